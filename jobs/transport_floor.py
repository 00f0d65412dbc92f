"""The Python data source transport floor, for jobs/benchmark.py: a source that plans exactly as
`format("wal3")` does and yields the very Arrow batches its reader yields, from memory.

Each Python worker keeps the batches of the partitions it has read (the benchmark's warm-up
run fills them); later reads yield them again with no I/O, no decode and no setsum check. What
such a read costs over `spark.read.parquet` is what the transport alone costs: Arrow batches
through the worker's socket into the JVM, then rows. No Python source can read faster, so this
row bounds every `format("wal3")` read target (docs/benchmarks.md); its streaming twin bounds
the drains the same way, with the source's per-query start-up included.

Imported as `jobs.transport_floor` so that Spark's Python workers, which have the checkout on
their path but not `jobs/`, can unpickle the classes by reference.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial

from wal3_spark.spark import options as opts
from wal3_spark.spark.batch_reader import Wal3BatchReader
from wal3_spark.spark.planning import Wal3Partition
from wal3_spark.spark.source import Wal3DataSource
from wal3_spark.spark.stream_reader import Wal3StreamReader

#: (log URL, partition index, or its ranges for a stream) -> the Arrow batches the reader
#: yielded, per worker
_BATCHES: dict[tuple, list] = {}


def _remembered(key: tuple, read: Callable[[], Iterator]) -> list:
    """The batches `read()` yields, read the first time `key` is asked for in this worker."""
    if key not in _BATCHES:
        _BATCHES[key] = list(read())
    return _BATCHES[key]


class MemoryReader(Wal3BatchReader):
    """`Wal3BatchReader` whose partitions are read once per worker, then yielded from memory."""

    def read(self, partition: Wal3Partition):
        yield from _remembered((self.options.url, partition.index), partial(super().read, partition))


class MemoryStreamReader(Wal3StreamReader):
    """`Wal3StreamReader` whose micro-batches' partitions are read once per worker, then
    yielded from memory: a drain with the source's per-query start-up, planning and transport
    but no fetch, decode or check (the drain's floor)."""

    def read(self, partition: Wal3Partition):
        key = (self.options.url, tuple((r.start, r.limit) for r in partition.part.ranges))
        yield from _remembered(key, partial(super().read, partition))


class MemoryFloorSource(Wal3DataSource):
    """`format("wal3memory")`: the wal3 source reading through `MemoryReader` (batch) and
    `MemoryStreamReader` (streaming)."""

    @classmethod
    def name(cls) -> str:
        return "wal3memory"

    def reader(self, schema):
        return MemoryReader(self._parse(opts.READ, schema), schema)

    def streamReader(self, schema):
        return MemoryStreamReader(self._parse(opts.STREAM_READ, schema), schema)
