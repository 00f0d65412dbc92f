"""The jobs under jobs/ run through spark-submit; the distributed verify finds corruption."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.spark import ROOT, run_spark_script, spark_env
from tests.spark.test_08_batch import append, corrupt_fragment, read, sample
from wal3_spark.log.reader import LogReader
from wal3_spark.storage import open_store

pytestmark = pytest.mark.timeout(400)

JOBS = ["quickstart", "ingest", "tail", "pipeline", "verify"]


def test_00_every_job_has_help():
    """`--help` exits in argparse, before any Spark: each job runs as its own script in a plain
    interpreter, as spark-submit's Python runner starts it (a JVM each would add nothing)."""
    for job in JOBS:
        result = subprocess.run([sys.executable, str(ROOT / "jobs" / f"{job}.py"), "--help"],
                                cwd=ROOT, env=spark_env(), capture_output=True, text=True,
                                timeout=180)
        assert result.returncode == 0, (job, result.stderr[-2000:])
        assert "usage:" in result.stdout, job


def test_01_quickstart_runs_on_a_fresh_temporary_log():
    """Every step of the README's main job on its default log (a new temporary directory): two
    append jobs of four tasks, the stream back in bounded micro-batches, the tail read by its
    offsets, verify. A tenth of its default rows (200,000, 50,000 per trigger) takes the same steps in
    as many micro-batches: the default run differs only in size (42.6 s against 29.0 s)."""
    result = run_spark_script([str(ROOT / "jobs" / "quickstart.py"), "--rows", "20000",
                               "--max-records-per-trigger", "5000"], timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    assert "/wal3-quickstart-" in result.stdout  # the log went to a fresh temporary directory
    assert "streamed back        20000 rows in 4 micro-batches [5000, 5000, 5000, 5000]" in result.stdout
    assert "result               OK" in result.stdout
    assert "verify               ok" in result.stdout


def test_02_ingest_pipeline_and_verify_jobs(spark, tmp_path):
    src_files = tmp_path / "in"
    sample(spark, 2000).write.parquet(str(src_files))
    source, sink = (tmp_path / "source").as_uri(), (tmp_path / "sink").as_uri()
    r = run_spark_script([str(ROOT / "jobs" / "ingest.py"), "--input", str(src_files),
                          "--log", source], timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    args = [str(ROOT / "jobs" / "pipeline.py"), "--source", source, "--sink", sink,
            "--checkpoint", str(tmp_path / "ckpt"), "--where", "id % 2 = 0",
            "--with-column", "double_id=id * 2", "--keep-source-offsets", "--available-now"]
    r = run_spark_script(args, timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    append(sample(spark, 10, start=2000), source)
    r = run_spark_script(args, timeout=300)  # restart: only the new records flow
    assert r.returncode == 0, r.stderr[-4000:]
    rows = read(spark, sink).collect()
    assert sorted(x.id for x in rows) == list(range(0, 2010, 2))
    assert all(x.double_id == 2 * x.id for x in rows)
    r = run_spark_script([str(ROOT / "jobs" / "verify.py"), "--log", sink], timeout=300)
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr[-3000:]


def test_03_distributed_verify_reports_corrupt_fragment(spark, log_url):
    from wal3_spark.spark.distributed_verify import verify_on_spark

    append(sample(spark, 300, parts=3), log_url)
    report = verify_on_spark(spark, log_url)
    assert report.ok and report.records == 300 and report.fragments == 3
    store = open_store(log_url)
    bad = LogReader(store).manifest().fragments[1]
    corrupt_fragment(store, bad.path)
    report = verify_on_spark(spark, log_url)
    assert not report.ok
    # its bytes no longer match the digest the writer recorded (checked before the setsum)
    assert any(p.kind == "corrupt" and p.obj == bad.path and "do not match their blake3" in p.detail
               for p in report.problems), report.problems
