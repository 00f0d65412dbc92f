"""The routing sink's tasks and per-log commits, without Spark: rows split by `logColumn`,
bad log names, one log's failed commit, an idempotent rerun and a replayed stream batch."""

from __future__ import annotations

import pyarrow as pa
import pytest

from tests.support.logsets import append, prefix_url
from wal3_spark.errors import InvalidLogName, InvalidOption, RoutedCommitFailed
from wal3_spark.format.layout import MANIFEST_KEY
from wal3_spark.log.reader import LogReader
from wal3_spark.ops.verify import verify
from wal3_spark.spark import options as opts
from wal3_spark.spark.routing_writer import (
    RoutingBatchWriter,
    RoutingStreamWriter,
    split_by,
)
from wal3_spark.storage import open_store


def test_00_split_by_keeps_row_order_and_refuses_nulls():
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


def test_01_bad_log_names_fail_the_task_naming_the_value():
    sink = routing(prefix_url())
    with pytest.raises(InvalidLogName, match="logColumn 'tenant' holds an invalid log name 'a/b'"):
        sink.write(iter([rows(["ok", "a/b"])]))


def test_02_a_failed_log_leaves_the_others_committed_and_an_idempotent_rerun_completes():
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


def test_03_a_replayed_stream_batch_commits_only_where_it_is_missing():
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
