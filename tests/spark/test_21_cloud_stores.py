"""The Spark data source on Google Cloud Storage and Azure Blob Storage (fake-gcs-server and
Azurite): batch appends read back exactly by Spark and by `LogReader` and verified, a batch
writer version that commits once, a stream with a cursor into an exactly-once streaming sink
whose replayed batch commits once, and the routing sink writing a log set that is read back.
The store options reach the executors in the plan; the executors are Python workers of
`local[2]`. Each test asks several questions of the same Spark jobs (the suite's time is mostly
Spark's): a separate stream for the cursor and another for the sink cost 8-10 s per store."""

from __future__ import annotations

import os

import pytest

from tests.support.emulators import cloud_url
from tests.spark.test_08_batch import append, assert_roundtrip, read, sample
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.reader import LogReader
from wal3_spark.ops.verify import verify
from wal3_spark.storage import open_store

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(params=["gcs", "azure"])
def cloud(request: pytest.FixtureRequest) -> tuple[str, dict[str, str]]:
    """A fresh log URL on each emulator, and its store options."""
    return cloud_url(request, request.param)


def test_00_append_then_read_back_exactly_and_a_writer_version_commits_once(spark, cloud):
    url, options = cloud
    assert_roundtrip(spark, url, options)  # Spark reads 4,000 rows back exactly; verify is clean
    nightly = {"writerId": "nightly", "writerVersion": "7", **options}
    append(sample(spark, 100, start=4000), url, **nightly)
    append(sample(spark, 100, start=4000), url, **nightly)  # the same run again: skipped
    table = LogReader(url, options=options).read_table()
    assert sorted(table.column("id").to_pylist()) == list(range(4100))
    assert sorted(table.column("_offset").to_pylist()) == list(range(1, 4101))
    assert verify(url, options=options).ok


def test_01_stream_with_a_cursor_into_a_sink_that_commits_a_replayed_batch_once(spark, cloud, tmp_path):
    url, options = cloud
    source, sink, ckpt = url, url + "-sink", tmp_path / "ckpt"
    append(sample(spark, 400), source, **options)

    def pipe() -> list[int]:
        q = (
            spark.readStream.format("wal3").options(**options).option("cursor", "reader")
            .option("maxRecordsPerTrigger", "200").load(source).drop("_offset", "_timestamp")
            .writeStream.format("wal3").option("checkpointLocation", str(ckpt)).options(**options)
            .trigger(availableNow=True).start(sink)
        )  # fmt: skip
        q.awaitTermination(240)
        if q.exception():
            raise q.exception()
        return [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]

    assert pipe() == [200, 200]
    cursor = CursorStore(open_store(source, options)).get("reader")
    assert cursor is not None and cursor.cursor.offset in (201, 401)
    assert sorted(LogReader(sink, options=options).read_table().column("id").to_pylist()) == list(range(400))
    # a crash after the sink committed the last batch, before Spark recorded it: it replays
    commits = ckpt / "commits"
    last = max(int(p) for p in os.listdir(commits) if p.isdigit())
    (commits / str(last)).unlink()
    for crc in commits.glob(f".{last}.crc"):
        crc.unlink()
    append(sample(spark, 50, start=400), source, **options)
    pipe()
    assert sorted(r.id for r in read(spark, sink, **options).select("id").collect()) == list(range(450))
    assert verify(sink, options=options).ok
    cursor = CursorStore(open_store(source, options)).get("reader")
    assert cursor is not None and cursor.cursor.offset in (401, 451)


def test_02_routing_sink_and_log_set_read(spark, cloud):
    """`logColumn` routes rows to one log per tenant under a prefix (with the prefix's dirty
    log); the log set reads back every row once, each in its own log."""
    from pyspark.sql import functions as F

    prefix, options = cloud
    df = spark.range(0, 60, numPartitions=2).select(
        F.col("id"), F.concat(F.lit("t"), (F.col("id") % 3).cast("string")).alias("tenant")
    )
    df.write.format("wal3").mode("append").options(**options).option("logColumn", "tenant") \
        .option("dirtyLog", "true").save(prefix)  # fmt: skip
    back = spark.read.format("wal3").options(**options).option("logs", "*").load(prefix)
    rows = back.select("id", "_log").collect()
    assert sorted(r.id for r in rows) == list(range(60))
    assert all(r._log == f"t{r.id % 3}" for r in rows)
    for tenant in ("t0", "t1", "t2"):
        assert verify(f"{prefix}/{tenant}", options=options).ok


def test_03_sql_table_on_gcs(spark, gcs):
    """A SQL table over a GCS log: the endpoint (not a credential) lives in the table's options;
    SELECT and INSERT go through the store like the DataFrame API."""
    import uuid

    url, table = gcs.new_url("sql"), f"gcs_{uuid.uuid4().hex[:8]}"
    append(sample(spark, 5), url, **gcs.options)
    try:
        spark.sql(f"CREATE TABLE {table} USING wal3 OPTIONS (path '{url}', endpoint '{gcs.endpoint}')")
        spark.sql(f"INSERT INTO {table} (id, name, score, flag, maybe) SELECT id + 5, name, score, flag, maybe FROM {table}")
        row = spark.sql(f"SELECT count(*) n, min(_offset) lo, max(_offset) hi, max(id) top FROM {table}").first()
        assert (row.n, row.lo, row.hi, row.top) == (10, 1, 10, 9)
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {table}")
    assert verify(url, options=gcs.options).ok
