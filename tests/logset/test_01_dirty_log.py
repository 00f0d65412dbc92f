"""The dirty log (Chroma's wal3 design, "Multiple wal3 Instances"): appenders record which log they
appended to and its new tail; readers learn what changed from it in O(logs written); a lost record
(a crash between the commit and the record, a failed record) never loses data, because readers' full
scans find what the dirty log missed; roll-ups keep it from growing."""

from __future__ import annotations

import io
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading

import pyarrow.parquet as pq
import pytest

from tests.support.fakes import CountingStore
from wal3_spark.clock import ManualClock
from wal3_spark.errors import InvalidLogName, InvalidOption, StorageError
from wal3_spark.log.committer import Committer
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.fragment_io import FragmentFile, write_fragments
from wal3_spark.log.reader import LogReader
from wal3_spark.log.writer import LogWriter, to_batches
from wal3_spark.logset.dirty import (
    DEFAULT_FULL_SCAN_EVERY_S,
    DIRTY_SCHEMA,
    DirtyLog,
    DirtyPosition,
    changes_since,
    dirty_store,
    read_dirty,
    roll_up,
    rolled_up_to,
)
from wal3_spark.logset.logs import LogSelection, LogSet
from wal3_spark.ops.garbage_collector import GCOptions, collect_garbage
from wal3_spark.storage import open_store
from wal3_spark.storage.base import ObjectStore
from wal3_spark.storage.forwarding import ForwardingStore


def append(prefix: ObjectStore, dirty: DirtyLog | None, name: str, *records: bytes) -> int:
    """Append to log `name` under `prefix`; the log's new tail."""
    with LogWriter(LogSet(prefix).log_store(name), dirty_log=dirty) as writer:
        return writer.append(list(records)).limit


def raw_fragments(store: ObjectStore, records: int) -> list[FragmentFile]:
    batches, _ = to_batches([b"r%d" % i for i in range(records)])
    return write_fragments(store, batches, None, fragment_bytes=1 << 20)


@pytest.fixture
def prefix(store_url: str, store_options: dict[str, str]) -> ObjectStore:
    return open_store(store_url, store_options)


# ----------------------------------------------------------------------------- recording


def test_00_appends_record_their_logs_and_new_tails(prefix: ObjectStore) -> None:
    with DirtyLog(prefix) as dirty:
        assert append(prefix, dirty, "a", b"1", b"2") == 3
        assert append(prefix, dirty, "b", b"1") == 2
        assert append(prefix, dirty, "a", b"3") == 4
    table = LogReader(dirty_store(prefix)).read_table()
    assert table.column("log").to_pylist() == ["a", "b", "a"]
    assert table.column("tail").to_pylist() == [3, 2, 4]
    assert table.column("rollup").to_pylist() == [None, None, None]
    assert table.schema.remove(4).remove(3) == DIRTY_SCHEMA
    assert LogSet(prefix).names() == ["a", "b"]  # the dirty log is never part of the set
    assert read_dirty(dirty_store(prefix), 1) == ({"a": 4, "b": 2}, 4)
    assert read_dirty(dirty_store(prefix), 3) == ({"a": 4}, 4)


def test_01_committer_and_submit_paths_record_too(tmp_path) -> None:
    prefix = open_store(str(tmp_path))
    logs = LogSet(prefix)
    with DirtyLog(prefix) as dirty:
        committer = Committer(logs.log_store("c"), dirty_log=dirty)
        result = committer.commit(raw_fragments(logs.log_store("c"), 3))
        assert result.dirty is not None and result.dirty.result() is not None
        with LogWriter(logs.log_store("s"), dirty_log=dirty) as writer:
            futures = [writer.submit([b"x"]) for _ in range(5)]
            writer.flush()
            assert [f.result().limit for f in futures][-1] == 6
    tails, _ = read_dirty(dirty_store(prefix), 1)
    assert tails == {"c": 4, "s": 6}


