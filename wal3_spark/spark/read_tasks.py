"""What a read task does on an executor: fetch, verify and decode its partition's fragments.

`read_partition` yields each range's records as Arrow batches in exactly the schema Spark
declared (PySpark 4.2+ rejects any other), prefetching the next fragment while Spark consumes
the current one. The partitions themselves are planned on the driver (`planning`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import pyarrow as pa

from wal3_spark.format.schema import conform
from wal3_spark.format.stream_filter import ValueFilter
from wal3_spark.log.fragment_io import ReadRange, read_range
from wal3_spark.spark.planning import Part
from wal3_spark.storage.base import ObjectStore

#: one range to read: a log's `ReadRange`, or a log set's (log name, range)
Range = TypeVar("Range")

#: rows per Arrow batch handed back to Spark by read()
READ_BATCH_ROWS = int(os.environ.get("WAL3_READ_BATCH_ROWS", 1 << 16))


def read_partition(
    store: ObjectStore,
    part: Part[ReadRange],
    payload: pa.Schema | None,
    target: pa.Schema,
    *,
    verify: bool,
    records: bool = False,
    batch_rows: int = READ_BATCH_ROWS,
    item_hash: str | None = None,
    fail_on_data_loss: bool = True,
    values: ValueFilter | None = None,
) -> Iterator[pa.RecordBatch]:
    """The records of `part` in offset order (with `values`, only those it wants), as batches
    of the declared Arrow schema; a fragment GC deleted since the driver planned is DataLost,
    or skipped with a warning under failOnDataLoss=false (`read_range`)."""

    def load(r: ReadRange) -> pa.RecordBatch:
        batch = read_range(store, r, payload, verify=verify, records=records, item_hash=item_hash,
                           fail_on_data_loss=fail_on_data_loss, values=values)
        return conform(batch, target, against="query")

    return prefetched(part.ranges, load, batch_rows)


def prefetched(
    ranges: Sequence[Range], load: Callable[[Range], pa.RecordBatch], batch_rows: int
) -> Iterator[pa.RecordBatch]:
    """`load` of each range in order, in slices of at most `batch_rows`, the next range loaded
    while Spark consumes this one: fetching, decoding and verifying overlap with Spark's work
    (Parquet decoding and SHA3 release the GIL), and at most two fragments are in memory."""
    if not ranges:
        return
    with ThreadPoolExecutor(1, thread_name_prefix="wal3-prefetch") as pool:
        pending = pool.submit(load, ranges[0])
        for i in range(len(ranges)):
            batch = pending.result()
            if i + 1 < len(ranges):
                pending = pool.submit(load, ranges[i + 1])
            for lo in range(0, batch.num_rows, batch_rows):
                yield batch.slice(lo, batch_rows)
            del batch
