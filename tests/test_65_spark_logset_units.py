"""Log sets and routing without Spark: options, fair admission, offsets, the stream source's
decisions (joins, data loss, sealed and missing logs, AvailableNow, cursors) on in-memory logs,
and the routing sink's tasks and per-log commits."""

from __future__ import annotations

import json
import uuid

import pyarrow as pa
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from wal3_spark.errors import (
    DataLost,
    InvalidLogName,
    InvalidOption,
    RoutedCommitFailed,
)
from wal3_spark.format.layout import MANIFEST_KEY
from wal3_spark.log.committer import Committer
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.reader import LogReader
from wal3_spark.log.writer import LogWriter
from wal3_spark.logset.logs import ALL_LOGS, LogSelection
from wal3_spark.ops.gc import collect_garbage
from wal3_spark.ops.verify import verify
from wal3_spark.spark import options as opts
from wal3_spark.spark.fair_share import Chunk, Limits, Rotation, admit, water_fill
from wal3_spark.spark.logset_reader import logset_schema, union_payload
from wal3_spark.spark.logset_stream import LogSetStreamReader, encode
from wal3_spark.spark.routing_writer import (
    RoutingBatchWriter,
    RoutingStreamWriter,
    split_by,
)
from wal3_spark.storage import open_store


def prefix_url() -> str:
    return f"memory://logset-{uuid.uuid4().hex[:8]}/tenants"


def append(prefix: str, name: str, n: int, start: int = 0) -> None:
    with LogWriter(open_store(f"{prefix}/{name}")) as writer:
        writer.append(pa.table({"id": pa.array(range(start, start + n), pa.int64())}))


# ------------------------------------------------------------------------------- options


def test_log_set_options_parse():
    o = opts.parse({"path": "/p", "logs": "b, a"}, opts.STREAM_READ)
    assert o.logs == LogSelection.of(["a", "b"]) and o.new_log_offsets == "earliest"
    assert opts.parse({"path": "/p", "logs": "tenant-*"}, opts.READ).logs.pattern == "tenant-*"
    assert opts.parse({"path": "/p", "logs": "*"}, opts.READ).logs == ALL_LOGS
    s = opts.parse({"path": "/p", "logs": "*", "startingOffsets": '{"logs": {"a": 17, "b": 3}}',
                    "newLogOffsets": "LATEST"}, opts.STREAM_READ)
    assert s.starting == ("logs", 0) and s.starting_logs == (("a", 17), ("b", 3))
    assert s.new_log_offsets == "latest"
    w = opts.parse({"path": "/p", "logColumn": "tenant"}, opts.WRITE)
    assert w.log_column == "tenant" and w.logs is None


@pytest.mark.parametrize("options, match", [
    ({"logs": " , "}, "expected \\* \\(every log\\)"),
    ({"logs": "a/b"}, "invalid log name 'a/b'"),
    ({"logs": "a,t-*"}, "give one glob, or a list of log names"),
    ({"logs": "*", "startingOffsets": '{"logs": {"_dirty": 1}}'}, "reserved"),
    ({"logs": "*", "startingOffsets": "42"}, "per-log offsets"),
    ({"logs": "*", "startingOffsets": '{"logs": {"a": 0}}'}, "offsets start at 1"),
    ({"logs": "*", "startingOffsets": '{"offset": 3}'}, "per-log offsets"),
    ({"newLogOffsets": "latest"}, "applies only to a log set"),
    ({"startingOffsets": '{"logs": {"a": 3}}'}, "per-log offsets read a log set: set logs too"),
    ({"logs": "*", "newLogOffsets": "soon"}, "expected earliest or latest"),
])
def test_bad_log_set_options_name_the_problem(options, match):
    with pytest.raises(InvalidOption, match=match):
        opts.parse({"path": "/p", **options}, opts.STREAM_READ)


# ---------------------------------------------------------------------------- fair shares


def test_water_fill_gives_cold_logs_their_records_before_the_hot_one_takes_the_rest():
    available = {"hot": 10_000, **{f"cold{i}": 10 for i in range(10)}, "warm": 40}
    share = water_fill(available, 150, sorted(available))
    assert sum(share.values()) == 150
    assert all(share[f"cold{i}"] == 10 for i in range(10)) and share["warm"] == 25
    assert share["hot"] == 25
    # fewer records than logs: one each to the least recently served
    assert water_fill({"a": 5, "b": 5, "c": 5}, 2, ["c", "a", "b"]) == {"a": 1, "b": 0, "c": 1}


