"""The connector's plain functions, without Spark: options, packing, admission, task memory."""

from __future__ import annotations

from dataclasses import fields

import pyarrow as pa
import pytest

from wal3_spark.errors import InvalidOption
from wal3_spark.format.layout import FragmentRef
from wal3_spark.format.setsum import Setsum
from wal3_spark.log.fragment_io import ReadRange
from wal3_spark.spark import options as opts
from wal3_spark.spark.planning import pack
from wal3_spark.spark.stream_reader import admit
from wal3_spark.spark.write_tasks import write_partition
from wal3_spark.storage import open_store


def test_00_options_parse_case_insensitively_into_a_frozen_object():
    o = opts.parse({"path": "/tmp/x", "FRAGMENTBYTES": "8m", "mergeschema": "TRUE"}, opts.WRITE)
    assert (o.fragment_bytes, o.merge_schema) == (8 << 20, True)
    with pytest.raises(Exception):
        o.fragment_bytes = 1  # frozen
    r = opts.parse({"path": "/tmp/x", "startingOffsets": '{"offset": 42}', "endingoffsets": "50",
                    "verifyOnRead": "false", "failOnDataLoss": "false"}, opts.READ)
    assert r.starting == ("offset", 42) and r.ending == ("offset", 50)
    assert not r.verify_on_read and not r.fail_on_data_loss
    t = opts.parse({"path": "/tmp/x", "startingTimestamp": "1970-01-01T00:00:01Z"}, opts.STREAM_READ)
    assert t.starting == ("timestamp", 1_000_000)
    assert opts.parse({"path": "/x", "startingTimestamp": "1500"}, opts.READ).starting == ("timestamp", 1_500_000)


@pytest.mark.parametrize("options, match", [
    ({"nope": "1"}, "unknown option"),
    ({"maxPartitionBytes": "big"}, "expected a size"),
    ({"maxRecordsPerTrigger": "0"}, "does not apply"),
    ({"startingOffsets": "middle"}, "earliest or latest or an offset"),
    ({"startingOffsets": "0"}, "offsets start at 1"),
    ({"verifyOnRead": "maybe"}, "expected true or false"),
    ({"startingOffsets": "1", "startingTimestamp": "5"}, "not both"),
])
def test_01_bad_options_fail_with_the_valid_list(options, match):
    with pytest.raises(InvalidOption, match=match) as info:
        opts.parse({"path": "/tmp/x", **options}, opts.READ)
    assert "Valid options for batch reads" in str(info.value)
    assert "startingOffsets" in str(info.value) and "endpoint" in str(info.value)


def test_02_stream_read_cursor_name_is_checked():
    with pytest.raises(InvalidOption, match="letters, digits and underscores"):
        opts.parse({"path": "/tmp/x", "cursor": "bad name"}, opts.STREAM_READ)


def test_03_credentials_are_masked():
    o = opts.parse({"path": "s3://b/l", "secretAccessKey": "S3CR3T", "accessKeyId": "AKIA1",
                    "endpoint": "http://h:1"}, opts.READ)
    assert dict(o.store_options)["secretAccessKey"] == "S3CR3T"
    assert "S3CR3T" not in repr(o) and "AKIA1" not in repr(o) and "http://h:1" in repr(o)
    with pytest.raises(InvalidOption) as info:
        opts.parse({"path": "s3://b/l", "secretAccessKey": "S3CR3T", "x": "1"}, opts.READ)
    assert "S3CR3T" not in str(info.value)
    with pytest.raises(InvalidOption) as info:
        opts.parse({"path": "s3://b/l", "secretAccessKey": "S3CR3T", "writerId": "w"}, opts.WRITE)
    assert "S3CR3T" not in str(info.value)
    assert all(f"{f.name}=" in repr(o) for f in fields(o)), "repr shows every field"


def _ranges(sizes, records=10):
    out, start = [], 1
    for i, size in enumerate(sizes):
        ref = FragmentRef(f"log/{i}", f"u{i}", start, start + records, size, Setsum())
        out.append(ReadRange(ref, start, start + records))
        start += records
    return out


