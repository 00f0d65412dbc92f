"""Streaming source on local[2,4]: admission control, AvailableNow, restarts, cursor, errors."""

from __future__ import annotations

import json

import pytest

from tests.spark.test_08_batch import (
    append,
    corrupt_fragment,
    gc_first_fragment,
    sample,
)
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.reader import LogReader
from wal3_spark.storage import open_store

pytestmark = pytest.mark.timeout(300)


def stream(spark, url: str, **options):
    return spark.readStream.format("wal3").options(**options).load(url)


def run_available_now(spark, url, ckpt, sink, **options):
    """Run one AvailableNow query into a Parquet sink; return its progress list."""
    q = (
        stream(spark, url, **options).writeStream.format("parquet")
        .option("checkpointLocation", str(ckpt)).option("path", str(sink))
        .trigger(availableNow=True).start()
    )
    q.awaitTermination(240)
    assert not q.isActive
    if q.exception():
        raise q.exception()
    return q.recentProgress


def start_to_parquet(spark, url, ckpt, out, **options):
    """A continuous query from the log into Parquet files (restartable on its checkpoint)."""
    return (
        stream(spark, url, **options).writeStream.format("parquet")
        .option("checkpointLocation", str(ckpt)).option("path", str(out)).start()
    )


def sink_rows(spark, sink):
    return spark.read.parquet(str(sink)).collect()


def test_00_max_records_per_trigger_bounds_batches_and_available_now_stops(spark, log_url, tmp_path):
    append(sample(spark, 1000, parts=2), log_url)
    progress = run_available_now(spark, log_url, tmp_path / "ckpt", tmp_path / "out",
                                 maxRecordsPerTrigger="300")
    sizes = [p["numInputRows"] for p in progress if p["numInputRows"]]
    assert sizes == [300, 300, 300, 100]
    rows = sink_rows(spark, tmp_path / "out")
    assert sorted(r._offset for r in rows) == list(range(1, 1001))
    assert sorted(r.id for r in rows) == list(range(1000))


def test_01_max_fragments_and_bytes_per_trigger(spark, log_url, tmp_path):
    for i in range(5):
        append(sample(spark, 100, start=100 * i, parts=1), log_url)
    progress = run_available_now(spark, log_url, tmp_path / "c1", tmp_path / "o1",
                                 maxFragmentsPerTrigger="2")
    assert [p["numInputRows"] for p in progress if p["numInputRows"]] == [200, 200, 100]
    progress = run_available_now(spark, log_url, tmp_path / "c2", tmp_path / "o2",
                                 maxBytesPerTrigger="1")  # always at least one fragment
    assert [p["numInputRows"] for p in progress if p["numInputRows"]] == [100] * 5
    assert len(sink_rows(spark, tmp_path / "o2")) == 500


def test_02_restart_from_checkpoint_delivers_every_record_once(spark, log_url, tmp_path):
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    append(sample(spark, 500), log_url)

    def start():
        return start_to_parquet(spark, log_url, ckpt, out, maxRecordsPerTrigger="200", cursor="consumer")

    q = start()
    q.processAllAvailable()
    q.stop()
    append(sample(spark, 300, start=500), log_url)
    q = start()  # a fresh query on the same checkpoint
    q.processAllAvailable()
    append(sample(spark, 200, start=800), log_url)
    q.processAllAvailable()
    q.stop()
    rows = sink_rows(spark, out)
    assert sorted(r.id for r in rows) == list(range(1000))
    assert sorted(r._offset for r in rows) == list(range(1, 1001))
    # the cursor trails the checkpoint by at most one batch, and pins what is unread
    cursor = CursorStore(open_store(log_url)).get("consumer")
    assert cursor is not None and 801 <= cursor.cursor.offset <= 1001


def test_03_starting_offsets_latest_and_offset(spark, log_url, tmp_path):
    append(sample(spark, 100), log_url)
    run_available_now(spark, log_url, tmp_path / "c1", tmp_path / "o1", startingOffsets="latest")
    assert not (tmp_path / "o1").exists() or len(sink_rows(spark, tmp_path / "o1")) == 0
    run_available_now(spark, log_url, tmp_path / "c2", tmp_path / "o2", startingOffsets="91")
    assert sorted(r._offset for r in sink_rows(spark, tmp_path / "o2")) == list(range(91, 101))


def test_04_garbage_collected_start_fails_or_skips(spark, log_url, tmp_path):
    append(sample(spark, 10, parts=1), log_url)
    append(sample(spark, 10, start=10, parts=1), log_url)
    start, limit = gc_first_fragment(log_url)
    with pytest.raises(Exception) as info:
        run_available_now(spark, log_url, tmp_path / "c1", tmp_path / "o1", startingOffsets="1")
    assert f"offsets [1, {limit})" in str(info.value)
    run_available_now(spark, log_url, tmp_path / "c2", tmp_path / "o2", startingOffsets="1",
                      failOnDataLoss="false")
    assert sorted(r._offset for r in sink_rows(spark, tmp_path / "o2")) == list(range(limit, 21))


def test_05_corrupted_fragment_fails_the_stream_naming_it(spark, log_url, tmp_path):
    append(sample(spark, 50, parts=1), log_url)
    store = open_store(log_url)
    ref = LogReader(store).manifest().fragments[0]
    corrupt_fragment(store, ref.path)
    with pytest.raises(Exception) as info:
        run_available_now(spark, log_url, tmp_path / "c", tmp_path / "o")
    # the writer recorded the fragment's digest: the read checks it and names the fragment
    assert ref.path in str(info.value) and "do not match their blake3" in str(info.value)


