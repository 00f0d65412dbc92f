"""A read of a log as a `pyarrow.RecordBatchReader`: what DuckDB, Polars, pandas and pyarrow
itself consume, so Python users query a log without Spark.

The range is fixed when the scan is planned (against one manifest), and fragments are fetched,
verified and decoded only as the consumer pulls batches, one fragment at a time: memory stays
about one fragment whatever the range. `position` follows what the consumer has taken, so a
consumer reading from a cursor knows where to move it, also when it stopped early.

Design: docs/design/24-reading-without-spark.md.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pyarrow as pa

from wal3_spark.errors import InvalidOption
from wal3_spark.format.schema import OFFSET_COLUMN


class LogScan:
    """Offsets [start, limit) of the log at `url`; read them through `reader` (once)."""

    def __init__(self, url: str, schema: pa.Schema, start: int, limit: int,
                 batches: Iterator[pa.RecordBatch]) -> None:
        self.url = url
        self.schema = schema
        self.start = start
        #: the exclusive end, fixed when planned: records appended since are not in this scan
        self.limit = limit
        #: the offset after the last record handed to the consumer: where the next read starts
        self.position = start
        self.reader = pa.RecordBatchReader.from_batches(schema, self._follow(batches))

    def _follow(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            if batch.num_rows:
                self.position = batch.column(OFFSET_COLUMN)[-1].as_py() + 1
            yield batch
        self.position = self.limit

    @property
    def records(self) -> int:
        return self.limit - self.start

    def __repr__(self) -> str:
        return f"LogScan({self.url}, offsets [{self.start}, {self.limit}), at {self.position})"


def timestamp_us(when: dt.datetime) -> int:
    """Microseconds since the epoch; a naive datetime is UTC (as the Spark options read it)."""
    if not isinstance(when, dt.datetime):
        raise InvalidOption(f"{when!r} is not a time: give a datetime.datetime (naive means UTC)")
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    delta = when - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