def test_02_records_made_while_a_manifest_write_is_in_flight_share_the_next_one(tmp_path) -> None:
    """Many appenders, one dirty log: records batch behind the commit in flight, so the dirty
    log's manifest (the object every appender contends on) is written once per batch, not once
    per commit."""
    uploaded = threading.Condition()
    state = {"rows": 0, "writes": 0}
    blocking, release = threading.Event(), threading.Event()

    class Gate(ForwardingStore):
        def put_if_absent(self, key: str, data: bytes) -> str:
            etag = self.inner.put_if_absent(key, data)
            with uploaded:
                if key.startswith("_dirty/log/"):
                    state["rows"] += pq.read_metadata(io.BytesIO(data)).num_rows
                state["writes"] += key == "_dirty/manifest/MANIFEST"
                uploaded.notify_all()
            return etag

        def put_if_match(self, key: str, data: bytes, etag: str) -> str:
            if key == "_dirty/manifest/MANIFEST":
                with uploaded:
                    state["writes"] += 1
                    first = state["writes"] == 2
                if first:  # the first commit: hold it until every later record is uploaded
                    blocking.set()
                    release.wait(timeout=60)
            return self.inner.put_if_match(key, data, etag)

    prefix = open_store(str(tmp_path))
    with DirtyLog(Gate(prefix)) as dirty:
        first = dirty.record({"a": 2})
        assert blocking.wait(timeout=60)
        later = [dirty.record({f"l{i}": i + 2}) for i in range(10)]
        with uploaded:
            assert uploaded.wait_for(lambda: state["rows"] == 11, timeout=60)
        release.set()
        for future in [first, *later]:
            future.result(timeout=60)
    assert LogReader(dirty_store(prefix)).manifest().next_offset == 12
    # the dirty log's creation, the first record's commit, then one for all 10 later records
    assert state["writes"] == 3


def test_03_a_committer_outside_the_prefix_is_refused(tmp_path) -> None:
    with DirtyLog(str(tmp_path / "p")) as dirty:
        with pytest.raises(InvalidOption, match="not directly under"):
            Committer(open_store(str(tmp_path / "elsewhere" / "a")), dirty_log=dirty)
        with pytest.raises(InvalidOption, match="not directly under"):
            LogWriter(str(tmp_path / "p" / "a" / "deeper"), dirty_log=dirty)
        with pytest.raises(InvalidLogName, match="'_x'"):
            LogWriter(str(tmp_path / "p" / "_x"), dirty_log=dirty)
        with pytest.raises(InvalidLogName, match="'a b'"):
            dirty.record({"a b": 3})


# ------------------------------------------------------------------------------- reading


def test_04_changes_since_reads_only_the_dirty_log_between_full_scans(prefix: ObjectStore) -> None:
    names = [f"t{i}" for i in range(8)]
    with DirtyLog(prefix) as dirty:
        for name in names:
            append(prefix, dirty, name, b"x")
        clock = ManualClock()
        counting = CountingStore(prefix)
        logs = LogSet(counting)
        first = changes_since(logs, None, clock=clock)
        assert first.full_scan and first.tails == dict.fromkeys(names, 2)
        assert first.position == DirtyPosition(9, int(clock.now() * 1e6))

        append(prefix, dirty, "t3", b"y", b"z")
        append(prefix, dirty, "t5", b"y")
        append(prefix, dirty, "new", b"y")  # created after the scan: joins through its record
        counting.counts.clear()
        clock.advance(1)
        second = changes_since(logs, first.position, clock=clock)
        assert not second.full_scan
        assert second.tails == {"t3": 4, "t5": 3, "new": 2}
        assert second.position == DirtyPosition(12, first.position.full_scan_us)
        # one manifest GET and one GET per dirty-log fragment appended since: nothing per log
        assert counting.counts == {("get", "_dirty"): 4}

        counting.counts.clear()
        assert changes_since(logs, second.position, clock=clock).tails == {}
        assert counting.counts == {("get", "_dirty"): 1}

        clock.advance(DEFAULT_FULL_SCAN_EVERY_S)
        third = changes_since(logs, second.position, clock=clock)
        assert third.full_scan and third.tails["t3"] == 4 and len(third.tails) == 9
        picked = changes_since(LogSet(prefix, LogSelection.matching("t[0-4]")), second.position,
                               clock=clock, full_scan_every_s=3600)
        assert picked.tails == {} and not picked.full_scan