def test_04_pack_is_contiguous_balanced_and_bounded():
    mb = 1 << 20
    ranges = _ranges([20 * mb] * 8)
    parts = pack(ranges, 128 * mb, min_partitions=4)
    assert [len(p.ranges) for p in parts] == [2, 2, 2, 2]
    assert [r for p in parts for r in p.ranges] == ranges
    parts = pack(ranges, 30 * mb, min_partitions=1)
    assert len(parts) == 6 and all(sum(r.ref.num_bytes for r in p.ranges) <= 40 * mb for p in parts)
    # more partitions than cores: a multiple of the cores, so that no task runs alone at the end
    parts = pack(_ranges([42 * mb] * 8), 128 * mb, min_partitions=2)
    assert [len(p.ranges) for p in parts] == [2, 2, 2, 2]
    assert len(pack(_ranges([42 * mb] * 5), 128 * mb, min_partitions=2)) == 2
    assert len(pack(_ranges([42 * mb] * 3), 40 * mb, min_partitions=2)) == 3  # one per fragment
    tiny = _ranges([1000] * 50)
    assert len(pack(tiny, 128 * mb, min_partitions=8)) == 1  # below the open cost: one task
    assert pack([], 1, 1) == []


def test_05_admit_never_stalls_and_respects_limits():
    ranges = _ranges([100, 100, 100, 100])  # offsets 1..41, 10 records each
    assert admit(ranges, 1, 41, max_records=15) == 16
    assert admit(ranges, 1, 41, max_fragments=2) == 21
    assert admit(ranges, 1, 41, max_bytes=250) == 21
    assert admit(ranges, 1, 41, max_bytes=1) == 11  # at least one fragment
    assert admit(ranges, 1, 41, max_bytes=1000, max_records=5) == 6


def test_06_write_task_memory_is_bounded_by_fragment_bytes(tmp_path):
    """A task streaming 48 MB through write_partition never holds much more than 2x
    fragmentBytes in Arrow memory, whatever the partition size."""
    store = open_store((tmp_path / "log").as_uri())
    schema = pa.schema([pa.field("id", pa.int64(), False), pa.field("s", pa.string(), False)])
    fragment_bytes = 4 << 20
    peak = 0

    def batches():
        nonlocal peak
        for i in range(48):
            ids = pa.array(range(i * 20_000, (i + 1) * 20_000), pa.int64())
            s = pa.array([f"{j:040d}" for j in range(20_000)], pa.string())  # ~1 MB per batch
            yield pa.RecordBatch.from_arrays([ids, s], schema=schema)
            peak = max(peak, pa.total_allocated_bytes())

    base = pa.total_allocated_bytes()
    files = write_partition(store, batches(), schema, fragment_bytes)
    assert sum(f.records for f in files) == 48 * 20_000
    assert len(files) >= 3
    assert peak - base < 2.5 * fragment_bytes, (peak - base) / fragment_bytes


def test_07_a_read_keeps_the_query_schema_when_the_log_gained_a_column():
    """A stream fixes its schema when it starts; a later mergeSchema append adds a column.
    Batches must still come out in the query's schema, columns taken by name."""
    from wal3_spark.log.fragment_io import output_schema
    from wal3_spark.log.reader import LogReader
    from wal3_spark.log.writer import LogWriter
    from wal3_spark.spark.planning import Part
    from wal3_spark.spark.read_tasks import read_partition

    store = open_store("memory://units-evolving-schema")
    LogWriter(store).append(pa.table({"id": pa.array([1, 2], pa.int64()), "name": ["a", "b"]}))
    query_schema = output_schema(LogReader(store).manifest().arrow_schema())
    LogWriter(store, merge_schema=True).append(
        pa.table({"id": pa.array([3], pa.int64()), "score": [0.5], "name": ["c"]}))
    reader = LogReader(store)
    manifest = reader.manifest()
    batches = list(read_partition(store, Part(tuple(reader.plan())), manifest.arrow_schema(),
                                  query_schema, verify=True, item_hash=manifest.item_hash))
    table = pa.Table.from_batches(batches)
    assert table.schema == query_schema
    assert table.column("id").to_pylist() == [1, 2, 3]
    assert table.column("name").to_pylist() == ["a", "b", "c"]
    assert table.column("_offset").to_pylist() == [1, 2, 3]


