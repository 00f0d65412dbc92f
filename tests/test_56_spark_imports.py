"""What a Python process Spark starts pays to import the connector."""

from __future__ import annotations


def test_00_the_source_imports_neither_pandas_nor_boto3():
    """Spark starts a fresh Python process for each streaming query's source (and one per
    planning worker): importing the connector there must not pay for pandas (~0.6 s of CPU) or
    boto3 (~0.25 s), which planning a read on any store never needs."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import wal3_spark.spark.source, wal3_spark.spark.stream_reader, wal3_spark.spark.batch_reader\n"
        "import wal3_spark.spark.read_tasks, wal3_spark.spark.write_tasks, wal3_spark.log.reader, wal3_spark.log.writer\n"
        "from wal3_spark.storage import open_store\n"
        "open_store('s3://bucket/log')\n"
        "print(sorted(m for m in ('pandas', 'boto3') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
