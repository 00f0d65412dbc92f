"""Stream filters through format("wal3") on local[2,4]: the sink's filterColumn gives every
fragment a filter; filterColumn/filterValues (batch and stream, pushdown off as the project
ships) and pushed `=`/`IN` filters (pushdown on) plan only the fragments that may hold the
values; rows are exact. Fragments planned are counted as input partitions (maxPartitionBytes=1:
one per fragment), since executors' GETs happen in other processes."""

from __future__ import annotations

import json

import pytest
from pyspark.sql import functions as F

from tests.support.spark import filter_pushdown
from tests.spark.test_08_batch import append, read
from tests.spark.test_09_stream_read import run_available_now, sink_rows
from wal3_spark.format.layout import MANIFEST_KEY
from wal3_spark.storage import open_store

pytestmark = pytest.mark.timeout(300)

TENANTS = 20


def multiplexed(spark, url: str, **options) -> None:
    """20 appends of one fragment each; append f holds tenants t{f} and t{(f+1) % 20}: every
    tenant is in 2 of the 20 fragments."""
    for f in range(TENANTS):
        df = spark.range(f * 100, f * 100 + 10, numPartitions=1).select(
            F.col("id"),
            F.when(F.col("id") % 2 == 0, F.lit(f"t{f}"))
            .otherwise(F.lit(f"t{(f + 1) % TENANTS}")).alias("tenant"),
        )
        append(df, url, **options)


def expected_ids(tenants: set[str]) -> list[int]:
    ids = []
    for f in range(TENANTS):
        for i in range(f * 100, f * 100 + 10):
            tenant = f"t{f}" if i % 2 == 0 else f"t{(f + 1) % TENANTS}"
            if tenant in tenants:
                ids.append(i)
    return sorted(ids)


def test_01_batch_option_reads_one_tenant_from_few_fragments(spark, log_url):
    multiplexed(spark, log_url, filterColumn="tenant")
    entries = json.loads(open_store(log_url).get(MANIFEST_KEY).data)["fragments"]
    assert len(entries) == TENANTS and all(e["filter"]["column"] == "tenant" for e in entries)
    df = read(spark, log_url, filterColumn="tenant", filterValues="t3", maxPartitionBytes="1")
    assert df.rdd.getNumPartitions() <= 3  # 2 fragments hold t3; a false positive at most
    rows = df.collect()
    assert sorted(r.id for r in rows) == expected_ids({"t3"})
    assert {r.tenant for r in rows} == {"t3"}
    # every query of that DataFrame reads the same rows (the option is part of its definition)
    assert df.count() == len(expected_ids({"t3"}))
    several = read(spark, log_url, filterColumn="tenant", filterValues='["t3", "t11"]')
    assert sorted(r.id for r in several.collect()) == expected_ids({"t3", "t11"})
    assert read(spark, log_url, maxPartitionBytes="1").rdd.getNumPartitions() == TENANTS


def test_02_pushdown_skips_fragments_for_where_and_in(spark, log_url):
    multiplexed(spark, log_url, filterColumn="tenant")

    def planned(condition):
        df = read(spark, log_url, maxPartitionBytes="1")  # a fresh DataFrame per query
        with filter_pushdown(spark):
            filtered = df.where(condition)
            return filtered.rdd.getNumPartitions(), sorted(r.id for r in filtered.collect())

    parts, ids = planned(F.col("tenant") == "t5")
    assert parts <= 3 and ids == expected_ids({"t5"})
    parts, ids = planned(F.col("tenant").isin("t5", "t6"))
    assert parts <= 5 and ids == expected_ids({"t5", "t6"})
    parts, ids = planned(F.col("id") == 5)  # a column without filters: every fragment
    assert parts == TENANTS and ids == [5]


def test_03_stream_reads_one_tenant(spark, log_url, tmp_path):
    multiplexed(spark, log_url, filterColumn="tenant")
    run_available_now(spark, log_url, tmp_path / "ckpt", tmp_path / "out",
                      filterColumn="tenant", filterValues="t7")
    assert sorted(r.id for r in sink_rows(spark, tmp_path / "out")) == expected_ids({"t7"})


def test_04_fragments_written_without_filters_are_read(spark, log_url):
    append(spark.range(0, 5, numPartitions=1).select("id", F.lit("t3").alias("tenant")), log_url)
    multiplexed(spark, log_url, filterColumn="tenant")
    df = read(spark, log_url, filterColumn="tenant", filterValues="t3")
    assert sorted(r.id for r in df.collect()) == sorted([0, 1, 2, 3, 4] + expected_ids({"t3"}))


