"""Log sets on Spark (local[2,4]): batch reads with `_log` pushdown, the stream's fairness, and
the routing sink (batch and exactly-once streaming) with its errors."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from tests.support.spark import filter_pushdown
from wal3_spark.format.layout import MANIFEST_KEY
from wal3_spark.log.reader import LogReader
from wal3_spark.log.writer import LogWriter
from wal3_spark.logset.dirty import dirty_store, read_dirty
from wal3_spark.logset.logs import LogSet
from wal3_spark.ops.verify import verify
from wal3_spark.spark import offsets_behind
from wal3_spark.storage import open_store

pytestmark = pytest.mark.timeout(400)


def make_logs(prefix: str, sizes: dict[str, int], options: dict | None = None) -> None:
    for name, n in sizes.items():
        with LogWriter(f"{prefix}/{name}", options=options) as writer:
            writer.append(pa.table({"id": pa.array(range(n), pa.int64()), "src": [name] * n}))


def read_set(spark, prefix: str, **options):
    return spark.read.format("wal3").option("logs", options.pop("logs", "*")) \
        .options(**options).load(prefix)


def counts(df) -> dict[str, int]:
    return {r["_log"]: r["count"] for r in df.groupBy("_log").count().collect()}


# --------------------------------------------------------------------------- batch source


def test_00_batch_read_selects_logs_by_all_list_and_glob(spark, tmp_path):
    prefix = (tmp_path / "set").as_uri()
    make_logs(prefix, {"a1": 3, "a2": 4, "b1": 5})
    df = read_set(spark, prefix)
    assert df.columns == ["id", "src", "_log", "_offset", "_timestamp"]
    rows = df.collect()
    assert all(r.src == r._log for r in rows)
    assert counts(df) == {"a1": 3, "a2": 4, "b1": 5}
    assert counts(read_set(spark, prefix, logs="a*")) == {"a1": 3, "a2": 4}
    assert counts(read_set(spark, prefix, logs="b1,a2")) == {"a2": 4, "b1": 5}
    per_log = read_set(spark, prefix, startingOffsets='{"logs": {"a1": 3, "b1": 5}}',
                       endingOffsets='{"logs": {"a2": 3}}')
    assert counts(per_log) == {"a1": 1, "a2": 2, "b1": 1}
    with pytest.raises(Exception, match=f"no wal3 log at {prefix}/zz"):
        read_set(spark, prefix, logs="a1,zz").collect()


def test_01_log_filters_read_only_the_named_logs(spark, tmp_path):
    """A log whose manifest is unreadable fails any query that reads it, so a filtered query
    that succeeds did not read it; `_offset` filters apply to each log."""
    prefix = (tmp_path / "set").as_uri()
    make_logs(prefix, {"a": 10, "b": 20, "c": 30, "broken": 5})
    store = open_store(f"{prefix}/broken")
    store.put_if_match(MANIFEST_KEY, b"{not json", store.get(MANIFEST_KEY).etag)

    # a DataFrame per query: with pushdown on, Spark 4.3 reuses a DataFrame's last pushed-down
    # plan for its later queries (docs/design/54-spark-batch-caching-and-pushdown.md)
    def df():
        return spark.read.format("wal3").schema(
            "id long, src string, _log string not null, _offset long not null, "
            "_timestamp timestamp not null").option("logs", "*").load(prefix)

    with filter_pushdown(spark):
        assert counts(df().where("_log = 'b'")) == {"b": 20}
        assert counts(df().where(F.col("_log").isin("a", "c") & (F.col("_offset") > 8))) == {
            "a": 2, "c": 22}
        assert counts(df().where(F.col("_log").startswith("c"))) == {"c": 30}
        with pytest.raises(Exception, match=f"{prefix}/broken"):
            df().count()


def test_02_a_reused_log_set_dataframe_answers_every_query_under_the_shipped_configuration(spark, tmp_path):
    """With filter pushdown on, `df.count()` after `df.where("_log = 'b'")` returned b's 20
    rows: Spark 4.3 reused the plan the filtered query pushed (docs/design/54-spark-batch-caching-and-pushdown.md)."""
    prefix = (tmp_path / "set").as_uri()
    make_logs(prefix, {"a": 10, "b": 20, "c": 30})
    df = read_set(spark, prefix)
    assert counts(df.where("_log = 'b'")) == {"b": 20}
    assert df.count() == 60
    assert counts(df) == {"a": 10, "b": 20, "c": 30}
    assert df.agg(F.sum("id")).first()[0] == 45 + 190 + 435


def test_03_stream_over_a_log_set_is_fair_to_cold_logs(spark, tmp_path):
    prefix = (tmp_path / "set").as_uri()
    make_logs(prefix, {"hot": 5000, **{f"cold{i}": 10 for i in range(8)}})
    q = (spark.readStream.format("wal3").option("logs", "*").option("maxRecordsPerTrigger", "200")
         .load(prefix).writeStream.format("memory").queryName("fair_logs")
         .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start())
    q.awaitTermination(300)
    first = q.recentProgress[0]
    assert first["numInputRows"] == 200
    assert offsets_behind(first) == 5080 - 200
    ends = json.loads(first["sources"][0]["endOffset"])["logs"]
    logs_first = {name for name, end in ends.items() if end > 1}
    assert logs_first == {"hot", *(f"cold{i}" for i in range(8))}  # every cold log in batch 1
    total = spark.sql("select _log, count(*) n from fair_logs group by _log").collect()
    assert {r._log: r.n for r in total} == {"hot": 5000, **{f"cold{i}": 10 for i in range(8)}}


# --------------------------------------------------------------------------- routing sink


def routed(df, prefix: str, **options) -> None:
    df.write.format("wal3").mode("append").option("logColumn", "tenant").options(**options) \
        .save(prefix)


def test_04_routing_100k_rows_over_200_keys(spark, tmp_path):
    prefix = (tmp_path / "tenants").as_uri()
    df = spark.range(0, 100_000, numPartitions=2).select(
        "id", F.format_string("tenant-%03d", F.col("id") % 200).alias("tenant"))
    routed(df, prefix)
    names = LogSet(prefix).names()
    assert len(names) == 200
    for name in names:
        url = f"{prefix}/{name}"
        table = LogReader(open_store(url)).read_table()
        assert table.num_rows == 500, name
        assert {i % 200 for i in table.column("id").to_pylist()} == {int(name[-3:])}
        assert table.column_names == ["id", "_offset", "_timestamp"]  # the key is not stored
        assert verify(url).ok, name
    back = read_set(spark, prefix)
    assert back.count() == 100_000
    assert back.where(F.format_string("tenant-%03d", F.col("id") % 200) != F.col("_log")).count() == 0


def test_05_routing_on_s3_into_existing_logs_recorded_in_the_dirty_log(spark, seaweed):
    prefix, options = seaweed.new_url("routing"), dict(seaweed.options)
    make_logs(prefix, {"t1": 3}, options)
    df = spark.createDataFrame([(i, "t-x" if i % 2 else "t1", f"s{i}") for i in range(50)],
                               "id long, tenant string, src string")
    routed(df, prefix, dirtyLog="true", **options)
    assert counts(read_set(spark, prefix, **options)) == {"t1": 28, "t-x": 25}
    for name in ("t1", "t-x"):
        assert verify(f"{prefix}/{name}", options=options).ok
    # the single-log sink records its commits too, in the dirty log of the log's parent
    spark.range(5).write.format("wal3").mode("append").options(**options) \
        .option("dirtyLog", "true").save(f"{prefix}/orders")
    assert read_dirty(dirty_store(open_store(prefix, options)), 1)[0] == {
        "t1": 29, "t-x": 26, "orders": 6}
    with pytest.raises(Exception, match="invalid log name 'bad name'"):
        spark.range(5).write.format("wal3").mode("append").options(**options) \
            .option("dirtyLog", "true").save(f"{prefix}/bad name")


@pytest.mark.parametrize("rows, match", [
    ([(1, "good"), (2, "a/b")], "logColumn 'tenant' holds an invalid log name 'a/b'"),
    ([(1, "good"), (2, "_dirty")], "reserved"),
    ([(1, None)], "logColumn 'tenant' is null in 1 row"),
])
def test_06_routing_refuses_bad_keys(spark, tmp_path, rows, match):
    prefix = (tmp_path / "tenants").as_uri()
    with pytest.raises(Exception, match=match):
        routed(spark.createDataFrame(rows, "id long, tenant string"), prefix)
    assert not os.path.exists(tmp_path / "tenants" / "good" / "manifest")  # nothing committed


def test_07_routing_column_must_be_a_string_column(spark, tmp_path):
    df = spark.createDataFrame([(1, 2)], "id long, tenant long")
    with pytest.raises(Exception, match="logColumn 'tenant' is not a string column"):
        routed(df, (tmp_path / "t").as_uri())
    with pytest.raises(Exception, match="logColumn 'tenant' is not a column"):
        routed(spark.range(3), (tmp_path / "t").as_uri())
    with pytest.raises(Exception, match="column _log would be stored in the routed logs"):
        routed(spark.createDataFrame([(1, "a", "b")], "id long, tenant string, _log string"),
               (tmp_path / "t").as_uri())


def test_08_routing_stream_replayed_batch_adds_nothing(spark, tmp_path):
    source, prefix, ckpt = (tmp_path / "src").as_uri(), (tmp_path / "out").as_uri(), tmp_path / "ck"
    spark.range(0, 300, numPartitions=2).select(
        "id", F.format_string("k%d", F.col("id") % 7).alias("tenant")
    ).write.format("wal3").mode("append").save(source)

    def pipe():
        q = (spark.readStream.format("wal3").option("maxRecordsPerTrigger", "100").load(source)
             .drop("_offset", "_timestamp").writeStream.format("wal3")
             .option("logColumn", "tenant").option("checkpointLocation", str(ckpt))
             .trigger(availableNow=True).start(prefix))
        q.awaitTermination(300)
        if q.exception():
            raise q.exception()

    pipe()
    # a crash after the sink committed the last batch but before Spark recorded it
    commits = ckpt / "commits"
    last = max(int(p) for p in os.listdir(commits) if p.isdigit())
    (commits / str(last)).unlink()
    for crc in commits.glob(f".{last}.crc"):
        crc.unlink()
    spark.range(300, 350, numPartitions=1).select(
        "id", F.format_string("k%d", F.col("id") % 7).alias("tenant")
    ).write.format("wal3").mode("append").save(source)
    pipe()
    back = read_set(spark, prefix)
    assert sorted(r.id for r in back.select("id").collect()) == list(range(350))
    for name in LogSet(prefix).names():
        url = f"{prefix}/{name}"
        report = verify(url)
        assert report.ok and not [p for p in report.problems if p.kind == "extra"], name


def test_09_failed_routing_jobs_leave_no_fragments_and_no_directories(spark, tmp_path):
    """Jobs failing on an invalid log name in one partition: the failing task deletes what it
    wrote, the job's abort deletes what the finished tasks wrote, and no directory is left for
    the logs the jobs never created (a listing of the set would show their names)."""
    prefix = tmp_path / "tenants"
    routed(spark.createDataFrame([(1, "old1"), (2, "old2")], "id long, tenant string"), prefix.as_uri())
    for job in range(3):
        data = [(i, f"new{i % 4}" if i % 3 else f"old{1 + i % 2}") for i in range(120)]
        df = spark.createDataFrame(data + [(999, "bad/name")], "id long, tenant string")
        with pytest.raises(Exception, match="invalid log name 'bad/name'"):
            routed(df.repartition(4), prefix.as_uri(), fragmentBytes="1024")
    assert sorted(os.listdir(prefix)) == ["old1", "old2"]
    for name in ("old1", "old2"):
        report = verify(f"{prefix.as_uri()}/{name}")
        assert report.ok and not [p for p in report.problems if p.kind == "extra"], name
        assert LogReader(open_store(f"{prefix.as_uri()}/{name}")).read_table().num_rows == 1


def test_10_what_failed_routing_jobs_leave_is_swept_after_the_orphan_grace(spark, tmp_path):
    """Tasks still running when a job fails (here: two at once, the invalid name in the last of
    four partitions) write fragments that no commit message reports, so neither the failing task
    nor the abort can delete them: garbage collection of the existing log and prefix GC's sweep
    of names without a manifest remove them once older than the orphan grace, and nothing else."""
    from wal3_spark.clock import SystemClock
    from wal3_spark.ops.garbage_collector import MIN_ORPHAN_GRACE_S, GarbageCollector, GCOptions

    prefix = tmp_path / "set"
    routed(spark.createDataFrame([(1, "existing")], "id long, tenant string"), prefix.as_uri())
    for job in range(6):
        df = spark.range(0, 4000, numPartitions=4).select("id", F.when(F.col("id") == 3999 - job, "bad/name")
            .when(F.col("id") % 3 == 0, "existing").otherwise(F.format_string("new%d", F.col("id") % 2))
            .alias("tenant"))
        with pytest.raises(Exception, match="invalid log name 'bad/name'"):
            routed(df, prefix.as_uri(), fragmentBytes="4096")
    later = SystemClock(skew_s=MIN_ORPHAN_GRACE_S + 3600)
    for name in sorted(os.listdir(prefix)):
        store = open_store(f"{prefix.as_uri()}/{name}")
        GarbageCollector(store, GCOptions(orphans_without_log=True), clock=later).run()
    existing = f"{prefix.as_uri()}/existing"
    report = verify(existing)
    assert report.ok and not [p for p in report.problems if p.kind == "extra"], report.problems
    assert LogReader(open_store(existing)).read_table().column("id").to_pylist() == [1]
    for name in sorted(set(os.listdir(prefix)) - {"existing"}):  # fenced: empty logs, no fragment
        assert LogReader(open_store(f"{prefix.as_uri()}/{name}")).read_table().num_rows == 0, name
        assert not os.path.exists(prefix / name / "log") or not os.listdir(prefix / name / "log"), name


def test_11_a_failing_task_deletes_what_it_uploaded_before_the_invalid_name(spark, tmp_path):
    """With nothing running beside it (one partition), a task that meets an invalid name in its
    third Arrow batch, after uploading fragments of the first two to an existing log and to two
    new ones, leaves nothing right after the failure: no unreferenced fragment in the existing
    log, no object under the names never created. A name is checked with its batch, before that
    batch's first upload, so an invalid name in the first batch uploads nothing."""
    prefix = tmp_path / "set"
    routed(spark.createDataFrame([(1, "existing")], "id long, tenant string"), prefix.as_uri())
    n = 30_000  # three Arrow batches of spark.sql.execution.arrow.maxRecordsPerBatch (10,000)
    assert int(spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")) == 10_000
    for bad in (n - 1, 0):
        df = spark.range(0, n, numPartitions=1).select("id", F.when(F.col("id") == bad, "bad/name")
            .when(F.col("id") % 3 == 0, "existing").otherwise(F.format_string("new%d", F.col("id") % 2))
            .alias("tenant"))
        with pytest.raises(Exception, match="invalid log name 'bad/name'"):
            routed(df, prefix.as_uri(), fragmentBytes="4096")
        assert sorted(os.listdir(prefix)) == ["existing"], bad
        report = verify(f"{prefix.as_uri()}/existing")
        assert report.ok and not [p for p in report.problems if p.kind == "extra"], report.problems