def chunks_of(fragments: dict[str, list[tuple[int, int, int]]]):
    def chunks(name: str, begin: int, end: int):
        for start, limit, size in fragments[name]:
            if limit > begin and start < end:
                yield Chunk(max(start, begin), min(limit, end), size)
    return chunks


def test_fragment_budget_rotates_so_that_every_log_is_served():
    """Ten logs with one fragment each and room for three fragments a batch: within four
    batches every log was served, none twice before all were served once."""
    fragments = {f"log{i}": [(1, 11, 100)] for i in range(10)}
    begins = {name: 1 for name in fragments}
    tails = {name: 11 for name in fragments}
    rotation = Rotation()
    served_order = []
    for _ in range(4):
        ends = admit(begins, tails, chunks_of(fragments), Limits(max_fragments=3), rotation)
        served = sorted(n for n in ends if ends[n] > begins[n])
        served_order.append(served)
        begins = ends
    assert [len(s) for s in served_order] == [3, 3, 3, 1]
    assert sorted(sum(served_order, [])) == sorted(fragments)


def test_byte_budget_admits_at_least_one_fragment_and_shares_the_rest():
    fragments = {"hot": [(1, 101, 1000), (101, 201, 1000), (201, 301, 1000)],
                 "cold": [(1, 3, 10)]}
    begins, tails = {"hot": 1, "cold": 1}, {"hot": 301, "cold": 3}
    ends = admit(begins, tails, chunks_of(fragments), Limits(max_bytes=1), Rotation())
    assert sum(1 for n in ends if ends[n] > begins[n]) == 1  # one fragment, however large
    ends = admit(begins, tails, chunks_of(fragments), Limits(max_bytes=2010), Rotation())
    assert ends == {"hot": 201, "cold": 3}
    capped = admit(begins, tails, chunks_of(fragments),
                   Limits(max_records=50, max_bytes=10_000), Rotation())
    assert capped == {"hot": 49, "cold": 3}  # records cap each log, then bytes


# -------------------------------------------------------------------------------- offsets


def test_offset_json_for_5000_logs_is_compact():
    """Spark writes a log-set offset to the checkpoint every batch, as PySpark serialises it
    (json.dumps): per log only the name, its quotes, the separators and the digits."""
    offsets = {f"tenant-{i:05d}": 1_000_000 + i for i in range(5000)}
    text = json.dumps(encode(offsets))
    overhead = len(text) - sum(len(n) + len(str(o)) for n, o in offsets.items())
    print(f"offset JSON for 5,000 logs: {len(text):,} bytes ({len(text) / 5000:.1f} per log)")
    assert overhead <= 6 * 5000 + 20
    assert json.loads(text) == {"logs": offsets}


# ---------------------------------------------------------------------------- the schema


def test_union_schema_across_logs():
    prefix = prefix_url()
    with LogWriter(open_store(f"{prefix}/a")) as w:
        w.append(pa.table({"id": pa.array([1], pa.int64()), "x": pa.array(["s"])},
                          schema=pa.schema([pa.field("id", pa.int64(), False), ("x", pa.string())])))
    with LogWriter(open_store(f"{prefix}/b")) as w:
        w.append(pa.table({"id": pa.array([2], pa.int64()), "y": pa.array([1.5])},
                          schema=pa.schema([pa.field("id", pa.int64(), False), ("y", pa.float64())])))
    options = opts.parse({"path": prefix, "logs": "*"}, opts.READ)
    schema = logset_schema(options)
    assert [(f.name, f.nullable) for f in schema.fields] == [
        ("id", False), ("x", True), ("y", True), ("_log", False), ("_offset", False),
        ("_timestamp", False)]
    with LogWriter(open_store(f"{prefix}/c")) as w:
        w.append(pa.table({"id": pa.array(["text"])}))
    with pytest.raises(Exception, match=r"log c disagrees with the logs before it \(from a on\)"):
        logset_schema(options)
    with LogWriter(open_store(f"{prefix}/r")) as w:
        w.append([b"raw"])
    with pytest.raises(Exception, match="mixes raw logs"):
        union_payload({n: LogReader(open_store(f"{prefix}/{n}")).manifest() for n in "ar"})
    with LogWriter(open_store(f"{prefix}/own")) as w:
        w.append(pa.table({"_log": ["kept from elsewhere"]}))
    with pytest.raises(Exception, match="log own has a column named _log, which a log-set read"):
        union_payload({n: LogReader(open_store(f"{prefix}/{n}")).manifest() for n in ("a", "own")})


