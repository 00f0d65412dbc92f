"""jobs/gc.py: garbage collection of the logs under a prefix (driver-only and spark-submit), with
and without a dirty log, and of every log at any depth (`--recursive`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from tests.support.spark import run_spark_script
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.reader import LogReader
from wal3_spark.log.writer import LogWriter
from wal3_spark.logset.dirty import DirtyLog
from wal3_spark.storage import open_store

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "jobs" / "gc.py"


def make_logs(prefix: Path) -> None:
    for name, cursor in (("a", 8), ("nested/b", 6), ("c", 11)):
        store = open_store(str(prefix / name))
        writer = LogWriter(store)
        for i in range(2):
            writer.append([b"%s-%d" % (name.encode(), i)] * 5)  # [1,6) [6,11)
        CursorStore(store).create("reader", cursor)
    (prefix / "not-a-log").mkdir()
    (prefix / "not-a-log" / "file.txt").write_text("x")


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(JOB), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.slow
def test_00_help_and_driver_only_run(tmp_path):
    proc = run("--help")
    assert proc.returncode == 0 and "--prefix" in proc.stdout and "--grace" in proc.stdout
    make_logs(tmp_path)
    proc = run("--prefix", str(tmp_path), "--driver-only", "--grace", "0", "--recursive")
    results = {Path(json.loads(line)["url"].removeprefix("file://")).relative_to(tmp_path).as_posix():
               json.loads(line) for line in proc.stdout.splitlines()}
    assert set(results) == {"a", "nested/b", "c"}
    assert results["a"]["ok"] and results["a"]["oldest_offset"] == 6
    assert results["nested/b"]["ok"] and results["nested/b"]["oldest_offset"] == 6
    # c's cursor is at the tail: everything would go, refused without --force
    assert not results["c"]["ok"] and "--force" in results["c"]["error"]
    assert proc.returncode == 1
    assert LogReader(open_store(str(tmp_path / "a"))).manifest().oldest_offset == 6
    proc = run("--prefix", str(tmp_path), "--driver-only", "--grace", "0", "--force", "--recursive")
    assert proc.returncode == 0, proc.stderr
    assert LogReader(open_store(str(tmp_path / "c"))).manifest().oldest_offset == 11
    assert run("--prefix", "gopher://x", "--driver-only").returncode == 1
    for recursive in ((), ("--recursive",)):  # a store option's typo is named, not ignored
        proc = run("--prefix", str(tmp_path), "--driver-only", "--option", "endpont=http://127.0.0.1:1", *recursive)
        assert proc.returncode == 1 and "unknown store option 'endpont'" in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr and proc.stdout == ""
    for bad in (("--grace", "-5"), ("--grace", "nan"), ("--max-drop-share", "5"), ("--endpoint", "ftp://x")):
        proc = run("--prefix", str(tmp_path), "--driver-only", *bad)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr and bad[0] in proc.stderr, proc.stderr


@pytest.mark.slow
def test_01_a_prefix_is_its_log_set_and_the_dirty_log_narrows_later_runs(tmp_path):
    make_logs(tmp_path)
    proc = run("--prefix", str(tmp_path), "--driver-only", "--grace", "0", "--force")
    assert proc.returncode == 0, proc.stderr
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    assert sorted(Path(r["url"]).name for r in results) == ["a", "c"]  # direct children only
    assert "2 logs (every log)" in proc.stderr

    with DirtyLog(str(tmp_path)) as dirty:  # from now on appenders record their commits
        for name in ("a", "c"):
            LogWriter(str(tmp_path / name), dirty_log=dirty).append([b"x"])
    proc = run("--prefix", str(tmp_path), "--driver-only", "--grace", "0", "--force")
    assert proc.returncode == 0, proc.stderr
    assert "every log" in proc.stderr  # the first run with a dirty log reads no cursor yet
    with DirtyLog(str(tmp_path)) as dirty:
        LogWriter(str(tmp_path / "c"), dirty_log=dirty).append([b"y"])
    proc = run("--prefix", str(tmp_path), "--driver-only", "--grace", "0", "--force", "--dry-run")
    assert [Path(json.loads(line)["url"]).name for line in proc.stdout.splitlines()] == ["c"]
    proc = run("--prefix", str(tmp_path), "--driver-only", "--grace", "0", "--force")
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [Path(r["url"]).name for r in lines] == ["c", "_dirty"]
    assert "1 logs (the logs changed since the last run)" in proc.stderr
    assert lines[1]["ok"] and lines[1]["dirty"]["rolled_up_to"] == lines[1]["dirty"]["cursor"]
    proc = run("--prefix", str(tmp_path), "--driver-only", "--full-scan")
    assert "2 logs (every log)" in proc.stderr


@pytest.mark.spark
def test_02_spark_submit_one_log_per_task(tmp_path):
    make_logs(tmp_path)
    writer = LogWriter(str(tmp_path / "t"))
    for i in range(4):  # a log with a schema, due at 4 fragments (raw logs never are)
        writer.append(pa.table({"id": pa.array([i], pa.int64())}))
    proc = run_spark_script([str(JOB), "--prefix", str(tmp_path), "--grace", "0", "--force", "--recursive",
                             "--auto-compact", "--auto-compact-fragments", "4"], master="local[2]")
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = {Path(r["url"]).name: r for r in (json.loads(line) for line in proc.stdout.splitlines()
                                                if line.startswith("{"))}
    assert len(results) == 4 and all(r["ok"] and r["compaction"]["ok"] for r in results.values())
    assert sorted(results[name]["oldest_offset"] for name in ("a", "b", "c")) == [6, 6, 11]
    assert results["t"]["compaction"]["fragments_after"] == 1  # compacted in its executor task
    assert not results["a"]["compaction"]["due"]
    assert LogReader(open_store(str(tmp_path / "t"))).read_table().column("id").to_pylist() == [0, 1, 2, 3]


@pytest.mark.slow
def test_03_auto_compact_compacts_due_logs_after_collection_and_reports_failures(tmp_path):
    """--auto-compact: a due log is compacted after its collection (records and setsum kept),
    a log that is not due is left alone, a damaged one's failure is reported in its line
    without stopping the others, and each compacted or failed log is visited again by the next
    dirty-log run although nothing was appended to it."""
    def fragments(name: str) -> int:
        return len(LogReader(open_store(str(tmp_path / name))).manifest().fragments)

    with DirtyLog(str(tmp_path)) as dirty:
        for name, appends in (("due", 6), ("small", 2), ("damaged", 6)):
            writer = LogWriter(str(tmp_path / name), dirty_log=dirty)
            for i in range(appends):
                writer.append(pa.table({"id": pa.array(range(i * 3, i * 3 + 3), pa.int64())}))
    store = open_store(str(tmp_path / "due"))
    setsum = LogReader(store).manifest().setsum
    damaged = sorted((tmp_path / "damaged").rglob("*.parquet"))[2]
    damaged.write_bytes(damaged.read_bytes()[:-40] + b"\0" * 40)
    auto = ("--auto-compact", "--auto-compact-fragments", "4", "--auto-compact-target-bytes", "1m")
    args = ("--prefix", str(tmp_path), "--driver-only", "--grace", "0", "--force", "--full-scan")
    proc = run(*args, "--dry-run", *auto)
    lines = {Path(json.loads(line)["url"]).name: json.loads(line) for line in proc.stdout.splitlines()}
    assert lines["due"]["compaction"] == {"ok": True, "due": True} and fragments("due") == 6
    assert lines["small"]["compaction"] == {"ok": True, "due": False}

    proc = run(*args, *auto)
    assert proc.returncode == 1 and "1 compactions failed" in proc.stderr, proc.stderr
    lines = {Path(json.loads(line)["url"]).name: json.loads(line) for line in proc.stdout.splitlines()}
    assert all(lines[name]["ok"] for name in ("due", "small", "damaged"))  # every collection ran
    assert lines["due"]["compaction"]["ok"] and lines["due"]["compaction"]["fragments_after"] == 1
    assert fragments("due") == 1 and LogReader(store).manifest().setsum == setsum
    assert LogReader(store).read_table().column("id").to_pylist() == list(range(18))
    assert lines["small"]["compaction"] == {"ok": True, "due": False} and fragments("small") == 2
    failure = lines["damaged"]["compaction"]
    assert not failure["ok"] and damaged.name in failure["error"] and fragments("damaged") == 6
    assert lines["_dirty"]["dirty"]["retried"] == ["damaged", "due"]
    proc = run(*args[:-1], *auto)  # nothing appended: the compacted and the failed log again
    assert sorted(Path(json.loads(line)["url"]).name for line in proc.stdout.splitlines()) == \
        ["_dirty", "damaged", "due"]
    for bad in (("--auto-compact-fragments", "1"), ("--auto-compact-target-bytes", "0")):
        proc = run(*args, "--auto-compact", *bad)
        assert proc.returncode == 2 and bad[0] in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
