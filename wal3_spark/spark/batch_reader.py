"""Batch source: `spark.read.format("wal3").load(url)`.

The driver reads the manifest once, resolves startingOffsets/endingOffsets (or timestamps) and
bin-packs the range's fragments into input partitions; executors only fetch and decode. With
filter pushdown on (off as the project ships it: Spark 4.3 reuses a DataFrame's last pushed
plan for its later queries, docs/design/54-spark-batch-caching-and-pushdown.md), filters on `_offset` narrow the range
and fragments whose write time (from the UUIDv7 in their path, without reading them) cannot
match a filter on `_timestamp` are skipped.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from types import FrameType

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, Filter, InputPartition
from pyspark.sql.types import StructType

from wal3_spark.log.reader import LogReader
from wal3_spark.spark.options import Wal3Options
from wal3_spark.spark.planning import (
    Bounds,
    Wal3Partition,
    narrow,
    partitions_of,
    plan_range,
    positions,
    pushed_values,
    value_filters,
)
from wal3_spark.spark.read_tasks import read_partition
from wal3_spark.spark.schemas import spark_to_arrow


class Wal3BatchReader(DataSourceReader):
    def __init__(self, options: Wal3Options, schema: StructType) -> None:
        self.options = options
        self.target = spark_to_arrow(schema)
        self.offsets = Bounds()
        self.times = Bounds()
        #: pushed-down equality filters on other columns, for stream filters to skip fragments
        self.pushed: list[tuple[str, tuple]] = []

    def partitions(self) -> Sequence[Wal3Partition]:
        o = self.options
        store = o.open_store()
        manifest = LogReader(store).manifest()
        values, skipping = value_filters(manifest, (o.filter_column, o.filter_values), self.pushed,
                                         o.url)
        starting, ending = positions(o, store, manifest)
        ranges = plan_range(store, manifest, starting, ending, self.offsets, self.times,
                            o.fail_on_data_loss, values, skipping)
        return partitions_of(manifest, ranges, o.max_partition_bytes, o.min_partitions, values)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, Wal3Partition):  # Spark's stand-in when partitions() found nothing
            return
        yield from read_partition(
            self.options.open_store(), partition.part, partition.payload, self.target,
            verify=self.options.verify_on_read, records=self.options.verify_records,
            item_hash=partition.item_hash,
            fail_on_data_loss=self.options.fail_on_data_loss, values=partition.values,
        )


class Wal3PushdownReader(Wal3BatchReader):
    """The batch reader with filter pushdown on `_offset` and `_timestamp`, and of equality
    filters (`=`, `IN`) on a column whose stream filters let fragments be skipped.

    PySpark refuses a reader that implements pushFilters when
    `spark.sql.python.filterPushdown.enabled` is false, so `reader_class` picks this one only
    when pushdown is on.
    """

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        filters = list(filters)
        # Spark may reuse this reader for another query on the same DataFrame: start afresh
        self.offsets, self.times = Bounds(), Bounds()
        narrow(filters, self.offsets, self.times)
        self.pushed = pushed_values(filters)
        return filters  # all of them: Spark re-checks, we only skip what cannot match


def pushdown_enabled() -> bool:
    """Whether Spark planned this read with filter pushdown enabled.

    PySpark (4.1-4.3) reads the flag in its planning worker into a local variable of the function
    that calls `DataSource.reader()` and fails readers implementing pushFilters when it is false;
    the flag is not passed to the data source. Look for it on the calling frames; when it is not
    found (another PySpark version, or the pushdown worker itself) assume pushdown is on.
    """
    frame: FrameType | None = sys._getframe(1)
    for _ in range(8):
        if frame is None:
            break
        if "enable_pushdown" in frame.f_locals:
            return bool(frame.f_locals["enable_pushdown"])
        frame = frame.f_back
    return True


#: a batch reader's class: made from the parsed options and the schema
ReaderClass = Callable[[Wal3Options, StructType], DataSourceReader]


def reader_class(plain: ReaderClass = Wal3BatchReader,
                 pushdown: ReaderClass = Wal3PushdownReader) -> ReaderClass:
    """`pushdown` (a reader implementing pushFilters) when Spark plans with filter pushdown."""
    return pushdown if pushdown_enabled() else plain
