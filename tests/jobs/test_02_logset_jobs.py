"""The jobs on a log set: `jobs/verify.py --prefix` verifies every log of the set (or those
selected), on threads or one Spark task per log, and fails naming the broken log."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.spark import run_spark_script
from wal3_spark.log.reader import LogReader
from wal3_spark.log.writer import LogWriter
from wal3_spark.storage import open_store

ROOT = Path(__file__).resolve().parents[2]
VERIFY = ROOT / "jobs" / "verify.py"


def make_set(prefix: Path) -> None:
    for name in ("a", "b", "c"):
        with LogWriter(str(prefix / name)) as writer:
            writer.append([b"%s-1" % name.encode()] * 3)
            writer.append([b"%s-2" % name.encode()] * 2)


def break_fragment(log: Path) -> str:
    """Replace the log's first fragment with its second's bytes (valid Parquet, wrong records)."""
    store = open_store(str(log))
    first, second = LogReader(store).manifest().fragments
    data = store.get(second.path).data
    store.delete(first.path)
    store.put_if_absent(first.path, data)
    return first.path


def verify(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(VERIFY), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.slow
def test_00_verify_a_prefix_on_threads(tmp_path: Path) -> None:
    make_set(tmp_path)
    proc = verify("--prefix", str(tmp_path), "--driver-only")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count(": 2 fragments, 5 records") == 3
    assert "3 logs under" in proc.stdout and "0 failed" in proc.stdout

    bad = break_fragment(tmp_path / "b")
    proc = verify("--prefix", str(tmp_path), "--driver-only")
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert any(line.endswith("/b: 2 fragments, 5 records, 0.0 MB: FAILED") for line in lines), lines
    assert any(bad in line for line in lines)
    assert "1 failed" in lines[-1]
    proc = verify("--prefix", str(tmp_path), "--driver-only", "--pattern", "[ac]")
    assert proc.returncode == 0 and "2 logs under" in proc.stdout

    open_store(str(tmp_path / "d")).put_if_absent("manifest/MANIFEST", b"{not json")
    proc = verify("--prefix", str(tmp_path), "--driver-only", "--logs", "a,d")
    assert proc.returncode == 1
    assert any("/d: " in line and line.endswith("FAILED") for line in proc.stdout.splitlines())
    assert "valid JSON" in proc.stdout

    proc = verify("--prefix", str(tmp_path), "--driver-only", "--logs", "a b")
    assert proc.returncode == 2 and "invalid log name 'a b'" in proc.stderr
    proc = verify("--log", str(tmp_path / "a"), "--pattern", "x")
    assert proc.returncode == 2 and "go with --prefix" in proc.stderr


@pytest.mark.spark
def test_01_verify_a_prefix_with_one_spark_task_per_log(tmp_path: Path) -> None:
    make_set(tmp_path)
    break_fragment(tmp_path / "c")
    proc = run_spark_script([str(VERIFY), "--prefix", str(tmp_path)], master="local[2]")
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "3 logs under" in proc.stdout and "1 failed" in proc.stdout
    failed = [line for line in proc.stdout.splitlines() if line.endswith("FAILED")]
    assert len(failed) == 1 and "/c: " in failed[0]
