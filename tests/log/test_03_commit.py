"""The commit protocol on the in-memory store: creation, placement, idempotence, seal, schema,
ambiguity (the batched LogWriter: log/test_07_writer; cursors: log/test_12_cursors; reads below the oldest offset: log/test_11_data_loss)."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

from wal3_spark.clock import ManualClock
from wal3_spark.errors import AmbiguousWrite, LogNotFound, LogSealed, SchemaMismatch
from wal3_spark.format.layout import MANIFEST_KEY
from wal3_spark.format.manifest import SnapshotOptions
from wal3_spark.log.committer import Committer
from wal3_spark.log.fragment_io import write_fragments
from wal3_spark.log.reader import LogReader
from wal3_spark.log.writer import LogWriter, LogWriterOptions, to_batches


def raw_files(store, bodies):
    batches, _ = to_batches(bodies)
    return write_fragments(store, batches, None, fragment_bytes=1 << 20)


def test_00_reading_a_missing_log_says_how_to_create_it(store):
    with pytest.raises(LogNotFound, match="wal3 init"):
        LogReader(store).manifest()
    with pytest.raises(LogNotFound):
        Committer(store).commit(raw_files(store, [b"a"]), create=False)


def test_01_racing_creators_all_see_one_log(store):
    results = []
    threads = [threading.Thread(target=lambda: results.append(Committer(store).create()[1])) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(results)) == 1


def test_02_append_then_read_back_with_offsets_and_timestamps(store):
    with LogWriter(store) as writer:
        first = writer.append([b"a", b"b", b"c"])
        second = writer.append(b"d")
    assert (first.start, first.limit, second.start, second.limit) == (1, 4, 4, 5)
    table = LogReader(store).read_table()
    assert table.column("body").to_pylist() == [b"a", b"b", b"c", b"d"]
    assert table.column("_offset").to_pylist() == [1, 2, 3, 4]
    assert table.schema.field("_timestamp").type == pa.timestamp("us", tz="UTC")
    assert LogReader(store).read_table(2, 4).column("body").to_pylist() == [b"b", b"c"]


def test_03_a_multi_fragment_commit_is_placed_in_order_in_one_manifest_write(store):
    committer = Committer(store)
    files = raw_files(store, [b"1"]) + raw_files(store, [b"2", b"3"]) + raw_files(store, [b"4"])
    before = committer.requests["put"]
    result = committer.commit(files)
    assert committer.requests["put"] - before == 1  # the log is created holding them
    assert (result.start, result.limit) == (1, 5)
    assert [f.path for f in result.manifest.fragments] == [f.path for f in files]


def test_04_a_committer_with_a_fresh_etag_needs_one_put_per_commit(store):
    committer = Committer(store)
    committer.commit(raw_files(store, [b"x"]))
    gets, puts = committer.requests["get"], committer.requests["put"]
    for i in range(5):
        committer.commit(raw_files(store, [str(i).encode()]))
    assert committer.requests["get"] == gets and committer.requests["put"] == puts + 5


def test_05_idempotent_commits_apply_each_version_once(store):
    committer = Committer(store)
    first = committer.commit(raw_files(store, [b"a"]), app_id="q1", version=0)
    replay = Committer(store).commit(raw_files(store, [b"a"]), app_id="q1", version=0)
    nxt = committer.commit(raw_files(store, [b"b"]), app_id="q1", version=1)
    assert not first.duplicate and replay.duplicate and not nxt.duplicate
    assert LogReader(store).read_table().column("body").to_pylist() == [b"a", b"b"]
    assert LogReader(store).manifest().txns["q1"].version == 1


def test_06_a_sealed_log_refuses_appends_and_still_reads(store):
    LogWriter(store).append(b"before")
    Committer(store).seal()
    with pytest.raises(LogSealed, match="sealed"):
        LogWriter(store).append(b"after")
    with pytest.raises(LogSealed):
        Committer(store).commit(raw_files(store, [b"late"]))
    assert LogReader(store).read_table().column("body").to_pylist() == [b"before"]


def test_07_schema_is_fixed_by_the_first_append_and_checked_after(store):
    writer = LogWriter(store)
    writer.append(pa.table({"id": pa.array([1, 2], pa.int64()), "name": ["a", "b"]}))
    with pytest.raises(SchemaMismatch) as err:
        writer.append(pa.table({"id": pa.array(["x"]), "name": ["c"]}))
    assert "log schema" in str(err.value) and "appended schema" in str(err.value)
    with pytest.raises(SchemaMismatch, match="mergeSchema"):
        writer.append(pa.table({"id": pa.array([3], pa.int64()), "name": ["c"], "extra": [1.0]}))
    with pytest.raises(SchemaMismatch, match="raw"):
        writer.append(b"raw bytes")
    LogWriter(store, LogWriterOptions(merge_schema=True)).append(
        pa.table({"id": pa.array([3], pa.int64()), "extra": [1.5]}))
    table = LogReader(store).read_table()
    assert table.column_names == ["id", "name", "extra", "_offset", "_timestamp"]
    assert table.column("name").to_pylist() == ["a", "b", None]
    assert table.column("extra").to_pylist() == [None, None, 1.5]


def test_08_raw_log_rejects_structured_data(store):
    LogWriter(store).append(b"raw")
    with pytest.raises(SchemaMismatch, match="raw log"):
        LogWriter(store).append(pa.table({"x": [1]}))


class LandThenFail:
    """Wraps a store: the next manifest CAS lands, then reports an ambiguous failure."""

    def __init__(self, inner, times=1):
        self.inner, self.times, self.url = inner, times, inner.url

    def put_if_match(self, key, data, etag):
        new = self.inner.put_if_match(key, data, etag)
        if key == MANIFEST_KEY and self.times:
            self.times -= 1
            raise AmbiguousWrite(key, "simulated timeout after the write landed")
        return new

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_09_an_ambiguous_write_that_landed_is_not_committed_twice(store):
    Committer(store).create()
    committer = Committer(LandThenFail(store))
    result = committer.commit(raw_files(store, [b"once"]))
    assert (result.start, result.limit) == (1, 2)
    assert LogReader(store).read_table().column("body").to_pylist() == [b"once"]


def test_10_snapshots_roll_during_commits_and_reads_are_unchanged(store):
    committer = Committer(store, snapshot_options=SnapshotOptions(2, 3))
    for i in range(40):
        committer.commit(raw_files(store, [f"r{i}".encode()]))
    manifest = LogReader(store).manifest()
    assert manifest.snapshots and len(manifest.fragments) <= 3
    table = LogReader(store).read_table()
    assert table.column("body").to_pylist() == [f"r{i}".encode() for i in range(40)]
    assert LogReader(store).read_table(17, 20).column("_offset").to_pylist() == [17, 18, 19]


def test_11_idempotent_commits_are_stamped_by_the_injected_clock(store):
    committer = Committer(store, clock=ManualClock(now=1_700_000_000.5))
    committer.commit(raw_files(store, [b"a"]), app_id="q1", version=0)
    assert LogReader(store).manifest().txns["q1"].epoch_us == 1_700_000_000_500_000