def test_08_an_executor_reading_fragments_gc_deleted_after_planning_gets_the_collected_range(tmp_path):
    """The driver plans partitions from one manifest; GC collects before the tasks run."""
    from wal3_spark.errors import DataLost
    from wal3_spark.log.cursors import CursorStore
    from wal3_spark.log.fragment_io import output_schema
    from wal3_spark.log.reader import LogReader
    from wal3_spark.log.writer import LogWriter
    from wal3_spark.ops.gc import GarbageCollector
    from wal3_spark.spark.read_tasks import read_partition

    store = open_store(str(tmp_path / "log"))
    writer = LogWriter(store)
    for i in range(4):
        writer.append([b"%d" % i] * 5)  # [1,6) [6,11) [11,16) [16,21)
    reader = LogReader(store)
    manifest = reader.manifest()
    parts = pack(reader.plan(manifest=manifest), 1 << 30, 1)
    CursorStore(store).create("c", 12)
    GarbageCollector(store, grace_s=0, force=True).run()
    with pytest.raises(DataLost) as info:
        list(read_partition(store, parts[0], None, output_schema(None), verify=True))
    assert (info.value.start, info.value.oldest) == (1, 11)
    # failOnDataLoss=false holds on executors too: the collected fragments are skipped
    batches = read_partition(store, parts[0], None, output_schema(None), verify=True,
                             fail_on_data_loss=False)
    assert pa.Table.from_batches(list(batches)).column("_offset").to_pylist() == list(range(11, 21))


def test_09_min_records_per_trigger_waits_for_records_or_the_delay():
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
    now = [1000.0]

    def reader(**options):
        parsed = opts.parse({"path": url, "minRecordsPerTrigger": "10", **options}, opts.STREAM_READ)
        return Wal3StreamReader(parsed, schema, clock=lambda: now[0])

    r = reader(maxTriggerDelay="30s", maxRecordsPerTrigger="25")
    limit = r.getDefaultReadLimit()
    assert isinstance(limit, ReadMaxRows) and limit.max_rows == 25
    assert isinstance(reader().getDefaultReadLimit(), ReadMinRows)
    assert r.latestOffset({"offset": 1}, limit) == {"offset": 5}  # a run's first batch: no wait
    append(3)
    assert r.latestOffset({"offset": 5}, limit) == {"offset": 5}  # 3 < 10: wait
    now[0] += 29.9
    assert r.latestOffset({"offset": 5}, limit) == {"offset": 5}  # still within the delay
    append(8)
    assert r.latestOffset({"offset": 5}, limit) == {"offset": 16}  # 11 >= 10: go
    append(2)
    now[0] += 29.9
    assert r.latestOffset({"offset": 16}, limit) == {"offset": 16}
    now[0] += 0.1  # 30 s since the last batch: go with what there is
    assert r.latestOffset({"offset": 16}, limit) == {"offset": 18}
    append(40)
    assert r.latestOffset({"offset": 18}, limit) == {"offset": 43}  # the maximum still caps it
    append(1)
    assert r.latestOffset({"offset": 58}, limit) == {"offset": 58}
    assert r.latestOffset({"offset": 58}, ReadAllAvailable()) == {"offset": 59}  # Trigger.Once
    r.prepareForTriggerAvailableNow()
    assert r.latestOffset({"offset": 58}, limit) == {"offset": 59}  # AvailableNow: no minimum


@pytest.mark.parametrize("options, match", [
    ({"maxTriggerDelay": "1m"}, "applies only with minRecordsPerTrigger"),
    ({"minRecordsPerTrigger": "10", "maxTriggerDelay": "soon"}, "expected a duration"),
    ({"minRecordsPerTrigger": "0"}, "expected a positive integer"),
    ({"minRecordsPerTrigger": "100", "maxRecordsPerTrigger": "10"}, "larger than maxRecordsPerTrigger"),
])
def test_10_trigger_option_errors_name_the_problem_and_the_valid_options(options, match):
    with pytest.raises(InvalidOption, match=match) as info:
        opts.parse({"path": "/tmp/x", **options}, opts.STREAM_READ)
    assert "Valid options for streaming reads" in str(info.value)
    assert "minRecordsPerTrigger" in str(info.value) and "maxTriggerDelay" in str(info.value)


