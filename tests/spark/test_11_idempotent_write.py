"""Idempotent batch writes (writerId + writerVersion, Delta's txnAppId/txnVersion): a version
commits once, reruns are skipped and leave no fragments, foreachBatch becomes exactly-once."""

from __future__ import annotations

import pytest

from tests.spark.test_08_batch import append, check_log, read, sample
from wal3_spark.log.reader import LogReader, iter_fragments
from wal3_spark.storage import open_store

pytestmark = pytest.mark.timeout(300)


def txn_version(url: str, writer_id: str) -> int | None:
    txn = LogReader(open_store(url)).manifest().txns.get(writer_id)
    return None if txn is None else txn.version


def stored_fragments(url: str) -> set[str]:
    return {meta.key for meta in open_store(url).list("log/")}


def referenced_fragments(url: str) -> set[str]:
    store = open_store(url)
    return {ref.path for ref in iter_fragments(store, LogReader(store).manifest())}


def test_00_a_version_commits_once_and_reruns_leave_nothing(spark, log_url):
    nightly = {"writerId": "nightly-load", "writerVersion": "42"}
    append(sample(spark, 100), log_url, **nightly)
    append(sample(spark, 100), log_url, **nightly)  # the same run again: skipped
    append(sample(spark, 7, start=500), log_url, writerId="nightly-load", writerVersion="41")
    assert read(spark, log_url).count() == 100
    assert txn_version(log_url, "nightly-load") == 42
    assert stored_fragments(log_url) == referenced_fragments(log_url)  # the skipped runs' deleted
    append(sample(spark, 50, start=100), log_url, writerId="nightly-load", writerVersion="43")
    assert sorted(r.id for r in read(spark, log_url).select("id").collect()) == list(range(150))
    # an empty DataFrame still records its version; another writer id is independent
    append(sample(spark, 0), log_url, writerId="nightly-load", writerVersion="44")
    append(sample(spark, 5, start=900), log_url, writerId="backfill", writerVersion="0")
    assert (txn_version(log_url, "nightly-load"), txn_version(log_url, "backfill")) == (44, 0)
    assert read(spark, log_url).count() == 155
    manifest = LogReader(open_store(log_url)).manifest()
    assert manifest.writer == "wal3-spark batch backfill"
    check_log(log_url)


def test_01_bad_writer_options_fail_before_writing(spark, log_url):
    with pytest.raises(Exception, match="needs both writerId and writerVersion"):
        append(sample(spark, 10), log_url, writerId="nightly-load")
    with pytest.raises(Exception, match="writerVersion='-3': expected an integer >= 0"):
        append(sample(spark, 10), log_url, writerId="nightly-load", writerVersion="-3")
    assert not open_store(log_url).exists("manifest/MANIFEST")


def test_02_foreach_batch_pipeline_restarted_mid_way_is_exactly_once(spark, log_url, tmp_path):
    """The batch function crashes right after its sink write committed batch 1: Spark replays
    batch 1 on restart, and the sink skips it instead of appending it twice."""
    source, sink, ckpt = log_url, log_url + "-sink", tmp_path / "ckpt"
    crashed = tmp_path / "crashed"
    for i in range(3):
        append(sample(spark, 100, start=100 * i, parts=1), source)

    def to_sink(batch, batch_id: int) -> None:
        (batch.drop("_offset", "_timestamp").write.format("wal3").mode("append")
         .option("writerId", "orders-pipeline").option("writerVersion", batch_id).save(sink))
        if batch_id == 1 and not crashed.exists():
            crashed.touch()
            raise RuntimeError("crash after the sink committed batch 1")

    def run() -> None:
        q = (spark.readStream.format("wal3").option("maxRecordsPerTrigger", "100").load(source)
             .writeStream.foreachBatch(to_sink).option("checkpointLocation", str(ckpt))
             .trigger(availableNow=True).start())
        q.awaitTermination(240)
        if q.exception():
            raise q.exception()

    with pytest.raises(Exception, match="crash after the sink committed batch 1"):
        run()
    assert read(spark, sink).count() == 200 and txn_version(sink, "orders-pipeline") == 1
    append(sample(spark, 100, start=300, parts=1), source)
    run()  # replays batch 1 (skipped by the sink), then 2 and 3
    ids = [r.id for r in read(spark, sink).select("id").collect()]
    assert sorted(ids) == list(range(400))
    assert txn_version(sink, "orders-pipeline") == 3
    assert stored_fragments(sink) == referenced_fragments(sink)
    check_log(sink)
