"""What a log's tree holds, for the figures operators watch: how many fragments and snapshots,
and when its newest fragment was written.

Counting the fragments under a snapshot means loading it, but snapshots are immutable and
named by their setsum, so a `TreeCounts` memo keyed by pointer remembers each subtree's counts
for good: a process that watches a log (the status model of `wal3_spark.observe`) loads each
snapshot once in its lifetime, however often it counts. Only a snapshot straddling the oldest
offset (garbage collection cut through it) is walked again, through the snapshot cache.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from wal3_spark.format.layout import SnapshotPointer
from wal3_spark.format.manifest import Manifest, Snapshot
from wal3_spark.format.uuid7 import uuid7_timestamp_us
from wal3_spark.log.snapshots import SnapshotCache, load_snapshot
from wal3_spark.storage.base import ObjectStore


@dataclass(frozen=True)
class Counts:
    """Fragments holding offsets at or after a log's oldest offset, and every snapshot of its
    tree (what `wal3 info` shows)."""

    fragments: int
    snapshots: int


class TreeCounts:
    """Each snapshot subtree's counts, by (store URL, path, setsum): never stale (a snapshot
    is immutable). Thread-safe; forgets everything once it holds `limit` subtrees."""

    def __init__(self, limit: int = 100_000) -> None:
        self.limit = limit
        self._counts: dict[tuple[str, str, str], Counts] = {}
        self._lock = threading.Lock()

    def get(self, store: ObjectStore, pointer: SnapshotPointer) -> Counts | None:
        with self._lock:
            return self._counts.get(_key(store, pointer))

    def put(self, store: ObjectStore, pointer: SnapshotPointer, counts: Counts) -> None:
        with self._lock:
            if len(self._counts) >= self.limit:
                self._counts.clear()
            self._counts[_key(store, pointer)] = counts


def _key(store: ObjectStore, pointer: SnapshotPointer) -> tuple[str, str, str]:
    return store.url, pointer.path_to_snapshot, pointer.setsum.hexdigest()


def tree_counts(
    store: ObjectStore, manifest: Manifest, cache: SnapshotCache | None = None,
    memo: TreeCounts | None = None,
) -> Counts:
    """The fragments holding offsets at or after the oldest offset, and every snapshot of the
    tree; loads the snapshots `memo` does not know yet (through `cache`)."""
    memo = TreeCounts() if memo is None else memo
    oldest = manifest.oldest_offset

    def count(node: Manifest | Snapshot) -> Counts:
        fragments = sum(1 for f in node.fragments if f.limit > oldest)
        snapshots = 0
        for pointer in node.snapshots:
            below = count_pointer(pointer)
            fragments, snapshots = fragments + below.fragments, snapshots + 1 + below.snapshots
        return Counts(fragments, snapshots)

    def count_pointer(pointer: SnapshotPointer) -> Counts:
        whole = pointer.start >= oldest  # no fragment of it lies below the oldest offset
        known = memo.get(store, pointer) if whole else None
        if known is None:
            known = count(load_snapshot(store, pointer, cache))
            if whole:
                memo.put(store, pointer, known)
        return known

    return count(manifest)


def last_written_us(manifest: Manifest) -> int | None:
    """When the log's newest fragment was written (µs, from the UUIDv7 names of the manifest's
    own fragments, which are the newest: snapshots take the oldest). A commit follows its
    fragments' writes within the writer's batch interval, so this is the last commit's time
    to that precision. With every fragment in snapshots, the manifest's `rolled_written_us`;
    None when no name carries a time (or the log is empty)."""
    written = [t for f in manifest.fragments if (t := uuid7_timestamp_us(str(f.seq_no))) is not None]
    if written:
        return max(written)
    return manifest.rolled_written_us or None