# ------------------------------------------------------------------------- stream source


def stream_reader(prefix: str, **options) -> LogSetStreamReader:
    parsed = opts.parse({"path": prefix, "logs": "*", **options}, opts.STREAM_READ)
    return LogSetStreamReader(parsed, logset_schema(parsed))


def test_stream_offsets_joins_and_fair_admission():
    prefix = prefix_url()
    append(prefix, "hot", 1000)
    for i in range(5):
        append(prefix, f"cold{i}", 3)
    r = stream_reader(prefix, maxRecordsPerTrigger="20")
    start = r.initialOffset()
    assert start == encode({"hot": 1, **{f"cold{i}": 1 for i in range(5)}})
    end = r.latestOffset(start, r.getDefaultReadLimit())
    assert end == encode({"hot": 6, **{f"cold{i}": 4 for i in range(5)}})
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


def test_new_logs_join_at_latest_and_starting_offsets_name_logs():
    prefix = prefix_url()
    append(prefix, "a", 5)
    r = stream_reader(prefix, newLogOffsets="latest",
                      startingOffsets='{"logs": {"a": 3, "later": 2}}')
    start = r.initialOffset()
    assert start == encode({"a": 3})
    append(prefix, "b", 4)
    append(prefix, "later", 4)
    joined = r.latestOffset(start, ReadAllAvailable())
    assert joined == encode({"a": 6, "b": 5, "later": 2})


def test_a_garbage_collected_log_fails_or_skips_alone():
    prefix = prefix_url()
    append(prefix, "ok", 3)
    append(prefix, "gone", 10)
    append(prefix, "gone", 10, start=10)
    strict, lenient = stream_reader(prefix), stream_reader(prefix, failOnDataLoss="false")
    start = strict.initialOffset()
    CursorStore(open_store(f"{prefix}/gone")).advance("c", 11)
    collect_garbage(f"{prefix}/gone", grace_s=0, force=True)
    assert LogReader(open_store(f"{prefix}/gone")).bounds()[0] == 11
    with pytest.raises(DataLost, match=f"offsets \\[1, 11\\) of {prefix}/gone"):
        strict.latestOffset(start, ReadAllAvailable())
    end = lenient.latestOffset(start, ReadAllAvailable())
    assert end == encode({"ok": 4, "gone": 21})
    parts = lenient.partitions(start, end)
    assert sorted((rr.log, rr.range.start) for p in parts for rr in p.ranges) == [
        ("gone", 11), ("ok", 1)]


def test_a_task_reading_fragments_gc_deleted_after_planning_fails_or_skips_them():
    """GC collects a log between the driver's partitions() and the task's read: the task fails
    naming the collected range of that log, or under failOnDataLoss=false skips it."""
    prefix = prefix_url()
    append(prefix, "ok", 3)
    append(prefix, "gone", 10)
    append(prefix, "gone", 10, start=10)
    strict, lenient = stream_reader(prefix), stream_reader(prefix, failOnDataLoss="false")
    start = strict.initialOffset()
    end = strict.latestOffset(start, ReadAllAvailable())
    plans = [r.partitions(start, end) for r in (strict, lenient)]
    CursorStore(open_store(f"{prefix}/gone")).advance("c", 11)
    collect_garbage(f"{prefix}/gone", grace_s=0, force=True)
    with pytest.raises(DataLost, match=f"offsets \\[1, 11\\) of {prefix}/gone"):
        [batch for part in plans[0] for batch in strict.read(part)]
    table = pa.Table.from_batches([batch for part in plans[1] for batch in lenient.read(part)])
    assert sorted(zip(table.column("_log").to_pylist(), table.column("_offset").to_pylist())) == sorted(
        [("ok", o) for o in range(1, 4)] + [("gone", o) for o in range(11, 21)])