def test_05_without_a_dirty_log_every_call_is_a_full_scan(tmp_path) -> None:
    prefix = open_store(str(tmp_path))
    append(prefix, None, "a", b"1")
    first = changes_since(LogSet(prefix), None)
    assert first.full_scan and first.tails == {"a": 2} and first.position.offset == 1
    again = changes_since(LogSet(prefix), first.position)
    assert again.full_scan and again.tails == {"a": 2}


def test_06_an_unreadable_dirty_log_falls_back_to_a_full_scan(tmp_path, caplog) -> None:
    prefix = open_store(str(tmp_path))
    with DirtyLog(prefix) as dirty:
        append(prefix, dirty, "a", b"1")
    position = changes_since(LogSet(prefix), None).position
    append(prefix, None, "b", b"1")  # no record
    manifest = LogReader(dirty_store(prefix)).manifest()
    prefix.delete(f"_dirty/{manifest.fragments[0].path}")

    with caplog.at_level(logging.WARNING):
        result = changes_since(LogSet(prefix), DirtyPosition(1, position.full_scan_us))
    assert result.full_scan and result.tails == {"a": 2, "b": 2}
    assert "reading every manifest" in caplog.text


def test_07_a_position_past_the_dirty_logs_tail_gets_a_full_scan(tmp_path, caplog) -> None:
    prefix = open_store(str(tmp_path))
    with DirtyLog(prefix) as dirty:
        append(prefix, dirty, "a", b"1")
    position = changes_since(LogSet(prefix), None).position
    with caplog.at_level(logging.WARNING):
        result = changes_since(LogSet(prefix), DirtyPosition(position.offset + 5, position.full_scan_us))
    assert result.full_scan and result.tails == {"a": 2} and result.position.offset == position.offset
    assert "before this reader's position" in caplog.text


def test_08_positions_round_trip_and_bad_ones_are_refused() -> None:
    position = DirtyPosition(17, 1_800_000_000_000_000)
    assert DirtyPosition.from_dict(position.to_dict()) == position
    for bad in ({}, {"dirty": -1, "scan_us": 0}, {"dirty": "1", "scan_us": 0}, None):
        with pytest.raises(InvalidOption, match="not a dirty-log position"):
            DirtyPosition.from_dict(bad)


# ------------------------------------------------------------------- losing a record


CRASH_CHILD = textwrap.dedent(
    """
    import sys, threading
    from wal3_spark.logset.dirty import DirtyLog
    from wal3_spark.logset.logs import LogSet
    from wal3_spark.storage import open_store
    from wal3_spark.storage.forwarding import ForwardingStore
    from wal3_spark.log.writer import LogWriter

    class Stall(ForwardingStore):
        def put_if_absent(self, key, data):
            print("recording", flush=True)  # the data commit is done: the parent kills us now
            threading.Event().wait()

    prefix = open_store(sys.argv[1], dict(a.split("=", 1) for a in sys.argv[2:]))
    dirty = DirtyLog(Stall(prefix))
    LogWriter(LogSet(prefix).log_store("victim"), dirty_log=dirty).append([b"committed"] * 3)
    dirty.flush()  # the record's write never finishes
    print("not killed", flush=True)
    """
)


def test_09_a_crash_between_the_commit_and_its_record_loses_no_data(
    prefix: ObjectStore, store_url: str, store_options: dict[str, str]
) -> None:
    with DirtyLog(prefix) as dirty:
        append(prefix, dirty, "victim", b"before")
        append(prefix, dirty, "other", b"before")
    clock = ManualClock()
    logs = LogSet(prefix)
    start = changes_since(logs, None, clock=clock)
    assert start.tails == {"victim": 2, "other": 2}

    child = subprocess.Popen(
        [sys.executable, "-c", CRASH_CHILD, store_url, *(f"{k}={v}" for k, v in store_options.items())],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "recording\n"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=60)
    # The records are in the log, once; the dirty log does not know.
    victim = LogReader(logs.log_store("victim")).read_table()
    assert victim.column("body").to_pylist() == [b"before"] + [b"committed"] * 3
    assert read_dirty(dirty_store(prefix), start.position.offset)[0] == {}

    clock.advance(1)
    quiet = changes_since(logs, start.position, clock=clock)
    assert quiet.tails == {} and not quiet.full_scan
    clock.advance(DEFAULT_FULL_SCAN_EVERY_S)  # the next full scan is what bounds the delay
    found = changes_since(logs, quiet.position, clock=clock)
    assert found.full_scan and found.tails["victim"] == 5


