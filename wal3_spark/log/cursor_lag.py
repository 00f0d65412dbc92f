"""How far each cursor trails the log's tail, the way Kafka users watch consumer lag: records
and bytes behind, how old the oldest unread record is, and how long ago the cursor last moved
(a consumer that stopped shows a lag that grows while its cursor's age grows too).

The age of the oldest unread record (`lag_s`, what Kafka lag exporters call time lag) is read
from the write time of the fragment holding the cursor's offset, which its UUIDv7 path carries:
no fragment is fetched. It is 0 for a cursor at the tail and None when that fragment's name
carries no time (a fragment written by Chroma's S3 backend, named by a sequence number).

Bytes behind are the bytes of every fragment a consumer at the cursor still has to fetch: the
fragments holding any offset at or after it (fragments are fetched whole). A snapshot pointer's
`num_bytes` already sums its whole subtree, so only the snapshots that straddle the cursor are
loaded, at most one per depth: a cursor far behind on a log of millions of fragments costs a few
snapshot GETs, not the whole tree.

Design: docs/design/25-cursor-lag.md.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass

from wal3_spark.clock import micros
from wal3_spark.format.manifest import Manifest, Snapshot
from wal3_spark.format.uuid7 import uuid7_timestamp_us
from wal3_spark.log.cursors import CursorState
from wal3_spark.log.reader import iter_ranges
from wal3_spark.log.snapshots import SnapshotCache, load_snapshot
from wal3_spark.storage.base import ObjectStore


@dataclass(frozen=True)
class CursorLag:
    """One cursor's distance from the tail of the manifest it was measured against."""

    name: str
    offset: int
    #: the log's next offset minus the cursor's (0 for a cursor at the tail)
    records_behind: int
    #: bytes of the fragments holding offsets at or after the cursor
    bytes_behind: int
    #: when the cursor was last written (microseconds since the epoch, the writer's clock)
    moved_epoch_us: int
    #: seconds from then to the measurement (0 when the writer's clock ran ahead)
    moved_ago_s: float
    #: age in seconds of the oldest unread record (its fragment's write time to the
    #: measurement); 0 at the tail, None when the fragment's name carries no write time
    lag_s: float | None = 0.0

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def bytes_from(
    store: ObjectStore, node: Manifest | Snapshot, offset: int, cache: SnapshotCache | None = None
) -> int:
    """Bytes of the fragments under `node` holding offsets >= `offset`; only the snapshots
    that straddle `offset` are read (through `cache` when given)."""
    total = 0
    for pointer in node.snapshots:
        if pointer.start >= offset:
            total += pointer.num_bytes
        elif pointer.limit > offset:
            total += bytes_from(store, load_snapshot(store, pointer, cache), offset, cache)
    return total + sum(f.num_bytes for f in node.fragments if f.limit > offset)


def written_us_at(
    store: ObjectStore, manifest: Manifest, offset: int, cache: SnapshotCache | None = None
) -> int | None:
    """When the fragment holding `offset` was written (µs, from its UUIDv7 name); None when
    no fragment holds it or its name carries no time. Reads only the snapshots that straddle
    `offset` (the ones `bytes_from` reads too: with a shared `cache`, nothing more)."""
    for part in iter_ranges(store, manifest, offset, offset + 1, cache):  # a branch's: its parent's
        return uuid7_timestamp_us(str(part.ref.seq_no))
    return None


def parent_bytes_from(
    store: ObjectStore, manifest: Manifest, offset: int, cache: SnapshotCache | None = None
) -> int:
    """A branch's share of `bytes_from`: the bytes of its parent's fragments holding offsets at
    or after `offset` below the branch point (0 for a log that reads no parent)."""
    parent = manifest.parent
    if not manifest.reads_parent or parent is None or offset >= parent.offset:
        return 0
    start = max(offset, manifest.oldest_offset)
    return sum(part.ref.num_bytes for part in iter_ranges(store, manifest, start, parent.offset, cache))


def cursor_lag(
    store: ObjectStore, manifest: Manifest, state: CursorState, at_us: int,
    cache: SnapshotCache | None = None,
) -> CursorLag:
    """`state`'s lag behind `manifest`'s tail, measured at `at_us`."""
    offset = state.cursor.offset
    behind = max(0, manifest.next_offset - offset)
    lag_s: float | None = 0.0
    if behind:
        written = written_us_at(store, manifest, max(offset, manifest.oldest_offset), cache)
        lag_s = None if written is None else max(0, at_us - written) / 1e6
    return CursorLag(
        name=state.name,
        offset=offset,
        records_behind=behind,
        bytes_behind=bytes_from(store, manifest, offset, cache) + parent_bytes_from(store, manifest, offset, cache),
        moved_epoch_us=state.cursor.epoch_us,
        moved_ago_s=max(0, at_us - state.cursor.epoch_us) / 1e6,
        lag_s=lag_s,
    )


def cursor_lags(
    store: ObjectStore, manifest: Manifest, states: Iterable[CursorState], at_us: int | None = None,
    cache: SnapshotCache | None = None,
) -> list[CursorLag]:
    """Every cursor's lag against one manifest (so they compare), in name order, measured at
    `at_us` (default: now); snapshots through `cache` (default: one for this call, since
    cursors close together straddle the same snapshots)."""
    at = micros() if at_us is None else at_us
    cache = SnapshotCache() if cache is None else cache
    return [cursor_lag(store, manifest, s, at, cache) for s in sorted(states, key=lambda s: s.name)]