def test_sealed_and_missing_logs_do_not_stop_the_others(caplog):
    prefix = prefix_url()
    for name in ("a", "sealed", "vanishing"):
        append(prefix, name, 2)
    r = stream_reader(prefix)
    start = r.initialOffset()
    Committer(open_store(f"{prefix}/sealed")).seal()
    open_store(f"{prefix}/vanishing").delete(MANIFEST_KEY)
    append(prefix, "a", 3, start=2)
    end = r.latestOffset(start, ReadAllAvailable())
    assert end == encode({"a": 6, "sealed": 3, "vanishing": 1})
    assert f"{prefix}/vanishing has no manifest" in caplog.text
    again = r.latestOffset(end, ReadAllAvailable())
    assert again == end
    assert f"{prefix}/sealed is sealed and read to its end" in caplog.text


def test_a_restart_with_another_selection_keeps_the_old_logs_offsets_unread(caplog):
    prefix = prefix_url()
    for name in ("a1", "a2", "b1"):
        append(prefix, name, 2)
    first = stream_reader(prefix, logs="a*")
    checkpointed = first.latestOffset(first.initialOffset(), ReadAllAvailable())
    assert checkpointed == encode({"a1": 3, "a2": 3})
    append(prefix, "a1", 2, start=2)
    restarted = stream_reader(prefix, logs="a2,b1")  # the checkpoint's offsets win
    end = restarted.latestOffset(checkpointed, ReadAllAvailable())
    assert end == encode({"a1": 3, "a2": 3, "b1": 1})  # b1 joins; a1 stays, unread
    assert restarted.latestOffset(end, ReadAllAvailable()) == encode({"a1": 3, "a2": 3, "b1": 3})
    assert "no manifest" not in caplog.text


def test_available_now_stops_at_each_tail_as_of_the_start():
    prefix = prefix_url()
    append(prefix, "a", 4)
    r = stream_reader(prefix, maxRecordsPerTrigger="3")
    start = r.initialOffset()
    r.prepareForTriggerAvailableNow()
    append(prefix, "a", 5, start=4)
    append(prefix, "b", 5)
    limit = r.getDefaultReadLimit()
    first = r.latestOffset(start, limit)
    assert first == encode({"a": 4})
    assert r.latestOffset(first, limit) == encode({"a": 5})
    assert r.latestOffset(encode({"a": 5}), limit) == encode({"a": 5})


def test_commit_moves_the_cursor_on_every_advanced_log():
    prefix = prefix_url()
    for name in ("a", "b"):
        append(prefix, name, 3)
    r = stream_reader(prefix, cursor="billing")
    r.commit(encode({"a": 3, "b": 1}))
    r.commit(encode({"a": 4, "b": 2}))
    positions = {n: CursorStore(open_store(f"{prefix}/{n}")).get("billing").cursor.offset
                 for n in ("a", "b")}
    assert positions == {"a": 4, "b": 2}


# -------------------------------------------------------------------------- routing sink


def test_split_by_keeps_row_order_and_refuses_nulls():
    batch = pa.RecordBatch.from_pydict({"k": ["b", "a", "b", "a"], "v": [1, 2, 3, 4]})
    assert [(n, b.to_pydict()) for n, b in split_by(batch, "k")] == [
        ("b", {"v": [1, 3]}), ("a", {"v": [2, 4]})]
    with pytest.raises(InvalidOption, match="null in 1 row"):
        list(split_by(pa.RecordBatch.from_pydict({"k": ["a", None], "v": [1, 2]}), "k"))


def routing(prefix: str, writer=RoutingBatchWriter, **options):
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    role = opts.STREAM_WRITE if writer is RoutingStreamWriter else opts.WRITE
    parsed = opts.parse({"path": prefix, "logColumn": "tenant", **options}, role)
    schema = StructType([StructField("id", LongType()), StructField("tenant", StringType())])
    return writer.create(parsed, schema, False)


def rows(tenants: list[str], start: int = 0) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"id": pa.array(range(start, start + len(tenants)), pa.int64()),
                                       "tenant": tenants})


def test_bad_log_names_fail_the_task_naming_the_value():
    sink = routing(prefix_url())
    with pytest.raises(InvalidLogName, match="logColumn 'tenant' holds an invalid log name 'a/b'"):
        sink.write(iter([rows(["ok", "a/b"])]))


