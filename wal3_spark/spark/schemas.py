"""Conversions between Spark schemas and the Arrow schemas a log stores.

A log's payload is an Arrow schema (or none: a raw log's single binary `body` column); Spark
declares reads and writes as `StructType`s. Every role of the data source converts through these
functions, so a read and a write agree on what a column's type is (timestamps in UTC).

Arrow has types Spark lacks. `spark_arrow_type` maps each to the Spark type Spark's own Parquet
reader gives the same Parquet column (unsigned integers to the next wider signed type, UINT64 to
decimal(20,0), float16 to float, date64 to date, a decimal of precision <= 38 to decimal(p,s)),
and time units finer or coarser than Spark's microseconds to microseconds. Reads cast each
batch to that form with `schema.conform`, whose checked casts fail, naming the offsets, on a
value that does not convert exactly (a nanosecond timestamp that is not whole microseconds);
types with no Spark equivalent at all are refused here, before any job runs. The native scan
reads the same Parquet files with Spark's reader: `native_conversions` and
`check_parquet_readable` say what it converts itself and what it refuses. Appends from Spark go
the other way (`as_log_types`): a column whose Spark type is the log column's widened type is
cast back to the log's type, checked, so a long that does not fit a uint32 column fails.
docs/design/53-arrow-types-spark-lacks.md says why.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_schema, from_arrow_type, to_arrow_schema
from pyspark.sql.types import ArrayType, BinaryType, DataType, LongType, StructType

from wal3_spark.errors import SchemaMismatch
from wal3_spark.format.schema import find_type, is_raw_schema
from wal3_spark.log.fragment_io import output_schema

#: fixed-width Arrow types Spark lacks, as the Spark-held type Spark's Parquet reader reads
#: the same Parquet column as (ParquetToSparkSchemaConverter, Spark 4.x)
_WIDER = {
    pa.uint8(): pa.int16(),
    pa.uint16(): pa.int32(),
    pa.uint32(): pa.int64(),
    pa.uint64(): pa.decimal128(20, 0),
    pa.float16(): pa.float32(),
    pa.date64(): pa.date32(),
    pa.time32("s"): pa.time64("us"),
    pa.time32("ms"): pa.time64("us"),
    pa.time64("ns"): pa.time64("us"),
}
#: Spark's largest decimal precision (DecimalType.MAX_PRECISION)
MAX_DECIMAL_PRECISION = 38
_FIX = ("Fix: read this log with wal3's Python API (LogReader, LogScan), which returns the stored "
        "Arrow types, or store the column as a type Spark has")


def spark_arrow_type(t: pa.DataType, column: str) -> pa.DataType:
    """The Arrow form of the Spark type a payload column (or a part of one) of type `t` reads
    as; SchemaMismatch naming `column` when Spark has no type that holds its values."""
    if isinstance(t, pa.BaseExtensionType):  # uuid, json, user types: their stored values
        return spark_arrow_type(t.storage_type, column)
    if t in _WIDER:
        return _WIDER[t]
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz=t.tz)
    if pa.types.is_duration(t):
        return pa.duration("us")
    if pa.types.is_decimal(t):
        if t.precision > MAX_DECIMAL_PRECISION:
            raise SchemaMismatch(
                f"column {column!r} is {t}: Spark's decimals hold at most "
                f"{MAX_DECIMAL_PRECISION} digits. {_FIX} (decimal128, precision <= 38)"
            )
        return pa.decimal128(t.precision, t.scale)
    if pa.types.is_dictionary(t):
        return spark_arrow_type(t.value_type, column)
    if pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_binary_view(t):
        return pa.binary()
    if pa.types.is_struct(t):
        return pa.struct([_field(f, column) for f in t])
    if pa.types.is_map(t):
        return pa.map_(_field(t.key_field, column), _field(t.item_field, column))
    if pa.types.is_list_view(t) or pa.types.is_large_list_view(t):
        raise SchemaMismatch(
            f"column {column!r} is {t}: pyarrow {pa.__version__} converts list views to the lists "
            f"Spark takes wrongly (invalid offsets). {_FIX} (list or large_list)"
        )
    if pa.types.is_large_list(t):
        return pa.large_list(_field(t.value_field, column))
    if pa.types.is_list(t) or pa.types.is_fixed_size_list(t):
        return pa.list_(_field(t.value_field, column))
    return t


def check_parquet_readable(payload: pa.Schema | None) -> None:
    """SchemaMismatch naming the first payload column whose Parquet form Spark's own Parquet
    reader (the native scan) cannot read as `spark_arrow_type` says, unless `native_conversions`
    converts it: float16 (no Spark reader), nanosecond timestamps (refused by the reader), times
    (Spark's TIME type is off by default) and durations in any unit but microseconds (read as
    microseconds: wrong by 10^3 to 10^6)."""
    convertible = native_conversions(payload)
    for f in payload or ():
        bad = None if f.name in convertible else _parquet_unreadable(f.type)
        if bad is not None:
            raise SchemaMismatch(
                f"column {f.name!r} is {f.type}: Spark's Parquet reader cannot read {bad} "
                "exactly, so the native scan does not read this log. Fix: read it with "
                'spark.read.format("wal3"), which converts it exactly or fails naming the '
                "offsets it cannot convert"
            )


#: SQL turning a top-level column the native scan reads from Parquet as the stored long (its
#: unit's count) into its Spark type; `{c}` is the column. None: whole microseconds are checked
_FROM_LONG: dict[pa.DataType, str] = {
    pa.duration("s"): "CAST({c} * INTERVAL '1' SECOND AS INTERVAL DAY TO SECOND)",
    pa.duration("ms"): "CAST({c} * INTERVAL '0.001' SECOND AS INTERVAL DAY TO SECOND)",
    pa.duration("ns"): "CAST(({c} DIV 1000) * INTERVAL '0.000001' SECOND AS INTERVAL DAY TO SECOND)",
}


@dataclass(frozen=True)
class NativeColumn:
    """How the native scan reads a top-level payload column Spark's Parquet reader cannot read
    as its Spark type: as `read_type` (what the reader does read), then `sql(column, offset)`
    (the SQL of the column and of the row's offset) makes it the Spark type."""

    read_type: DataType
    sql: Callable[[str, str], str]


def native_conversions(payload: pa.Schema | None) -> dict[str, NativeColumn]:
    """The top-level payload columns the native scan converts itself to what `format("wal3")`
    returns: nanosecond timestamps (the reader refuses them) and durations not in microseconds
    (it misreads them), read as the stored longs; float16 and lists of them (no reader), read as
    their 2 bytes and decoded. A nanosecond value that is not whole microseconds fails the query
    naming the column, its offset and the fix, as `format("wal3")` does."""
    conversions: dict[str, NativeColumn] = {}
    for f in payload or ():
        t = f.type
        if pa.types.is_timestamp(t) and t.unit == "ns":
            to_spark = ("timestamp_micros({c} DIV 1000)" if t.tz is not None else
                        "timestampadd(MICROSECOND, {c} DIV 1000, TIMESTAMP_NTZ'1970-01-01 00:00:00')")
        elif pa.types.is_duration(t) and t.unit != "us":
            to_spark = _FROM_LONG[t]
        elif pa.types.is_float16(t):
            conversions[f.name] = NativeColumn(BinaryType(), lambda c, _: _float16(c))
            continue
        elif (pa.types.is_list(t) or pa.types.is_large_list(t)) and pa.types.is_float16(t.value_type):
            conversions[f.name] = NativeColumn(ArrayType(BinaryType(), t.value_field.nullable),
                                               lambda c, _: f"transform({c}, x -> {_float16('x')})")
            continue
        else:
            continue
        conversions[f.name] = NativeColumn(LongType(), functools.partial(_from_long, to_spark, f, t.unit == "ns"))
    return conversions


def _float16(column: str) -> str:
    """SQL decoding a float16's 2 little-endian bytes (IEEE 754 binary16: sign, 5-bit exponent,
    10-bit fraction) to the float it is, exactly: NaN, infinities, -0.0 and subnormals too."""
    word = f"CAST(conv(hex({column}), 16, 10) AS INT)"  # the bytes read big-endian: swap them
    h = f"(shiftleft({word} & 255, 8) | shiftright({word}, 8))"
    exponent, fraction = f"(shiftright({h}, 10) & 31)", f"({h} & 1023)"
    return (f"CAST(CASE WHEN {h} >= 32768 THEN -1D ELSE 1D END * CASE "
            f"WHEN {exponent} = 0 THEN {fraction} * power(2, -24) "
            f"WHEN {exponent} = 31 THEN CASE WHEN {fraction} = 0 THEN double('Infinity') ELSE double('NaN') END "
            f"ELSE (1024 + {fraction}) * power(2, {exponent} - 25) END AS FLOAT)")


def _from_long(to_spark: str, f: pa.Field, nanos: bool, column: str, offset: str) -> str:
    converted = to_spark.format(c=column)
    if not nanos:
        return converted
    message = (f"column {f.name!r} of type {f.type} cannot be read exactly by Spark, which holds "
               "microseconds: its value at offset ")
    fix = (" is not whole microseconds. Fix: read these records with wal3's Python API "
           "(LogReader, LogScan), which returns the stored types, or append microseconds")
    return (f"CASE WHEN {column} IS NULL OR {column} % 1000 = 0 THEN {converted} ELSE "
            f"raise_error(concat({_sql_text(message)}, CAST({offset} AS STRING), {_sql_text(fix)})) END")


def _sql_text(value: str) -> str:
    """`value` as a SQL string expression, whatever quotes or backslashes it holds."""
    return f"CAST(X'{value.encode().hex()}' AS STRING)"


def _parquet_unreadable(t: pa.DataType) -> pa.DataType | None:
    """The part of type `t` Spark's Parquet reader misreads or refuses, or None."""
    return find_type(t, lambda k: (
        pa.types.is_float16(k)
        or (pa.types.is_timestamp(k) and k.unit == "ns")
        or pa.types.is_time(k)
        or (pa.types.is_duration(k) and k.unit != "us")
    ))


def _field(f: pa.Field, column: str) -> pa.Field:
    return f.with_type(spark_arrow_type(f.type, column))


def arrow_to_spark(schema: pa.Schema) -> StructType:
    """A read's output schema (payload columns, then wal3's own) as the Spark schema it
    declares: types Spark lacks widened (`spark_arrow_type`), others as PySpark maps them."""
    widened = pa.schema([_field(f, f.name) for f in schema], metadata=schema.metadata)
    try:
        return from_arrow_schema(widened)
    except TypeError as exc:  # PySparkTypeError: a type neither Spark nor the widening knows
        raise SchemaMismatch(f"a column's type has no Spark equivalent ({exc}). {_FIX}") from None


def payload_to_spark(payload: pa.Schema | None) -> StructType:
    """The Spark schema a read of a log with this payload returns (`_offset`, `_timestamp` last)."""
    return arrow_to_spark(output_schema(payload))


def spark_to_arrow(schema: StructType) -> pa.Schema:
    """A Spark schema as Arrow, timestamps in UTC (the form a log stores)."""
    return to_arrow_schema(schema, timezone="UTC")


def appended_schema(schema: StructType) -> pa.Schema | None:
    """The Arrow schema to append as; None for a raw log's single binary `body` column."""
    arrow = spark_to_arrow(schema)
    return None if is_raw_schema(arrow) else arrow


def as_log_types(appended: pa.Schema, log: pa.Schema) -> pa.Schema:
    """`appended` with each column whose type is what the log's column of that name reads as in
    Spark (a uint32 column reads as long) given the log's type: the tasks' checked cast
    (`schema.conform`) then stores the log's type, and fails on a value it cannot hold instead
    of wrapping."""
    return pa.schema([_as_log_type(f, log) for f in appended], metadata=appended.metadata)


def _as_log_type(f: pa.Field, log: pa.Schema) -> pa.Field:
    at = log.get_field_index(f.name)
    if at < 0 or log.field(at).type.equals(f.type):
        return f
    stored = log.field(at).type
    try:
        reads_as = spark_arrow_type(stored, f.name)
    except SchemaMismatch:
        return f
    if from_arrow_type(reads_as) != from_arrow_type(spark_arrow_type(f.type, f.name)):
        return f
    if find_type(stored, pa.types.is_float16) is not None:  # the cast would round, and overflow to inf
        raise SchemaMismatch(
            f"column {f.name!r} is {stored} in the log, which Spark reads as {f.type} but cannot "
            "append to: a float does not convert to a float16 exactly, and the conversion is not "
            "checked. Fix: append to this log with the Python API (LogWriter), converting the "
            "values yourself, or write the column to a log that stores it as float"
        )
    return f.with_type(stored)
