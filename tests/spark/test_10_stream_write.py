"""Streaming sink: exactly-once across a replayed batch, writer ids, errors."""

from __future__ import annotations

import os

import pytest

from tests.spark.test_08_batch import append, check_log, read, sample
from wal3_spark.log.reader import LogReader
from wal3_spark.storage import open_store

pytestmark = pytest.mark.timeout(300)


def pipe(spark, source, sink, ckpt, **options):
    q = (
        spark.readStream.format("wal3").option("maxRecordsPerTrigger", "100").load(source)
        .drop("_offset", "_timestamp")
        .writeStream.format("wal3").option("checkpointLocation", str(ckpt)).options(**options)
        .trigger(availableNow=True).start(sink)
    )
    q.awaitTermination(240)
    if q.exception():
        raise q.exception()
    return q


def test_00_replayed_batch_commits_once(spark, log_url, tmp_path):
    source, sink, ckpt = log_url, log_url + "-sink", tmp_path / "ckpt"
    append(sample(spark, 300), source)
    pipe(spark, source, sink, ckpt)
    assert read(spark, sink).count() == 300
    manifest = LogReader(open_store(sink)).manifest()
    assert len(manifest.txns) == 1 and next(iter(manifest.txns.values())).version == 2
    # Simulate a crash after the sink committed batch 2 but before Spark recorded it: remove
    # the batch's commit marker, so the restarted query replays batch 2.
    commits = ckpt / "commits"
    last = max(int(p) for p in os.listdir(commits) if p.isdigit())
    (commits / str(last)).unlink()
    for crc in commits.glob(f".{last}.crc"):
        crc.unlink()
    append(sample(spark, 50, start=300), source)
    pipe(spark, source, sink, ckpt)
    ids = [r.id for r in read(spark, sink).select("id").collect()]
    assert sorted(ids) == list(range(350))
    check_log(sink)


def test_01_writer_id_option_and_missing_id(spark, log_url, tmp_path):
    append(sample(spark, 20), log_url)
    df = spark.readStream.format("wal3").load(log_url).drop("_offset", "_timestamp")
    with pytest.raises(Exception, match="writerId"):
        q = (df.writeStream.format("wal3").option("writerId", " ")
             .option("checkpointLocation", str(tmp_path / "c0")).start(log_url + "-s"))
        q.awaitTermination(240)
        if q.exception():
            raise q.exception()
    # Spark itself insists on a checkpoint for this sink; with one, writerId names the txn
    q = (df.writeStream.format("wal3").option("writerId", "orders_copy")
         .option("checkpointLocation", str(tmp_path / "c")).trigger(availableNow=True)
         .start(log_url + "-s"))
    q.awaitTermination(240)
    assert "orders_copy" in LogReader(open_store(log_url + "-s")).manifest().txns


def test_02_stream_parse_requires_writer_id():
    from wal3_spark.errors import InvalidOption
    from wal3_spark.spark import options as opts

    with pytest.raises(InvalidOption, match="checkpointLocation"):
        opts.parse({"path": "/tmp/x"}, opts.STREAM_WRITE)
    a = opts.parse({"path": "/tmp/x", "checkpointlocation": "/c/1"}, opts.STREAM_WRITE)
    b = opts.parse({"path": "/tmp/x", "checkpointLocation": "/c/1/"}, opts.STREAM_WRITE)
    assert a.writer_id == b.writer_id and a.writer_id.startswith("ckpt-")


def test_03_complete_mode_is_refused(spark, log_url, tmp_path):
    append(sample(spark, 20), log_url)
    agg = spark.readStream.format("wal3").load(log_url).groupBy("flag").count()
    with pytest.raises(Exception, match="append-only"):
        q = (agg.writeStream.format("wal3").outputMode("complete")
             .option("checkpointLocation", str(tmp_path / "c")).trigger(availableNow=True)
             .start(log_url + "-agg"))
        q.awaitTermination(240)
        if q.exception():
            raise q.exception()


def test_04_a_sealed_sink_log_fails_the_stream_and_keeps_its_records(spark, log_url, tmp_path):
    from wal3_spark.log.committer import Committer

    source, sink = log_url, log_url + "-sealed"
    append(sample(spark, 100), source)
    pipe(spark, source, sink, tmp_path / "ckpt")
    Committer(open_store(sink)).seal()
    append(sample(spark, 50, start=100), source)
    with pytest.raises(Exception, match="is sealed"):
        pipe(spark, source, sink, tmp_path / "ckpt")
    assert read(spark, sink).count() == 100
    check_log(sink)
