"""The log-set stream source's decisions on in-memory logs, without a running query: its
offsets, logs joining, restarts with another selection, AvailableNow, cursors, what a trigger
reads with a dirty log, and the lag Spark's progress shows."""

from __future__ import annotations

import json

import pyarrow as pa
from pyspark.sql.streaming.datasource import ReadAllAvailable

from tests.support.logsets import append, prefix_url, stream_reader
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.writer import LogWriter
from wal3_spark.spark.logset_stream import encode
from wal3_spark.storage import open_store


def test_00_offset_json_for_5000_logs_is_compact():
    """Spark writes a log-set offset to the checkpoint every batch, as PySpark serialises it
    (json.dumps): per log only the name, its quotes, the separators and the digits."""
    offsets = {f"tenant-{i:05d}": 1_000_000 + i for i in range(5000)}
    text = json.dumps(encode(offsets))
    overhead = len(text) - sum(len(n) + len(str(o)) for n, o in offsets.items())
    print(f"offset JSON for 5,000 logs: {len(text):,} bytes ({len(text) / 5000:.1f} per log)")
    assert overhead <= 6 * 5000 + 20
    assert json.loads(text) == {"logs": offsets}


def test_01_stream_offsets_joins_and_fair_admission():
    prefix = prefix_url()
    append(prefix, "hot", 1000)
    for i in range(5):
        append(prefix, f"cold{i}", 3)
    r = stream_reader(prefix, maxRecordsPerTrigger="20")
    start = r.initialOffset()
    assert start["logs"] == encode({"hot": 1, **{f"cold{i}": 1 for i in range(5)}})["logs"]
    end = r.latestOffset(start, r.getDefaultReadLimit())
    assert end["logs"] == encode({"hot": 6, **{f"cold{i}": 4 for i in range(5)}})["logs"]
    # a new log joins first (recorded in the offset), and is read from the next batch on
    append(prefix, "newcomer", 7)
    joined = r.latestOffset(end, r.getDefaultReadLimit())
    assert joined["logs"]["newcomer"] == 1 and joined["logs"]["hot"] == 26
    after = r.latestOffset(joined, ReadAllAvailable())
    assert after["logs"]["newcomer"] == 8 and after["logs"]["hot"] == 1001
    parts = r.partitions(joined, after)
    assert len(parts) == 1  # small logs share one partition
    assert {rr.log for rr in parts[0].ranges} == {"hot", "newcomer"}
    assert r.reportLatestOffset()["logs"]["hot"] == 1001


def test_02_new_logs_join_at_latest_and_starting_offsets_name_logs():
    prefix = prefix_url()
    append(prefix, "a", 5)
    r = stream_reader(prefix, newLogOffsets="latest",
                      startingOffsets='{"logs": {"a": 3, "later": 2}}')
    start = r.initialOffset()
    assert start["logs"] == encode({"a": 3})["logs"]
    append(prefix, "b", 4)
    append(prefix, "later", 4)
    joined = r.latestOffset(start, ReadAllAvailable())
    assert joined["logs"] == encode({"a": 6, "b": 5, "later": 2})["logs"]


def test_03_a_restart_with_another_selection_keeps_the_old_logs_offsets_unread(caplog):
    prefix = prefix_url()
    for name in ("a1", "a2", "b1"):
        append(prefix, name, 2)
    first = stream_reader(prefix, logs="a*")
    checkpointed = first.latestOffset(first.initialOffset(), ReadAllAvailable())
    assert checkpointed["logs"] == encode({"a1": 3, "a2": 3})["logs"]
    append(prefix, "a1", 2, start=2)
    restarted = stream_reader(prefix, logs="a2,b1")  # the checkpoint's offsets win
    end = restarted.latestOffset(checkpointed, ReadAllAvailable())
    assert end["logs"] == encode({"a1": 3, "a2": 3, "b1": 1})["logs"]  # b1 joins; a1 stays, unread
    assert restarted.latestOffset(end, ReadAllAvailable())["logs"] == encode({"a1": 3, "a2": 3, "b1": 3})["logs"]
    assert "no manifest" not in caplog.text


def test_04_available_now_stops_at_each_tail_as_of_the_start():
    prefix = prefix_url()
    append(prefix, "a", 4)
    r = stream_reader(prefix, maxRecordsPerTrigger="3")
    start = r.initialOffset()
    r.prepareForTriggerAvailableNow()
    append(prefix, "a", 5, start=4)
    append(prefix, "b", 5)
    limit = r.getDefaultReadLimit()
    first = r.latestOffset(start, limit)
    assert first["logs"] == encode({"a": 4})["logs"]
    assert r.latestOffset(first, limit)["logs"] == encode({"a": 5})["logs"]
    assert r.latestOffset(encode({"a": 5}), limit)["logs"] == encode({"a": 5})["logs"]


def test_05_commit_moves_the_cursor_on_every_advanced_log():
    prefix = prefix_url()
    for name in ("a", "b"):
        append(prefix, name, 3)
    r = stream_reader(prefix, cursor="billing")
    r.commit(encode({"a": 3, "b": 1}))
    r.commit(encode({"a": 4, "b": 2}))
    positions = {n: CursorStore(open_store(f"{prefix}/{n}")).get("billing").cursor.offset
                 for n in ("a", "b")}
    assert positions == {"a": 4, "b": 2}


def test_06_with_a_dirty_log_a_trigger_reads_only_the_logs_that_changed():
    """After the first look (every manifest), a trigger costs the dirty log's reads plus one
    manifest GET per changed log; planning the batch reads nothing more."""
    from tests.logset.test_01_dirty_log import CountingStore
    from wal3_spark.logset.dirty import DirtyLog
    from wal3_spark.logset.logs import LogSet

    prefix = prefix_url()
    root = open_store(prefix)
    names = [f"t{i:02d}" for i in range(20)]
    with DirtyLog(root) as dirty:
        for name in names:
            with LogWriter(open_store(f"{prefix}/{name}"), dirty_log=dirty) as writer:
                writer.append(pa.table({"id": pa.array([1, 2], pa.int64())}))
        r = stream_reader(prefix)
        counting = CountingStore(root)
        r.log_set = LogSet(counting, r.log_set.selection)
        start = r.initialOffset()
        first = r.latestOffset(start, ReadAllAvailable())
        assert first["logs"] == encode(dict.fromkeys(names, 3))["logs"]
        for name, n in (("t03", 5), ("t11", 1)):
            with LogWriter(open_store(f"{prefix}/{name}"), dirty_log=dirty) as writer:
                writer.append(pa.table({"id": pa.array(range(n), pa.int64())}))
        counting.counts.clear()
        second = r.latestOffset(first, ReadAllAvailable())
        assert second["logs"] == encode({**dict.fromkeys(names, 3), "t03": 8, "t11": 4})["logs"]
        parts = r.partitions(first, second)
        assert sorted((rr.log, rr.range.start, rr.range.limit) for p in parts for rr in p.ranges) \
            == [("t03", 3, 8), ("t11", 3, 4)]
    assert counting.logs_touched() == {"_dirty", "t03", "t11"}
    assert counting.counts[("get", "t03")] == counting.counts[("get", "t11")] == 1


def test_07_lag_of_a_log_set_source_sums_its_logs():
    from wal3_spark.spark.query_lag import offsets_behind

    source = {"description": "wal3", "endOffset": json.dumps(encode({"a": 5, "b": 2})),
              "latestOffset": json.dumps(encode({"a": 9, "b": 2, "new": 4}))}
    assert offsets_behind({"sources": [source]}) == 4 + 0 + 3