def test_11_trigger_delay_forms():
    parsed = [opts.parse({"path": "/x", "minRecordsPerTrigger": "5", "maxTriggerDelay": d},
                         opts.STREAM_READ).max_trigger_delay_ms for d in ("15m", "30s", "500ms", "2h", "750")]
    assert parsed == [900_000, 30_000, 500, 7_200_000, 750]
    assert opts.parse({"path": "/x", "minRecordsPerTrigger": "5"}, opts.STREAM_READ).max_trigger_delay_ms == 900_000


@pytest.mark.parametrize("options, match", [
    ({"writerId": "nightly"}, "needs both writerId and writerVersion; add writerVersion"),
    ({"writerVersion": "3"}, "needs both writerId and writerVersion; add writerId"),
    ({"writerId": "nightly", "writerVersion": "-1"}, "expected an integer >= 0"),
    ({"writerId": "nightly", "writerVersion": "v2"}, "expected an integer >= 0"),
    ({"writerId": "nightly", "writerVersion": str(1 << 63)}, r"at most 9223372036854775807, a long"),
    ({"writerId": " ", "writerVersion": "1"}, "non-empty id"),
])
def test_12_idempotent_write_options_go_together(options, match):
    with pytest.raises(InvalidOption, match=match) as info:
        opts.parse({"path": "/tmp/x", **options}, opts.WRITE)
    assert "Valid options for batch writes" in str(info.value) and "writerVersion" in str(info.value)
    parsed = opts.parse({"path": "/tmp/x", "writerId": "nightly", "writerVersion": "42"}, opts.WRITE)
    assert (parsed.writer_id, parsed.writer_version) == ("nightly", 42)
    largest = opts.parse({"path": "/tmp/x", "writerId": "nightly", "writerVersion": str((1 << 63) - 1)},
                         opts.WRITE)
    assert largest.writer_version == (1 << 63) - 1
    with pytest.raises(InvalidOption, match="does not apply to streaming writes"):
        opts.parse({"path": "/x", "writerId": "w", "writerVersion": "1"}, opts.STREAM_WRITE)


def test_13_a_stream_trigger_reads_the_manifest_once():
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
    assert end == r.reportLatestOffset() == {"offset": 13}
    parts = r.partitions({"offset": 1}, end)
    assert [(x.start, x.limit) for p in parts for x in p.part.ranges] == [(1, 5), (5, 9), (9, 13)]
    assert manifest_gets() == 1

    writer.append(pa.table({"id": pa.array(range(4), pa.int64())}))  # [13,17)
    parts = r.partitions({"offset": 9}, {"offset": 17})
    assert [(x.start, x.limit) for p in parts for x in p.part.ranges] == [(9, 13), (13, 17)]
    assert manifest_gets() == 2