def test_05_errors(spark, log_url):
    df = spark.range(3).select("id", (F.col("id") * 0.5).alias("score"))
    with pytest.raises(Exception, match="filter column 'nope' is not a column"):
        append(df, log_url, filterColumn="nope")
    with pytest.raises(Exception, match="filter column 'score' is double"):
        append(df, log_url, filterColumn="score")
    append(df, log_url)
    with pytest.raises(Exception, match="needs filterColumn and filterValues"):
        read(spark, log_url, filterValues="1").collect()
    with pytest.raises(Exception, match="filter value 'x' for the int64 column 'id' is not an integer"):
        read(spark, log_url, filterColumn="id", filterValues="x").collect()


def test_06_options_parse():
    from wal3_spark.errors import InvalidOption
    from wal3_spark.spark.options import parse

    o = parse({"path": "/x", "filterColumn": "tenant", "filterValues": '["a,b", 7]'}, "read")
    assert (o.filter_column, o.filter_values) == ("tenant", ("a,b", 7))
    assert parse({"path": "/x", "filterColumn": "t", "filterValues": "acme"}, "streamRead").filter_values == ("acme",)
    assert parse({"path": "/x", "filterColumn": "tenant"}, "write").filter_column == "tenant"
    assert parse({"path": "/x", "filterColumn": "t", "filterValues": "a", "logs": "*"},
                 "read").filter_values == ("a",)
    with pytest.raises(InvalidOption, match="JSON array"):
        parse({"path": "/x", "filterColumn": "t", "filterValues": "[1.5]"}, "read")
    with pytest.raises(InvalidOption, match="does not apply"):
        parse({"path": "/x", "filterValues": "a"}, "write")


def test_07_log_sets(spark, tmp_path):
    """A log set read with filterValues: each log's fragments skipped by their filters, a log
    without the column left out, rows exact; the routing sink writes filters too."""
    prefix = (tmp_path / "set").as_uri()
    multiplexed(spark, f"{prefix}/a", filterColumn="tenant")
    routed = spark.range(0, 6, numPartitions=1).select(
        "id", F.lit("t3").alias("tenant"), F.lit("b").alias("log"))
    append(routed, prefix, logColumn="log", filterColumn="tenant")
    append(spark.range(0, 4, numPartitions=1).select("id"), f"{prefix}/c")  # no tenant column
    assert json.loads(open_store(f"{prefix}/b").get(MANIFEST_KEY).data)["fragments"][0]["filter"]
    df = read(spark, prefix, logs="*", filterColumn="tenant", filterValues="t3",
              maxPartitionBytes="1")
    assert df.rdd.getNumPartitions() <= 4  # 2 of a's 20 fragments (1 false positive at most), b's 1
    rows = df.collect()
    assert sorted((r._log, r.id) for r in rows) == sorted(
        [("a", i) for i in expected_ids({"t3"})] + [("b", i) for i in range(6)])
    with filter_pushdown(spark):
        pushed = read(spark, prefix, logs="*", maxPartitionBytes="1").where(F.col("tenant") == "t3")
        assert pushed.rdd.getNumPartitions() <= 5  # and c's one fragment: its rows are null there
        assert sorted(r.id for r in pushed.collect()) == sorted(expected_ids({"t3"}) + list(range(6)))
    run_available_now(spark, prefix, tmp_path / "ckpt", tmp_path / "out", logs="*",
                      filterColumn="tenant", filterValues="t3")
    assert sorted(r.id for r in sink_rows(spark, tmp_path / "out")) == sorted(
        expected_ids({"t3"}) + list(range(6)))


def test_08_native_scan(spark, log_url):
    """Wal3Log.toDF with filterColumn/filterValues lists only the fragments the stream filters
    let through, and Spark keeps exactly the matching rows."""
    from wal3_spark.spark import Wal3Log

    multiplexed(spark, log_url, filterColumn="tenant")
    df = Wal3Log.forPath(spark, log_url).toDF(filterColumn="tenant", filterValues='["t4"]')
    assert len(df.inputFiles()) <= 3  # 2 fragments hold t4; a false positive at most
    rows = df.collect()
    assert sorted(r.id for r in rows) == expected_ids({"t4"}) and {r.tenant for r in rows} == {"t4"}
    assert len(Wal3Log.forPath(spark, log_url).toDF().inputFiles()) == TENANTS


def test_09_streaming_sink_writes_filters(spark, log_url, tmp_path):
    multiplexed(spark, log_url, filterColumn="tenant")
    sink = (tmp_path / "copy").as_uri()
    query = (spark.readStream.format("wal3").load(log_url).drop("_offset", "_timestamp")
             .writeStream.format("wal3").option("checkpointLocation", str(tmp_path / "ckpt"))
             .option("filterColumn", "tenant").trigger(availableNow=True).start(sink))
    query.awaitTermination(240)
    assert query.exception() is None
    entries = json.loads(open_store(sink).get(MANIFEST_KEY).data)["fragments"]
    assert entries and all(e["filter"]["column"] == "tenant" for e in entries)
    back = read(spark, sink, filterColumn="tenant", filterValues="t9")
    assert sorted(r.id for r in back.collect()) == expected_ids({"t9"})