def test_10_a_failed_record_fails_nothing_and_the_next_full_scan_finds_the_change(
    tmp_path, caplog
) -> None:
    class NoDirtyWrites(ForwardingStore):
        def put_if_absent(self, key: str, data: bytes) -> str:
            if key.startswith("_dirty/"):
                raise StorageError(f"put {key} refused")
            return self.inner.put_if_absent(key, data)

    prefix = open_store(str(tmp_path))
    with DirtyLog(prefix) as dirty:
        append(prefix, dirty, "a", b"1")
    position = changes_since(LogSet(prefix), None).position
    with caplog.at_level(logging.WARNING), DirtyLog(NoDirtyWrites(prefix)) as broken:
        assert append(prefix, broken, "a", b"2", b"3") == 4  # the append succeeds
    assert "could not record that a changed" in caplog.text
    assert LogReader(LogSet(prefix).log_store("a")).bounds() == (1, 4)
    assert changes_since(LogSet(prefix), position).tails == {}
    late = DirtyPosition(position.offset, position.full_scan_us - int(DEFAULT_FULL_SCAN_EVERY_S * 1e6))
    assert changes_since(LogSet(prefix), late).tails == {"a": 4}


def test_11_a_record_that_cannot_even_be_queued_does_not_fail_the_commit(tmp_path, caplog) -> None:
    prefix = open_store(str(tmp_path))
    dirty = DirtyLog(prefix)
    dirty.close()  # later records cannot be submitted
    committer = Committer(LogSet(prefix).log_store("a"), dirty_log=dirty)
    with caplog.at_level(logging.WARNING):
        result = committer.commit(raw_fragments(LogSet(prefix).log_store("a"), 2))
    assert result.limit == 3 and result.dirty is None
    assert "could not record the commit" in caplog.text


# ------------------------------------------------------------------------------- roll-up


def test_12_roll_up_keeps_every_log_so_readers_behind_the_collected_head_miss_nothing(
    prefix: ObjectStore,
) -> None:
    with DirtyLog(prefix) as dirty:
        for i in range(3):
            for name in ("a", "b", "c"):
                append(prefix, dirty, name, b"%d" % i)
    store = dirty_store(prefix)
    assert LogReader(store).bounds() == (1, 10)
    CursorStore(store).advance("gc", 10)

    done = roll_up(prefix, 10)
    assert (done.logs, done.skipped) == (3, False)
    assert roll_up(prefix, 10).skipped  # idempotent
    manifest = LogReader(store).manifest()
    assert rolled_up_to(manifest) == 10 and manifest.next_offset == 13
    rolled = LogReader(store).read_table(10)
    assert rolled.column("rollup").to_pylist() == [10, 10, 10]
    assert dict(zip(rolled.column("log").to_pylist(), rolled.column("tail").to_pylist())) == {
        "a": 4, "b": 4, "c": 4
    }
    # nothing new but the roll-up itself: the next roll-up appends nothing
    CursorStore(store).advance("gc", 13)
    assert roll_up(prefix, 13).skipped

    report = collect_garbage(store, GCOptions(grace_s=0, force=True), keep_from=10)
    assert LogReader(store).bounds() == (10, 13) and report.deleted
    # a reader far behind skips to the oldest offset and still learns every log
    assert read_dirty(store, 2) == ({"a": 4, "b": 4, "c": 4}, 13)
    # a reader that had read up to 10 skips the roll-up records: it saw what they say
    assert read_dirty(store, 10) == ({}, 13)
    with DirtyLog(prefix) as dirty:
        append(prefix, dirty, "b", b"new")
    assert read_dirty(store, 13) == ({"b": 5}, 14)
    # a second roll-up merges the first one's records with the new ones
    CursorStore(store).advance("gc", 14)
    assert roll_up(prefix, 14).logs == 3
    assert read_dirty(store, 1)[0] == {"a": 4, "b": 5, "c": 4}
