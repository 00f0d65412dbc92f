"""Kafka's backlog figures for wal3 sources, from Spark's progress: the sources report the log's
tail and the bytes left after the batch planned (`reportLatestOffset`, the one hook PySpark 4.3
gives a Python source), and `install_lag_listener` turns each progress into
`minOffsetsBehindLatest`, `maxOffsetsBehindLatest`, `avgOffsetsBehindLatest` and
`estimatedTotalBytesBehindLatest`, logged and published to a Prometheus registry, per query and
source and, for log sets, per log. Real streams on the session's SparkSession."""

from __future__ import annotations

import json
import logging

import pyarrow as pa
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from wal3_spark.log.cursor_lag import bytes_from
from wal3_spark.log.reader import LogReader
from wal3_spark.log.writer import LogWriter
from wal3_spark.spark import install_lag_listener
from wal3_spark.storage import open_store


def append_batches(url: str, batches: int, size: int) -> None:
    """`batches` commits of `size` records each: one fragment per commit."""
    with LogWriter(open_store(url)) as writer:
        for i in range(batches):
            writer.append(pa.table({"id": pa.array(range(i * size, (i + 1) * size), pa.int64())}))


def scrape(registry: CollectorRegistry) -> dict[tuple[str, tuple], float]:
    from prometheus_client import generate_latest

    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


class Recorder:
    """Scrapes `registry` at every progress the listener has handled (the listener forgets a
    query when it terminates, as a gauge of a stopped query should go)."""

    def __init__(self, listener, registry: CollectorRegistry) -> None:
        self.scrapes: list[dict] = []
        handle = listener.onQueryProgress

        def recording(event) -> None:
            handle(event)
            self.scrapes.append(scrape(registry))

        listener.onQueryProgress = recording


def run(spark, query, tmp_path, reader):
    q = (reader.writeStream.format("noop").queryName(query)
         .option("checkpointLocation", str(tmp_path / f"ckpt-{query}")).trigger(availableNow=True).start())
    q.awaitTermination(240)
    assert not q.isActive and q.exception() is None, q.exception()
    spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty()
    return [p for p in q.recentProgress if p["numInputRows"]]


def test_00_a_log_reports_kafkas_figures_per_batch(spark, tmp_path, caplog):
    url = str(tmp_path / "orders")
    append_batches(url, 10, 100)  # fragments of 100 records: the bytes behind are whole fragments
    manifest = LogReader(open_store(url)).manifest()
    registry = CollectorRegistry()
    listener = install_lag_listener(spark, registry)
    recorder = Recorder(listener, registry)
    try:
        with caplog.at_level(logging.INFO, logger="wal3_spark.spark.query_lag"):
            batches = run(spark, "orders_backlog", tmp_path,
                          spark.readStream.format("wal3").option("maxRecordsPerTrigger", "300").load(url))
    finally:
        spark.streams.removeListener(listener)
    ends = [json.loads(p["sources"][0]["endOffset"])["offset"] for p in batches]
    assert ends == [301, 601, 901, 1001]
    expected = [(1001 - end, bytes_from(open_store(url), manifest, end)) for end in ends]
    assert [e[0] for e in expected] == [700, 400, 100, 0] and expected[0][1] == sum(
        f.num_bytes for f in manifest.fragments[3:])
    # the source reports the bytes left in its progress
    assert [json.loads(p["sources"][0]["latestOffset"])["bytes_behind"] for p in batches] == [e[1] for e in expected]
    # the registry, scraped at each progress: one source, one log
    labels = (("query", "orders_backlog"), ("source", "0"))
    seen = [(s[("wal3_spark_max_offsets_behind_latest", labels)],
             s[("wal3_spark_estimated_total_bytes_behind_latest", labels)]) for s in recorder.scrapes
            if ("wal3_spark_max_offsets_behind_latest", labels) in s]
    assert seen[-len(expected):] == [(float(r), float(b)) for r, b in expected]
    assert all(s[("wal3_spark_min_offsets_behind_latest", labels)] == s[("wal3_spark_avg_offsets_behind_latest", labels)]
               == s[("wal3_spark_max_offsets_behind_latest", labels)] for s in recorder.scrapes if s)
    assert not any(k[0] == "wal3_spark_log_offsets_behind_latest" for s in recorder.scrapes for k in s)
    logged = [r.getMessage() for r in caplog.records if r.name == "wal3_spark.spark.query_lag"]
    assert any("700 records behind" in m and "maxOffsetsBehindLatest 700" in m
               and f"estimatedTotalBytesBehindLatest {expected[0][1]}" in m for m in logged), logged
    # a terminated query's gauges go
    assert "orders_backlog" not in listener.latest
    assert ("wal3_spark_max_offsets_behind_latest", labels) not in scrape(registry)