def test_06_missing_log_fails_the_stream(spark, log_url):
    with pytest.raises(Exception, match="no wal3 log at"):
        stream(spark, log_url).writeStream.format("console").start().stop()


def test_07_stream_unknown_option(spark, log_url):
    append(sample(spark, 5), log_url)
    with pytest.raises(Exception, match=r"unknown option \(did you mean maxRecordsPerTrigger\?\)"):
        q = stream(spark, log_url, maxRowsPerTrigger="5").writeStream.format("noop").start()
        q.processAllAvailable()
        q.stop()


@pytest.mark.s3
def test_08_stream_with_cursor_on_s3(spark, request, tmp_path):
    seaweed = request.getfixturevalue("seaweed")
    url, options = seaweed.new_url("spark-stream"), dict(seaweed.options)
    append(sample(spark, 400), url, **options)
    progress = run_available_now(spark, url, tmp_path / "c", tmp_path / "o", cursor="s3_reader",
                                 maxRecordsPerTrigger="150", **options)
    assert [p["numInputRows"] for p in progress if p["numInputRows"]] == [150, 150, 100]
    assert sorted(r._offset for r in sink_rows(spark, tmp_path / "o")) == list(range(1, 401))
    cursor = CursorStore(open_store(url, options)).get("s3_reader")
    assert cursor is not None and cursor.cursor.offset in (301, 401)


def test_09_gc_below_the_cursor_then_the_stream_continues_without_loss(spark, log_url, tmp_path):
    """The consumer's cursor pins the log: GC removes only what lies wholly below it, and the
    restarted query (its checkpoint is at or past the cursor) loses and repeats nothing."""
    from wal3_spark.ops.garbage_collector import GCOptions, collect_garbage

    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    for i in range(4):
        append(sample(spark, 100, start=100 * i, parts=1), log_url)

    def start():
        return start_to_parquet(spark, log_url, ckpt, out, maxRecordsPerTrigger="100", cursor="billing")

    q = start()
    q.processAllAvailable()
    q.stop()
    cursor = CursorStore(open_store(log_url)).get("billing").cursor.offset
    report = collect_garbage(log_url, GCOptions(grace_s=0, force=True))
    oldest = LogReader(open_store(log_url)).bounds()[0]
    assert 1 < oldest <= cursor, (oldest, cursor, report)
    append(sample(spark, 100, start=400, parts=1), log_url)
    q = start()
    q.processAllAvailable()
    q.stop()
    rows = sink_rows(spark, out)
    assert sorted(r._offset for r in rows) == list(range(1, 501))
    assert sorted(r.id for r in rows) == list(range(500))


def batch_sizes(query) -> list[int]:
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def test_10_min_records_per_trigger_holds_small_batches_back(spark, log_url, tmp_path):
    """Below minRecordsPerTrigger the source offers no new batch (maxTriggerDelay is an hour,
    far beyond this test), so 200 new records wait and go out with the next 400."""
    append(sample(spark, 300, parts=1), log_url)
    q = start_to_parquet(spark, log_url, tmp_path / "ckpt", tmp_path / "out",
                         minRecordsPerTrigger="500", maxTriggerDelay="1h", maxRecordsPerTrigger="700")
    try:
        q.processAllAvailable()  # a run's first batch is not held back (as Kafka's)
        append(sample(spark, 200, start=300, parts=1), log_url)
        q.processAllAvailable()
        assert batch_sizes(q) == [300]
        append(sample(spark, 400, start=500, parts=1), log_url)
        q.processAllAvailable()
        assert batch_sizes(q) == [300, 600]
    finally:
        q.stop()
    assert sorted(r._offset for r in sink_rows(spark, tmp_path / "out")) == list(range(1, 901))


def test_11_available_now_ignores_min_records_per_trigger(spark, log_url, tmp_path):
    append(sample(spark, 300, parts=1), log_url)
    progress = run_available_now(spark, log_url, tmp_path / "ckpt", tmp_path / "out",
                                 minRecordsPerTrigger="250", maxRecordsPerTrigger="250",
                                 maxTriggerDelay="1h")
    assert [p["numInputRows"] for p in progress if p["numInputRows"]] == [250, 50]


def test_12_progress_reports_the_tail_and_the_offsets_behind_it(spark, log_url, tmp_path, caplog):
    """Every progress carries the log's tail as latestOffset; offsets_behind turns a progress into
    the records still to read, and LagLogger logs it at every progress."""
    import logging

    from wal3_spark.spark import LagLogger, offsets_behind

    append(sample(spark, 1000, parts=2), log_url)
    listener = LagLogger()
    spark.streams.addListener(listener)
    try:
        with caplog.at_level(logging.INFO, logger="wal3_spark.spark.query_lag"):
            progress = run_available_now(spark, log_url, tmp_path / "ckpt", tmp_path / "out",
                                         maxRecordsPerTrigger="300")
            spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty()
    finally:
        spark.streams.removeListener(listener)
    batches = [p for p in progress if p["numInputRows"]]
    assert [json.loads(p["sources"][0]["latestOffset"])["offset"] for p in batches] == [1001] * 4
    assert [offsets_behind(p) for p in batches] == [700, 400, 100, 0]
    logged = [r.getMessage() for r in caplog.records if r.name == "wal3_spark.spark.query_lag"]
    assert any("700 records behind the log's tail (read up to offset 301 of 1001)" in m for m in logged)
    assert any("0 records behind" in m for m in logged)
