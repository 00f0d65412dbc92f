"""Which Arrow schemas may append to a log, and what the log's schema becomes.

The first append fixes a structured log's schema. Later appends must match by name and type;
nullability may widen (the log's column becomes nullable), a column the log has may be missing if
it is nullable (it reads as null), and new nullable columns are added only when the writer asks
for it (`merge_schema`, Spark's `mergeSchema`). A raw log (`body` only, no schema in the
manifest) never changes.

Design: docs/design/14-structured-logs.md.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import TypeVar

import numpy as np
import pyarrow as pa

from wal3_spark.errors import InvalidOption, SchemaMismatch
from wal3_spark.format.layout import ABSOLUTE_OFFSET, RELATIVE_OFFSET, TIMESTAMP

RAW_SCHEMA = pa.schema([pa.field("body", pa.binary(), nullable=False)])
OFFSET_COLUMN = "_offset"
TIMESTAMP_COLUMN = "_timestamp"
#: what `conform` converts: Arrow record batches and tables have the same column interface
Data = TypeVar("Data", pa.RecordBatch, pa.Table)
#: what a read adds to each record and what a fragment file stores beside the payload: the one
#: list of the column names a payload may not use (`check_columns`)
RESERVED = frozenset({OFFSET_COLUMN, TIMESTAMP_COLUMN, RELATIVE_OFFSET, TIMESTAMP, ABSOLUTE_OFFSET})


def is_raw_schema(schema: pa.Schema) -> bool:
    """A single binary `body` column: the data of a raw (Chroma-compatible) log."""
    return (
        len(schema) == 1
        and schema[0].name == "body"
        and (pa.types.is_binary(schema[0].type) or pa.types.is_large_binary(schema[0].type))
    )


def same_schema(a: pa.Schema | None, b: pa.Schema | None) -> bool:
    """Whether appends of schemas `a` and `b` (None: raw records) can share a fragment."""
    return (a is None and b is None) or (a is not None and b is not None and a.equals(b))


def _loose(t: pa.DataType) -> pa.DataType:
    """The type with every nested field nullable, so that types compare without nullability."""
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _loose(f.type)) for f in t])
    if pa.types.is_large_list(t):
        return pa.large_list(_loose(t.value_type))
    if pa.types.is_fixed_size_list(t):
        return pa.list_(_loose(t.value_type), t.list_size)
    if pa.types.is_list(t):
        return pa.list_(_loose(t.value_type))
    if pa.types.is_map(t):
        return pa.map_(_loose(t.key_type), _loose(t.item_type))
    if pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_large_binary(t):
        return pa.binary()
    return t


def _describe(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name} {f.type}{'' if f.nullable else ' NOT NULL'}" for f in schema)


def _mismatch(log: pa.Schema, incoming: pa.Schema, why: str, fix: str) -> SchemaMismatch:
    return SchemaMismatch(
        f"schema mismatch: {why}.\n  log schema:      {_describe(log)}\n"
        f"  appended schema: {_describe(incoming)}\n{fix}"
    )


def check_columns(schema: pa.Schema) -> None:
    """A payload schema uses no reserved name and no name twice (SchemaMismatch otherwise)."""
    clash = sorted(RESERVED & set(schema.names))
    if clash:
        raise SchemaMismatch(
            f"column(s) {clash} are reserved by wal3 (offsets and timestamps are added on read); "
            "rename them before appending"
        )
    if len(set(schema.names)) != len(schema.names):
        raise SchemaMismatch(f"duplicate column names in {schema.names}")


def reconcile(log: pa.Schema | None, incoming: pa.Schema, *, merge: bool, raw_log: bool) -> pa.Schema | None:
    """The log's schema after appending data of schema `incoming`; raises SchemaMismatch.

    `log` is None for a new log (and for a raw log, with `raw_log` True). Returns None for a raw
    log, else the (possibly widened) structured schema.
    """
    if raw_log:
        if not is_raw_schema(incoming):
            raise SchemaMismatch(
                "this is a raw log (a single binary `body` column); appended schema is "
                f"{_describe(incoming)}. Append a DataFrame with exactly one binary column `body`, "
                "or write structured data to a new log"
            )
        return None
    check_columns(incoming)
    if log is None:
        return incoming
    fix = "Fix: select and cast the columns to the log schema" + (
        "" if merge else ", or set mergeSchema=true to add new nullable columns"
    )
    fields = []
    by_name = {f.name: f for f in incoming}
    for lf in log:
        inf = by_name.pop(lf.name, None)
        if inf is None:
            if not lf.nullable:
                raise _mismatch(log, incoming, f"required column {lf.name!r} is missing", fix)
            fields.append(lf)
            continue
        if _loose(inf.type) != _loose(lf.type):
            raise _mismatch(
                log, incoming, f"column {lf.name!r} is {inf.type}, the log has {lf.type}", fix
            )
        fields.append(lf.with_nullable(lf.nullable or inf.nullable))
    if by_name:
        extra = list(by_name)
        if not merge:
            raise _mismatch(log, incoming, f"new column(s) {extra} not in the log", fix)
        fields.extend(f.with_nullable(True) for f in incoming if f.name in by_name)
    return pa.schema(fields, metadata=log.metadata)


#: what pyarrow's checked cast raises for values it refuses (ArrowIndexError: more distinct
#: values than a dictionary's index type holds, e.g. 300 strings into dictionary<int8, string>)
_CAST_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, pa.ArrowIndexError)


def conform(data: Data, target: pa.Schema, *, exact: bool = False, against: str = "log") -> Data:
    """`data` (a batch or a table) with exactly the schema `target`, or SchemaMismatch.

    The one conversion of every path: appends (to the log's schema), the fragment codec
    (`exact`: the payload's names in the schema's order, nothing else), reads (a fragment written
    before a mergeSchema append, to the log's current schema) and Spark reads (to the query's
    schema, which PySpark requires exactly). Columns are taken by name, so a column `target`
    lacks is left out (one a log gained after a query started); a nullable column `data` lacks
    reads as nulls; types are cast where they differ. A missing NOT NULL column, a failed cast or
    nulls in a NOT NULL column raise, naming both schemas (`against`: what `target` is).
    """
    if exact and data.schema.names != target.names:
        raise _data_mismatch(data, target, against, "the column names or their order differ")
    columns = []
    for f in target:
        idx = data.schema.get_field_index(f.name)
        if idx < 0:
            if not f.nullable:
                raise _data_mismatch(data, target, against, f"column {f.name!r} is missing and NOT NULL")
            columns.append(pa.nulls(data.num_rows, f.type))
            continue
        column = data.column(idx)
        if not f.nullable and column.null_count:
            why = f"{column.null_count} nulls in NOT NULL column {f.name!r}"
            raise _data_mismatch(data, target, against, why)
        if not column.type.equals(f.type):
            try:
                column = cast(column, f.type)
            except _CAST_ERRORS as exc:
                why = (f"column {f.name!r} of type {column.type} cannot be cast to {f.type}"
                       f"{_where_inexact(data, column, f.type)}: {exc}")
                raise _data_mismatch(data, target, against, why, _cast_fix(f, against)) from None
        if exact and find_type(f.type, pa.types.is_date64) is not None:  # only those are checked
            _check_whole_days(f.name, column)
        columns.append(column)
    return type(data).from_arrays(columns, schema=target)


def cast(column: pa.Array | pa.ChunkedArray, to: pa.DataType) -> pa.Array | pa.ChunkedArray:
    """`column` as type `to`, by pyarrow's checked cast; a dictionary type is reached by
    encoding, which pyarrow's cast does for strings only (Parquet hands back a dictionary of
    integers, e.g. dictionary<uint8>, as plain values)."""
    if pa.types.is_dictionary(to) and not pa.types.is_dictionary(column.type):
        return column.cast(to.value_type).dictionary_encode().cast(to)
    try:
        return column.cast(to)
    except pa.ArrowNotImplementedError:
        if isinstance(column, pa.ChunkedArray):
            return pa.chunked_array([_cast_nested(chunk, to) for chunk in column.chunks], to)
        return _cast_nested(column, to)


def _cast_nested(array: pa.Array, to: pa.DataType) -> pa.Array:
    """`cast` of a list or struct array child by child (a dictionary of integers inside it is
    beyond pyarrow's cast); any other type raises what pyarrow's cast raised."""
    if array.offset:  # a slice: rebuilt with offset 0, as the constructors need with a mask
        array = pa.concat_arrays([array])
    mask = array.is_null() if array.null_count else None
    if pa.types.is_struct(to) and pa.types.is_struct(array.type):
        children = [cast(array.field(f.name), f.type) for f in to]
        return pa.StructArray.from_arrays(children, fields=list(to), mask=mask)
    for kind, is_kind in ((pa.ListArray, pa.types.is_list), (pa.LargeListArray, pa.types.is_large_list)):
        if is_kind(to) and is_kind(array.type):
            return kind.from_arrays(array.offsets, cast(array.values, to.value_type), type=to, mask=mask)
    return array.cast(to)


#: a date64 is milliseconds, but Parquet stores dates as days (DATE): the part of a day would be
#: lost in the fragment, and its setsum (hashed on the milliseconds) would never verify
_MS_PER_DAY = 86_400_000


def find_type(t: pa.DataType, pred: Callable[[pa.DataType], bool]) -> pa.DataType | None:
    """The first part of type `t` (itself, a stored or dictionary value type, a nested field's
    type, depth first) for which `pred` holds, or None."""
    if isinstance(t, pa.BaseExtensionType):
        return find_type(t.storage_type, pred)
    if pa.types.is_dictionary(t):
        return find_type(t.value_type, pred)
    if pred(t):
        return t
    if pa.types.is_nested(t):
        for i in range(t.num_fields):
            found = find_type(t.field(i).type, pred)
            if found is not None:
                return found
    return None


def _check_whole_days(name: str, column: pa.Array | pa.ChunkedArray) -> None:
    """SchemaMismatch when a date64 value in `column` (or nested in it) is not a whole day."""
    for values in _date64_parts(column):
        ms = np.asarray(values.cast(pa.int64()).fill_null(0))
        bad = np.flatnonzero(ms % _MS_PER_DAY)
        if len(bad):
            raise SchemaMismatch(
                f"column {name!r} holds {len(bad)} date64 value(s) that are not whole days "
                f"(e.g. {int(ms[bad[0]])} ms): a fragment stores dates as days (Parquet DATE) and "
                "would lose the rest. Fix: append timestamps (timestamp[ms]) to keep the time of "
                "day, or truncate the values to days"
            )


def _date64_parts(array: pa.Array | pa.ChunkedArray) -> Iterator[pa.Array]:
    """The date64 arrays in `array`: itself, its chunks, or the values of its nested fields."""
    if isinstance(array, pa.ChunkedArray):
        for chunk in array.chunks:
            yield from _date64_parts(chunk)
        return
    t = array.type
    if pa.types.is_date64(t):
        yield array
    elif pa.types.is_dictionary(t):
        yield from _date64_parts(array.dictionary)
    elif pa.types.is_struct(t):
        for child in array.flatten():  # null where the struct is null: hidden values are not stored
            yield from _date64_parts(child)
    elif pa.types.is_map(t):
        yield from _date64_parts(array.keys)
        yield from _date64_parts(array.items)
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        yield from _date64_parts(array.flatten())


def _where_inexact(data: Data, column: pa.Array | pa.ChunkedArray, to: pa.DataType) -> str:
    """Which rows hold the values that do not convert exactly to type `to` (a value the cast
    would truncate or wrap): their offsets when `data` is a read's output (it has `_offset`),
    else their row numbers. Where values cannot be compared (nested types), the range of all of
    `data`'s rows.

    Only a refused read or append gets here: pyarrow.compute is imported here, not with the
    module, which every streaming source's fresh runner process imports to plan
    (`wal3_spark.spark.source`)."""
    import pyarrow.compute as pc

    try:
        back = column.cast(to, safe=False).cast(column.type, safe=False)
        rows = pc.indices_nonzero(pc.fill_null(pc.not_equal(back, column), False))
    except _CAST_ERRORS:
        rows = None
    if rows is not None and not len(rows):
        return ""
    first, last = (0, data.num_rows - 1) if rows is None else (rows[0].as_py(), rows[-1].as_py())
    what = "in the records" if rows is None else f"{len(rows)} value(s)"
    if OFFSET_COLUMN in data.schema.names:
        offsets = data.column(OFFSET_COLUMN)
        return f" exactly: {what} at offsets [{offsets[first].as_py()}, {offsets[last].as_py()}]"
    return f" exactly: {what} in rows [{first}, {last}] of the data"


def _cast_fix(f: pa.Field, against: str) -> str:
    if against == "query":  # a Spark read: its types are coarser than the log's (spark/schemas)
        return (f"\nFix: read these records with wal3's Python API (LogReader, LogScan), which "
                f"returns the stored types, or append only values that {f.type} holds exactly")
    return f"\nFix: append only values that the {against}'s type {f.type} holds"


def _data_mismatch(data: Data, target: pa.Schema, against: str, why: str, fix: str = "") -> SchemaMismatch:
    return SchemaMismatch(
        f"the data's schema does not match the {against}'s ({why}).\n"
        f"data:\n{data.schema.to_string(show_schema_metadata=False)}\n"
        f"{against}:\n{target.to_string(show_schema_metadata=False)}{fix}"
    )


#: Spark SQL type names as the Arrow types a Spark DataFrame column of that type appends (so a
#: log declared in SQL takes the appends of the DataFrames that SQL users write)
_SQL_TYPES = {
    "boolean": pa.bool_(), "tinyint": pa.int8(), "byte": pa.int8(), "smallint": pa.int16(),
    "short": pa.int16(), "int": pa.int32(), "integer": pa.int32(), "bigint": pa.int64(),
    "long": pa.int64(), "float": pa.float32(), "real": pa.float32(), "double": pa.float64(),
    "string": pa.string(), "binary": pa.binary(), "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"), "timestamp_ntz": pa.timestamp("us"),
}
_PARAMETRIC = (
    (r"timestamp\[(s|ms|us|ns)(?:,\s*tz=([^\]]+))?\]", lambda m: pa.timestamp(m[1], tz=m[2])),
    (r"(?:decimal|dec|numeric|decimal128)\((\d+)(?:,\s*(\d+))?\)",
     lambda m: pa.decimal128(int(m[1]), int(m[2] or 0))),
    (r"(?:var)?char\(\d+\)", lambda m: pa.string()),
)
_FIELD = re.compile(r"\s*(`[^`]+`|[^\s:`]+)\s*(?::\s*|\s+)(.+?)(\s+not\s+null)?\s*", re.I | re.S)
_TYPE_HELP = ("a Spark SQL type (BIGINT, INT, DOUBLE, STRING, BINARY, BOOLEAN, DATE, TIMESTAMP, "
              "DECIMAL(p,s), ...) or an Arrow type name (int64, float64, string, "
              "timestamp[us, tz=UTC], ...)")


def parse_schema(text: str) -> pa.Schema:
    """A flat schema written as `"id: int64, name: string not null"` (Arrow type names, as
    `wal3 init --schema` takes it) or `"id BIGINT, name STRING NOT NULL"` (Spark SQL DDL, as a
    SQL table's `schema` option takes it). Nested types are not parsed: a log with nested
    columns gets its schema from its first append."""
    fields = []
    for part in filter(str.strip, _split_top_level(text)):
        match = _FIELD.fullmatch(part)
        if match is None:
            raise InvalidOption(f"bad schema field {part.strip()!r}: write NAME TYPE or NAME: TYPE, "
                                "e.g. 'id BIGINT' or 'id: int64'")
        name, type_text = match[1].strip("`"), match[2].strip()
        fields.append(pa.field(name, _arrow_type(name, type_text), nullable=match[3] is None))
    if not fields:
        raise InvalidOption("the schema names no columns: write NAME TYPE, ..., e.g. 'id BIGINT'")
    schema = pa.schema(fields)
    try:
        check_columns(schema)
    except SchemaMismatch as exc:
        raise InvalidOption(str(exc)) from None
    return schema


def _split_top_level(text: str) -> list[str]:
    """`text` cut at the commas outside brackets (a type's own commas stay: decimal(10, 2))."""
    parts, depth, current = [], 0, ""
    for ch in text:
        depth += (ch in "[(<") - (ch in "])>")
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    return [*parts, current]


def _arrow_type(name: str, text: str) -> pa.DataType:
    low = text.lower()
    if low in _SQL_TYPES:
        return _SQL_TYPES[low]
    for pattern, build in _PARAMETRIC:
        match = re.fullmatch(pattern, text, re.I)
        if match:
            return build(match)
    try:
        return pa.type_for_alias(text)
    except (ValueError, TypeError):
        raise InvalidOption(f"unknown type {text!r} for column {name!r}: use {_TYPE_HELP}") from None
