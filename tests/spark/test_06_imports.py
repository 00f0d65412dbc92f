"""What a Python process Spark starts pays to import the connector."""

from __future__ import annotations

import subprocess
import sys


def printed(code: str) -> str:
    """What `code` prints, run in a fresh Python process (nothing imported before it)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_00_the_source_imports_neither_pandas_nor_boto3():
    """Spark starts a fresh Python process for each streaming query's source (and one per
    planning worker): importing the connector there must not pay for pandas (~0.6 s of CPU) or
    boto3 (~0.25 s), which planning a read on any store never needs."""
    code = (
        "import sys\n"
        "import wal3_spark.spark.source, wal3_spark.spark.stream_reader, wal3_spark.spark.batch_reader\n"
        "import wal3_spark.spark.read_tasks, wal3_spark.spark.write_tasks, wal3_spark.log.reader, wal3_spark.log.writer\n"
        "from wal3_spark.storage import open_store\n"
        "open_store('s3://bucket/log')\n"
        "print(sorted(m for m in ('pandas', 'boto3') if m in sys.modules))\n"
    )
    assert printed(code) == "[]"


def test_00b_the_source_side_never_imports_the_fragment_codec():
    """The driver side of a read (a streaming query's source runs it in a fresh Python process
    per query, before its first micro-batch) only plans: it must not import the fragment codec
    (`wal3_spark.format.fragment`, with pyarrow.parquet and pyarrow.compute, ~60 ms), which an
    import of the compaction constants by the options once pulled in."""
    code = (
        "import sys\n"
        "import wal3_spark.spark.source, wal3_spark.spark.stream_reader, wal3_spark.spark.batch_reader\n"
        "import wal3_spark.spark.options, wal3_spark.log.reader\n"
        "heavy = ('wal3_spark.format.fragment', 'wal3_spark.format.chunk_encoding', 'pyarrow.parquet',\n"
        "         'pyarrow.compute')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    assert printed(code) == "[]"


def test_01_a_read_task_never_imports_pandas(tmp_path):
    """A Spark read task's worker never needs pandas (PySpark's data source transport does not
    import it): pyarrow's `to_numpy` and `pa.array` import it on first use, which cost each
    fresh worker about 0.45 s of CPU (13 s of wall time on a loaded machine) on its first
    fragment. The batch and stream readers' `read` of a structured and a raw log, verified by
    digest, and a LogReader read, in a fresh process."""
    import pyarrow as pa

    from wal3_spark.log.writer import LogWriter

    structured, raw = (tmp_path / "s").as_uri(), (tmp_path / "r").as_uri()
    LogWriter(structured).append(pa.table({"a": [1, 2, 3], "s": ["x", "y", "z"]}))
    LogWriter(raw).append([b"a", b"b"])
    code = (
        "import sys\n"
        "from wal3_spark.spark.source import Wal3DataSource\n"
        "from wal3_spark.log.reader import LogReader\n"
        "rows = []\n"
        f"for url in ({structured!r}, {raw!r}):\n"
        "    source = Wal3DataSource({'path': url})\n"
        "    schema = source.schema()\n"
        "    batch = source.reader(schema)\n"
        "    rows += [b.num_rows for p in batch.partitions() for b in batch.read(p)]\n"
        "    stream = source.streamReader(schema)\n"
        "    start = stream.initialOffset()\n"
        "    end = stream.latestOffset(start, stream.getDefaultReadLimit())\n"
        "    rows += [b.num_rows for p in stream.partitions(start, end) for b in stream.read(p)]\n"
        "    rows.append(LogReader(url).read_table().num_rows)\n"
        "print(rows, 'pandas' in sys.modules)\n"
    )
    assert printed(code) == "[3, 3, 3, 2, 2, 2] False"