def test_14_the_source_imports_neither_pandas_nor_boto3():
    """Spark starts a fresh Python process for each streaming query's source (and one per
    planning worker): importing the connector there must not pay for pandas (~0.6 s of CPU) or
    boto3 (~0.25 s), which planning a read on any store never needs."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import wal3_spark.spark.source, wal3_spark.spark.stream_reader, wal3_spark.spark.batch_reader\n"
        "import wal3_spark.spark.read_tasks, wal3_spark.spark.write_tasks, wal3_spark.log.reader, wal3_spark.log.writer\n"
        "from wal3_spark.storage import open_store\n"
        "open_store('s3://bucket/log')\n"
        "print(sorted(m for m in ('pandas', 'boto3') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_15_a_query_column_the_log_lacks_reads_as_nulls_unless_not_null():
    """Reads conform each batch to the query's schema with `schema.conform`, as appends and
    the codec do: a nullable column the log lacks reads as nulls (as in a fragment written
    before a mergeSchema append); a NOT NULL one fails naming both schemas."""
    from wal3_spark.errors import SchemaMismatch
    from wal3_spark.log.fragment_io import output_schema
    from wal3_spark.log.reader import LogReader
    from wal3_spark.log.writer import LogWriter
    from wal3_spark.spark.planning import Part
    from wal3_spark.spark.read_tasks import read_partition

    store = open_store("memory://units-query-column-missing")
    LogWriter(store).append(pa.table({"id": pa.array([1, 2], pa.int64())}))
    reader = LogReader(store)
    manifest = reader.manifest()
    part = Part(tuple(reader.plan()))
    base = output_schema(manifest.arrow_schema())

    def read(query: pa.Schema) -> pa.Table:
        batches = read_partition(store, part, manifest.arrow_schema(), query, verify=True,
                                 item_hash=manifest.item_hash)
        return pa.Table.from_batches(list(batches), schema=query)

    nullable = base.insert(1, pa.field("note", pa.string()))
    assert read(nullable).column("note").to_pylist() == [None, None]
    with pytest.raises(SchemaMismatch, match="'note' is missing and NOT NULL") as info:
        read(base.insert(1, pa.field("note", pa.string(), nullable=False)))
    assert "data:" in str(info.value) and "query:" in str(info.value)


# ------------------------------------------------------------- Kafka's and Delta's option names


@pytest.mark.parametrize("alias, value, role, field, expected", [
    ("maxOffsetsPerTrigger", "500", opts.STREAM_READ, "max_records", 500),  # Kafka
    ("MINOFFSETSPERTRIGGER", "50", opts.STREAM_READ, "min_records", 50),  # Kafka, any case
    ("maxFilesPerTrigger", "7", opts.STREAM_READ, "max_fragments", 7),  # Delta
    ("txnAppId", "nightly", opts.WRITE, "writer_id", "nightly"),  # Delta's idempotent writes
    ("txnAppId", "pipeline", opts.STREAM_WRITE, "writer_id", "pipeline"),
])
def test_16_kafka_and_delta_names_are_the_wal3_options_of_the_same_meaning(alias, value, role, field,
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


def test_17_an_alias_reaches_spark_as_the_wal3_limit():
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
def test_18_aliases_fail_as_their_wal3_option_would_naming_both(options, role, match):
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
def test_19_kafka_and_delta_options_without_a_wal3_twin_name_what_to_use(name, value, role, instead):
    with pytest.raises(InvalidOption, match=instead) as info:
        opts.parse({"path": "/x", name: value}, role)
    assert f"wal3 option {name}=" in str(info.value) and "Valid options for" in str(info.value)


def test_20_kafka_secrets_are_never_shown():
    jaas = 'org.apache.kafka.common.security.plain.PlainLoginModule required password="hunter2";'
    with pytest.raises(InvalidOption, match="wal3 has no broker") as info:
        opts.parse({"path": "/x", "kafka.sasl.jaas.config": jaas}, opts.STREAM_READ)
    assert "hunter2" not in str(info.value)


def test_21_kafkas_per_partition_json_for_starting_offsets_says_what_wal3_takes():
    with pytest.raises(InvalidOption, match=r"Kafka's per-topic, per-partition form.*\{\"offset\": 42\}"):
        opts.parse({"path": "/x", "startingOffsets": '{"orders": {"0": 23, "1": -2}}'}, opts.STREAM_READ)
    # what both take: earliest, latest, and wal3's own JSON position
    assert opts.parse({"path": "/x", "startingOffsets": '{"offset": 23}'}, opts.STREAM_READ).starting == ("offset", 23)
    assert opts.parse({"path": "/x", "startingOffsets": "latest"}, opts.STREAM_READ).starting == ("latest", 0)
    # Delta's date form of startingTimestamp
    assert opts.parse({"path": "/x", "startingTimestamp": "2019-01-01"}, opts.STREAM_READ).starting == (
        "timestamp", 1546300800 * 1_000_000)
