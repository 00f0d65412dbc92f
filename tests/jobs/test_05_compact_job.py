"""jobs/compact.py: a log or a log set compacted, executors rewriting the runs and the driver
committing each log with one compare-and-swap; a run that fails leaves its log as it was (the
other runs' fragments orphans), a log changed during the job is a conflict for it only; bad
input is refused before anything is written. One spark-submit run; the cases in process."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from tests.support.emulators import cloud_url
from tests.support.spark import ROOT, run_spark_script
from wal3_spark.clock import SYSTEM, ManualClock
from wal3_spark.jobs import compact as job
from wal3_spark.log.committer import Committer
from wal3_spark.log.compaction import CompactOptions, compact
from wal3_spark.log.reader import LogReader
from wal3_spark.log.writer import LogWriter
from wal3_spark.ops.verify import verify
from wal3_spark.storage import resolve_store

#: when the logs were written: the job compacts now, so every fragment has settled
WRITTEN = SYSTEM.now() - 7200.0


def _log(url: str, appends: int = 6, options: dict[str, str] | None = None) -> None:
    clock = ManualClock(WRITTEN)
    with LogWriter(url, clock=clock, options=options) as writer:
        for i in range(appends):
            clock.advance(1.0)
            writer.append(pa.table({"id": pa.array(range(i * 10, i * 10 + 3 + i), pa.int64())}))


def _state(url: str, options: dict[str, str] | None = None) -> tuple[list, str, int]:
    reader = LogReader(url, options=options)
    table = reader.read_table()
    return (list(zip(table.column("_offset").to_pylist(), table.column("id").to_pylist(),
                     table.column("_timestamp").to_pylist())),
            reader.manifest().setsum.hexdigest(), len(reader.manifest().fragments))


def _damage(url: str, index: int) -> str:
    """Flip a byte in the middle of the log's fragment `index`; its path."""
    store = resolve_store(url)
    victim = LogReader(url).manifest().fragments[index]
    data = bytearray(store.get(victim.path).data)
    data[len(data) // 2] ^= 0xFF
    store.put_if_match(victim.path, bytes(data), store.head(victim.path).etag)
    return victim.path


def _logs(tmp_path: Path, names: str = "abc") -> list[str]:
    urls = [f"file://{tmp_path}/{name}" for name in names]
    for url in urls:
        _log(url)
    return urls


def _small_target(url: str) -> int:
    """A target that cuts the log's six fragments into at least two runs."""
    return LogReader(url).manifest().fragments[0].num_bytes * 3


@pytest.mark.spark
def test_00_spark_submit_compacts_a_log_set_and_refuses_a_damaged_log(tmp_path):
    """Three logs under a prefix, one sealed and one with a damaged fragment in its second run:
    the others drop to fewer fragments with every record, its offset and time, and the setsum
    kept (verify passes; the sealed one stays sealed); the damaged log fails naming its
    fragment and is unchanged, its first run's fragment left an orphan; exit status 1."""
    a, b, c = _logs(tmp_path)
    Committer(b).seal()
    target = _small_target(c)
    damaged = _damage(c, 4)
    before = {url: _state(url) for url in (a, b)}
    manifest_c = LogReader(c).manifest()
    result = run_spark_script([str(ROOT / "jobs" / "compact.py"), "--prefix", str(tmp_path),
                               "--target-bytes", str(target), "--json"], timeout=400)
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-5000:]
    # the Python driver's stderr reaches spark-submit's stdout (observed: its PythonRunner merges them)
    lines = {Path(doc["url"]).name: doc for doc in
             map(json.loads, (line for line in result.stdout.splitlines() if line.startswith("{")))}
    assert set(lines) == {"a", "b", "c"}
    for name, url in (("a", a), ("b", b)):
        after = _state(url)
        assert lines[name]["ok"] and lines[name]["conflicts"] == 0 and len(lines[name]["runs"]) >= 2
        assert after[:2] == before[url][:2] and after[2] == lines[name]["fragments_after"] < 6
        assert verify(url).ok
    assert LogReader(b).manifest().sealed
    assert not lines["c"]["ok"] and damaged in lines["c"]["error"]
    assert LogReader(c).manifest() == manifest_c
    orphans = lines["c"]["orphans"]
    assert len(orphans) >= 1 and all(resolve_store(c).exists(path) for path in orphans)
    assert "3 logs, " in result.stdout + result.stderr and "1 failed" in result.stdout + result.stderr


