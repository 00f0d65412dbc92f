"""Catalog tables: `CREATE TABLE t USING wal3 OPTIONS (path '…')` (or `LOCATION '…'`).

Spark 4.3 hands a Python data source neither a catalog table's path nor its options when the
table is used: `PythonDataSourceV2.getTable` drops the table properties, so `SELECT`, `INSERT`
and `readStream.table()` reach `reader()`/`writer()` with only the statement's own options. What
Spark does hand over is the table's schema as the catalog stores it, field metadata included.
So when CREATE TABLE asks wal3 for the schema (`DataSource.schema()` gets the statement's
options, recognisable by Spark's `provider` property), the answer records the log's URL and its
non-secret store options in the metadata of the `_offset` column; reads and INSERTs find the log
there. Spark asks only when the statement has no column list and no AS SELECT (with a column list
it runs no data-source code at all, so such a table cannot know its log); the `schema` table
option takes the column list's place and creates the empty log. Streaming writes
(`writeStream.toTable`) get the query's schema, never the table's.

`_offset` and `_timestamp` are assigned by the log: the table marks them DEFAULT NULL, so
`INSERT INTO t (cols) …` and `INSERT INTO t BY NAME …` fill them with nulls, and the sink drops
them (refusing any value a statement puts there). Spark checks a positional INSERT's arity
against all the table's columns (it fills defaults only for DS v1 tables), so INSERTs name their
columns, unless the table is created with `metadataColumns 'false'`: then it has only the
payload columns (the location sits on the first one) and positional INSERTs work.

Design: docs/design/51-sql-tables.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.types import StructField, StructType

import wal3_spark.spark.options as opts
from wal3_spark.errors import InvalidOption, LogNotFound, SchemaMismatch
from wal3_spark.format.manifest import Manifest
from wal3_spark.format.schema import (
    OFFSET_COLUMN,
    TIMESTAMP_COLUMN,
    parse_schema,
    reconcile,
)

SYSTEM_COLUMNS = (OFFSET_COLUMN, TIMESTAMP_COLUMN)
#: `_offset` metadata keys that locate a table's log
LOG_KEY, STORE_OPTIONS_KEY = "wal3.log", "wal3.storeOptions"
#: Spark's metadata for a column declared DEFAULT NULL (ResolveDefaultColumns)
_DEFAULT_NULL = {"CURRENT_DEFAULT": "NULL", "EXISTS_DEFAULT": "NULL"}
#: properties Spark's session catalog adds to CREATE TABLE's options (TableCatalog.PROP_*)
_SPARK_PROPERTIES = frozenset({"provider", "owner", "location", "path", "external", "comment",
                               "collation", "is_managed_location", "table_type"})
_OPTION_PREFIX = "option."
#: the table option that declares the log's columns (CREATE TABLE's column list cannot)
SCHEMA_OPTION = "schema"
#: the table option that leaves `_offset`/`_timestamp` out of the table (positional INSERTs)
METADATA_COLUMNS_OPTION = "metadataColumns"


@dataclass(frozen=True)
class TableLog:
    """Where a catalog table's log lives: its URL and the store options that are no secret."""

    url: str
    store_options: tuple[tuple[str, str], ...] = ()
    #: the columns the `schema` option declares: the log is created with them when absent
    declared: pa.Schema | None = None
    #: whether the table has the `_offset` and `_timestamp` columns
    metadata_columns: bool = True

    def options(self) -> dict[str, str]:
        """The table's location as data-source options (`path` and store options)."""
        return {"path": self.url, **dict(self.store_options)}


def is_table_definition(options: Mapping[str, str]) -> bool:
    """Whether `DataSource.schema()` was called by CREATE TABLE (Spark adds `provider`)."""
    return any(k.lower() == "provider" for k in options)


