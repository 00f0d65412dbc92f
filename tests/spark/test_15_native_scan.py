"""The native scan (`Wal3Log.forPath(spark, url).toDF()`) returns what `format("wal3")` returns,
row for row, on every shape of log, while Spark's own Parquet reader prunes columns, pushes
filters into row groups and counts without reading data."""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys
import textwrap
import time
import uuid
from decimal import Decimal

import pyarrow as pa
import pytest

from tests.support.fakes import write_chroma_s3_log
from tests.support.spark import ROOT, connect_env, filter_pushdown
from wal3_spark.errors import (
    DataLost,
    InvalidOption,
    InvalidUrl,
    LogNotFound,
    ObjectNotFound,
    ScanUnsupported,
)
from wal3_spark.format.fragment import encode_raw
from wal3_spark.format.layout import MANIFEST_KEY, TIMESTAMP, fragment_path
from wal3_spark.format.uuid7 import uuid7_timestamp_us
from wal3_spark.log.committer import Committer
from wal3_spark.log.fragment_io import FragmentFile, exact_path_timestamp_us
from wal3_spark.log.reader import LogReader
from wal3_spark.log.writer import LogWriter, LogWriterOptions
from wal3_spark.spark import Wal3Log, native_scan
from wal3_spark.spark.hadoop import HadoopFileStore, hadoop_options, hadoop_url
from wal3_spark.spark.options import READ, parse
from wal3_spark.storage import open_store

pytestmark = pytest.mark.timeout(300)

SIZES = (10, 7, 12)  # three fragments: offsets [1, 11), [11, 18), [18, 30)


def rows(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": [f"n{i}" for i in ids],
            "score": [i * 0.5 for i in ids],
            "flag": [i % 2 == 0 for i in ids],
            "maybe": pa.array([None if i % 3 == 0 else i for i in ids], pa.int32()),
            "at": pa.array([1_700_000_000_000_000 + i for i in ids], pa.timestamp("us", tz="UTC")),
            "tags": [[f"t{i}"] * (i % 3) for i in ids],
            "point": [{"x": i, "y": None if i % 4 else f"y{i}"} for i in ids],
            "day": pa.array([19_000 + i for i in ids], pa.date32()),
            "price": pa.array([Decimal(i) / 4 for i in ids], pa.decimal128(10, 2)),
        }
    )


@pytest.fixture(scope="module")
def log_url(tmp_path_factory) -> str:
    url = (tmp_path_factory.mktemp("native") / "log").as_uri()
    writer, start = LogWriter(url), 0
    for n in SIZES:
        writer.append(rows(start, n))
        start += n
    return url


def same_as_data_source(spark, url: str, **options) -> list:
    """The native scan's rows, after checking they equal the data source's (values and types)."""
    native = Wal3Log.forPath(spark, url).toDF(**options)
    source = spark.read.format("wal3").options(**{k: str(v) for k, v in options.items()}).load(url)
    assert native.columns == source.columns
    assert [f.dataType for f in native.schema] == [f.dataType for f in source.schema]
    got, expected = native.orderBy("_offset").collect(), source.orderBy("_offset").collect()
    assert got == expected
    return got


def plan_of(df) -> str:
    """The physical plan, with the scan's ReadSchema in full (Spark abbreviates it to 100
    characters by default)."""
    spark = df.sparkSession
    spark.conf.set("spark.sql.maxMetadataStringLength", "10000")
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            df.explain()
    finally:
        spark.conf.unset("spark.sql.maxMetadataStringLength")
    return out.getvalue()


def read_columns(df) -> set[str]:
    """The top-level file columns the scan decodes (Spark's ReadSchema, without its generated
    row index); commas nested in struct<...> or decimal(p,s) do not split fields."""
    names: set[str] = set()
    for schema in re.findall(r"ReadSchema: struct<(.*)", plan_of(df)):
        depth, field = 0, ""
        for char in schema:
            if depth == 0 and char in ",>":
                names.add(field.split(":")[0])
                field = ""
                if char == ">":
                    break
                continue
            depth += {"<": 1, "(": 1, ">": -1, ")": -1}.get(char, 0)
            field += char
    return names - {"_tmp_metadata_row_index", ""}


