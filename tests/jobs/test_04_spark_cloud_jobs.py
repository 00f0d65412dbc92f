"""The jobs (ingest, tail, verify, gc) on `gs://` and `az://` logs, on the emulators: each job's
`main` runs with the store options as its `--option` arguments, in this process on the test
session's Spark (a spark-submit per job and store would add a JVM start each, ~20 s, and
jobs/test_00_spark_jobs runs the entry points through spark-submit on local logs). The jobs stop their session
when they end: here that stop is the shared session's, so it is skipped."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from tests.support.emulators import cloud_url
from tests.spark.test_08_batch import corrupt_fragment, sample
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.reader import LogReader
from wal3_spark.log.writer import LogWriter
from wal3_spark.ops.verify import verify
from wal3_spark.storage import open_store

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(params=["gcs", "azure"])
def cloud(request: pytest.FixtureRequest, spark, monkeypatch: pytest.MonkeyPatch) -> tuple[str, dict[str, str]]:
    """A fresh URL on each emulator and its store options; the jobs' `spark.stop()` skipped."""
    from pyspark.sql import SparkSession

    monkeypatch.setattr(SparkSession, "stop", lambda self: None)
    return cloud_url(request, request.param)


def option_args(options: dict[str, str]) -> list[str]:
    return [arg for key, value in options.items() for arg in ("--option", f"{key}={value}")]


def write_log(url: str, options: dict[str, str], appends: int = 3, rows: int = 100) -> None:
    with LogWriter(url, options=options) as writer:
        for a in range(appends):
            writer.append(pa.table({"id": pa.array(range(a * rows, (a + 1) * rows), pa.int64())}))


def test_00_ingest(spark, cloud, tmp_path: Path) -> None:
    from wal3_spark.jobs import ingest

    url, options = cloud
    sample(spark, 500).write.parquet(str(tmp_path / "in"))
    assert ingest.main(["--input", str(tmp_path / "in"), "--log", url, *option_args(options)]) == 0
    table = LogReader(url, options=options).read_table()
    assert sorted(table.column("id").to_pylist()) == list(range(500))
    assert verify(url, options=options).ok


def test_01_tail_into_parquet_moving_a_cursor(spark, cloud, tmp_path: Path) -> None:
    from wal3_spark.jobs import tail

    url, options = cloud
    write_log(url, options)
    args = ["--log", url, "--available-now", "--starting-offsets", "earliest", "--cursor", "billing",
            "--max-records-per-trigger", "100", "--output", str(tmp_path / "out"),
            "--checkpoint", str(tmp_path / "ckpt"), *option_args(options)]
    assert tail.main(args) == 0
    out = spark.read.parquet(str(tmp_path / "out"))
    assert sorted(r.id for r in out.select("id").collect()) == list(range(300))
    # Spark commits a micro-batch's end to the source when the next one starts (the last one's
    # may come after the query stopped)
    cursor = CursorStore(open_store(url, options)).get("billing")
    assert cursor is not None and cursor.cursor.offset in (201, 301)


def test_02_verify_finds_a_corrupt_fragment(spark, cloud, capsys: pytest.CaptureFixture[str]) -> None:
    from wal3_spark.jobs import verify as verify_job

    url, options = cloud
    write_log(url, options)
    assert verify_job.main(["--log", url, "--partitions", "2", *option_args(options)]) == 0
    assert "3 fragments, 300 records" in capsys.readouterr().out
    store = open_store(url, options)
    bad = LogReader(store).manifest().fragments[1]
    corrupt_fragment(store, bad.path)
    assert verify_job.main(["--log", url, *option_args(options)]) == 1
    out = capsys.readouterr().out
    assert "FAILED" in out and bad.path in out


def test_03_gc_of_a_log_set_on_spark(spark, cloud, capsys: pytest.CaptureFixture[str]) -> None:
    from wal3_spark.jobs import gc

    prefix, options = cloud
    for name, cursor in (("a", 201), ("b", 101)):
        write_log(f"{prefix}/{name}", options)
        CursorStore(open_store(f"{prefix}/{name}", options)).create("reader", cursor)
    assert gc.main(["--prefix", prefix, "--grace", "0", *option_args(options)]) == 0
    results = {json.loads(line)["url"].rsplit("/", 1)[1]: json.loads(line)
               for line in capsys.readouterr().out.splitlines()}
    assert results["a"]["ok"] and results["b"]["ok"]
    for name, oldest in (("a", 201), ("b", 101)):
        reader = LogReader(f"{prefix}/{name}", options=options)
        assert reader.manifest().oldest_offset == oldest
        assert reader.read_table().column("id").to_pylist() == list(range(oldest - 1, 300))
        assert verify(f"{prefix}/{name}", options=options).ok
