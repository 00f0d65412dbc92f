"""Creating and deleting branches (docs/design/26-branches-and-tags.md): a log whose first records are
another log's `[oldest, offset)`, read through the parent's own fragments, never copied.

Creating one is three steps, each safe to crash after:
1. *pin*: `pin/<name>.json` is created in the parent (create-if-absent), naming the branch's URL
   and the parent's oldest offset. From then on the parent's garbage collection keeps what the
   pin names (`wal3_spark.log.holds`). A crash here leaves a pin whose branch does not exist:
   garbage collection drops it once it is older than the orphan grace;
2. *settle*: the parent's garbage and manifest are read again: a collection that decided before
   it could see the pin moves the branch's first offset up (or, past the branch point, the
   branch is refused and the pin deleted);
3. *publish*: the branch's manifest is created (create-if-absent) naming `parent` and the pin,
   within the pin deadline (a third of the orphan grace) of the pin's creation, so that no
   garbage collection can have dropped the pin as an orphan by then.

Deleting one removes its manifest first (it is no log any more), then releases the pin, then
removes the rest of its objects; a crash after the first step leaves a pin garbage collection
drops as an orphan. `wal3 checkpoint` (`wal3_spark.ops.checkpoint`) makes a branch standalone.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass

from wal3_spark.clock import SYSTEM, Clock, micros
from wal3_spark.errors import (
    BranchError,
    CommitOutcomeUnknown,
    LogNotFound,
    ObjectNotFound,
    Wal3Error,
)
from wal3_spark.format.incarnation import new_incarnation
from wal3_spark.format.layout import MANIFEST_KEY
from wal3_spark.format.lineage import Parent, Pin, pin_key
from wal3_spark.format.manifest import Manifest
from wal3_spark.format.setsum import Setsum
from wal3_spark.format.uuid7 import new_uuid7
from wal3_spark.log.cas import Outcome
from wal3_spark.log.committer import manifest_object
from wal3_spark.log.holds import list_pins, settle
from wal3_spark.log.manifest_reader import read_manifest
from wal3_spark.log.parents import parent_store
from wal3_spark.log.reader import iter_ranges
from wal3_spark.storage import StoreLike, resolve_store
from wal3_spark.storage.base import ObjectStore

logger = logging.getLogger(__name__)

BRANCH_WRITER = "wal3-spark branch"
#: a branch is published within this long of its pin, or not at all: a third of the shortest
#: orphan grace (900 s), after which garbage collection may drop a pin whose branch is missing
PIN_DEADLINE_S = 300.0
#: the steps of `branch`, in order (`after_step` hooks are called with these names)
CREATE_STEPS = ("pin", "settle", "publish")
DELETE_STEPS = ("unpublish", "release", "remove")


@dataclass
class BranchReport:
    branch: str
    parent: str
    offset: int
    start: int
    pin: str
    setsum: str

    def to_dict(self) -> dict:
        return asdict(self)


def _stores(source: StoreLike, destination: StoreLike, options: Mapping[str, str] | None,
            destination_options: Mapping[str, str] | None) -> tuple[ObjectStore, ObjectStore]:
    if destination_options is None and not isinstance(destination, ObjectStore):
        destination_options = options
    return resolve_store(source, options), resolve_store(destination, destination_options)


def parent_setsum(store: ObjectStore, manifest: Manifest, start: int, limit: int) -> Setsum:
    """The sum of the setsums of the fragments holding [start, limit) of the log at `store`
    (through its own parents), each whole: what a branch records of the range it reads."""
    return Setsum.sum(part.ref.setsum for part in iter_ranges(store, manifest, start, limit))


def branch(
    source: StoreLike,
    destination: StoreLike,
    *,
    at: int | None = None,
    options: Mapping[str, str] | None = None,
    destination_options: Mapping[str, str] | None = None,
    clock: Clock = SYSTEM,
    after_step: Callable[[str], None] | None = None,
    pin_deadline_s: float = PIN_DEADLINE_S,
) -> BranchReport:
    """Branch the log at `source` at offset `at` (default: its tail) into a new log at
    `destination`, whose first records are the source's [oldest, at) and whose own offsets
    continue from `at`. Nothing is copied; the source keeps taking appends. `pin_deadline_s`
    (tests and `wal3 stress` shorten it with the orphan grace) bounds the time from pin to publish."""
    src, dst = _stores(source, destination, options, destination_options)
    if src.url == dst.url:
        raise BranchError(f"a branch needs its own location: {src.url} is the source itself")
    if dst.exists(MANIFEST_KEY):
        raise BranchError(f"{dst.url} already holds a log; branch into a new location (nothing was written)")
    try:
        manifest = read_manifest(src)
    except LogNotFound:
        raise BranchError(
            f"no wal3 log at {src.url} to branch from (manifest/MANIFEST is missing): check the "
            "path, or create the log first"
        ) from None
    _check_reaches(src, dst, manifest)
    offset = manifest.next_offset if at is None else at
    oldest, tail = manifest.oldest_offset, manifest.next_offset
    if isinstance(offset, bool) or not isinstance(offset, int) or offset > tail:
        raise BranchError(
            f"cannot branch {src.url} at offset {offset!r}: it holds offsets [{oldest}, {tail}); "
            f"give --at within [{oldest}, {tail}] ({tail}, its tail, by default)"
        )
    if offset < oldest:
        raise BranchError(
            f"cannot branch {src.url} at offset {offset}: garbage collection removed offsets below "
            f"{oldest}; give --at within [{oldest}, {tail}] (keep a cursor to hold older records)"
        )
    created_us = micros(clock)
    name = new_uuid7(created_us).hex
    key = pin_key(name)
    pin = Pin(branch=dst.url, start=oldest, offset=offset, created_us=created_us, writer=BRANCH_WRITER)
    etag = src.put_if_absent(key, pin.to_bytes())
    _step(after_step, "pin")
    try:
        start = settle(src, oldest)
        if start > offset:
            raise BranchError(
                f"cannot branch {src.url} at offset {offset}: a garbage collection running at the "
                f"same moment removes offsets below {start}; branch at {start} or later"
            )
        if start != oldest:
            pin = Pin(dst.url, start, offset, created_us, BRANCH_WRITER)
            src.put_if_match(key, pin.to_bytes(), etag)
        current = read_manifest(src)
        setsum = parent_setsum(src, current, start, offset)
    except Exception:
        _release(src, key)
        raise
    _step(after_step, "settle")
    parent = Parent(src.url, offset, start, name, current.incarnation, setsum)
    first = Manifest(
        setsum=Setsum(), collected=Setsum(), acc_bytes=0, writer=BRANCH_WRITER, snapshots=(),
        fragments=(), initial_offset=offset, schema=current.schema, item_hash=current.item_hash,
        incarnation=new_incarnation(), parent=parent,
    )
    decisions = 0

    def publish(now: Manifest | None) -> Manifest | None:
        nonlocal decisions
        decisions += 1
        if now is not None:
            return None
        if clock.now() * 1e6 - created_us > pin_deadline_s * 1e6:  # checked before each write
            raise BranchError(
                f"branching {src.url} took longer than {pin_deadline_s:.0f} s, after which its pin "
                "may be dropped as an orphan; nothing was published: branch again"
            )
        return first

    try:
        created = manifest_object(dst, clock=clock).apply(publish)
    except BranchError:
        if decisions == 1:  # no write was sent: nothing can publish the branch any more
            _release(src, key)
        # else an earlier write may still land: the pin stays, and the parent's GC drops it
        # as an orphan only if the branch never appeared (it is live otherwise)
        raise
    if created.outcome is Outcome.UNKNOWN:
        raise CommitOutcomeUnknown(
            f"{dst.url}: could not establish whether the branch's manifest was written (the store "
            f"kept failing until the deadline); run `wal3 info {dst.url}`: a branch there is this "
            "one; otherwise branch again (the pin left in the source is dropped by its gc)"
        ) from created.cause
    if created.outcome is Outcome.NOTHING_TO_DO:
        _release(src, key)
        raise BranchError(f"{dst.url}: another process created a log there meanwhile; nothing was published")
    _step(after_step, "publish")
    logger.info("%s: branched from %s at %d (reads [%d, %d) from it)", dst.url, src.url, offset, start, offset)
    return BranchReport(dst.url, src.url, offset, start, name, setsum.hexdigest())


def _check_reaches(src: ObjectStore, dst: ObjectStore, manifest: Manifest) -> None:
    """Refuse a branch whose store cannot reach its parent as the parent itself is reached.
    Readers of the branch open the parent's URL with the branch's settings (endpoint,
    credentials), and the parent's garbage collection opens the branch's URL with its own: a
    destination opened with settings that reach another server (another endpoint with the same
    bucket) would read nothing of its parent, and the parent's collection, finding no branch at
    that URL, would drop the pin as an orphan and the parent's records with it."""
    seen: Manifest | None
    try:
        seen = found = read_manifest(parent_store(dst, src.url))
    except Wal3Error as exc:
        seen, problem = None, str(exc)
    else:
        problem = f"found another log there (incarnation {found.incarnation}, not {manifest.incarnation})"
    if seen is None or seen.incarnation != manifest.incarnation:
        raise BranchError(
            f"cannot branch {src.url} into {dst.url}: opened with the destination's store settings, "
            f"{src.url} is not the same log ({problem}); a branch reads its parent, and the parent's "
            "garbage collection finds the branch, with each other's settings: open both with the "
            "same endpoint and credentials (nothing was written)"
        )


