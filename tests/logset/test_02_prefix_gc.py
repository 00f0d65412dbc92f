"""Garbage collection of a log set: with a dirty log, a run touches only the logs that changed since
the previous run (counted with a store wrapper); without one, every log. The dirty log itself is
rolled up and collected, so it stays bounded; logs whose collection failed are retried by the next
run."""

from __future__ import annotations

from tests.support.fakes import CountingStore
from wal3_spark.errors import Wal3Error
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.reader import LogReader
from wal3_spark.log.writer import LogWriter
from wal3_spark.logset.dirty import GC_CURSOR, DirtyLog, dirty_store, rolled_up_to
from wal3_spark.logset.logs import LogSet
from wal3_spark.logset.prefix_gc import finish, plan
from wal3_spark.ops.garbage_collector import GCOptions, GCReport, collect_garbage
from wal3_spark.storage import open_store
from wal3_spark.storage.base import ObjectStore


def make_logs(prefix: ObjectStore, dirty: DirtyLog | None, names: list[str]) -> None:
    """Each log: two appends of 5 records, a cursor at 6 (GC can drop the first fragment)."""
    logs = LogSet(prefix)
    for name in names:
        store = logs.log_store(name)
        with LogWriter(store, dirty_log=dirty) as writer:
            for i in range(2):
                writer.append([b"%s-%d" % (name.encode(), i)] * 5)
        CursorStore(store).create("reader", 6)


def gc_run(prefix: ObjectStore, *, full_scan: bool = False, fail: set[str] = frozenset()) -> tuple[list[str], object]:
    """One run as `jobs/gc.py --prefix --driver-only` does it; logs in `fail` fail."""
    run = plan(prefix, full_scan=full_scan)
    logs = LogSet(prefix)
    results: dict[str, GCReport | Wal3Error] = {}
    for name in run.names:
        if name in fail:
            results[name] = Wal3Error(f"{name} failed")
            continue
        results[name] = collect_garbage(logs.log_store(name), GCOptions(grace_s=0, force=True))
    failed = [name for name, r in results.items() if isinstance(r, Wal3Error)]
    return run.names, finish(prefix, run, failed, grace_s=0)


def test_00_with_a_dirty_log_a_run_touches_only_the_logs_changed_since_the_last(tmp_path) -> None:
    prefix = open_store(str(tmp_path))
    names = [f"t{i}" for i in range(10)]
    with DirtyLog(prefix) as dirty:
        make_logs(prefix, dirty, names)
        counting = CountingStore(prefix)
        first, report = gc_run(counting)
        assert first == names  # no gc cursor yet: every log
        assert report is not None and report.cursor == 21
        assert LogReader(LogSet(prefix).log_store("t0")).bounds()[0] == 6

        for name in ("t3", "t7"):
            with LogWriter(LogSet(prefix).log_store(name), dirty_log=dirty) as writer:
                writer.append([b"more"] * 5)
        counting.counts.clear()
        second, report = gc_run(counting)
    assert second == ["t3", "t7"]
    # Requests went to the two changed logs and the dirty log only: no listing of the prefix,
    # not one request to the eight logs that did not change.
    assert counting.logs_touched() == {"t3", "t7", "_dirty"}
    assert ("list_children", "") not in counting.counts
    counting.counts.clear()
    third, _ = gc_run(counting)
    assert third == [] and counting.logs_touched() == {"_dirty"}


def test_01_without_a_dirty_log_every_run_collects_every_log(tmp_path) -> None:
    prefix = open_store(str(tmp_path))
    make_logs(prefix, None, ["a", "b"])
    for _ in range(2):
        names, report = gc_run(prefix)
        assert names == ["a", "b"] and report is None
    assert not prefix.exists("_dirty/manifest/MANIFEST")


def test_02_a_failed_log_is_recorded_again_and_retried_by_the_next_run(tmp_path) -> None:
    prefix = open_store(str(tmp_path))
    with DirtyLog(prefix) as dirty:
        make_logs(prefix, dirty, ["a", "b", "c"])
    gc_run(prefix)
    with DirtyLog(prefix) as dirty:
        for name in ("a", "b"):
            with LogWriter(LogSet(prefix).log_store(name), dirty_log=dirty) as writer:
                writer.append([b"x"])
    names, report = gc_run(prefix, fail={"b"})
    assert names == ["a", "b"] and report is not None and report.retried == ["b"]
    names, report = gc_run(prefix)
    assert names == ["b"] and report.retried == []
    assert gc_run(prefix)[0] == []


def test_03_full_scan_collects_every_log_and_the_dirty_log_stays_bounded(tmp_path) -> None:
    prefix = open_store(str(tmp_path))
    names = [f"l{i}" for i in range(4)]
    with DirtyLog(prefix) as dirty:
        make_logs(prefix, dirty, names)
        assert gc_run(prefix, full_scan=True)[0] == names
        store = dirty_store(prefix)
        sizes = []
        for round_ in range(4):
            for name in names:
                with LogWriter(LogSet(prefix).log_store(name), dirty_log=dirty) as writer:
                    writer.append([b"r%d" % round_])
            changed, report = gc_run(prefix)
            assert changed == names and report.error is None
            manifest = LogReader(store).manifest()
            assert rolled_up_to(manifest) == report.cursor
            sizes.append(manifest.next_offset - manifest.oldest_offset)
    # The head below each run's cursor was rolled up and collected: what is left is the roll-up
    # (one record per log) and nothing else, whatever the number of runs.
    assert sizes == [len(names)] * 4
    assert CursorStore(store).get(GC_CURSOR).cursor.offset == report.cursor
    assert gc_run(prefix, full_scan=True)[0] == names
