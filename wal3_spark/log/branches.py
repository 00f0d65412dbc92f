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

A branch is created only where no other log is: its location holds no object, and no log's
root lies above it, so that no deletion of one log can reach another's objects.

Deleting a log (`delete_branch`) first writes its deletion record (`manifest/DELETION`,
`wal3_spark.format.deletion`), then removes its manifest (it is no log any more), releases its
pin, removes the rest of its own objects and the record last. Only a location with a manifest or
a deletion record is deleted, and only the objects the layout names: a re-run after a crash at
any step finishes from the record, and a log set's prefix, a mistyped URL or another log nested
below are never touched. `wal3 checkpoint` (`wal3_spark.ops.checkpoint`) makes a branch
standalone.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from wal3_spark.clock import SYSTEM, Clock, micros
from wal3_spark.errors import (
    BranchError,
    CommitOutcomeUnknown,
    CorruptLog,
    LogNotFound,
    ObjectNotFound,
    PreconditionFailed,
    Wal3Error,
)
from wal3_spark.format.deletion import DELETION_KEY, Deletion, is_log_object
from wal3_spark.format.incarnation import new_incarnation
from wal3_spark.format.layout import MANIFEST_KEY
from wal3_spark.format.lineage import PIN_PREFIX, Parent, Pin, pin_key
from wal3_spark.format.manifest import Manifest
from wal3_spark.format.setsum import Setsum
from wal3_spark.format.uuid7 import new_uuid7
from wal3_spark.log import steps
from wal3_spark.log.cas import Outcome
from wal3_spark.log.committer import manifest_object
from wal3_spark.log.holds import list_pins, pin_is_live, settle
from wal3_spark.log.manifest_reader import read_manifest
from wal3_spark.log.parents import parent_store
from wal3_spark.log.reader import iter_ranges
from wal3_spark.storage import StoreLike, open_like, resolve_store
from wal3_spark.storage.base import ObjectStore

logger = logging.getLogger(__name__)

BRANCH_WRITER = "wal3-spark branch"
#: a branch is published within this long of its pin, or not at all: a third of the shortest
#: orphan grace (900 s), after which garbage collection may drop a pin whose branch is missing
PIN_DEADLINE_S = 300.0
#: a pin whose branch is neither published nor being deleted may still be published (its creator
#: is between pin and publish, or a write it sent may land) until it is this old: the shortest
#: orphan grace of garbage collection, which drops such a pin only then
UNPUBLISHED_PIN_S = 3 * PIN_DEADLINE_S
#: the steps of `branch`, in order (`after_step` hooks are called with these names)
CREATE_STEPS = ("pin", "settle", "publish")
DELETE_STEPS = ("record", "unpublish", "release", "remove")


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
    _check_location(dst)
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
    try:
        etag = src.put_if_absent(key, pin.to_bytes())
    except Exception:
        _release_after_failure(src, key)  # the pin's name is new: if the write landed anyway, it is ours
        raise
    steps.done("pin")
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
        _release_after_failure(src, key)
        raise
    steps.done("settle")
    parent = Parent(src.url, offset, start, name, current.incarnation, setsum)
    first = Manifest(
        setsum=Setsum(), collected=Setsum(), acc_bytes=0, writer=BRANCH_WRITER, snapshots=(),
        fragments=(), initial_offset=offset, schema=current.schema, item_hash=current.item_hash,
        incarnation=new_incarnation(), parent=parent,
    )
    def publish(now: Manifest | None) -> Manifest | None:
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
    except Exception:
        # `apply` raises only when none of its writes can land (one that may is an UNKNOWN
        # outcome, below): nothing can publish the branch any more, whatever the error
        _release_after_failure(src, key)
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
    steps.done("publish")
    logger.info("%s: branched from %s at %d (reads [%d, %d) from it)", dst.url, src.url, offset, start, offset)
    return BranchReport(dst.url, src.url, offset, start, name, setsum.hexdigest())