def test_01_a_log_set_reports_per_log_and_over_its_logs(spark, tmp_path):
    prefix = (tmp_path / "set").as_uri()
    sizes = {"hot": 900, "warm": 300, "cold": 30}
    for name, n in sizes.items():
        append_batches(f"{prefix}/{name}", n // 30, 30)
    registry = CollectorRegistry()
    listener = install_lag_listener(spark, registry)
    recorder = Recorder(listener, registry)
    try:
        batches = run(spark, "tenants_backlog", tmp_path,
                      spark.readStream.format("wal3").option("logs", "*")
                      .option("maxRecordsPerTrigger", "200").load(prefix))
    finally:
        spark.streams.removeListener(listener)
    assert sum(p["numInputRows"] for p in batches) == sum(sizes.values())
    first = batches[0]["sources"][0]
    ends = json.loads(first["endOffset"])["logs"]
    latest = json.loads(first["latestOffset"])
    assert latest["logs"] == {name: n + 1 for name, n in sizes.items()}
    behind = {name: n + 1 - ends[name] for name, n in sizes.items()}
    assert sum(behind.values()) == 1230 - 200  # the known backlog after a first batch of 200
    manifests = {n: LogReader(open_store(f"{prefix}/{n}")).manifest() for n in sizes}
    bytes_behind = {n: bytes_from(open_store(f"{prefix}/{n}"), manifests[n], ends[n]) for n in sizes}
    assert {n: latest["bytes_behind"].get(n, 0) for n in sizes} == bytes_behind
    scraped = next(s for s in recorder.scrapes if s)
    labels = (("query", "tenants_backlog"), ("source", "0"))
    assert scraped[("wal3_spark_min_offsets_behind_latest", labels)] == min(behind.values())
    assert scraped[("wal3_spark_max_offsets_behind_latest", labels)] == max(behind.values())
    assert scraped[("wal3_spark_avg_offsets_behind_latest", labels)] == sum(behind.values()) / 3
    assert scraped[("wal3_spark_estimated_total_bytes_behind_latest", labels)] == sum(bytes_behind.values())
    for name in sizes:
        log_labels = (("log", name), ("query", "tenants_backlog"), ("source", "0"))
        assert scraped[("wal3_spark_log_offsets_behind_latest", log_labels)] == behind[name]
        assert scraped[("wal3_spark_log_bytes_behind_latest", log_labels)] == bytes_behind[name]
    last = next(s for s in reversed(recorder.scrapes) if s)
    assert last[("wal3_spark_max_offsets_behind_latest", labels)] == 0
    assert last[("wal3_spark_estimated_total_bytes_behind_latest", labels)] == 0


def test_02_kafka_metrics_are_kafkas_strings():
    """No Spark: a progress's offsets as the sources report them give Kafka's figures, the
    average unrounded as Kafka's source prints it (a Scala Double), over every log of a set,
    those with nothing left to read included (as Kafka's over every partition)."""
    from wal3_spark.spark.query_lag import source_backlogs

    progress = {"sources": [{
        "description": "wal3 set", "endOffset": json.dumps({"logs": {"a": 11, "b": 5, "c": 4}}),
        "latestOffset": json.dumps({"logs": {"a": 11, "b": 6, "c": 4}, "bytes_behind": {"b": 900}}),
    }]}
    [backlog] = source_backlogs(progress)
    assert backlog.kafka_metrics() == {
        "minOffsetsBehindLatest": "0", "maxOffsetsBehindLatest": "1",
        "avgOffsetsBehindLatest": "0.3333333333333333", "estimatedTotalBytesBehindLatest": "900",
    }