def release_pin(store: ObjectStore, parent: Parent) -> None:
    """Delete the pin `parent` names in its log (a branch no longer reads through it)."""
    _release(parent_store(store, parent.log), pin_key(parent.pin))


def _release(store: ObjectStore, key: str) -> None:
    with contextlib.suppress(ObjectNotFound):
        store.delete(key)


def delete_branch(
    target: StoreLike,
    *,
    options: Mapping[str, str] | None = None,
    force: bool = False,
    after_step: Callable[[str], None] | None = None,
) -> dict:
    """Delete the log at `target` (a branch or any log) and release the pin it holds in its
    parent. Refused while other branches read through it (its own pins), unless `force`."""
    store = resolve_store(target, options)
    try:
        manifest: Manifest | None = read_manifest(store)
    except LogNotFound:
        manifest = None  # a delete that crashed after its first step: finish it
    children = list_pins(store)
    if children and not force:
        raise BranchError(
            f"{store.url} has {len(children)} branch(es) reading through it ("
            + ", ".join(sorted(pin.branch for pin, _ in children.values()))
            + "): checkpoint or delete them first, or pass --force to delete it anyway"
        )
    if manifest is not None:
        store.delete(MANIFEST_KEY)
    _step(after_step, "unpublish")
    if manifest is not None and manifest.parent is not None:
        release_pin(store, manifest.parent)
    _step(after_step, "release")
    removed = 0
    for meta in list(store.list()):
        store.delete(meta.key)
        removed += 1
    _step(after_step, "remove")
    return {"log": store.url, "parent": manifest.parent.log if manifest and manifest.parent else None,
            "objects_removed": removed + (manifest is not None)}


def _step(hook: Callable[[str], None] | None, name: str) -> None:
    if hook is not None:
        hook(name)
