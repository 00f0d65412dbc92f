"""Catalog tables: `CREATE TABLE t USING wal3 OPTIONS (path '…')` (or `LOCATION '…'`).

Spark 4.3 hands a Python data source neither a catalog table's path nor its options when the
table is used: `PythonDataSourceV2.getTable` drops the table properties, so `SELECT`, `INSERT`
and `readStream.table()` reach `reader()`/`writer()` with only the statement's own options. What
Spark does hand over is the table's schema as the catalog stores it, field metadata included.
So when CREATE TABLE asks wal3 for the schema (`DataSource.schema()` gets the statement's
options, recognisable by Spark's `provider` property), the answer records the log's URL and its
non-secret store options in the metadata of the `_offset` column; reads and INSERTs find the log
there. Spark asks only when the statement has no column list and no AS SELECT; streaming writes
(`writeStream.toTable`) get the query's schema, never the table's.

`_offset` and `_timestamp` are assigned by the log: the table marks them DEFAULT NULL, so
`INSERT INTO t (cols) …` and `INSERT INTO t BY NAME …` fill them with nulls, and the sink drops
them (refusing any value a statement puts there). Spark checks a positional INSERT's arity
against all the table's columns (it fills defaults only for DS v1 tables), so INSERTs name their
columns.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.types import StructField, StructType

from wal3_spark.errors import InvalidOption, SchemaMismatch
from wal3_spark.schema import OFFSET_COLUMN, TIMESTAMP_COLUMN
from wal3_spark.spark import options as opts

SYSTEM_COLUMNS = (OFFSET_COLUMN, TIMESTAMP_COLUMN)
#: `_offset` metadata keys that locate a table's log
LOG_KEY, STORE_OPTIONS_KEY = "wal3.log", "wal3.storeOptions"
#: Spark's metadata for a column declared DEFAULT NULL (ResolveDefaultColumns)
_DEFAULT_NULL = {"CURRENT_DEFAULT": "NULL", "EXISTS_DEFAULT": "NULL"}
#: properties Spark's session catalog adds to CREATE TABLE's options (TableCatalog.PROP_*)
_SPARK_PROPERTIES = frozenset({"provider", "owner", "location", "path", "external", "comment",
                               "collation", "is_managed_location", "table_type"})
_OPTION_PREFIX = "option."


@dataclass(frozen=True)
class TableLog:
    """Where a catalog table's log lives: its URL and the store options that are no secret."""

    url: str
    store_options: tuple[tuple[str, str], ...] = ()

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
    return TableLog(url.strip(), tuple(sorted(kept)))


def _refuse(name: str, why: str) -> InvalidOption:
    valid = ["path"] + [n for n in opts.store_option_names() if not opts.is_secret(n)]
    return InvalidOption(f"wal3 table option {name}: {why}. Valid options for CREATE TABLE … "
                         f"USING wal3: {', '.join(valid)}")


def table_schema(read_schema: StructType, log: TableLog) -> StructType:
    """A log's read schema as a catalog table keeps it: `_offset` and `_timestamp` nullable and
    DEFAULT NULL (what an INSERT gives them), with comments, and the log's location in
    `_offset`'s metadata."""
    notes = {
        OFFSET_COLUMN: {"comment": f"the record's offset in the wal3 log {log.url}",
                        LOG_KEY: log.url, STORE_OPTIONS_KEY: dict(log.store_options)},
        TIMESTAMP_COLUMN: {"comment": "when the record's fragment was written"},
    }
    return StructType([
        StructField(f.name, f.dataType, True, {**f.metadata, **_DEFAULT_NULL, **notes[f.name]})
        if f.name in notes else f
        for f in read_schema.fields
    ])


def table_log(schema: StructType | None) -> TableLog | None:
    """The log a catalog table's schema names (on its `_offset` column), if it names one."""
    if schema is None or OFFSET_COLUMN not in schema.fieldNames():
        return None
    metadata = schema[OFFSET_COLUMN].metadata or {}
    url = metadata.get(LOG_KEY)
    if not isinstance(url, str) or not url:
        return None
    store = metadata.get(STORE_OPTIONS_KEY) or {}
    return TableLog(url, tuple(sorted((str(k), str(v)) for k, v in store.items())))


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
    """An INSERT's schema without the columns the log assigns."""
    return StructType([f for f in schema.fields if f.name not in SYSTEM_COLUMNS])


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