def test_a_failed_log_leaves_the_others_committed_and_an_idempotent_rerun_completes():
    prefix = prefix_url()
    tenants = ["a", "b", "c"] * 10
    append(prefix, "b", 0)
    sink = routing(prefix, writerId="nightly", writerVersion="7")
    message = sink.write(iter([rows(tenants)]))
    good = open_store(f"{prefix}/b").get(MANIFEST_KEY).data
    open_store(f"{prefix}/b").put_if_match(MANIFEST_KEY, b"{broken",
                                           open_store(f"{prefix}/b").get(MANIFEST_KEY).etag)
    with pytest.raises(RoutedCommitFailed) as info:
        sink.commit([message])
    assert "committed to 2 log(s) and failed on 1: b:" in str(info.value)
    assert "same writerId and writerVersion" in str(info.value)
    store_b = open_store(f"{prefix}/b")
    store_b.put_if_match(MANIFEST_KEY, good, store_b.get(MANIFEST_KEY).etag)
    rerun = routing(prefix, writerId="nightly", writerVersion="7")
    rerun.commit([rerun.write(iter([rows(tenants)]))])
    for name in "abc":
        url = f"{prefix}/{name}"
        assert LogReader(open_store(url)).read_table().num_rows == 10, name
        report = verify(url)
        assert report.ok, name
        if name != "b":  # the rerun skipped a and c and deleted its copies of their rows (b keeps
            # the first attempt's fragments: its manifest was unreadable when they were to be
            # deleted, so they could not be told from data, and are left to GC)
            assert not [p for p in report.problems if p.kind == "extra"], name


def test_a_replayed_stream_batch_commits_only_where_it_is_missing():
    prefix = prefix_url()
    first = routing(prefix, RoutingStreamWriter, checkpointLocation="/ckpt/route")
    first.commit([first.write(iter([rows(["a", "b"] * 5)]))], 0)
    # batch 1's first attempt reached only log a (say the driver died before committing b)
    attempt = first.write(iter([rows(["a", "b", "c"] * 4, start=100)]))
    a_only = type(attempt)(tuple(p for p in attempt.logs if p.log == "a"))
    first.commit([a_only], 1)
    replay = routing(prefix, RoutingStreamWriter, checkpointLocation="/ckpt/route")
    replay.commit([replay.write(iter([rows(["a", "b", "c"] * 4, start=100)]))], 1)
    counts = {n: LogReader(open_store(f"{prefix}/{n}")).read_table().num_rows for n in "abc"}
    assert counts == {"a": 9, "b": 9, "c": 4}
    for name in "abc":
        manifest = LogReader(open_store(f"{prefix}/{name}")).manifest()
        assert [t.version for t in manifest.txns.values()] == [1]
        assert verify(f"{prefix}/{name}").ok
    # the replay's copy of log a's rows was deleted (the first attempt's b and c fragments,
    # never committed, are orphans as after a real crash)
    assert not [p for p in verify(f"{prefix}/a").problems if p.kind == "extra"]


def test_with_a_dirty_log_a_trigger_reads_only_the_logs_that_changed():
    """After the first look (every manifest), a trigger costs the dirty log's reads plus one
    manifest GET per changed log; planning the batch reads nothing more."""
    from tests.test_61_dirty_log import CountingStore
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
        assert first == encode(dict.fromkeys(names, 3))
        for name, n in (("t03", 5), ("t11", 1)):
            with LogWriter(open_store(f"{prefix}/{name}"), dirty_log=dirty) as writer:
                writer.append(pa.table({"id": pa.array(range(n), pa.int64())}))
        counting.counts.clear()
        second = r.latestOffset(first, ReadAllAvailable())
        assert second == encode({**dict.fromkeys(names, 3), "t03": 8, "t11": 4})
        parts = r.partitions(first, second)
        assert sorted((rr.log, rr.range.start, rr.range.limit) for p in parts for rr in p.ranges) \
            == [("t03", 3, 8), ("t11", 3, 4)]
    assert counting.logs_touched() == {"_dirty", "t03", "t11"}
    assert counting.counts[("get", "t03")] == counting.counts[("get", "t11")] == 1


def test_lag_of_a_log_set_source_sums_its_logs():
    from wal3_spark.spark.lag import offsets_behind

    source = {"description": "wal3", "endOffset": json.dumps(encode({"a": 5, "b": 2})),
              "latestOffset": json.dumps(encode({"a": 9, "b": 2, "new": 4}))}
    assert offsets_behind({"sources": [source]}) == 4 + 0 + 3