@pytest.mark.parametrize(
    "options, offsets",
    [
        ({}, (1, 30)),
        ({"startingOffsets": 5}, (5, 30)),  # starts inside the first fragment
        ({"endingOffsets": 25}, (1, 25)),  # ends inside the last
        ({"startingOffsets": 13, "endingOffsets": 16}, (13, 16)),  # inside one fragment
        ({"startingOffsets": 11, "endingOffsets": 18}, (11, 18)),  # exactly one fragment
        ({"startingOffsets": "latest"}, (30, 30)),  # empty
        ({"startingOffsets": 7, "endingOffsets": 7}, (7, 7)),  # empty
    ],
)
def test_00_ranges_match_the_data_source(spark, log_url, options, offsets):
    got = same_as_data_source(spark, log_url, **options)
    assert [r._offset for r in got] == list(range(*offsets))
    assert [r.id for r in got] == [o - 1 for o in range(*offsets)]


def test_01_a_timestamp_range_matches_the_data_source(spark, log_url):
    second = LogReader(open_store(log_url)).manifest().fragments[1]
    ms = uuid7_timestamp_us(second.seq_no) // 1000 + 1  # a time inside the second fragment's ms
    got = same_as_data_source(spark, log_url, startingTimestamp=ms)
    assert got[0]._offset == 18 and len(got) == 12
    assert same_as_data_source(spark, log_url, endingTimestamp=ms)[-1]._offset == 17


def test_02_a_log_whose_schema_grew_reads_nulls_for_older_fragments(spark, tmp_path):
    url = (tmp_path / "grown").as_uri()
    LogWriter(url).append(pa.table({"id": [1, 2]}))
    LogWriter(url, LogWriterOptions(merge_schema=True)).append(pa.table({"id": [3], "extra": ["x"]}))
    got = same_as_data_source(spark, url, startingOffsets=2)
    assert [(r.id, r.extra) for r in got] == [(2, None), (3, "x")]


def test_03_raw_logs(spark, tmp_path):
    url = (tmp_path / "raw").as_uri()
    writer = LogWriter(url)
    writer.append([b"a", b"b", b"c"])
    writer.append([b"\x00\xff"])
    got = same_as_data_source(spark, url, startingOffsets=2)
    assert [bytes(r.body) for r in got] == [b"b", b"c", b"\x00\xff"]


def test_04_chroma_s3_logs_with_absolute_offsets(spark, tmp_path):
    url = (tmp_path / "chroma").as_uri()
    write_chroma_s3_log(open_store(url))
    got = same_as_data_source(spark, url)
    assert [r._offset for r in got] == list(range(1, 10))
    assert same_as_data_source(spark, url, startingOffsets=4, endingOffsets=8)[0].body == b"chroma 2.1"


def test_05_many_fragments_take_their_values_from_a_join_spark_drops_when_unused(spark, log_url, monkeypatch):
    monkeypatch.setattr(native_scan, "CASE_LIMIT", 2)
    for options in ({}, {"startingOffsets": 5, "endingOffsets": 25}):
        assert len(same_as_data_source(spark, log_url, **options)) == 20 + 9 * (not options)
    df = Wal3Log.forPath(spark, log_url).toDF()
    assert "BroadcastHashJoin" in plan_of(df)
    assert "Join" not in plan_of(df.groupBy().count())
    assert "Join" not in plan_of(df.selectExpr("sum(id)", "count(name)"))


def test_06_spark_prunes_columns_pushes_filters_and_counts_without_payload(spark, log_url):
    df = Wal3Log.forPath(spark, log_url).toDF()
    assert read_columns(df.groupBy().count()) == set()
    assert read_columns(df.selectExpr("sum(id)", "count(name)")) == {"id", "name"}
    assert read_columns(df) == {"id", "name", "score", "flag", "maybe", "at", "tags", "point", "day", "price"}
    filtered = df.where("id > 20").select("id", "_offset")
    assert "GreaterThan(id,20)" in plan_of(filtered)
    assert [(r.id, r._offset) for r in filtered.orderBy("id").collect()] == [(i, i + 1) for i in range(21, 29)]
    assert df.count() == 29 and Wal3Log.forPath(spark, log_url).toDF(startingOffsets=5).count() == 25


