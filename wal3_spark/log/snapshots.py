"""A log's snapshots, read and written in one place: `load_snapshot` reads one and checks it
against its pointer (through a `SnapshotCache`: snapshots are immutable and content-addressed),
`write_snapshot` creates one at its content-addressed path, and `roll_snapshots` rolls a
manifest's oldest fragments into new ones before a commit publishes it (Chroma's snapshot
rollover, docs/design/22-snapshot-rollover.md). Readers, the committer, garbage collection, copy
and checkpoint all come here.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict

from wal3_spark.errors import AmbiguousWrite, CorruptLog, ObjectNotFound, PreconditionFailed, TransientError
from wal3_spark.format.layout import SnapshotPointer
from wal3_spark.format.manifest import Manifest, Snapshot, SnapshotOptions
from wal3_spark.log.fragment_io import MISSING_SNAPSHOT, missing_error
from wal3_spark.storage.base import ObjectStore
from wal3_spark.storage.retry import retry

logger = logging.getLogger(__name__)


class SnapshotCache:
    """Snapshots loaded and checked, by store URL and the whole pointer (path, setsum, range,
    depth, bytes): a path names a setsum, and another snapshot with that setsum may take the
    path once the first is deleted (the same records rolled again after a compaction lifted the
    first: docs/format.md section 4, "Inside snapshots"); its pointer differs in its bytes or
    range, so an entry is never stale. Thread-safe; the least recently used go first once it
    holds `limit`."""

    def __init__(self, limit: int = 4096) -> None:
        self.limit = limit
        self._snapshots: OrderedDict[tuple[str, SnapshotPointer], Snapshot] = OrderedDict()
        self._lock = threading.Lock()

    def __reduce__(self) -> tuple:  # travels empty (to Spark executors): a cache, not state
        return SnapshotCache, (self.limit,)

    @staticmethod
    def _key(store: ObjectStore, pointer: SnapshotPointer) -> tuple[str, SnapshotPointer]:
        return store.url, pointer

    def get(self, store: ObjectStore, pointer: SnapshotPointer) -> Snapshot | None:
        key = self._key(store, pointer)
        with self._lock:
            cached = self._snapshots.get(key)
            if cached is not None:
                self._snapshots.move_to_end(key)
            return cached

    def put(self, store: ObjectStore, pointer: SnapshotPointer, snapshot: Snapshot) -> None:
        with self._lock:
            self._snapshots[self._key(store, pointer)] = snapshot
            while len(self._snapshots) > self.limit:
                self._snapshots.popitem(last=False)


def load_snapshot(
    store: ObjectStore, pointer: SnapshotPointer, cache: SnapshotCache | None = None
) -> Snapshot:
    """The snapshot a pointer names, checked against the pointer (setsum, range, depth); from
    `cache` when it holds it, and kept there."""
    cached = cache.get(store, pointer) if cache is not None else None
    if cached is not None:
        return cached
    try:
        data = store.get(pointer.path_to_snapshot).data
    except ObjectNotFound:
        raise missing_error(store, MISSING_SNAPSHOT, pointer.path_to_snapshot, pointer.start) from None
    snapshot = Snapshot.from_bytes(data, pointer.path_to_snapshot)
    snapshot.scrub()
    if snapshot.pointer() != pointer:
        raise CorruptLog(
            "a snapshot matches the pointer to it",
            pointer.path_to_snapshot,
            f"does not match the pointer to it (pointer {pointer}, snapshot {snapshot.pointer()})",
        )
    if cache is not None:
        cache.put(store, pointer, snapshot)
    return snapshot



def write_snapshot(store: ObjectStore, snapshot: Snapshot, *, horizon_us: int | None = None) -> bool:
    """Create the snapshot at its path (`snapshot/SNAPSHOT.<setsum>`); True when the path holds
    it now: written here, or found there already with the same children at the same offsets.

    With `horizon_us` (the orphan horizon of the manifest the snapshot is for), a snapshot found
    there that was written before the horizon is not trusted either (False): a commit attempt
    that lost its race left it unreferenced, and garbage collection may be deleting it as an
    orphan (docs/design/32-orphan-horizon.md).

    False when the path holds a *different* snapshot with the same setsum: the same fragments
    rolled at other offsets by a commit attempt that lost its race (a fragment's setsum does not
    depend on where it sits). Chroma takes any existing file as the one it meant; trusting it
    here would publish a pointer to offsets the file does not hold. Callers roll a variant
    instead (`roll_snapshots`, docs/design/22-snapshot-rollover.md).
    """
    snapshot.scrub()
    data = snapshot.to_bytes()

    def attempt() -> bool:
        try:
            store.put_if_absent(snapshot.path, data)
            return True
        except (PreconditionFailed, AmbiguousWrite):
            pass
        try:
            existing = store.get(snapshot.path).data
            if not (existing == data or _holds(existing, snapshot)):
                return False
            if horizon_us is None or store.head(snapshot.path).last_modified * 1e6 >= horizon_us:
                return True
        except ObjectNotFound:
            raise TransientError(f"{snapshot.path} was not written: writing it again") from None
        logger.info("%s was written before the orphan horizon: rolling a different one", snapshot.path)
        return False

    return retry(attempt, what=f"write {snapshot.path}")


def _holds(data: bytes, snapshot: Snapshot) -> bool:
    """Whether stored snapshot bytes hold `snapshot` (whoever wrote them); unreadable bytes do
    not: the path is taken either way."""
    try:
        stored = Snapshot.from_bytes(data, snapshot.path)
    except CorruptLog:
        return False
    if stored.same_content(snapshot):
        return True
    logger.warning("%s holds another snapshot with the same setsum (offsets [%d, %d), not [%d, %d)); "
                "rolling a different one", snapshot.path, stored.start, stored.limit,
                snapshot.start, snapshot.limit)
    return False


def roll_snapshots(store: ObjectStore, manifest: Manifest, options: SnapshotOptions, writer: str) -> Manifest:
    """Write the snapshots `manifest` needs before it is published (docs/format.md section 5), and
    return it with them rolled in. When a snapshot's path already holds a different snapshot,
    a variant with one child fewer is tried (another setsum, another path), down to none; so it
    is when the path holds a snapshot older than the manifest's orphan horizon."""
    fewer = 0
    while (snapshot := manifest.generate_snapshot(options, writer, fewer=fewer)) is not None:
        if write_snapshot(store, snapshot, horizon_us=manifest.orphan_horizon_us):
            manifest, fewer = manifest.apply_snapshot(snapshot), 0
        else:
            fewer += 1
    return manifest