def table_definition(options: Mapping[str, str]) -> TableLog:
    """CREATE TABLE's options checked: a path or LOCATION, and only non-secret store options.

    Read and write options given here would be stored in the catalog and never reach a query,
    and credentials would sit in the catalog in clear, so both are refused.
    """
    given = {k.lower(): v for k, v in options.items()}
    stores = {n.lower(): n for n in opts.store_option_names()}
    kept: list[tuple[str, str]] = []
    for key, value in given.items():
        if not key.startswith(_OPTION_PREFIX):
            continue  # Spark's own properties and TBLPROPERTIES: the catalog's business
        name = key[len(_OPTION_PREFIX):]
        if name in (SCHEMA_OPTION, METADATA_COLUMNS_OPTION.lower()):
            continue
        if name in stores and not opts.is_secret(name):
            kept.append((stores[name], value))
        elif name in stores:
            raise _refuse(name, "credentials in CREATE TABLE would be stored in the catalog; "
                                "give them through the environment (AWS_* variables, "
                                "spark.executorEnv.AWS_*) or an instance role")
        elif name not in _SPARK_PROPERTIES:
            raise _refuse(name, "Spark passes a table's options to neither reads nor writes; "
                                "give read and write options per statement, e.g. SELECT … FROM t "
                                "WITH ('verifyOnRead' = 'false') or spark.read.options(…).table(\"t\")")
    url = given.get("path") or given.get("location")
    if not url or not url.strip():
        raise InvalidOption(
            "CREATE TABLE … USING wal3 needs the log's URL: add OPTIONS (path 's3://bucket/logs/x')"
            " or LOCATION 's3://bucket/logs/x'"
        )
    declared = given.get(_OPTION_PREFIX + SCHEMA_OPTION)
    return TableLog(url.strip(), tuple(sorted(kept)),
                    None if declared is None else parse_schema(declared),
                    _metadata_columns(given.get(_OPTION_PREFIX + METADATA_COLUMNS_OPTION.lower())))


def _metadata_columns(value: str | None) -> bool:
    if value is None or value.strip().lower() == "true":
        return True
    if value.strip().lower() == "false":
        return False
    raise InvalidOption(f"wal3 table option {METADATA_COLUMNS_OPTION}={value!r}: valid values are "
                        "true (the table has _offset and _timestamp; INSERTs name their columns) "
                        "and false (payload columns only; positional INSERTs work)")


def table_manifest(log: TableLog) -> Manifest:
    """The manifest of a new table's log. With a declared schema an absent log is created empty
    with it (what a column list would do), and an existing log must take appends of it.

    Only CREATE TABLE gets here, so the committer is imported here: every role parses its
    options through this module, a streaming query's source runner included
    (`wal3_spark.spark.source`)."""
    from wal3_spark.log.committer import Committer

    committer = Committer(opts.location(log.options()).open_store(), writer="wal3-spark table")
    if log.declared is None:
        loaded = committer.load()
        if loaded is None:
            raise LogNotFound(log.url, "declare its columns and the table creates it empty: CREATE "
                              f"TABLE t USING wal3 OPTIONS (path '…', {SCHEMA_OPTION} 'id BIGINT, "
                              "name STRING'); or `wal3 init URL`, or an append")
        return loaded[0]
    manifest, _ = committer.create(log.declared)
    existing = manifest.arrow_schema()
    try:
        reconcile(existing, log.declared, merge=False, raw_log=existing is None)
    except SchemaMismatch as exc:
        raise SchemaMismatch(
            f"the log at {log.url} exists, and appends of the columns the {SCHEMA_OPTION} option "
            f"declares would not fit it; leave the option out (the table takes the log's columns) "
            f"or declare columns the log takes. {exc}".split("\nFix:")[0]) from None
    return manifest


def _refuse(name: str, why: str) -> InvalidOption:
    valid = ["path", SCHEMA_OPTION, METADATA_COLUMNS_OPTION] + [
        n for n in opts.store_option_names() if not opts.is_secret(n)]
    return InvalidOption(f"wal3 table option {name}: {why}. Valid options for CREATE TABLE … "
                         f"USING wal3: {', '.join(valid)}")