def test_07_bad_options_and_missing_logs_say_what_to_do(spark, log_url, tmp_path):
    with pytest.raises(InvalidOption, match="valid: startingOffsets"):
        Wal3Log.forPath(spark, log_url).toDF(verifyOnRead=False)
    with pytest.raises(InvalidOption, match="not store options"):
        Wal3Log.forPath(spark, log_url, {"startingOffsets": "5"})
    with pytest.raises(InvalidOption, match="startingOffsets"):
        Wal3Log.forPath(spark, log_url).toDF(startingOffsets="soon")
    with pytest.raises(LogNotFound):
        Wal3Log.forPath(spark, (tmp_path / "nothing").as_uri())
    with pytest.raises(InvalidUrl, match="format"):
        Wal3Log.forPath(spark, "memory://scan-test")


def test_08_s3_logs_map_to_s3a_with_the_store_options(monkeypatch):
    for name in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    assert hadoop_url("s3://bucket/logs/orders/") == "s3a://bucket/logs/orders"
    assert hadoop_url("/data/logs/x") == "file:///data/logs/x"
    assert hadoop_url("hdfs://nn:8020/logs/x") == "hdfs://nn:8020/logs/x"
    assert hadoop_options("file:///x", {"endpoint": "http://h:1"}) == {}
    assert hadoop_options("s3://b/p", {}) == {"fs.s3a.path.style.access": "false"}
    conf = hadoop_options("s3://b/p", {"endpoint": "http://127.0.0.1:8333", "accessKeyId": "AK",
                                        "secretAccessKey": "SK", "sessionToken": "T"})
    assert conf == {
        "fs.s3a.endpoint": "http://127.0.0.1:8333",
        "fs.s3a.connection.ssl.enabled": "false",
        "fs.s3a.endpoint.region": "us-east-1",
        "fs.s3a.path.style.access": "true",
        "fs.s3a.access.key": "AK",
        "fs.s3a.secret.key": "SK",
        "fs.s3a.session.token": "T",
        "fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider",
    }
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "https://s3.example.com")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    conf = hadoop_options("s3://b/p", {"pathStyle": "false"})
    assert conf == {"fs.s3a.endpoint": "https://s3.example.com", "fs.s3a.connection.ssl.enabled": "true",
                    "fs.s3a.endpoint.region": "eu-west-1", "fs.s3a.path.style.access": "false"}


def test_09_a_log_on_another_hadoop_filesystem_is_planned_through_spark(spark, log_url):
    """Logs `open_store` has no backend for are read through Spark's binaryFile source (tried
    here on the local filesystem, the only Hadoop filesystem this machine has)."""
    store = HadoopFileStore(spark, log_url)
    assert store.get(MANIFEST_KEY).data == open_store(log_url).get(MANIFEST_KEY).data
    with pytest.raises(ObjectNotFound):
        store.get("snapshot/SNAPSHOT.missing")
    options = parse({"path": log_url, "startingOffsets": "5"}, READ)
    plan = native_scan.plan_scan(store, LogReader(store).manifest(), hadoop_url(log_url), options)
    got = native_scan.scan_dataframe(spark, plan, {}).orderBy("_offset").collect()
    assert got == spark.read.format("wal3").option("startingOffsets", 5).load(log_url).orderBy("_offset").collect()