def _check_location(dst: ObjectStore) -> None:
    """Refuse a destination that holds any object, or lies inside another log: a branch there
    would share its location with another log, and deleting one could reach the other's objects.
    Checked before anything is written; a log created at such a location by another process
    meanwhile is not refused, but no deletion removes another log's objects all the same
    (`wal3_spark.format.deletion.is_log_object`)."""
    found = next(iter(dst.list()), None)
    if found is not None:
        raise BranchError(
            f"cannot branch into {dst.url}: it is not empty ({found.key} is there"
            + (", another log's" if found.key.endswith(MANIFEST_KEY) else "")
            + "); branch into an empty location (nothing was written)"
        )
    for url in ancestor_urls(dst.url):
        if open_like(dst, url).exists(MANIFEST_KEY):
            raise BranchError(
                f"cannot branch into {dst.url}: it lies inside the log at {url}; branch into a "
                "location outside every log (nothing was written)"
            )


def ancestor_urls(url: str) -> list[str]:
    """The URLs above `url` in its store, nearest first, up to the bucket (or filesystem) root:
    `s3://b/logs/a` -> `s3://b/logs`, `s3://b`."""
    scheme, _, rest = url.partition("://")
    authority, slash, path = rest.partition("/")
    parts = [p for p in path.split("/") if p] if slash else []
    root = f"{scheme}://{authority}" + ("/" if scheme == "file" else "")
    found = []
    for end in range(len(parts) - 1, -1, -1):
        found.append(root.rstrip("/") + "/" + "/".join(parts[:end]) if end else root)
    return found


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
    """Delete the pin `parent` names in its log (the branch at `store` no longer reads through
    it)."""
    release_own_pin(store, parent.log, parent.pin)


def release_own_pin(store: ObjectStore, parent_log: str, name: str) -> None:
    """Delete pin `name` in `parent_log` only if it is the pin of the branch at `store` (its
    `branch` is this URL): a manifest or deletion record naming another branch's pin (damaged,
    edited by hand) must not release it, or that branch would lose what it reads. A pin kept
    here is dropped by the parent's collection as an orphan once nothing reads through it."""
    parent = parent_store(store, parent_log)
    key = pin_key(name)
    try:
        pin = Pin.from_bytes(parent.get(key).data, f"{parent.url}/{key}")
    except ObjectNotFound:
        return  # released already
    except CorruptLog as exc:
        logger.warning("%s: keeping pin %s in %s: it cannot be read (%s)", store.url, name, parent_log, exc)
        return
    if pin.branch != store.url:
        logger.warning("%s: keeping pin %s in %s: it is the pin of %s, not of this branch", store.url, name,
                       parent_log, pin.branch)
        return
    _release(parent, key)


def _release(store: ObjectStore, key: str) -> None:
    store.delete(key)  # deleting a missing object is not an error


def _release_after_failure(store: ObjectStore, key: str) -> None:
    """Release the pin of a creation that failed definitely, without hiding why it failed: a
    release that fails too leaves the pin to garbage collection's orphan rule."""
    try:
        _release(store, key)
    except Wal3Error as exc:
        logger.warning("%s: could not release pin %s after a failed branch creation (%s); garbage "
                       "collection drops it once it is older than the orphan grace", store.url, key, exc)


@dataclass(frozen=True)
class DeletionReport:
    """What `delete_branch` did: the log deleted, the parent whose pin it released (None: not a
    branch), the objects it removed, and those under its location it left because they are not
    its own (another log's below it, files not of a log's layout)."""

    log: str
    parent: str | None
    objects_removed: int
    objects_left: int
    #: whether this run finished a deletion an earlier run started (found its record)
    resumed: bool

    def to_dict(self) -> dict:
        return asdict(self)