def table_schema(read_schema: StructType, log: TableLog) -> StructType:
    """A log's read schema as a catalog table keeps it: `_offset` and `_timestamp` nullable and
    DEFAULT NULL (what an INSERT gives them), with comments, and the log's location in
    `_offset`'s metadata. Without metadata columns, only the payload columns, the location in
    the first one's metadata."""
    location: dict[str, object] = {LOG_KEY: log.url, STORE_OPTIONS_KEY: dict(log.store_options)}
    if not log.metadata_columns:
        first, *rest = [f for f in read_schema.fields if f.name not in SYSTEM_COLUMNS]
        return StructType([StructField(first.name, first.dataType, first.nullable,
                                       {**first.metadata, **location}), *rest])
    notes: dict[str, dict[str, object]] = {
        OFFSET_COLUMN: {"comment": f"the record's offset in the wal3 log {log.url}, assigned by "
                                   "the log: INSERTs name their columns (INSERT INTO t (a, b) … or "
                                   "INSERT INTO t BY NAME …), or the table is created with "
                                   f"{METADATA_COLUMNS_OPTION} 'false'", **location},
        TIMESTAMP_COLUMN: {"comment": "when the record's fragment was written"},
    }
    return StructType([
        StructField(f.name, f.dataType, True, {**f.metadata, **_DEFAULT_NULL, **notes[f.name]})
        if f.name in notes else f
        for f in read_schema.fields
    ])


def table_log(schema: StructType | None) -> TableLog | None:
    """The log a catalog table's schema names (on `_offset`, or on its first column when it has
    no metadata columns), if it names one."""
    if schema is None or not schema.fields:
        return None
    marked = schema[OFFSET_COLUMN] if OFFSET_COLUMN in schema.fieldNames() else schema.fields[0]
    metadata = marked.metadata or {}
    url = metadata.get(LOG_KEY)
    if not isinstance(url, str) or not url:
        return None
    store = metadata.get(STORE_OPTIONS_KEY) or {}
    return TableLog(url, tuple(sorted((str(k), str(v)) for k, v in store.items())),
                    metadata_columns=OFFSET_COLUMN in schema.fieldNames())


def with_table_location(options: Mapping[str, str], schema: StructType | None) -> dict[str, str]:
    """`options`, completed with the location of the table `schema` comes from when they name no
    path (the statement's own options win)."""
    given = dict(options)
    log = table_log(schema)
    if log is None or any(k.lower() == "path" for k in given):
        return given
    present = {k.lower() for k in given}
    return {**{k: v for k, v in log.options().items() if k.lower() not in present}, **given}


def payload_schema(schema: StructType) -> StructType:
    """An INSERT's schema without the columns the log assigns nor the table's location."""
    return StructType([
        StructField(f.name, f.dataType, f.nullable,
                    {k: v for k, v in (f.metadata or {}).items() if k not in (LOG_KEY, STORE_OPTIONS_KEY)})
        for f in schema.fields if f.name not in SYSTEM_COLUMNS
    ])


def drop_system_columns(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """An INSERT's rows without `_offset` and `_timestamp`, which must be null (their DEFAULT):
    the log assigns them, and a statement that sets them is refused before anything commits."""
    for batch in batches:
        for name in SYSTEM_COLUMNS:
            column = batch.schema.get_field_index(name)
            if column >= 0 and batch.column(column).null_count != batch.num_rows:
                raise SchemaMismatch(
                    f"{name} is assigned by the log and cannot be written; insert only the "
                    "payload columns, naming them: INSERT INTO t (id, name) SELECT … or INSERT "
                    "INTO t BY NAME SELECT … (a DataFrame of a wal3 table needs "
                    ".drop(\"_offset\", \"_timestamp\") and its log URL in save(url))"
                )
        yield batch.select([n for n in batch.schema.names if n not in SYSTEM_COLUMNS])
