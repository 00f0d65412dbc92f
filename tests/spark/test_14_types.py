"""Every column type a structured log can hold reads from Spark, through `format("wal3")` and
the native scan alike, value for value; a value Spark cannot hold exactly is refused, naming the
column (and for a value found while reading, its offsets), never truncated; and a Spark append to
a column Spark reads widened stores the log's type, checked."""

from __future__ import annotations

import math
import re
import uuid
from decimal import Decimal

import pyarrow as pa
import pytest

from wal3_spark.errors import SchemaMismatch
from wal3_spark.log.reader import LogReader
from wal3_spark.log.writer import LogWriter
from wal3_spark.spark import Wal3Log
from wal3_spark.storage import open_store

pytestmark = pytest.mark.timeout(300)

DAY_MS = 86_400_000
NS = pa.timestamp("ns", tz="UTC")
#: one column of each type Spark lacks (and a few it has, as controls): the Arrow array, with
#: edge values, and the Spark type both readers must return it as
READABLE = {
    "u8": (pa.array([0, 255, None], pa.uint8()), "smallint"),
    "u16": (pa.array([0, 65535, None], pa.uint16()), "int"),
    "u32": (pa.array([0, 2**32 - 1, None], pa.uint32()), "bigint"),
    "u64": (pa.array([0, 2**63, 2**64 - 1, None], pa.uint64()), "decimal(20,0)"),
    "f32": (pa.array([-0.0, math.nan, -3.4e38, None], pa.float32()), "float"),
    "f16": (pa.array([1.5, -65504.0, math.nan, -math.inf, 2**-24, -0.0, None], pa.float16()), "float"),
    "list_f16": (pa.array([[0.5, None, math.inf], None], pa.list_(pa.float16())), "array<float>"),
    "d64": (pa.array([DAY_MS, -DAY_MS * 36525, None], pa.date64()), "date"),
    "dec32": (pa.array([Decimal("-9999.9"), None], pa.decimal32(5, 1)), "decimal(5,1)"),
    "dec64": (pa.array([Decimal("1.25"), None], pa.decimal64(15, 2)), "decimal(15,2)"),
    "dec256": (pa.array([Decimal("-" + "9" * 37 + ".9"), None], pa.decimal256(38, 1)), "decimal(38,1)"),
    "ts_s": (pa.array([-5, 1, None], pa.timestamp("s")), "timestamp_ntz"),
    "ts_ns": (pa.array([1_000, -2_000, None], NS), "timestamp"),
    "ts_ns_naive": (pa.array([-1_000_000, None], pa.timestamp("ns")), "timestamp_ntz"),
    "dur_s": (pa.array([-1, 86_400, None], pa.duration("s")), "interval day to second"),
    "dur_ms": (pa.array([-1, 1, None], pa.duration("ms")), "interval day to second"),
    "dur_ns": (pa.array([-1_000, 5_000, None], pa.duration("ns")), "interval day to second"),
    "ts_ms_ny": (pa.array([1, None], pa.timestamp("ms", tz="America/New_York")), "timestamp"),
    "struct_u32": (pa.array([{"a": 2**32 - 1}, None], pa.struct([("a", pa.uint32())])), "struct<a:bigint>"),
    "list_u64": (pa.array([[2**64 - 1, None], None], pa.list_(pa.uint64())), "array<decimal(20,0)>"),
    "map_u8": (pa.array([[(255, 65535)], None], pa.map_(pa.uint8(), pa.uint16())), "map<smallint,int>"),
    "uuid": (pa.array([uuid.UUID(int=2**128 - 1).bytes, None], pa.uuid()), "binary"),
    "view": (pa.array(["a", None], pa.string_view()), "string"),
    "dict_u8": (pa.array([255, None, 255, 0], pa.uint8()).dictionary_encode(), "smallint"),
    "list_dict_u8": (pa.ListArray.from_arrays([0, 2, 2], pa.array([255, 0], pa.uint8()).dictionary_encode(),
                                              mask=pa.array([False, True])), "array<smallint>"),
}
#: read exactly by `format("wal3")`; Spark's Parquet reader cannot, so the native scan refuses
#: (it converts top-level nanosecond timestamps, durations, float16 and lists of float16: READABLE)
SOURCE_ONLY = {
    "time_ms": (pa.array([1, 86_399_999, None], pa.time32("ms")), "time(6)"),
    "struct_f16": (pa.array([{"a": 0.5}, None], pa.struct([("a", pa.float16())])), "struct<a:float>"),
    "list_ts_ns": (pa.array([[1_000], None], pa.list_(NS)), "array<timestamp>"),
}