def test_01_a_failed_rewrite_leaves_its_log_as_it_was_and_the_others_commit(tmp_path):
    a, b = _logs(tmp_path, "ab")
    settings = CompactOptions(target_bytes=_small_target(a))
    damaged = _damage(b, 1)
    manifest_b, before_a = LogReader(b).manifest(), _state(a)
    results = job.compact_logs([a, b], settings, {})
    assert results[0]["ok"] and _state(a)[:2] == before_a[:2] and verify(a).ok
    assert not results[1]["ok"] and damaged in results[1]["error"] and "CorruptLog" in results[1]["error"]
    assert LogReader(b).manifest() == manifest_b
    assert results[1]["orphans"] and all(resolve_store(b).exists(p) for p in results[1]["orphans"])
    assert "nothing committed" in job.describe(results[1])


def test_02_a_log_changed_during_the_job_is_a_conflict_for_that_log_only(tmp_path):
    a, b, c = _logs(tmp_path)
    before = {url: _state(url) for url in (a, b, c)}
    settings = CompactOptions(target_bytes=1 << 20)
    planned = job.plan_logs([a, b, c], settings, {})
    outcomes = job.rewrite_on_threads(job.tasks_of(planned), {})
    compact(b, clock=ManualClock(SYSTEM.now()))  # another compaction of b wins the race
    rival = LogReader(b).manifest()
    results = job.commit_logs(planned, outcomes, {})
    assert [r["ok"] for r in results] == [True, True, True]
    assert [r["conflicts"] for r in results] == [0, 1, 0]
    assert LogReader(b).manifest() == rival  # as the rival made it; our fragment is an orphan
    assert resolve_store(b).exists(results[1]["runs"][0]["path"])
    for url in (a, b, c):
        assert _state(url)[:2] == before[url][:2] and _state(url)[2] == 1 and verify(url).ok


def test_03_bad_input_is_refused_and_changes_nothing(tmp_path, capsys):
    (a,) = _logs(tmp_path, "a")
    manifest = LogReader(a).manifest()
    for bad in (["--target-bytes", "0"], ["--target-bytes", "-5"], ["--target-bytes", "lots"],
                ["--min-fragments", "1"], ["--min-fragments", "x"], ["--settle", "-1"]):
        with pytest.raises(SystemExit) as exit_:
            job.main(["--log", a, "--driver-only", *bad])
        assert exit_.value.code == 2 and bad[0] in capsys.readouterr().err
    assert job.main(["--log", a, "--driver-only", "--target-bytes", "100"]) == 2
    assert "cannot hold one fragment" in capsys.readouterr().err
    assert job.main(["--log", f"file://{tmp_path}/missing", "--driver-only"]) == 1
    out = capsys.readouterr().out
    assert "FAILED" in out and "missing" in out
    assert LogReader(a).manifest() == manifest
    assert job.main(["--prefix", str(tmp_path), "--logs", "a,missing", "--driver-only", "--json"]) == 1
    docs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [d["ok"] for d in docs] == [True, False] and docs[0]["fragments_after"] == 1
    # a target below every fragment (each about 1.1 KB) merges nothing, and says why
    (d,) = _logs(tmp_path, "d")
    manifest = LogReader(d).manifest()
    assert job.main(["--log", d, "--driver-only", "--target-bytes", "1k"]) == 0
    assert "nothing to merge" in capsys.readouterr().out
    assert LogReader(d).manifest() == manifest


@pytest.mark.s3
def test_04_a_log_set_on_seaweedfs(request, capsys):
    """On S3 (SeaweedFS), store options as `--option`: both logs of the set drop to one
    fragment each with every record and the setsum kept."""
    prefix, options = cloud_url(request, "s3")
    urls = [f"{prefix}/{name}" for name in ("a", "b")]
    for url in urls:
        _log(url, options=options)
    before = {url: _state(url, options) for url in urls}
    flags = [arg for key, value in options.items() for arg in ("--option", f"{key}={value}")]
    assert job.main(["--prefix", prefix, "--driver-only", "--json", *flags]) == 0
    docs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(d["ok"], d["fragments_before"], d["fragments_after"]) for d in docs] == [(True, 6, 1)] * 2
    for url in urls:
        assert _state(url, options)[:2] == before[url][:2] and verify(url, options=options).ok
