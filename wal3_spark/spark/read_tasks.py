"""What a read task does on an executor: fetch, verify and decode its partition's fragments.

`read_partition` yields each range's records as Arrow batches in exactly the schema Spark
declared (PySpark 4.2+ rejects any other), decoding the next row group (and fetching the next
fragment) while Spark consumes the current one. The partitions themselves are planned on the
driver (`planning`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TypeVar

import pyarrow as pa

from wal3_spark.format.schema import conform
from wal3_spark.format.stream_filter import ValueFilter
from wal3_spark.log.fragment_io import Piece, ReadRange, open_range
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
    or skipped with a warning under failOnDataLoss=false (`open_range`)."""

    def conformed(piece: Piece) -> pa.RecordBatch:
        return conform(piece(), target, against="query")

    def pieces(r: ReadRange) -> list[Piece]:
        opened = open_range(store, r, payload, verify=verify, records=records, item_hash=item_hash,
                            fail_on_data_loss=fail_on_data_loss, values=values)
        return [partial(conformed, p) for p in opened]

    return pipelined(part.ranges, pieces, batch_rows)


def pipelined(
    ranges: Sequence[Range], pieces: Callable[[Range], list[Piece]], batch_rows: int
) -> Iterator[pa.RecordBatch]:
    """Each range's pieces' batches in order, in slices of at most `batch_rows`, one step ahead
    on a thread: while Spark consumes a piece (a Parquet row group), the next one decodes, and
    while it consumes a range's last piece, the next range is fetched and checked (`pieces`).
    Parquet decoding and BLAKE3 release the GIL. A task holds at most the bytes of two
    fragments and two decoded pieces, less than the two decoded fragments of the bound.

    Measured (docs/benchmarks.md, "Batch reads"): the benchmark's tasks read one fragment each,
    so a whole-fragment prefetch never overlapped anything and the decode preceded the first
    batch."""
    if not ranges:
        return
    with ThreadPoolExecutor(1, thread_name_prefix="wal3-prefetch") as pool:
        opening = pool.submit(pieces, ranges[0])
        for i in range(len(ranges)):
            todo = opening.result()
            pending = pool.submit(todo[0]) if todo else None
            if len(todo) <= 1 and i + 1 < len(ranges):
                opening = pool.submit(pieces, ranges[i + 1])
            for k in range(len(todo)):
                assert pending is not None
                batch = pending.result()
                if k + 1 < len(todo):
                    pending = pool.submit(todo[k + 1])
                    if k + 2 == len(todo) and i + 1 < len(ranges):
                        opening = pool.submit(pieces, ranges[i + 1])
                for lo in range(0, batch.num_rows, batch_rows):
                    yield batch.slice(lo, batch_rows)
                del batch
