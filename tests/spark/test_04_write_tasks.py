"""What an executor's write task holds, called without Spark: Arrow memory bounded by
fragmentBytes, whatever the partition's size."""

from __future__ import annotations

import pyarrow as pa

from wal3_spark.spark.write_tasks import write_partition
from wal3_spark.storage import open_store


def test_00_write_task_memory_is_bounded_by_fragment_bytes(tmp_path):
    """A task streaming 48 MB through write_partition never holds much more than 2x
    fragmentBytes in Arrow memory, whatever the partition size."""
    store = open_store((tmp_path / "log").as_uri())
    schema = pa.schema([pa.field("id", pa.int64(), False), pa.field("s", pa.string(), False)])
    fragment_bytes = 4 << 20
    peak = 0

    def batches():
        nonlocal peak
        for i in range(48):
            ids = pa.array(range(i * 20_000, (i + 1) * 20_000), pa.int64())
            s = pa.array([f"{j:040d}" for j in range(20_000)], pa.string())  # ~1 MB per batch
            yield pa.RecordBatch.from_arrays([ids, s], schema=schema)
            peak = max(peak, pa.total_allocated_bytes())

    base = pa.total_allocated_bytes()
    files = write_partition(store, batches(), schema, fragment_bytes)
    assert sum(f.records for f in files) == 48 * 20_000
    assert len(files) >= 3
    assert peak - base < 2.5 * fragment_bytes, (peak - base) / fragment_bytes
