"""Which Arrow schemas may append to a log, and what the log's schema becomes.

The first append fixes a structured log's schema. Later appends must match by name and type;
nullability may widen (the log's column becomes nullable), a column the log has may be missing if
it is nullable (it reads as null), and new nullable columns are added only when the writer asks
for it (`merge_schema`, Spark's `mergeSchema`). A raw log (`body` only, no schema in the
manifest) never changes.
"""

from __future__ import annotations

import pyarrow as pa

from wal3_spark.errors import SchemaMismatch

RAW_SCHEMA = pa.schema([pa.field("body", pa.binary(), nullable=False)])
OFFSET_COLUMN = "_offset"
TIMESTAMP_COLUMN = "_timestamp"
RESERVED = frozenset({OFFSET_COLUMN, TIMESTAMP_COLUMN, "relative_offset", "timestamp_us", "offset"})


def is_raw_schema(schema: pa.Schema) -> bool:
    """A single binary `body` column: the data of a raw (Chroma-compatible) log."""
    return (
        len(schema) == 1
        and schema[0].name == "body"
        and (pa.types.is_binary(schema[0].type) or pa.types.is_large_binary(schema[0].type))
    )


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


def conform(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """`batch` reordered and cast to `target`: missing nullable columns become null."""
    columns = []
    for f in target:
        idx = batch.schema.get_field_index(f.name)
        if idx < 0:
            columns.append(pa.nulls(batch.num_rows, f.type))
            continue
        column = batch.column(idx)
        if not column.type.equals(f.type):
            column = column.cast(f.type)
        if not f.nullable and column.null_count:
            raise SchemaMismatch(f"column {f.name!r} is NOT NULL in the log but has null values")
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, schema=target)
