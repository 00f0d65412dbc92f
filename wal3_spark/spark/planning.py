"""Planning a read on the driver: which fragment ranges, in which input partitions.

Shared by every reader of the data source (batch, stream, log set) and the native scan: an
option position (`startingOffsets`, `endingTimestamp`, …) becomes an offset (`resolve`), pushed-
down filters on `_offset` and `_timestamp` narrow the range (`narrow`, `plan_range`), and the
fragment ranges are bin-packed into input partitions (`pack`) that executors read as they are,
never re-planned.

Design: docs/design/16-stream-filters.md, docs/design/54-spark-batch-caching-and-pushdown.md.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)

from wal3_spark.errors import FilterError
from wal3_spark.format.layout import FragmentRef
from wal3_spark.format.manifest import Manifest
from wal3_spark.format.schema import OFFSET_COLUMN, TIMESTAMP_COLUMN
from wal3_spark.format.stream_filter import ValueFilter
from wal3_spark.log.fragment_io import (
    ReadRange,
    exact_path_timestamp_us,
    fragment_timestamp_us,
)
from wal3_spark.log.reader import LogReader
from wal3_spark.log.tags import TagStore
from wal3_spark.spark.options import Wal3Options
from wal3_spark.storage.base import ObjectStore

#: Spark's spark.sql.files.openCostInBytes: the smallest partition worth a task
OPEN_COST_BYTES = 4 << 20


# ------------------------------------------------------------------------------ the range


@dataclass
class Bounds:
    """Inclusive-exclusive bounds pushed down on one column (None: unbounded)."""

    lo: int | None = None
    hi: int | None = None  # exclusive

    def lower(self, value: int) -> None:
        self.lo = value if self.lo is None else max(self.lo, value)

    def upper(self, value: int) -> None:
        self.hi = value if self.hi is None else min(self.hi, value)


def to_us(value: object) -> int | None:
    """A pushed-down `_timestamp` literal in microseconds since the epoch."""
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:  # PySpark hands TimestampType literals over in local time
            value = value.astimezone()
        delta = value - _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return None


def narrow(filters: Iterable[Filter], offsets: Bounds, times: Bounds) -> None:
    """Tighten the bounds with the filters we understand (Spark still re-checks every filter)."""
    for f in filters:
        column = getattr(f, "attribute", None)
        if column not in ((OFFSET_COLUMN,), (TIMESTAMP_COLUMN,)):
            continue
        is_offset = column == (OFFSET_COLUMN,)
        bounds = offsets if is_offset else times
        conv = (lambda v: int(v) if isinstance(v, int) and not isinstance(v, bool) else None) \
            if is_offset else to_us
        if isinstance(f, In):
            values = [conv(v) for v in f.value]
            known = [v for v in values if v is not None]
            if values and len(known) == len(values):
                bounds.lower(min(known))
                bounds.upper(max(known) + 1)
            continue
        v = conv(getattr(f, "value", None))
        if v is None:
            continue
        if isinstance(f, EqualTo):
            bounds.lower(v)
            bounds.upper(v + 1)
        elif isinstance(f, GreaterThan):
            bounds.lower(v + 1)
        elif isinstance(f, GreaterThanOrEqual):
            bounds.lower(v)
        elif isinstance(f, LessThan):
            bounds.upper(v)
        elif isinstance(f, LessThanOrEqual):
            bounds.upper(v + 1)


def pushed_values(filters: Iterable[Filter]) -> list[tuple[str, tuple]]:
    """The pushed-down `column = v` and `column IN (...)` filters on a top-level column other
    than `_offset` and `_timestamp`: (column, values) pairs that stream filters may skip
    fragments for (Spark re-applies every filter to the rows)."""
    found = []
    for f in filters:
        column = getattr(f, "attribute", None)
        if not isinstance(column, tuple) or len(column) != 1 or column[0] in (OFFSET_COLUMN, TIMESTAMP_COLUMN):
            continue
        if isinstance(f, EqualTo):
            found.append((column[0], (f.value,)))
        elif isinstance(f, In):
            found.append((column[0], tuple(f.value)))
    return found


def value_filters(manifest: Manifest, options_filter: tuple[str | None, tuple | None],
                  pushed: Sequence[tuple[str, tuple]] = (), url: str = "") -> tuple[
                      ValueFilter | None, list[ValueFilter]]:
    """The read's `filterColumn`/`filterValues` as a `ValueFilter` (FilterError when the log
    cannot be filtered so), and the pushed filters that can skip fragments of this log (the
    others are left to Spark: a pushed filter is never an error)."""
    column, values = options_filter
    if manifest.schema is None and not manifest.fragments and not manifest.snapshots:
        return None, []  # an empty log without a schema yet: nothing to read, nothing to check
    explicit = None if column is None or values is None else ValueFilter.of(
        manifest.arrow_schema(), column, values, url)
    skipping = []
    for name, wanted in pushed:
        try:
            skipping.append(ValueFilter.of(manifest.arrow_schema(), name, wanted, url))
        except FilterError:  # a column without stream filters, or values of another type
            continue
    return explicit, skipping


def resolve(reader: LogReader, manifest: Manifest, position: tuple[str, int], *, default: int) -> int:
    """An option position (earliest/latest/offset/timestamp) as an offset."""
    kind, value = position
    if kind == "earliest":
        return manifest.oldest_offset
    if kind == "latest":
        return manifest.next_offset
    if kind == "timestamp":
        return reader.offset_for_timestamp(value, manifest)
    if kind == "offset":
        return value
    return default


def positions(options: Wal3Options, store: ObjectStore, manifest: Manifest) -> tuple[tuple[str, int], tuple[str, int]]:
    """Where a batch read starts and ends: its options' positions, or its tag's records."""
    if options.tag is None:
        return options.starting, options.ending
    start, limit = TagStore(store).range(options.tag, manifest)
    return ("offset", start), ("offset", limit)


def plan_range(store: ObjectStore, manifest: Manifest, starting: tuple[str, int],
               ending: tuple[str, int], offsets: Bounds, times: Bounds,
               fail_on_data_loss: bool, values: ValueFilter | None = None,
               skipping: Sequence[ValueFilter] = ()) -> list[ReadRange]:
    """A log's fragment ranges between its start and end positions, narrowed by pushed-down
    filters on `_offset` and (by the write time in each fragment's path) on `_timestamp`, less
    the fragments whose stream filter rules out `values` or any of `skipping` (pushed filters
    on other columns)."""
    reader = LogReader(store)
    start = resolve(reader, manifest, starting, default=manifest.oldest_offset)
    limit = resolve(reader, manifest, ending, default=manifest.next_offset)
    if offsets.lo is not None:
        start = max(start, offsets.lo)
    if offsets.hi is not None:
        limit = min(limit, offsets.hi)
    if start >= limit:
        return []
    ranges = reader.plan(start, limit, manifest=manifest, fail_on_data_loss=fail_on_data_loss,
                         values=values)
    if skipping:
        ranges = [r for r in ranges if not any(r.ref.skipped_by(v) for v in skipping)]
    if times.lo is None and times.hi is None:
        return ranges
    structured = manifest.schema is not None
    written = [(r, _known_timestamp_us(store, r.ref, structured)) for r in ranges]
    return [r for r, ts in written if ts is None
            or ((times.lo is None or ts >= times.lo) and (times.hi is None or ts < times.hi))]


def _known_timestamp_us(store: ObjectStore, ref: FragmentRef, structured: bool) -> int | None:
    """A fragment's `timestamp_us` where it is known for certain: from its UUIDv7 path in a
    structured log (exact there), from its data for Chroma S3 fragments (no time in the path);
    None for the UUID fragments of a raw log, whose path may be Chroma's and say another time
    than its rows: such a fragment is kept, and Spark's re-applied filter decides."""
    if isinstance(ref.seq_no, str):
        return exact_path_timestamp_us(ref, structured)
    return fragment_timestamp_us(store, ref)


# ------------------------------------------------------------------------------ partitions


class Packable(Protocol):
    """What `pack` needs of a range: its fragment and its number of records (a `ReadRange`, or a
    log set's range of one of its logs)."""

    @property
    def ref(self) -> FragmentRef: ...
    @property
    def records(self) -> int: ...


R = TypeVar("R", bound=Packable)


@dataclass(frozen=True)
class Part(Generic[R]):
    """One input partition's work: contiguous fragment ranges (never re-planned on executors)."""

    ranges: tuple[R, ...]

    @property
    def records(self) -> int:
        return sum(r.records for r in self.ranges)


class Wal3Partition(InputPartition):
    """Fragment ranges to read, the log's payload schema and its setsum `item_hash`, and the
    rows wanted of them (`values`: filterColumn/filterValues; None: all); nothing is
    re-planned."""

    def __init__(self, index: int, part: Part[ReadRange], payload: pa.Schema | None,
                 item_hash: str | None, values: ValueFilter | None = None) -> None:
        super().__init__(index)
        self.index = index
        self.part = part
        self.payload = payload
        self.item_hash = item_hash
        self.values = values


def range_bytes(r: Packable) -> int:
    """The bytes a range costs to read (the whole fragment is fetched)."""
    return max(1, r.ref.num_bytes)


def pack(ranges: Sequence[R], max_partition_bytes: int,
         min_partitions: int | None = None) -> list[Part[R]]:
    """Bin-pack consecutive ranges into balanced partitions of at most about
    `max_partition_bytes`, and into at least `min_partitions` (default: the driver's cores) when
    the read is big enough (Spark's file-split rule, with its 4 MB open cost as the floor).
    More partitions than cores are rounded up to a multiple of the cores, so that the last
    wave of tasks keeps every core busy: 8 fragments of 42 MB on 2 cores are 4 tasks of 2, not
    3 tasks of 3, 3 and 2, whose last ran alone (an AvailableNow drain measured 4.40 s against
    4.92 s, docs/benchmarks.md). A fragment is never split, so each is fetched once; order is
    kept."""
    if not ranges:
        return []
    sizes = [range_bytes(r) for r in ranges]
    total = sum(sizes)
    cores = min_partitions or os.cpu_count() or 1
    wanted = max(math.ceil(total / max_partition_bytes),
                 min(cores, max(1, total // OPEN_COST_BYTES)))
    if wanted > cores:
        wanted = math.ceil(wanted / cores) * cores
    wanted = max(1, min(wanted, len(ranges)))
    parts: list[list[R]] = [[] for _ in range(wanted)]
    seen = 0
    for r, size in zip(ranges, sizes, strict=True):
        # the partition whose share of the bytes holds this range's midpoint: contiguous, even
        index = min(wanted - 1, int((seen + size / 2) * wanted / total))
        parts[index].append(r)
        seen += size
    return [Part(tuple(p)) for p in parts if p]


def partitions_of(manifest: Manifest, ranges: Sequence[ReadRange], max_partition_bytes: int,
                  min_partitions: int | None, values: ValueFilter | None = None) -> list[Wal3Partition]:
    """A log's ranges as Spark's input partitions, each carrying what executors need from the
    manifest (its payload schema and item hash) and the rows wanted, so they never read it."""
    parts = pack(ranges, max_partition_bytes, min_partitions)
    payload = manifest.arrow_schema()
    return [Wal3Partition(i, p, payload, manifest.item_hash, values) for i, p in enumerate(parts)]
