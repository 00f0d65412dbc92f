"""Kafka's and Delta's option names, parsed without Spark: an alias is the wal3 option of the
same meaning (and reaches Spark as its limit), fails as that option would naming both, an option
with no wal3 twin names what to use instead, and Kafka's secrets never show."""

from __future__ import annotations

import pyarrow as pa
import pytest

from wal3_spark.errors import InvalidOption
from wal3_spark.spark import options as opts
from wal3_spark.storage import open_store


@pytest.mark.parametrize("alias, value, role, field, expected", [
    ("maxOffsetsPerTrigger", "500", opts.STREAM_READ, "max_records", 500),  # Kafka
    ("MINOFFSETSPERTRIGGER", "50", opts.STREAM_READ, "min_records", 50),  # Kafka, any case
    ("maxFilesPerTrigger", "7", opts.STREAM_READ, "max_fragments", 7),  # Delta
    ("txnAppId", "nightly", opts.WRITE, "writer_id", "nightly"),  # Delta's idempotent writes
    ("txnAppId", "pipeline", opts.STREAM_WRITE, "writer_id", "pipeline"),
])
def test_00_kafka_and_delta_names_are_the_wal3_options_of_the_same_meaning(alias, value, role, field,
                                                                           expected):
    given = {"path": "/x", alias: value}
    if field == "min_records":
        given["maxTriggerDelay"] = "30s"  # Kafka's companion option, the same name here
    if role == opts.WRITE:
        given["txnVersion"] = "3"
    parsed = opts.parse(given, role)
    assert getattr(parsed, field) == expected
    canonical = {k.lower(): k for k in opts.ALIASES}
    wal3 = {opts.ALIASES.get(canonical.get(k.lower(), k), k): v for k, v in given.items()}
    assert parsed == opts.parse(wal3, role)
    if role == opts.WRITE:
        assert parsed.writer_version == 3


def test_01_an_alias_reaches_spark_as_the_wal3_limit():
    from pyspark.sql.streaming.datasource import ReadMaxFiles, ReadMaxRows

    from wal3_spark.log.reader import LogReader
    from wal3_spark.log.writer import LogWriter
    from wal3_spark.spark.schemas import payload_to_spark
    from wal3_spark.spark.stream_reader import Wal3StreamReader

    url = "memory://units-aliases"
    LogWriter(open_store(url)).append(pa.table({"id": pa.array(range(4), pa.int64())}))
    schema = payload_to_spark(LogReader(open_store(url)).manifest().arrow_schema())

    def limit(**options):
        return Wal3StreamReader(opts.parse({"path": url, **options}, opts.STREAM_READ),
                                schema).getDefaultReadLimit()

    rows = limit(maxOffsetsPerTrigger="25")
    assert isinstance(rows, ReadMaxRows) and rows.max_rows == 25
    files = limit(maxFilesPerTrigger="3")
    assert isinstance(files, ReadMaxFiles) and files.max_files == 3


@pytest.mark.parametrize("options, role, match", [
    ({"maxOffsetsPerTrigger": "0"}, opts.STREAM_READ,
     r"maxOffsetsPerTrigger \(wal3's maxRecordsPerTrigger\)='0': expected a positive integer"),
    ({"maxOffsetsPerTrigger": "10", "maxRecordsPerTrigger": "20"}, opts.STREAM_READ,
     "they are the same option, set one"),
    ({"maxFilesPerTrigger": "10"}, opts.READ, r"maxFilesPerTrigger \(wal3's maxFragmentsPerTrigger\).*"
     "does not apply to batch reads"),
    ({"txnVersion": "3"}, opts.WRITE, "needs both writerId and writerVersion; add writerId"),
    ({"txnAppId": "a", "txnVersion": "3"}, opts.STREAM_WRITE, "does not apply to streaming writes"),
])
def test_02_aliases_fail_as_their_wal3_option_would_naming_both(options, role, match):
    with pytest.raises(InvalidOption, match=match):
        opts.parse({"path": "/x", "checkpointLocation": "/c", **options}
                   if role == opts.STREAM_WRITE else {"path": "/x", **options}, role)


@pytest.mark.parametrize("name, value, role, instead", [
    ("subscribe", "orders", opts.STREAM_READ, "Kafka's option, not wal3's: .* load\\(prefix\\) with logs=a,b,c"),
    ("subscribePattern", "orders-.*", opts.READ, "logs=<glob>"),
    ("assign", '{"orders": [0]}', opts.STREAM_READ, "no partitions"),
    ("startingOffsetsByTimestamp", '{"orders": {"0": 1000}}', opts.STREAM_READ, "use startingTimestamp"),
    ("endingOffsetsByTimestamp", '{"orders": {"0": 1000}}', opts.READ, "use endingTimestamp"),
    ("kafka.bootstrap.servers", "host:9092", opts.STREAM_READ, "wal3 has no broker"),
    ("kafka.group.id", "billing", opts.STREAM_READ, "cursor=<name>"),
    ("groupIdPrefix", "billing", opts.STREAM_READ, "cursor=<name>"),
    ("includeHeaders", "true", opts.STREAM_READ, "no headers"),
    ("topic", "orders", opts.WRITE, "save\\(url\\).*logColumn"),
    ("startingVersion", "12", opts.STREAM_READ, "Delta's option, not wal3's: .*startingOffsets"),
    ("ignoreChanges", "true", opts.STREAM_READ, "append-only"),
    ("ignoreDeletes", "true", opts.STREAM_READ, "append-only"),
    ("skipChangeCommits", "true", opts.STREAM_READ, "append-only"),
    ("readChangeFeed", "true", opts.READ, "readStream"),
    ("overwriteSchema", "true", opts.WRITE, "mergeSchema=true"),
    ("replaceWhere", "id > 1", opts.WRITE, "append-only"),
])
def test_03_kafka_and_delta_options_without_a_wal3_twin_name_what_to_use(name, value, role, instead):
    with pytest.raises(InvalidOption, match=instead) as info:
        opts.parse({"path": "/x", name: value}, role)
    assert f"wal3 option {name}=" in str(info.value) and "Valid options for" in str(info.value)


def test_04_kafka_secrets_are_never_shown():
    jaas = 'org.apache.kafka.common.security.plain.PlainLoginModule required password="hunter2";'
    with pytest.raises(InvalidOption, match="wal3 has no broker") as info:
        opts.parse({"path": "/x", "kafka.sasl.jaas.config": jaas}, opts.STREAM_READ)
    assert "hunter2" not in str(info.value)


def test_05_kafkas_per_partition_json_for_starting_offsets_says_what_wal3_takes():
    with pytest.raises(InvalidOption, match=r"Kafka's per-topic, per-partition form.*\{\"offset\": 42\}"):
        opts.parse({"path": "/x", "startingOffsets": '{"orders": {"0": 23, "1": -2}}'}, opts.STREAM_READ)
    # what both take: earliest, latest, and wal3's own JSON position
    assert opts.parse({"path": "/x", "startingOffsets": '{"offset": 23}'}, opts.STREAM_READ).starting == ("offset", 23)
    assert opts.parse({"path": "/x", "startingOffsets": "latest"}, opts.STREAM_READ).starting == ("latest", 0)
    # Delta's date form of startingTimestamp
    assert opts.parse({"path": "/x", "startingTimestamp": "2019-01-01"}, opts.STREAM_READ).starting == (
        "timestamp", 1546300800 * 1_000_000)
