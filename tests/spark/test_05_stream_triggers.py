"""A streaming trigger's decisions, driven without a running query: when a batch waits for
minRecordsPerTrigger, and how many times one trigger reads the manifest."""

from __future__ import annotations

import pyarrow as pa

from wal3_spark.clock import ManualClock
from wal3_spark.spark import options as opts
from wal3_spark.storage import open_store


def test_00_min_records_per_trigger_waits_for_records_or_the_delay():
    """latestOffset under minRecordsPerTrigger + maxTriggerDelay, driven by an injected clock:
    a batch waits for the minimum, never longer than the delay since the last batch; the max
    limits still cap it; AvailableNow and Trigger.Once (ReadAllAvailable) ignore the minimum."""
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxRows,
        ReadMinRows,
    )

    from wal3_spark.log.reader import LogReader
    from wal3_spark.log.writer import LogWriter
    from wal3_spark.spark.schemas import payload_to_spark
    from wal3_spark.spark.stream_reader import Wal3StreamReader

    url = "memory://units-min-records"
    writer = LogWriter(open_store(url))

    def append(n: int) -> None:
        writer.append(pa.table({"id": pa.array(range(n), pa.int64())}))

    append(4)  # offsets 1..4
    schema = payload_to_spark(LogReader(open_store(url)).manifest().arrow_schema())
    clock = ManualClock(monotonic=1000.0)

    def reader(**options):
        parsed = opts.parse({"path": url, "minRecordsPerTrigger": "10", **options}, opts.STREAM_READ)
        return Wal3StreamReader(parsed, schema, clock=clock)

    r = reader(maxTriggerDelay="30s", maxRecordsPerTrigger="25")
    limit = r.getDefaultReadLimit()
    assert isinstance(limit, ReadMaxRows) and limit.max_rows == 25
    assert isinstance(reader().getDefaultReadLimit(), ReadMinRows)
    assert r.latestOffset({"offset": 1}, limit)["offset"] == 5  # a run's first batch: no wait
    append(3)
    assert r.latestOffset({"offset": 5}, limit)["offset"] == 5  # 3 < 10: wait
    clock.advance(29.9)
    assert r.latestOffset({"offset": 5}, limit)["offset"] == 5  # still within the delay
    append(8)
    assert r.latestOffset({"offset": 5}, limit)["offset"] == 16  # 11 >= 10: go
    append(2)
    clock.advance(29.9)
    assert r.latestOffset({"offset": 16}, limit)["offset"] == 16
    clock.advance(0.1)  # 30 s since the last batch: go with what there is
    assert r.latestOffset({"offset": 16}, limit)["offset"] == 18
    append(40)
    assert r.latestOffset({"offset": 18}, limit)["offset"] == 43  # the maximum still caps it
    append(1)
    assert r.latestOffset({"offset": 58}, limit)["offset"] == 58
    assert r.latestOffset({"offset": 58}, ReadAllAvailable())["offset"] == 59  # Trigger.Once
    r.prepareForTriggerAvailableNow()
    assert r.latestOffset({"offset": 58}, limit)["offset"] == 59  # AvailableNow: no minimum


def test_01_a_stream_trigger_reads_the_manifest_once():
    """latestOffset, reportLatestOffset and partitions of one trigger share one manifest GET; a
    batch beyond that manifest (planned before a restart) reads a fresh one and plans it all."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from tests.support.fakes import CountingStore
    from wal3_spark.format.layout import MANIFEST_KEY
    from wal3_spark.log.reader import LogReader
    from wal3_spark.log.writer import LogWriter
    from wal3_spark.spark.schemas import payload_to_spark
    from wal3_spark.spark.stream_reader import Wal3StreamReader

    url = "memory://units-manifest-once"
    writer = LogWriter(open_store(url))
    for _ in range(3):
        writer.append(pa.table({"id": pa.array(range(4), pa.int64())}))  # [1,5) [5,9) [9,13)
    schema = payload_to_spark(LogReader(open_store(url)).manifest().arrow_schema())
    r = Wal3StreamReader(opts.parse({"path": url}, opts.STREAM_READ), schema)
    store = r._store = CountingStore(open_store(url))
    manifest_gets = lambda: store.counts[("get", MANIFEST_KEY.split("/")[0])]  # noqa: E731

    end = r.latestOffset({"offset": 1}, ReadAllAvailable())
    assert r.reportLatestOffset() == {**end, "bytes_behind": 0} and end["offset"] == 13  # read to the tail
    parts = r.partitions({"offset": 1}, end)
    assert [(x.start, x.limit) for p in parts for x in p.part.ranges] == [(1, 5), (5, 9), (9, 13)]
    assert manifest_gets() == 1

    writer.append(pa.table({"id": pa.array(range(4), pa.int64())}))  # [13,17)
    parts = r.partitions({"offset": 9}, {"offset": 17})
    assert [(x.start, x.limit) for p in parts for x in p.part.ranges] == [(9, 13), (13, 17)]
    assert manifest_gets() == 2
