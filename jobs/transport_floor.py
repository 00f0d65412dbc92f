"""The Python data source transport floor, for jobs/benchmark.py: a source that plans exactly as
`format("wal3")` does and yields the very Arrow batches its reader yields, from memory.

Each Python worker keeps the batches of the partitions it has read (the benchmark's warm-up
run fills them); later reads yield them again with no I/O, no decode and no setsum check. What
such a read costs over `spark.read.parquet` is what the transport alone costs: Arrow batches
through the worker's socket into the JVM, then rows. No Python source can read faster, so this
row bounds every `format("wal3")` read target (docs/benchmarks.md).

Imported as `jobs.transport_floor` so that Spark's Python workers, which have the checkout on
their path but not `jobs/`, can unpickle the classes by reference.
"""

from __future__ import annotations

from wal3_spark.spark import options as opts
from wal3_spark.spark.batch_reader import Wal3BatchReader
from wal3_spark.spark.planning import Wal3Partition
from wal3_spark.spark.source import Wal3DataSource

#: (log URL, partition index) -> the Arrow batches `Wal3BatchReader.read` yielded, per worker
_BATCHES: dict[tuple[str, int], list] = {}


class MemoryReader(Wal3BatchReader):
    """`Wal3BatchReader` whose partitions are read once per worker, then yielded from memory."""

    def read(self, partition: Wal3Partition):
        key = (self.options.url, partition.index)
        if key not in _BATCHES:
            _BATCHES[key] = list(super().read(partition))
        yield from _BATCHES[key]


class MemoryFloorSource(Wal3DataSource):
    """`spark.read.format("wal3memory")`: the wal3 source reading through `MemoryReader`."""

    @classmethod
    def name(cls) -> str:
        return "wal3memory"

    def reader(self, schema):
        return MemoryReader(self._parse(opts.READ, schema), schema)
