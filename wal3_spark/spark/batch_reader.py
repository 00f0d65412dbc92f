"""Batch source: `spark.read.format("wal3").load(url)`.

The driver reads the manifest once, resolves startingOffsets/endingOffsets (or timestamps),
narrows the range with pushed-down filters on `_offset` and skips fragments whose write time
(from the UUIDv7 in their path, without reading them) cannot match a filter on `_timestamp`.
Fragments are bin-packed into input partitions; executors only fetch and decode.
"""

from __future__ import annotations

import datetime as _dt
import logging
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.types import StructType

from wal3_spark.schema import OFFSET_COLUMN, TIMESTAMP_COLUMN
from wal3_spark.spark.options import Wal3Options

log = logging.getLogger(__name__)

#: a fragment's UUIDv7 path carries exactly its rows' timestamp_us (write_fragment), so no slack
TIMESTAMP_SLACK_US = 0


class Wal3Partition(InputPartition):
    """Fragment ranges to read, the log's payload schema and its setsum `item_hash` (nothing is
    re-planned)."""

    def __init__(self, index: int, part, payload: pa.Schema | None, item_hash: str | None) -> None:
        super().__init__(index)
        self.index = index
        self.part = part
        self.payload = payload
        self.item_hash = item_hash


@dataclass
class Bounds:
    """Inclusive-exclusive bounds pushed down on one column (None: unbounded)."""

    lo: int | None = None
    hi: int | None = None  # exclusive

    def lower(self, value: int) -> None:
        self.lo = value if self.lo is None else max(self.lo, value)

    def upper(self, value: int) -> None:
        self.hi = value if self.hi is None else min(self.hi, value)


def to_us(value) -> int | None:
    """A pushed-down `_timestamp` literal in microseconds since the epoch."""
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:  # PySpark hands TimestampType literals over in local time
            value = value.astimezone()
        delta = value - _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return None


def narrow(filters, offsets: Bounds, times: Bounds) -> None:
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
            if values and all(v is not None for v in values):
                bounds.lower(min(values))
                bounds.upper(max(values) + 1)
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


def resolve(reader, manifest, position: tuple[str, int], *, default: int) -> int:
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


def plan_range(store, manifest, starting: tuple[str, int], ending: tuple[str, int],
               offsets: Bounds, times: Bounds, fail_on_data_loss: bool) -> list:
    """A log's fragment ranges between its start and end positions, narrowed by pushed-down
    filters on `_offset` and (by the write time in each fragment's path) on `_timestamp`."""
    from wal3_spark.reader import LogReader, fragment_timestamp_us

    reader = LogReader(store)
    start = resolve(reader, manifest, starting, default=manifest.oldest_offset)
    limit = resolve(reader, manifest, ending, default=manifest.next_offset)
    if offsets.lo is not None:
        start = max(start, offsets.lo)
    if offsets.hi is not None:
        limit = min(limit, offsets.hi)
    if start >= limit:
        return []
    if start < manifest.oldest_offset and offsets.lo is not None and starting[0] == "earliest":
        start = manifest.oldest_offset  # a filter below the oldest offset is not data loss
    ranges = reader.plan(start, limit, manifest=manifest, fail_on_data_loss=fail_on_data_loss)
    if times.lo is None and times.hi is None:
        return ranges
    lo = None if times.lo is None else times.lo - TIMESTAMP_SLACK_US
    hi = None if times.hi is None else times.hi + TIMESTAMP_SLACK_US
    written = [(r, fragment_timestamp_us(store, r.ref)) for r in ranges]
    return [r for r, ts in written if (lo is None or ts >= lo) and (hi is None or ts < hi)]


class Wal3BatchReader(DataSourceReader):
    def __init__(self, options: Wal3Options, schema: StructType) -> None:
        from wal3_spark.spark.source import spark_to_arrow

        self.options = options
        self.target = spark_to_arrow(schema)
        self.offsets = Bounds()
        self.times = Bounds()

    def partitions(self):
        from wal3_spark.reader import LogReader
        from wal3_spark.spark.tasks import pack

        store = self.options.open_store()
        manifest = LogReader(store).manifest()
        ranges = plan_range(store, manifest, self.options.starting, self.options.ending,
                            self.offsets, self.times, self.options.fail_on_data_loss)
        parts = pack(ranges, self.options.max_partition_bytes, self.options.min_partitions)
        payload = manifest.arrow_schema()
        return [Wal3Partition(i, p, payload, manifest.item_hash) for i, p in enumerate(parts)]

    def read(self, partition: Wal3Partition):
        from wal3_spark.spark.tasks import read_partition

        if not hasattr(partition, "part"):  # Spark's stand-in when partitions() found nothing
            return
        yield from read_partition(
            self.options.open_store(), partition.part, partition.payload, self.target,
            verify=self.options.verify_on_read, item_hash=partition.item_hash,
            fail_on_data_loss=self.options.fail_on_data_loss,
        )


class Wal3PushdownReader(Wal3BatchReader):
    """The batch reader with filter pushdown on `_offset` and `_timestamp`.

    PySpark refuses a reader that implements pushFilters when
    `spark.sql.python.filterPushdown.enabled` is false, so `reader_class` picks this one only
    when pushdown is on.
    """

    def pushFilters(self, filters):
        filters = list(filters)
        # Spark may reuse this reader for another query on the same DataFrame: start afresh
        self.offsets, self.times = Bounds(), Bounds()
        narrow(filters, self.offsets, self.times)
        return filters  # all of them: Spark re-checks, we only skip what cannot match



def pushdown_enabled() -> bool:
    """Whether Spark planned this read with filter pushdown enabled.

    PySpark (4.1-4.3) reads the flag in its planning worker into a local variable of the function
    that calls `DataSource.reader()` and fails readers implementing pushFilters when it is false;
    the flag is not passed to the data source. Look for it on the calling frames; when it is not
    found (another PySpark version, or the pushdown worker itself) assume pushdown is on.
    """
    import sys

    frame = sys._getframe(1)
    for _ in range(8):
        if frame is None:
            break
        if "enable_pushdown" in frame.f_locals:
            return bool(frame.f_locals["enable_pushdown"])
        frame = frame.f_back
    return True


def reader_class(plain: type[DataSourceReader] = Wal3BatchReader,
                 pushdown: type[DataSourceReader] = Wal3PushdownReader) -> type[DataSourceReader]:
    """`pushdown` (a reader implementing pushFilters) when Spark plans with filter pushdown."""
    return pushdown if pushdown_enabled() else plain
