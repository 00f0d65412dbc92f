"""What holds a log's garbage collection back besides its cursors: the pins its branches left in
it and the tags made with `hold` (docs/format.md section 10).

Garbage collection computes its cutoff from cursors and holds, writes the garbage, and before it
applies it reads the holds again (`lowest_hold`): a hold written meanwhile resets the garbage. A
hold's creator, after writing it, reads the garbage and the manifest (`settle`): whatever a
collection already decided is seen there. One of the two always sees the other (each writes,
then reads what the other writes), so no collection drops what a new hold names.

Design: docs/design/26-branches-and-tags.md.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from wal3_spark.errors import LogNotFound, ObjectNotFound, Wal3Error
from wal3_spark.format.garbage import Garbage
from wal3_spark.format.layout import GARBAGE_KEY, name_of
from wal3_spark.format.lineage import PIN_PREFIX, Pin, pin_key
from wal3_spark.format.tag import TAG_PREFIX, Tag
from wal3_spark.log.manifest_reader import read_manifest
from wal3_spark.log.parents import parent_store
from wal3_spark.storage.base import ObjectStore

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Hold:
    """One pin or held tag: `key` (its object), the first offset it keeps."""

    key: str
    start: int
    #: a pin whose branch does not name it (never published, deleted, checkpointed), older
    #: than the orphan grace: garbage collection deletes it instead of honouring it
    orphan: bool = False


def list_pins(store: ObjectStore) -> dict[str, tuple[Pin, str]]:
    """Every pin of the log at `store`: name -> (pin, ETag)."""
    pins: dict[str, tuple[Pin, str]] = {}
    for meta in store.list(PIN_PREFIX):
        name = name_of(meta.key, PIN_PREFIX)
        if name is None:
            continue
        try:
            blob = store.get(meta.key)
        except ObjectNotFound:
            continue  # released meanwhile
        pins[name] = (Pin.from_bytes(blob.data, meta.key), blob.etag)
    return pins


def pin_is_live(store: ObjectStore, name: str, pin: Pin) -> bool:
    """Whether the branch `pin` names exists and still reads through this pin. A branch that
    cannot be read (a damaged manifest, a store that fails) counts as live: dropping its pin
    could lose what it reads, keeping it only delays a collection."""
    try:
        branch = read_manifest(parent_store(store, pin.branch))
    except LogNotFound:
        return False
    except Wal3Error as exc:
        logger.warning("%s: keeping pin %s: its branch %s cannot be read (%s)", store.url, name, pin.branch, exc)
        return True
    return branch.parent is not None and branch.parent.pin == name and branch.reads_parent


def holds(store: ObjectStore, *, orphan_before_us: int | None = None) -> list[Hold]:
    """The pins and held tags of the log at `store`. With `orphan_before_us`, a pin created
    before it whose branch does not read through it is marked `orphan` (a branch is published
    within the pin deadline of its pin, far less than the orphan grace). An unreadable pin or
    tag raises CorruptLog: it may be holding data."""
    found: list[Hold] = []
    # A pin's age is the later of its creator's clock (`created_us`) and the store's (when it
    # was written): a creator whose clock is behind must not make a pin look old while its
    # branch is still being published
    written_us = {m.key: int(m.last_modified * 1e6) for m in store.list(PIN_PREFIX)}
    for name, (pin, _) in list_pins(store).items():
        orphan = (orphan_before_us is not None
                  and max(pin.created_us, written_us.get(pin_key(name), pin.created_us)) < orphan_before_us
                  and not pin_is_live(store, name, pin))
        found.append(Hold(pin_key(name), pin.start, orphan))
    for meta in store.list(TAG_PREFIX):
        if name_of(meta.key, TAG_PREFIX) is None:
            continue
        try:
            tag = Tag.from_bytes(store.get(meta.key).data, meta.key)
        except ObjectNotFound:
            continue
        if tag.hold:
            found.append(Hold(meta.key, tag.start))
    return found


def lowest_hold(store: ObjectStore) -> int | None:
    """The lowest offset a pin or held tag keeps (orphans included: only a collector that checked
    them may drop them), None when nothing holds the log."""
    return min((h.start for h in holds(store)), default=None)


def settle(store: ObjectStore, start: int) -> int:
    """After a hold at `start` was written: the first offset it can be trusted to keep, which is
    `start` unless a garbage collection decided (before it could see the hold) to collect past
    it, or already has."""
    try:
        garbage = Garbage.from_bytes(store.get(GARBAGE_KEY).data)
    except ObjectNotFound:
        garbage = Garbage.empty()
    if not garbage.is_empty():
        start = max(start, garbage.first_to_keep)
    return max(start, read_manifest(store).oldest_offset)
