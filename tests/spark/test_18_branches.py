"""Branches and tags through Spark: `format("wal3")` batch and stream reads of a branch (and of
a branch of a branch), the native scan, a branch in a log set, and `option("tag", ...)` reading
exactly a tag's records before and after appends and garbage collection."""

from __future__ import annotations

import pyarrow as pa
import pytest

from tests.spark.test_09_stream_read import run_available_now, sink_rows
from wal3_spark.errors import DataLost
from wal3_spark.log.branches import branch
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.reader import LogReader
from wal3_spark.log.tags import TagStore
from wal3_spark.log.writer import LogWriter
from wal3_spark.ops.garbage_collector import GarbageCollector, GCOptions
from wal3_spark.spark import Wal3Log
from wal3_spark.storage.common import file_url

pytestmark = pytest.mark.timeout(300)


def rows(start: int, n: int, who: str = "parent") -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()), "who": [who] * n})


def fill(url: str, appends: int, per: int = 4, start: int = 0, who: str = "parent") -> None:
    writer = LogWriter(url)
    for i in range(appends):
        writer.append(rows(start + i * per, per, who))


def ids(df) -> list[tuple[int, int, str]]:
    return sorted((r["_offset"], r["id"], r["who"]) for r in df.select("_offset", "id", "who").collect())


def collect(url: str) -> None:
    CursorStore(url).move("gc", LogReader(url).manifest().next_offset, allow_backwards=True)
    GarbageCollector(url, GCOptions(grace_s=0, force=True)).run()


@pytest.fixture
def urls(tmp_path) -> dict[str, str]:
    return {n: file_url(str(tmp_path / "logs" / n)) for n in ("orders", "fork", "fork2")}


def expected(parent_below: int, own: list[tuple[int, str]], first: int = 1) -> list[tuple[int, int, str]]:
    return [(o, o - 1, "parent") for o in range(first, parent_below)] + [
        (o, i, who) for o, (i, who) in zip(range(parent_below, parent_below + len(own)), own)]


def test_00_batch_stream_and_native_scan_read_through_the_parent(spark, urls, tmp_path):
    fill(urls["orders"], 6)  # [1, 25), fragments of 4
    branch(urls["orders"], urls["fork"], at=15)  # inside the fragment [13, 17)
    fill(urls["fork"], 1, per=3, start=100, who="fork")
    fill(urls["orders"], 2, start=24)  # the parent goes on
    want = expected(15, [(100, "fork"), (101, "fork"), (102, "fork")])
    assert ids(spark.read.format("wal3").load(urls["fork"])) == want
    assert ids(spark.read.format("wal3").option("startingOffsets", "12")
               .option("endingOffsets", "16").load(urls["fork"])) == [w for w in want if 12 <= w[0] < 16]
    assert ids(Wal3Log.forPath(spark, urls["fork"]).toDF()) == want
    run_available_now(spark, urls["fork"], tmp_path / "ckpt", tmp_path / "sink")
    assert sorted((r["_offset"], r["id"], r["who"]) for r in sink_rows(spark, tmp_path / "sink")) == want
    # a branch of the branch walks the chain, in every reader
    branch(urls["fork"], urls["fork2"], at=16)
    fill(urls["fork2"], 1, per=1, start=200, who="fork2")
    want2 = expected(15, [(100, "fork"), (200, "fork2")])
    assert ids(spark.read.format("wal3").load(urls["fork2"])) == want2
    assert ids(Wal3Log.forPath(spark, urls["fork2"]).toDF()) == want2
    # a branch in a log set is read as its records, beside the other logs
    prefix = file_url(str(tmp_path / "logs"))
    got = spark.read.format("wal3").option("logs", "fork*").load(prefix)
    assert sorted(r["_offset"] for r in got.where("_log = 'fork2'").collect()) == [o for o, _, _ in want2]


def test_01_a_tag_reads_the_same_rows_before_and_after_appends_and_gc(spark, urls):
    fill(urls["orders"], 6)
    TagStore(urls["orders"]).create("q3-close", at=18, hold=True)
    TagStore(urls["orders"]).create("loose", at=10)

    def read(**extra):
        return ids(spark.read.format("wal3").option("tag", "q3-close").options(**extra).load(urls["orders"]))

    before = read()
    assert [o for o, _, _ in before] == list(range(1, 18))
    assert ids(Wal3Log.forPath(spark, urls["orders"]).toDF(tag="q3-close")) == before
    fill(urls["orders"], 3, start=24)
    collect(urls["orders"])
    assert read() == before
    assert ids(Wal3Log.forPath(spark, urls["orders"]).toDF(tag="q3-close")) == before
    TagStore(urls["orders"]).delete("q3-close")  # nothing holds the log back now
    collect(urls["orders"])
    with pytest.raises(Exception, match="DataLost|garbage-collected") as info:
        spark.read.format("wal3").option("tag", "loose").load(urls["orders"]).collect()
    assert isinstance(info.value, DataLost) or "garbage-collected" in str(info.value)
    with pytest.raises(Exception, match="no tag 'nope'"):
        spark.read.format("wal3").option("tag", "nope").load(urls["orders"]).collect()
    with pytest.raises(Exception, match="a tag names its records itself"):
        spark.read.format("wal3").option("tag", "loose").option("startingOffsets", "3") \
            .load(urls["orders"]).collect()
