"""Streams across a log deleted and created again under the same name (real Spark, local[2,4]):
the query fails naming the log (`onRecreatedLog=fail`, the default) or reads the new log from its
oldest offset (`restart`), and the stream's cursor follows the new log instead of failing every
commit. Before incarnations, the stream kept the old offset: the new log's first records were
never delivered, and with `cursor` every commit failed ("offset 12 is beyond the tail")."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.reader import LogReader
from wal3_spark.log.writer import LogWriter
from wal3_spark.logset.dirty import DirtyLog
from wal3_spark.storage import open_store

pytestmark = pytest.mark.timeout(400)


def write(url: str, tag: str, n: int, dirty: DirtyLog | None = None) -> None:
    with LogWriter(url, dirty_log=dirty) as writer:
        writer.append(pa.table({"id": pa.array(range(n), pa.int64()), "tag": [tag] * n}))


def recreate(root: Path, tag: str, n: int, dirty: DirtyLog | None = None) -> None:
    """Delete the log (every object under its root, its cursors included) and create it again."""
    shutil.rmtree(root)
    write(root.as_uri(), tag, n, dirty)


def run(spark, url: str, ckpt: Path, out: Path, **options) -> None:
    q = (spark.readStream.format("wal3").options(**options).load(url).writeStream
         .format("parquet").option("checkpointLocation", str(ckpt)).option("path", str(out))
         .trigger(availableNow=True).start())
    q.awaitTermination(300)
    if q.exception():
        raise q.exception()


def delivered(spark, out: Path, *columns: str) -> list[tuple]:
    return sorted(tuple(r) for r in spark.read.parquet(str(out)).select(*columns).collect())


def cursor_of(url: str, name: str = "billing"):
    state = CursorStore(open_store(url)).get(name)
    assert state is not None
    return state.cursor


# ----------------------------------------------------------------------------- one log


@pytest.mark.parametrize("new_records", [15, 5])  # the new log passes the old offset, or not
def test_00_single_log_stream_fails_naming_a_recreated_log_or_restarts_it(spark, tmp_path, new_records):
    root = tmp_path / "orders"
    url = root.as_uri()
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    write(url, "old", 11)
    run(spark, url, ckpt, out, cursor="billing")
    recreate(root, "new", new_records)  # the restart commits the old end (12) to the cursor
    with pytest.raises(Exception, match=f"{url} was deleted and created again") as err:
        run(spark, url, ckpt, out, cursor="billing")
    assert "onRecreatedLog" in str(err.value)
    assert len(delivered(spark, out, "tag")) == 11  # nothing of the new log was read

    run(spark, url, ckpt, out, cursor="billing", onRecreatedLog="restart")
    rows = delivered(spark, out, "tag", "_offset")
    assert [r for r in rows if r[0] == "new"] == [("new", o) for o in range(1, new_records + 1)]
    # the stream goes on in the new log, its cursor too (Spark commits a run's last batch when
    # the next run starts)
    write(url, "more", 3)
    run(spark, url, ckpt, out, cursor="billing")
    assert len(delivered(spark, out, "tag")) == 11 + new_records + 3
    cursor = cursor_of(url)
    assert cursor.offset >= new_records + 1
    assert cursor.incarnation == LogReader(open_store(url)).manifest().incarnation


# ---------------------------------------------------------------------------- log sets


def make_set(prefix: Path, dirty: DirtyLog | None = None) -> None:
    write((prefix / "a").as_uri(), "a-old", 5, dirty)
    write((prefix / "b").as_uri(), "b-old", 11, dirty)


def test_01_logset_stream_fails_naming_a_recreated_log_or_restarts_only_that_log(spark, tmp_path):
    prefix = tmp_path / "set"
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    make_set(prefix)
    run(spark, prefix.as_uri(), ckpt, out, logs="*", cursor="billing")
    recreate(prefix / "b", "b-new", 15)
    write((prefix / "a").as_uri(), "a-more", 2)
    with pytest.raises(Exception, match=f"{prefix.as_uri()}/b was deleted and created again"):
        run(spark, prefix.as_uri(), ckpt, out, logs="*", cursor="billing")
    assert len(delivered(spark, out, "tag")) == 16

    run(spark, prefix.as_uri(), ckpt, out, logs="*", cursor="billing", onRecreatedLog="restart")
    rows = delivered(spark, out, "_log", "tag", "_offset")
    assert [r for r in rows if r[1] == "b-new"] == [("b", "b-new", o) for o in range(1, 16)]
    assert [r[2] for r in rows if r[1] == "a-more"] == [6, 7]  # a goes on where it was
    assert len(rows) == 16 + 15 + 2
    b = cursor_of((prefix / "b").as_uri())  # at the new log's start, or past its batch
    assert b.offset in (1, 16)
    assert b.incarnation == LogReader(open_store((prefix / "b").as_uri())).manifest().incarnation


@pytest.mark.parametrize("on_recreated", ["restart", "fail"])
def test_02_running_logset_stream_notices_a_recreated_log_shorter_than_its_offset(
        spark, tmp_path, on_recreated):
    """The dirty log records the new log's commits; its tail (6) is below the stream's offset
    in the old log (12), so the log has nothing to read by its tail: the stream must look."""
    prefix = tmp_path / "set"
    with DirtyLog(prefix.as_uri()) as dirty:
        make_set(prefix, dirty)
    q = (spark.readStream.format("wal3").option("logs", "*").option("cursor", "billing")
         .option("onRecreatedLog", on_recreated).load(prefix.as_uri())
         .writeStream.format("memory").queryName(f"recreated_{on_recreated}")
         .option("checkpointLocation", str(tmp_path / "ckpt")).start())
    try:
        q.processAllAvailable()
        with DirtyLog(prefix.as_uri()) as dirty:
            recreate(prefix / "b", "b-new", 5, dirty)
        if on_recreated == "fail":
            with pytest.raises(Exception, match="/b was deleted and created again"):
                q.processAllAvailable()
            return
        q.processAllAvailable()
        rows = spark.sql(f"select _log, tag, _offset from recreated_{on_recreated}").collect()
        assert sorted((r._offset, r.tag) for r in rows if r._log == "b") == sorted(
            [(o, "b-old") for o in range(1, 12)] + [(o, "b-new") for o in range(1, 6)])
        cursor = cursor_of((prefix / "b").as_uri())  # trails the last batch (Spark commits
        assert cursor.offset in (1, 6)               # a batch when it plans the next one)
        assert cursor.incarnation == LogReader(
            open_store((prefix / "b").as_uri())).manifest().incarnation
    finally:
        q.stop()


def test_06_one_read_that_disagrees_with_the_next_is_corrupt_never_a_recreated_log(tmp_path):
    """The setsum does not cover a manifest's incarnation: a stream acts on a changed one only
    when a second read of the manifest agrees. A single damaged read (here: the first read sees
    another log's incarnation, the re-read the real one) must neither restart the stream at the
    oldest offset (its records delivered again) nor fail it as a re-created log."""
    from wal3_spark.errors import CorruptLog, LogRecreated
    from wal3_spark.spark.options import STREAM_READ, parse
    from wal3_spark.spark.recreated import recorded_in_this_log, stale_batch

    url, other = (tmp_path / "log").as_uri(), (tmp_path / "other").as_uri()
    write(url, "a", 5)
    write(other, "b", 5)
    real, damaged = LogReader(url).manifest(), LogReader(other).manifest()
    assert real.incarnation != damaged.incarnation
    for mode in ("fail", "restart"):
        options = parse({"path": url, "onRecreatedLog": mode}, STREAM_READ)
        with pytest.raises(CorruptLog, match="a read was damaged"):
            recorded_in_this_log(options, url, 3, real.incarnation, damaged, lambda: real)
        with pytest.raises(CorruptLog, match="a read was damaged"):
            stale_batch(options, url, 3, real.incarnation, damaged, lambda: real)
    # a re-read that agrees: the log was really created again
    restart = parse({"path": url, "onRecreatedLog": "restart"}, STREAM_READ)
    assert recorded_in_this_log(restart, url, 3, real.incarnation, damaged, lambda: damaged) is False
    with pytest.raises(LogRecreated):
        recorded_in_this_log(parse({"path": url}, STREAM_READ), url, 3, real.incarnation, damaged,
                       lambda: damaged)


# ------------------------------------------------------------ sinks: a log deleted under a write


def records_of(url: str) -> list[tuple]:
    """Every record of the log at `url` as (tag, id), sorted; [] when it is empty."""
    manifest = LogReader(open_store(url)).manifest()
    if manifest.next_offset == manifest.oldest_offset:
        return []
    table = LogReader(open_store(url)).read_table()
    return sorted(zip(table.column("tag").to_pylist(), table.column("id").to_pylist()))


def frame(spark, tag: str, n: int, tenants: tuple[str, ...] = ()):
    rows = [(i, tag, tenants[i % len(tenants)] if tenants else "") for i in range(n)]
    df = spark.createDataFrame(rows, "id long, tag string, tenant string").repartition(2)
    return df if tenants else df.drop("tenant")


@pytest.fixture
def recreating(spark):
    from tests.support.recreating import NAME, RecreatingDataSource

    spark.dataSource.register(RecreatingDataSource)
    return NAME


def test_10_batch_sink_fragments_of_a_log_deleted_before_the_commit_are_never_committed(spark, tmp_path, recreating):
    url = (tmp_path / "orders").as_uri()
    write(url, "old", 3)
    before = LogReader(open_store(url)).manifest().incarnation
    with pytest.raises(Exception, match="deleted since these fragments were written"):
        frame(spark, "lost", 20).write.format(recreating).mode("append") \
            .option("recreateBeforeCommit", url).save(url)
    manifest = LogReader(open_store(url)).manifest()
    assert manifest.incarnation != before and records_of(url) == []  # nothing acknowledged
    assert not list(open_store(url).list("log/"))  # the fragments the tasks wrote went with it
    frame(spark, "new", 5).write.format("wal3").mode("append").save(url)  # the re-planned job
    assert [t for t, _ in records_of(url)] == ["new"] * 5


def test_11_stream_sink_batch_of_a_log_deleted_before_its_commit_fails_and_the_restart_replays_it(
        spark, tmp_path, recreating):
    source, sink, ckpt = (tmp_path / "source").as_uri(), (tmp_path / "sink").as_uri(), tmp_path / "ckpt"
    write(source, "s", 12)
    write(sink, "old", 3)

    def start(fmt: str, **options):
        q = (spark.readStream.format("wal3").load(source).drop("_offset", "_timestamp").writeStream
             .format(fmt).option("checkpointLocation", str(ckpt)).options(**options)
             .trigger(availableNow=True).start(sink))
        q.awaitTermination(240)
        if q.exception():
            raise q.exception()

    with pytest.raises(Exception, match="deleted since these fragments were written"):
        start(recreating, recreateBeforeCommit=sink)
    assert records_of(sink) == []  # the batch is not in the log created again
    start("wal3")  # a restart plans on the new log and replays the batch: nothing lost
    assert records_of(sink) == [("s", i) for i in range(12)]


def test_12_routing_sink_commits_only_into_the_logs_its_fragments_were_written_for(spark, tmp_path, recreating):
    prefix = (tmp_path / "set").as_uri()
    for name in ("kept", "gone"):
        write(f"{prefix}/{name}", "old", 2)
    # "gone" exists and is deleted and created again; "new" does not exist when the tasks write
    # and is created by another writer, then deleted (taking the fragments) and created again;
    # "meanwhile" does not exist either and is created by another writer: fine
    with pytest.raises(Exception, match=r"committed to 2 log\(s\) and failed on 2") as err:
        frame(spark, "routed", 40, ("kept", "gone", "new", "meanwhile")).write.format(recreating) \
            .mode("append").option("logColumn", "tenant") \
            .option("recreateBeforeCommit", f"{prefix}/gone,{prefix}/new") \
            .option("createBeforeCommit", f"{prefix}/meanwhile").save(prefix)
    message = str(err.value)
    assert "gone: " in message and "was deleted since these fragments were written" in message
    assert "new: " in message and "is gone: the log was deleted" in message
    assert records_of(f"{prefix}/gone") == [] and records_of(f"{prefix}/new") == []
    assert [t for t, _ in records_of(f"{prefix}/kept")] == ["old"] * 2 + ["routed"] * 10
    assert [t for t, _ in records_of(f"{prefix}/meanwhile")] == ["routed"] * 10
