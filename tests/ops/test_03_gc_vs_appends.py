"""Garbage collection never deletes what an append may still commit.

An append uploads its fragments first and commits them after; until then they look exactly like
the orphans of failed appends. `wal3 gc --grace 0` between the two must not turn the commit
into a manifest that points at nothing."""

from __future__ import annotations

import time

import pytest

from wal3_spark.cli.main import main as wal3_main
from wal3_spark.clock import SystemClock
from wal3_spark.errors import CommitFailed, InvalidOption
from wal3_spark.log.committer import Committer
from wal3_spark.log.fragment_io import write_fragments
from wal3_spark.log.reader import LogReader
from wal3_spark.log.writer import LogWriter, to_batches
from wal3_spark.ops.garbage_collector import GarbageCollector, GCOptions
from wal3_spark.ops.verify import verify
from wal3_spark.storage import open_store


@pytest.fixture
def store(store_url, store_options):
    return open_store(store_url, store_options)


def upload(store, bodies):
    batches, _ = to_batches(bodies)
    return write_fragments(store, batches, None, fragment_bytes=1 << 20)


def bodies(store) -> list[bytes]:
    return LogReader(store).read_table().column("body").to_pylist()


def test_00_gc_grace_0_between_upload_and_commit_loses_nothing(store, store_url, store_env):
    LogWriter(store).append(b"r0")
    files = upload(store, [b"r1", b"r2"])
    assert wal3_main(["gc", store_url, "--grace", "0"]) == 0
    result = Committer(store).commit(files)
    assert (result.start, result.limit) == (2, 4)
    assert bodies(store) == [b"r0", b"r1", b"r2"]
    assert verify(store).ok


def test_01_a_commit_of_fragments_gc_swept_as_orphans_is_refused_and_commits_nothing(store):
    LogWriter(store).append(b"r0")
    files = upload(store, [b"r1"])
    # a collector whose clock says the fragment is far older than any orphan grace
    report = GarbageCollector(store, GCOptions(grace_s=0), clock=SystemClock(skew_s=7 * 86400)).run()
    assert report.orphans_deleted == [files[0].path]
    with pytest.raises(CommitFailed, match="rerun the append"):
        Committer(store).commit(files)
    assert bodies(store) == [b"r0"]
    assert verify(store).ok
    assert LogWriter(store).append(b"r1 again").start == 2  # a rerun works


def append_until(url: str, options: dict, writer: int, stop, refused, results) -> None:
    """An appender process: appends of two fragments each until `stop` is set; an append
    refused by the orphan horizon is rerun (new fragments, same records) and counted."""
    store = open_store(url, options)
    committer = Committer(store, writer=f"appender-{writer}")
    acknowledged = []
    c = 0
    while not stop.is_set():
        records = [f"w{writer}/c{c}/r{r}".encode() for r in range(3)]
        while True:
            files = upload(store, records[:1]) + upload(store, records[1:])
            try:
                result = committer.commit(files)
                break
            except CommitFailed as exc:
                assert "orphan horizon" in str(exc), exc
                with refused.get_lock():
                    refused.value += 1
        acknowledged.append((result.start, records))
        c += 1
    results.put(acknowledged)


@pytest.mark.slow
# a race run until it is seen: minutes on an emulator serving eight processes on two cores (the
# deterministic races above run on every store)
@pytest.mark.parametrize("store_url", ["local", "s3"], indirect=True)
def test_02_appender_processes_and_repeated_gc_lose_no_acknowledged_record(store, store_url, store_options):
    """Three appender processes; meanwhile a consumer's cursor follows the tail and GC runs in
    a loop: alternately as `wal3 gc --grace 0` would (the orphan grace floor keeps in-flight
    fragments) and with a clock ahead by the whole floor, so that every unreferenced fragment it
    lists, in flight or not, is an orphan: the orphan horizon must turn those commits into
    refusals. It runs until refusals were seen (the race really happened)."""
    import multiprocessing

    from wal3_spark.log.cursors import CursorStore
    from wal3_spark.ops.garbage_collector import MIN_ORPHAN_GRACE_S

    LogWriter(store).append(b"r0")
    ctx = multiprocessing.get_context("spawn")
    stop, refused, results = ctx.Event(), ctx.Value("i", 0), ctx.Queue()
    procs = [ctx.Process(target=append_until, args=(store_url, store_options, w, stop, refused, results))
             for w in range(3)]
    for p in procs:
        p.start()
    cursors = CursorStore(store)
    runs = orphans = 0
    give_up = time.monotonic() + 300
    try:
        while (refused.value < 3 or runs < 10) and time.monotonic() < give_up:
            ahead = MIN_ORPHAN_GRACE_S if runs % 2 else 0.0
            tail = LogReader(store).manifest().next_offset
            cursors.advance("consumer", max(1, tail - 6))
            report = GarbageCollector(store, GCOptions(grace_s=0, force=True), clock=SystemClock(skew_s=ahead)).run()
            orphans += len(report.orphans_deleted)
            runs += 1
    finally:
        stop.set()
    outcomes = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert orphans > 0 and refused.value >= 3, (orphans, refused.value)
    report = verify(store)
    assert report.ok, report.problems  # no reference to a deleted fragment
    oldest = LogReader(store).manifest().oldest_offset
    table = LogReader(store).read_table(oldest)
    got = dict(zip(table.column("_offset").to_pylist(), table.column("body").to_pylist()))
    expected = {start + i: body for acked in outcomes for start, bodies in acked
                for i, body in enumerate(bodies)}
    kept = {o: b for o, b in expected.items() if o >= oldest}
    assert {o: got.get(o) for o in kept} == kept  # every acknowledged record still in the log
    assert len(got) == len(set(got.values()))  # and none twice
    assert len(kept) > 0


@pytest.mark.parametrize("options", [
    {"grace_s": 0},
    {"grace_s": 0, "force": True, "max_drop_share": 0.0},
    {"grace_s": 3600, "orphan_grace_s": 900},
    {"grace_s": 10**9},
])
@pytest.mark.parametrize("clock_ahead_s", [0, 900, 7 * 86400])
def test_03_every_gc_setting_between_upload_and_commit_is_safe(local_url, options, clock_ahead_s):
    """Whatever the options and the collector's clock: the commit lands with its records, or
    fails definitely with nothing committed; never a manifest pointing at a deleted fragment."""
    from wal3_spark.log.cursors import CursorStore

    store = open_store(local_url)
    LogWriter(store).append([b"r0", b"r0b"])
    CursorStore(store).create("consumer", 2)
    files = upload(store, [b"r1"])
    GarbageCollector(store, GCOptions(**options), clock=SystemClock(skew_s=clock_ahead_s)).run()
    try:
        Committer(store).commit(files)
        committed = True
    except CommitFailed:
        committed = False
    assert verify(store).ok
    assert bodies(store)[-1:] == ([b"r1"] if committed else [b"r0b"])
    assert committed == store.exists(files[0].path)


@pytest.mark.parametrize("options, match", [
    ({"grace_s": -5}, "grace_s"),
    ({"grace_s": float("nan")}, "grace_s"),
    ({"orphan_grace_s": 0}, "orphan_grace_s must be at least 900"),
    ({"max_drop_share": 5}, "max_drop_share"),
    ({"max_drop_share": -1}, "max_drop_share"),
])
def test_04_gc_settings_that_cannot_be_safe_are_refused_with_the_valid_range(local_url, options, match):
    with pytest.raises(InvalidOption, match=match):
        GarbageCollector(open_store(local_url), GCOptions(**options))