CONNECT_SCRIPT = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, {root!r})
    from pyspark.sql import SparkSession
    from wal3_spark.spark import Wal3Log, register
    spark = SparkSession.builder.remote("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    register(spark)
    url = sys.argv[1]
    native = Wal3Log.forPath(spark, url).toDF(startingOffsets=5, endingOffsets=25)
    source = spark.read.format("wal3").option("startingOffsets", 5).option("endingOffsets", 25).load(url)
    same = native.orderBy("_offset").collect() == source.orderBy("_offset").collect()
    r = native.selectExpr("count(*) n", "sum(id) s", "min(_offset) lo").first()
    shadowed = Wal3Log.forPath(spark, sys.argv[2]).toDF(startingOffsets=2)
    shadowed_same = (shadowed.orderBy("_offset").collect()
                     == spark.read.format("wal3").option("startingOffsets", 2).load(sys.argv[2]).orderBy("_offset").collect())
    print(json.dumps(dict(same=same, n=r.n, s=r.s, lo=r.lo, connect=type(spark).__module__,
                          shadowed=shadowed_same, shadowed_n=shadowed.count())))
    spark.stop()
    """
)


@pytest.mark.cluster
def test_10_over_spark_connect(tmp_path, log_url):
    script = tmp_path / "connect_scan.py"
    script.write_text(CONNECT_SCRIPT.format(root=str(ROOT)))
    shadowed = (tmp_path / "shadowed").as_uri()  # a payload column hides Spark's _metadata
    LogWriter(shadowed).append(pa.table({"id": [1, 2, 3], "_metadata": ["a", "b", "c"]}))
    result = subprocess.run([sys.executable, str(script), log_url, shadowed], cwd=ROOT, env=connect_env(),
                            capture_output=True, text=True, timeout=280)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-6000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert "connect" in out["connect"]
    assert out == {**out, "same": True, "n": 20, "s": sum(range(4, 24)), "lo": 5, "shadowed": True,
                   "shadowed_n": 2}


def test_11_a_fragment_gc_deleted_after_to_df_fails_the_query_or_is_skipped(spark, tmp_path):
    """The DataFrame is fixed to the fragments of toDF's manifest; GC deletes the first one
    before the action: the query fails naming the file, or with failOnDataLoss=false skips it
    as format("wal3") does."""
    from wal3_spark.log.cursors import CursorStore
    from wal3_spark.ops.garbage_collector import GarbageCollector, GCOptions

    url = (tmp_path / "log").as_uri()
    writer, start = LogWriter(url), 0
    for n in SIZES:
        writer.append(rows(start, n))
        start += n
    first = LogReader(open_store(url)).manifest().fragments[0].path
    strict = Wal3Log.forPath(spark, url).toDF()
    lenient = Wal3Log.forPath(spark, url).toDF(failOnDataLoss="false")
    CursorStore(open_store(url)).create("c", 11)
    GarbageCollector(open_store(url), GCOptions(grace_s=0, force=True)).run()
    with pytest.raises(Exception) as info:
        strict.collect()
    assert first.rsplit("/", 1)[-1] in str(info.value)
    assert sorted(r._offset for r in lenient.collect()) == list(range(11, 30))


@pytest.mark.parametrize("escaped", ["false", "true"])
def test_12_file_names_are_sql_literals_whatever_the_parser_settings(spark, escaped):
    """The per-file CASEs name files in SQL text: a name with a quote or a backslash reads back
    as itself with either setting of escapedStringLiterals."""
    names = ["Uuid=01a21823-112f-715f-a661-37fa67ca8762.parquet", "it's.parquet", "a\\b'.parquet"]
    spark.conf.set("spark.sql.parser.escapedStringLiterals", escaped)
    try:
        row = spark.range(1).selectExpr(*[f"{native_scan._sql_string(n)} AS n{i}" for i, n in enumerate(names)]).first()
    finally:
        spark.conf.unset("spark.sql.parser.escapedStringLiterals")
    assert list(row) == names


def foreign_uuid(timestamp_us: int, version: int, rand_a: int) -> uuid.UUID:
    """A fragment UUID as another writer makes it: `timestamp_us`'s millisecond, then `rand_a`
    (random or a counter for Chroma's UUIDv7s, not our microseconds)."""
    unix_ms = timestamp_us // 1000
    return uuid.UUID(int=(unix_ms << 80) | (version << 76) | (rand_a << 64) | (0b10 << 62) | 0x5EED)


def append_foreign(url: str, bodies: list[bytes], timestamp_us: int, fragment_uuid: uuid.UUID) -> None:
    """Commit a raw fragment whose rows carry `timestamp_us` at `log/Uuid=<fragment_uuid>`."""
    encoded = encode_raw(bodies, timestamp_us)
    path = fragment_path(fragment_uuid)
    store = open_store(url)
    store.put_if_absent(path, encoded.data)
    Committer(store).commit([FragmentFile(path, str(fragment_uuid), encoded.records, len(encoded.data),
                                          encoded.setsum, timestamp_us)])


def test_13_raw_fragments_whose_uuid_is_not_ours_keep_their_file_timestamp(spark, tmp_path):
    """Chroma's UUID-named raw fragments: the UUID's time is not the rows' `timestamp_us`. The
    scan reads the column, as `format("wal3")` does, mixed with our own fragments; structured
    logs (only we write them) keep the time from the path without reading the column."""
    url = (tmp_path / "mixed").as_uri()
    LogWriter(url).append([b"ours 1", b"ours 2"])
    now = time.time_ns() // 1000 // 1000 * 1000
    foreign = [  # (file timestamp_us, the UUID in its path)
        (now + 123, foreign_uuid(now, 7, 999)),  # a UUIDv7 whose rand_a reads as 999 µs
        (now + 2456, foreign_uuid(now + 2000, 7, 0xABC)),  # rand_a >= 1000: the millisecond only
        (now + 3000 - 5, foreign_uuid(now + 3000, 7, 0)),  # the UUID made after the rows
        (now + 4789, foreign_uuid(now + 4000, 4, 0x123)),  # a UUIDv4
    ]
    for i, (ts, fragment_uuid) in enumerate(foreign):
        append_foreign(url, [f"chroma {i}.{j}".encode() for j in range(i + 1)], ts, fragment_uuid)
    LogWriter(url).append([b"ours 3"])
    native = Wal3Log.forPath(spark, url).toDF()
    times = {r.body: r.us for r in native.selectExpr("body", "unix_micros(_timestamp) AS us").collect()}
    assert [times[f"chroma {i}.0".encode()] for i in range(4)] == [ts for ts, _ in foreign]
    assert TIMESTAMP in read_columns(native)
    assert len(same_as_data_source(spark, url)) == 13
    for options in ({"startingTimestamp": (now + 2000) // 1000}, {"endingTimestamp": (now + 4000) // 1000},
                    {"startingOffsets": 4, "endingOffsets": 9}):
        assert same_as_data_source(spark, url, **options)
    # a filter on _timestamp between a foreign fragment's rows and its path's time: the data
    # source's pushdown must not skip the fragment by its path
    for where in (f"_timestamp < timestamp_micros({now + 500})", f"_timestamp >= timestamp_micros({now + 2300})"):
        with filter_pushdown(spark):
            source = sorted(bytes(r.body) for r in
                            spark.read.format("wal3").load(url).where(where).selectExpr("body").collect())
        assert source == sorted(bytes(r.body) for r in native.where(where).selectExpr("body").collect())
    assert b"chroma 0.0" in {bytes(r.body) for r in native.where(f"_timestamp < timestamp_micros({now + 500})").collect()}


def test_14_a_structured_log_takes_timestamps_from_our_paths_without_reading_them(spark, log_url):
    """The fast path: every fragment of a structured log is ours, its UUIDv7 carries
    `timestamp_us` to the microsecond, and the column is never read."""
    ref = LogReader(open_store(log_url)).manifest().fragments[0]
    assert exact_path_timestamp_us(ref, structured=True) == uuid7_timestamp_us(ref.seq_no)
    assert exact_path_timestamp_us(ref, structured=False) is None
    foreign = foreign_uuid(ref.start * 1000, 7, 0xABC)  # no microsecond count: not ours
    assert uuid7_timestamp_us(foreign) == ref.start * 1000 and uuid7_timestamp_us(foreign, exact=True) is None
    df = Wal3Log.forPath(spark, log_url).toDF()
    assert TIMESTAMP not in read_columns(df)
    first = df.where("_offset = 1").selectExpr("unix_micros(_timestamp)").first()[0]
    assert first == uuid7_timestamp_us(ref.seq_no)


@pytest.mark.parametrize("case_limit", [native_scan.CASE_LIMIT, 1])
@pytest.mark.parametrize("metadata", ["_metadata", "_Metadata"])
def test_15_payload_columns_named_like_spark_metadata_or_the_scans_own(spark, tmp_path, monkeypatch,
                                                                         case_limit, metadata):
    """A payload column `_metadata` (any case) hides Spark's file metadata from SQL text, here
    a struct shaped like it; others take the names of the scan's temporary columns. Same rows
    as `format("wal3")`, through the per-file CASEs and through the join."""
    monkeypatch.setattr(native_scan, "CASE_LIMIT", case_limit)
    url = (tmp_path / "shadowing").as_uri()
    writer = LogWriter(url)
    for start in (0, 3):
        ids = list(range(start, start + 3))
        writer.append(pa.table({
            "id": ids,
            metadata: [{"file_name": "x", "row_index": 100 + i} for i in ids],
            "__wal3_meta": [f"m{i}" for i in ids],
            "__wal3_file": [f"f{i}" for i in ids],
            "__wal3_row": [-i for i in ids],
            "__wal3_start": [i * 10 for i in ids],
            "__wal3_time_us": [i * 100 for i in ids],
        }))
    got = same_as_data_source(spark, url, startingOffsets=2, endingOffsets=6)
    assert [(r._offset, r.id, r[metadata].row_index, r["__wal3_file"]) for r in got] == [
        (o, o - 1, 99 + o, f"f{o - 1}") for o in range(2, 6)]
    assert Wal3Log.forPath(spark, url).toDF(startingOffsets=2).count() == 5


@pytest.mark.parametrize("columns", [{"id": [1], "ID": [2]}, {"id": [1], "TIMESTAMP_US": [5]},
                                     {"Relative_Offset": [7]}])
def test_16_columns_that_differ_only_in_case_need_a_case_sensitive_session(spark, tmp_path, columns):
    """Payload columns differing only in case from each other or from a fragment's own columns
    are one column to Spark's Parquet reader unless the session is case-sensitive: a clear
    error naming them and the fixes, else the same rows as `format("wal3")`."""
    url = (tmp_path / "cases").as_uri()
    LogWriter(url).append(pa.table(columns))
    with pytest.raises(ScanUnsupported, match=r"differ only in case.*format\(\"wal3\"\).*caseSensitive=true"):
        Wal3Log.forPath(spark, url).toDF()
    spark.conf.set("spark.sql.caseSensitive", "true")
    try:
        assert len(same_as_data_source(spark, url)) == 1
    finally:
        spark.conf.unset("spark.sql.caseSensitive")


def test_17_an_empty_log_then_collected_and_sealed(spark, tmp_path):
    """A log created with a schema and no records; then appended to, its prefix collected and
    the log sealed: the same rows, and a range below the oldest offset is the same DataLost
    (or, with failOnDataLoss=false, the same rows skipped to the oldest offset)."""
    from wal3_spark.log.cursors import CursorStore
    from wal3_spark.ops.garbage_collector import GarbageCollector, GCOptions

    url = (tmp_path / "log").as_uri()
    Committer(open_store(url)).create(pa.schema([("id", pa.int64()), ("name", pa.string())]))
    assert same_as_data_source(spark, url) == []
    writer, start = LogWriter(url), 0
    for n in SIZES:
        writer.append(rows(start, n).select(["id", "name"]))
        start += n
    CursorStore(open_store(url)).create("c", 11)
    GarbageCollector(open_store(url), GCOptions(grace_s=0, force=True)).run()
    Committer(open_store(url)).seal()
    assert [r._offset for r in same_as_data_source(spark, url)] == list(range(11, 30))
    assert len(same_as_data_source(spark, url, startingOffsets=5, failOnDataLoss="false")) == 19
    with pytest.raises(DataLost, match="oldest offset still in the log is 11"):
        Wal3Log.forPath(spark, url).toDF(startingOffsets=5)
    with pytest.raises(Exception, match="oldest offset still in the log is 11"):
        spark.read.format("wal3").option("startingOffsets", 5).load(url).collect()


@pytest.mark.parametrize("kind, values", [
    (pa.uint64(), [0, 1, (1 << 63) - 1, 1 << 63, (1 << 64) - 1]),
    (pa.int64(), [-(1 << 63), -1, 0, (1 << 63) - 1]),
    (pa.uint32(), [0, (1 << 31), (1 << 32) - 1]),
    (pa.int8(), [-128, 0, 127]),
])
def test_18_a_filtered_native_scan_returns_every_integer_the_data_source_does(spark, tmp_path, kind, values):
    """A uint64 column is DECIMAL(20,0) in Spark: filtering it with a value above 2^63-1 as a
    long literal failed in the JVM (NumberFormatException) where format("wal3") returns the
    row. Each extreme of each width is asked for alone and all together."""
    url = (tmp_path / "log").as_uri()
    with LogWriter(url, LogWriterOptions(filter_column="k")) as w:
        for v in values:
            w.append(pa.table({"k": pa.array([v], kind), "n": [str(v)]}))
    log = Wal3Log.forPath(spark, url)
    for wanted in [[v] for v in values] + [values]:
        text = json.dumps(wanted)
        native = sorted(r.n for r in log.toDF(filterColumn="k", filterValues=text).collect())
        source = sorted(r.n for r in spark.read.format("wal3").option("filterColumn", "k")
                        .option("filterValues", text).load(url).collect())
        assert native == source == sorted(str(v) for v in wanted), (wanted, native, source)


def test_19_two_to_df_results_join_as_two_relations(spark, log_url):
    """Each toDF() result has attribute ids of its own, also when the second reuses the first's
    build: a join of two on a column pairs each row with its match (returning one DataFrame
    twice made `a.id == b.id` compare a column with itself: a self-join of one plan)."""
    log = Wal3Log.forPath(spark, log_url)
    a, b = log.toDF(), log.toDF()
    pairs = a.join(b, a.id == b.id).select(a._offset.alias("x"), b._offset.alias("y"), b.name).collect()
    assert sorted((r.x, r.y) for r in pairs) == [(o, o) for o in range(1, 30)]
    part = log.toDF(startingOffsets=11, endingOffsets=18)
    inner = a.join(part, a.id == part.id).select(a._offset, part.name).orderBy(a._offset).collect()
    assert [(r._offset, r.name) for r in inner] == [(o, f"n{o - 1}") for o in range(11, 18)]
    assert a.union(b).count() == 58


def test_20_to_df_reuses_its_build_until_the_plan_changes(spark, tmp_path, monkeypatch):
    """Building the DataFrame (py4j round trips, Spark's file listing and analysis) happens once
    per plan: toDF of the same log state and options renames the earlier build, while other
    options, an append and a fragment GC each build anew and read what the log now holds."""
    from wal3_spark.log.cursors import CursorStore
    from wal3_spark.ops.garbage_collector import GarbageCollector, GCOptions

    builds = []
    build = native_scan._build
    monkeypatch.setattr(native_scan, "_build", lambda *a: builds.append(a[1]) or build(*a))
    url = (tmp_path / "log").as_uri()
    writer = LogWriter(url)
    writer.append(rows(0, 10))
    log = Wal3Log.forPath(spark, url)
    first = log.toDF()
    again = Wal3Log.forPath(spark, url).toDF()  # another handle on the same log
    assert again is not first and len(builds) == 1
    assert log.toDF(failOnDataLoss="false").count() == 10 and len(builds) == 2
    writer.append(rows(10, 7))
    grown = log.toDF()
    assert len(builds) == 3 and grown.count() == 17 and first.count() == 10
    CursorStore(open_store(url)).create("c", 11)
    GarbageCollector(open_store(url), GCOptions(grace_s=0, force=True)).run()
    assert sorted(r._offset for r in log.toDF().collect()) == list(range(11, 18))
    assert len(builds) == 4