def delete_branch(
    log: StoreLike,
    *,
    options: Mapping[str, str] | None = None,
    force: bool = False,
    clock: Clock = SYSTEM,
) -> DeletionReport:
    """Delete the log at `log` (a branch or any log) and release the pin it holds in its parent.

    Only a location holding a log (its manifest) or an unfinished deletion (the record an
    earlier run wrote before removing anything) is deleted, and only the objects of a log's
    layout: another log nested below it, or a log set's prefix, is never touched. Refused while
    a branch reads through the log (a live pin, or one whose branch may still be published),
    unless `force`; a pin whose branch is gone or being deleted does not count."""
    store = resolve_store(log, options)
    try:
        manifest: Manifest | None = read_manifest(store)
    except LogNotFound:
        manifest = None
    record = _read_deletion(store)
    if manifest is None and record is None:
        raise LogNotFound(store.url, message=(
            f"no log at {store.url} to delete (no manifest/MANIFEST, and no unfinished deletion): "
            "nothing was deleted; check the URL (a log set's prefix is not a log: delete its logs "
            "one by one)"
        ))
    blocking = _branches_reading(store, clock)
    if blocking and not force:
        raise BranchError(
            f"{store.url} has {len(blocking)} branch(es) reading through it ({', '.join(blocking)}): "
            "checkpoint or delete them first, or pass --force to delete it anyway (nothing was deleted)"
        )
    resumed = manifest is None
    if manifest is not None:
        parent = manifest.parent
        record = Deletion(store.url, manifest.incarnation, parent.log if parent else None,
                          parent.pin if parent else None, micros(clock), BRANCH_WRITER)
        _write_deletion(store, record)  # before anything is removed
        steps.done("record")
        store.delete(MANIFEST_KEY)
    steps.done("unpublish")
    assert record is not None
    if record.parent_log is not None and record.parent_pin is not None:
        release_own_pin(store, record.parent_log, record.parent_pin)
    steps.done("release")
    removed, left = int(manifest is not None), 0
    for meta in list(store.list()):
        if meta.key == DELETION_KEY:
            continue
        if not is_log_object(meta.key):
            left += 1
            continue
        store.delete(meta.key)
        removed += 1
    store.delete(DELETION_KEY)
    steps.done("remove")
    if left:
        logger.warning("%s: deleted; %d object(s) there are not this log's and were left", store.url, left)
    return DeletionReport(store.url, record.parent_log, removed, left, resumed)


def _write_deletion(store: ObjectStore, record: Deletion) -> None:
    """Write the deletion record, replacing one an earlier run left (it crashed before removing
    the manifest, so this log is still the one that record was for)."""
    try:
        store.put_if_absent(DELETION_KEY, record.to_bytes())
    except PreconditionFailed:
        store.put_if_match(DELETION_KEY, record.to_bytes(), store.head(DELETION_KEY).etag)


def _read_deletion(store: ObjectStore) -> Deletion | None:
    try:
        return Deletion.from_bytes(store.get(DELETION_KEY).data, f"{store.url}/{DELETION_KEY}")
    except ObjectNotFound:
        return None


def _branches_reading(store: ObjectStore, clock: Clock) -> list[str]:
    """The branches that read through the log at `store`: each pin whose branch names it, or
    whose branch may still be published (neither there nor being deleted, and the pin younger
    than `UNPUBLISHED_PIN_S` by its creator's clock and the store's)."""
    written_us = {m.key: int(m.last_modified * 1e6) for m in store.list(PIN_PREFIX)}
    now_us = micros(clock)
    found = []
    for name, (pin, _) in sorted(list_pins(store).items()):
        if pin_is_live(store, name, pin):
            found.append(pin.branch)
            continue
        if parent_store(store, pin.branch).exists(DELETION_KEY):
            continue  # its branch is being deleted: the pin is released by that deletion
        age_s = (now_us - max(pin.created_us, written_us.get(pin_key(name), pin.created_us))) / 1e6
        if age_s < UNPUBLISHED_PIN_S:
            found.append(f"{pin.branch}, being created (its pin {name} is {age_s:.0f} s old)")
    return found