def write_log(url: str, columns: dict[str, pa.Array]) -> None:
    """A log of two LogWriter appends (two fragments) of these columns."""
    rows = max(len(array) for array in columns.values())
    table = pa.table({name: padded(array, rows) for name, array in columns.items()})
    with LogWriter(url) as writer:
        writer.append(table)
        writer.append(table)


def padded(array: pa.Array, rows: int) -> pa.Array:
    """`array` with nulls up to `rows` values (the columns of a log share one row count)."""
    return array if len(array) == rows else pa.concat_arrays([array, pa.nulls(rows - len(array), array.type)])


def comparable(values: list) -> list:
    return ["NaN" if isinstance(v, float) and math.isnan(v) else v for v in values]


def check_columns(df, table: pa.Table, columns: dict) -> None:
    """Each column of `df` (collected as `table`) has its Spark type and the log's values, as
    pyarrow's checked cast to that type gives them (the oracle)."""
    for name, (array, spark_type) in columns.items():
        assert df.schema[name].dataType.simpleString() == spark_type, name
        got = table.column(name)
        stored = array.storage if isinstance(array.type, pa.BaseExtensionType) else array
        want = padded(stored, len(table) // 2)
        assert comparable(got.to_pylist()) == comparable(want.cast(got.type).to_pylist()) * 2, name


def test_01_both_readers_return_every_value(spark, log_url):
    write_log(log_url, {name: array for name, (array, _) in READABLE.items()})
    source = spark.read.format("wal3").load(log_url)
    native = Wal3Log.forPath(spark, log_url).toDF()
    check_columns(source, source.orderBy("_offset").toArrow(), READABLE)
    check_columns(native, native.orderBy("_offset").toArrow(), READABLE)


def test_02_the_native_scan_refuses_what_parquet_misreads(spark, tmp_path):
    url = (tmp_path / "all").as_uri()
    write_log(url, {name: array for name, (array, _) in SOURCE_ONLY.items()})
    source = spark.read.format("wal3").load(url)
    check_columns(source, source.orderBy("_offset").toArrow(), SOURCE_ONLY)
    for name, (array, _) in SOURCE_ONLY.items():
        url = (tmp_path / name).as_uri()
        write_log(url, {name: array})
        with pytest.raises(SchemaMismatch, match=rf"column '{name}' is .*Fix: read it with spark\.read\.format"):
            Wal3Log.forPath(spark, url).toDF()


def test_03_sub_microsecond_values_fail_naming_their_offsets(spark, log_url):
    with LogWriter(log_url) as writer:  # offset 2 is not whole microseconds
        writer.append(pa.table({"ts": pa.array([1_000, 1_001, None], NS)}))
    with pytest.raises(Exception) as info:
        spark.read.format("wal3").load(log_url).collect()
    message = str(info.value)
    assert "column 'ts' of type timestamp[ns, tz=UTC] cannot be cast to timestamp[us, tz=UTC]" in message
    assert "1 value(s) at offsets [2, 2]" in message
    assert "Fix: read these records with wal3's Python API (LogReader, LogScan)" in message
    with pytest.raises(Exception) as info:
        Wal3Log.forPath(spark, log_url).toDF().collect()
    message = str(info.value)
    assert "column 'ts' of type timestamp[ns, tz=UTC] cannot be read exactly by Spark" in message
    assert "its value at offset 2 is not whole microseconds" in message
    assert "Fix: read these records with wal3's Python API (LogReader, LogScan)" in message
    assert LogReader(open_store(log_url)).read_table().column("ts").to_pylist()[1].nanosecond == 1


@pytest.mark.parametrize("array", [
    pa.array([Decimal("1.5")], pa.decimal256(40, 1)),
    pa.array([[1]], pa.list_view(pa.int32())),
], ids=["decimal256-40", "list_view"])
def test_04_types_spark_cannot_hold_are_refused_before_any_job(spark, log_url, array):
    write_log(log_url, {"c": array})
    named = re.escape(f"column 'c' is {array.type}")
    with pytest.raises(Exception, match=rf"{named}.*Fix: read this log with wal3's Python API"):
        spark.read.format("wal3").load(log_url)
    with pytest.raises(SchemaMismatch, match=named):
        Wal3Log.forPath(spark, log_url).toDF()


def test_05_a_log_refuses_date64_values_that_are_not_whole_days(log_url):
    with LogWriter(log_url) as writer, pytest.raises(SchemaMismatch, match="not whole days"):
        writer.append(pa.table({"d": pa.array([DAY_MS, DAY_MS + 1], pa.date64())}))


def test_06_spark_appends_to_a_widened_column_store_the_logs_type(spark, log_url):
    write_log(log_url, {"id": pa.array([1], pa.int64()), "u": pa.array([2**32 - 1], pa.uint32()),
                        "big": pa.array([2**64 - 1], pa.uint64())})
    read = spark.read.format("wal3").load(log_url).drop("_offset", "_timestamp")
    read.write.format("wal3").mode("append").save(log_url)  # long -> uint32, decimal -> uint64
    spark.createDataFrame([(3, 0, Decimal(2**63))], "id long, u long, big decimal(20,0)") \
        .write.format("wal3").mode("append").save(log_url)
    table = LogReader(open_store(log_url)).read_table()
    assert table.schema.field("u").type == pa.uint32() and table.schema.field("big").type == pa.uint64()
    assert table.column("u").to_pylist() == [2**32 - 1] * 4 + [0]
    assert table.column("big").to_pylist() == [2**64 - 1] * 4 + [2**63]
    with pytest.raises(Exception, match="column 'u' of type int64 cannot be cast to uint32 exactly"):
        spark.sql(f"SELECT 9L AS id, {2**32}L AS u").write.format("wal3").mode("append").save(log_url)
    assert LogReader(open_store(log_url)).read_table().num_rows == 5


def test_07_spark_appends_to_a_float16_column_are_refused(spark, log_url):
    write_log(log_url, {"h": pa.array([0.5], pa.float16())})
    with pytest.raises(Exception, match=r"column 'h' is halffloat in the log, .*Fix: append to this log with the Python API"):
        spark.sql("SELECT CAST(0.5 AS FLOAT) AS h").write.format("wal3").mode("append").save(log_url)


def test_08_a_log_set_reads_and_routes_widened_columns(spark, tmp_path):
    prefix = (tmp_path / "set").as_uri()
    for name in ("a", "b"):
        write_log(f"{prefix}/{name}", {"u": pa.array([2**32 - 1], pa.uint32()),
                                       "d": pa.array([DAY_MS], pa.date64())})
    df = spark.read.format("wal3").option("logs", "*").load(prefix)
    assert [f.dataType.simpleString() for f in df.schema.fields[:2]] == ["bigint", "date"]
    assert sorted((r._log, r.u, r.d.day) for r in df.collect()) == [("a", 2**32 - 1, 2)] * 2 + [("b", 2**32 - 1, 2)] * 2
    spark.sql("SELECT 'a' AS tenant, 7L AS u").write.format("wal3").mode("append") \
        .option("logColumn", "tenant").save(prefix)  # the routing sink stores the log's type too
    column = LogReader(open_store(f"{prefix}/a")).read_table().column("u")
    assert column.type == pa.uint32() and column.to_pylist() == [2**32 - 1, 2**32 - 1, 7]


def test_09_nested_values_that_do_not_convert_name_the_records(spark, log_url):
    with LogWriter(log_url) as writer:
        writer.append(pa.table({"ts": pa.array([[1_000], [1_001, 2_000]], pa.list_(NS))}))
    with pytest.raises(Exception, match=re.escape("exactly: in the records at offsets [1, 2]")):
        spark.read.format("wal3").load(log_url).collect()
