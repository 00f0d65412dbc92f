"""Native scan: a wal3 log as a DataFrame on Spark's own Parquet reader, for analytics.

    from wal3_spark.spark import Wal3Log
    df = Wal3Log.forPath(spark, "s3://bucket/logs/orders").toDF(startingOffsets=1000)

`spark.read.format("wal3")` runs through a Python data source: every column of every row
crosses the Python worker, and Spark can neither prune columns nor count from file footers.
Fragments are plain Parquet files, so this scan hands them to Spark's vectorised Parquet
reader instead: the driver reads the manifest (one GET, plus the snapshots covering the range),
resolves the range exactly as the data source does, and lists the fragments that hold it.
Spark then prunes columns, pushes filters into row groups and answers `count()` without
decoding data. The columns and values are those of `format("wal3")`: the payload columns (a
fragment written before a `mergeSchema` append reads the newer columns as null), `_offset`
(the fragment's start in the manifest plus the row's position in its file, Parquet's
`_metadata.row_index`, which costs no decoding) and `_timestamp` (the fragment's `timestamp_us`,
the value `format("wal3")` returns: taken from the fragment's UUIDv7 path where that provably
equals it, in structured logs (`fragment_io.exact_path_timestamp_us`), else read from the file's
column). Rows outside the range in the first and last fragment are filtered by row index. A
payload column named `_metadata` hides Spark's file metadata from SQL text; the scan then
reaches it through `DataFrame.metadataColumn`.

It does NOT verify setsums: the bytes are trusted as they are read. It does check, from their
Parquet footers, that the log's first and last fragment hold the records the manifest says
(the only ranges the manifest's own checks cannot pin). Scrub the log with
`jobs/verify.py` (distributed) or `wal3 verify`, or read with `format("wal3")` (which checks
every fragment) when that matters more than speed. The DataFrame is fixed to the fragments the
log held when `toDF` ran; call it again to see later appends.

`toDF` reads the manifest and plans the range on every call, so a new manifest is seen by the
next call. Building the DataFrame of a plan costs 29-32 py4j round trips, Spark's listing of the
files and the analysis of its expressions (0.2-0.8 s under load, inside the time of every query
that calls `toDF`; docs/benchmarks.md, "Native scan"), so while the plan (files, row ranges,
per-file values, schema), the reader options and the session are those of an earlier call, the
DataFrame that call built is reused (`_BUILT`): but never returned itself. Each call returns it
renamed to its own names (`DataFrame.toDF`, one JVM call: every column an alias), so every
`toDF()` result has attribute ids of its own and two of them join as two relations
(`a.join(b, a.id == b.id)`), not as a self-join of one plan, which is what returning one
DataFrame twice did.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, functions as F
from pyspark.sql.types import DataType, DecimalType, StructField, StructType

from wal3_spark.errors import CorruptLog, InvalidOption, ScanUnsupported
from wal3_spark.format.layout import MANIFEST_KEY, RELATIVE_OFFSET, TIMESTAMP
from wal3_spark.format.manifest import Manifest
from wal3_spark.format.schema import OFFSET_COLUMN, RESERVED, TIMESTAMP_COLUMN
from wal3_spark.format.stream_filter import ValueFilter
from wal3_spark.log.fragment_io import (
    ReadRange,
    check_columns_known,
    exact_path_timestamp_us,
    fragment_footer,
)
from wal3_spark.log.parents import parent_store
from wal3_spark.log.reader import LogReader
from wal3_spark.spark import options as opts
from wal3_spark.spark.hadoop import driver_store, hadoop_options, hadoop_url
from wal3_spark.spark.planning import positions, resolve, value_filters
from wal3_spark.spark.schemas import (
    check_parquet_readable,
    native_conversions,
    payload_to_spark,
)
from wal3_spark.storage.base import ObjectStore
from wal3_spark.storage.common import join_url

logger = logging.getLogger(__name__)

#: the read options `toDF` takes (store options go to `forPath`)
RANGE_OPTIONS = ("startingOffsets", "endingOffsets", "startingTimestamp", "endingTimestamp",
                 "failOnDataLoss", "tag", "filterColumn", "filterValues")
#: up to this many fragments, each one's start and write time are literals in one CASE on its
#: file name; beyond, a broadcast join with a table of them (a CASE with thousands of branches
#: outgrows Spark's generated code). docs/benchmarks.md compares the two.
CASE_LIMIT = 64

#: Spark's hidden file metadata column (`file_name`, `row_index`)
METADATA = "_metadata"
#: the scan's temporary columns, renamed when a payload column has one of these names
_META, _FILE, _ROW, _START, _TIME = ("__wal3_meta", "__wal3_file", "__wal3_row", "__wal3_start",
                                     "__wal3_time_us")
#: built DataFrames `toDF` keeps, at most this many (least recently used dropped): each holds
#: JVM objects alive (its Parquet relation with the files' listing, its analysed plan)
BUILT_LIMIT = 16


@dataclass(frozen=True)
class ScanFile:
    """One fragment a scan reads, and the rows of it [lo, hi) (positions in the file) it keeps."""

    url: str
    #: the file's name, unique in its log: what Spark's `_metadata.file_name` says
    name: str
    start: int
    records: int
    lo: int
    hi: int
    #: its `timestamp_us`, known without reading it (None: read from the file)
    timestamp_us: int | None


@dataclass(frozen=True)
class ScanPlan:
    payload: pa.Schema | None
    files: tuple[ScanFile, ...]
    #: the rows wanted (filterColumn/filterValues); None: all
    values: ValueFilter | None = None

    @property
    def timestamps_in_files(self) -> bool:
        """Whether `_timestamp` is read from the files' `timestamp_us` column: some fragment's
        path does not prove its time (raw logs, Chroma S3 logs)."""
        return any(f.timestamp_us is None for f in self.files)


@dataclass(frozen=True)
class _Built:
    """A DataFrame `toDF` built and what it was built from: reused only for the same session, an
    equal plan (a new manifest that changes the range's files, rows, per-file values or schema
    changes the plan) and equal reader options, and only through a rename (`Wal3Log.toDF`)."""

    spark: Any
    plan: ScanPlan
    reader_options: tuple[tuple[str, str], ...]
    #: `CASE_LIMIT` when it was built (a benchmark or test compares the CASE and the join)
    case_limit: int
    df: DataFrame
    #: its column names, known without asking the JVM (or, over Connect, the server)
    names: tuple[str, ...]


#: the last DataFrame built per (log URL, store options, toDF options), most recent last
_BUILT: OrderedDict[tuple[str, tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]], _Built] = OrderedDict()


def plan_scan(store: ObjectStore, manifest: Manifest, root: str, options: opts.Wal3Options) -> ScanPlan:
    """The fragments (as Hadoop URLs under `root`) holding the range `options` name, resolved
    as `spark.read.format("wal3")` resolves it."""
    reader = LogReader(store)
    starting, ending = positions(options, store, manifest)
    start = resolve(reader, manifest, starting, default=manifest.oldest_offset)
    limit = resolve(reader, manifest, ending, default=manifest.next_offset)
    values, _ = value_filters(manifest, (options.filter_column, options.filter_values), url=store.url)
    ranges = reader.plan(start, limit, manifest=manifest, fail_on_data_loss=options.fail_on_data_loss,
                         values=values)
    _check_boundary_counts(store, manifest, ranges)
    payload = manifest.arrow_schema()
    return ScanPlan(payload, tuple(_scan_file(root, r, payload is not None) for r in ranges), values)


def _check_boundary_counts(store: ObjectStore, manifest: Manifest, ranges: Sequence[ReadRange]) -> None:
    """The log's first and last fragment, when the scan reads them, hold the records their
    range says (from the Parquet footer: one small range GET each). The manifest's checks
    cannot show a damaged `limit` of the last fragment that stays above its `start` (or a first
    fragment's `start`: nothing precedes it), and this scan takes offsets from the manifest
    and row positions without decoding, so a wrong count would read a shorter or shifted log
    silently. Every other fragment's range is pinned by its neighbours; `format("wal3")`
    checks every fragment's count as it decodes it.

    The same footers, and those of the first and last fragment the scan reads (at most two more
    GETs), show the fragments' columns are the log's (`check_columns_known`): a damaged schema
    that renames a column would otherwise read it as nulls."""
    ends = {manifest.fragments[-1].path} if manifest.fragments else set()
    if manifest.fragments and not manifest.snapshots:
        ends.add(manifest.fragments[0].path)
    outer = {ranges[0].ref.path, ranges[-1].ref.path} if ranges else set()
    for part in ranges:
        if part.ref.path in ends | outer:
            # a branch's parent's fragment lives in the parent's store (`ReadRange.root`)
            holder = store if part.root is None else parent_store(store, part.root)
            footer = fragment_footer(holder, part.ref)
            columns = [n for n in footer.schema.to_arrow_schema().names if n not in RESERVED]
            check_columns_known(part.ref.path, columns, manifest.arrow_schema())
            rows = footer.num_rows
            if part.ref.path in ends and rows != part.ref.records:
                raise CorruptLog("a fragment holds limit - start records", part.ref.path,
                                 f"holds {rows} records, the manifest ({MANIFEST_KEY}) says "
                                 f"{part.ref.records}")


def _scan_file(root: str, part: ReadRange, structured: bool) -> ScanFile:
    """One file to scan; a branch's parent's fragment (`ReadRange.root`) under the parent's root."""
    ref = part.ref
    timestamp_us = exact_path_timestamp_us(ref, structured)
    return ScanFile(
        url=join_url(root if part.root is None else hadoop_url(part.root), ref.path),
        name=ref.path.rsplit("/", 1)[-1],
        start=ref.start,
        records=ref.records,
        lo=part.start - ref.start,
        hi=part.limit - ref.start,
        timestamp_us=timestamp_us,
    )


def scan_dataframe(spark: Any, plan: ScanPlan, reader_options: Mapping[str, str]) -> DataFrame:
    """The DataFrame of `plan`: payload columns, `_offset`, `_timestamp`, as the data source.

    Its expressions are SQL text (one `selectExpr`, and a `where` for a range that starts or
    ends inside a fragment) rather than Column objects: in a classic session every Column
    operation is a round trip to the JVM, and building the per-file CASEs that way took ~350 of
    them for 4 fragments, inside the time of every query that calls `toDF`.
    """
    check_parquet_readable(plan.payload)
    schema = payload_to_spark(plan.payload)
    payload = list(schema.fields[:-2])
    if not plan.files:
        return spark.createDataFrame([], schema)
    _check_case_insensitive_names(spark, [field.name for field in payload])
    in_files = plan.timestamps_in_files
    converted = native_conversions(plan.payload)  # read as the reader can, converted in the select
    read = [StructField(f.name, converted[f.name].read_type, f.nullable) if f.name in converted else f
            for f in payload]
    read_schema = StructType(read + ([StructField(TIMESTAMP, DecimalType(20, 0))] if in_files else []))
    df = spark.read.options(**reader_options).schema(read_schema).parquet(*[f.url for f in plan.files])
    taken = {name.lower() for name in read_schema.names}
    df, meta = _file_metadata(df, taken)
    keep = _kept_rows(plan.files, meta)
    if keep:
        df = df.where(" AND ".join(keep))
    df, offset, time_us = _per_file_values(spark, df, plan.files, meta, taken)
    if in_files:  # uint64 in Parquet; Spark reads it as decimal(20, 0)
        time_us = f"CAST({_quoted(TIMESTAMP)} AS BIGINT)"
    return df.selectExpr(
        *[_quoted(f.name) if f.name not in converted
          else f"{converted[f.name].sql(_quoted(f.name), offset)} AS {_quoted(f.name)}" for f in payload],
        f"{offset} AS {_quoted(OFFSET_COLUMN)}",
        f"timestamp_micros({time_us}) AS {_quoted(TIMESTAMP_COLUMN)}",
    )


def _check_case_insensitive_names(spark: Any, names: Sequence[str]) -> None:
    """ScanUnsupported when payload columns differ only in case from each other or from a
    structured fragment's own columns (`relative_offset`, `timestamp_us`; Chroma's absolute
    `offset` only sits in raw logs, beside `body`), and the session matches names
    case-insensitively (Spark's default): its Parquet reader then cannot tell them apart in the
    files ("Found duplicate field(s)"), or refuses the read schema."""
    seen: dict[str, list[str]] = {}
    for name in [*names, RELATIVE_OFFSET, TIMESTAMP]:
        seen.setdefault(name.lower(), []).append(name)
    clashes = sorted(name for group in seen.values() if len(group) > 1 for name in group)
    if not clashes or spark.conf.get("spark.sql.caseSensitive", "false").lower() == "true":
        return
    raise ScanUnsupported(
        f"the log's columns and the fragments' own columns include {clashes}, which differ only "
        "in case: Spark's Parquet reader matches column names case-insensitively in this session "
        "and cannot tell them apart. Read the log with spark.read.format(\"wal3\"), or set "
        "spark.sql.caseSensitive=true for the session (before the query runs)"
    )


def _file_metadata(df: DataFrame, taken: set[str]) -> tuple[DataFrame, str]:
    """`df` and the SQL name of Spark's file metadata struct in it: `_metadata`, unless a
    payload column has that name (Spark's analyzer compares names case-insensitively), which
    hides the metadata from SQL text; then the struct is selected once more under a free name
    through `DataFrame.metadataColumn` (classic and Connect alike), for the final select to
    drop."""
    if METADATA not in taken:
        return df, METADATA
    name = _free_name(_META, taken)
    return df.select("*", df.metadataColumn(METADATA).alias(name)), _quoted(name)


def _free_name(base: str, taken: set[str]) -> str:
    """`base`, prefixed with underscores until no payload column (lower-cased in `taken`) has
    its name: the scan's temporary columns never shadow the log's own."""
    while base.lower() in taken:
        base = "_" + base
    return base


def _kept_rows(files: Sequence[ScanFile], meta: str) -> list[str]:
    """Conditions dropping the rows of a fragment outside the range: the first and last
    fragment's, and a branch's parent fragment its branch point cuts (none when every range
    starts and ends on fragment boundaries); `meta` names the file metadata."""
    conditions = []
    for f in files:
        if f.lo > 0:
            conditions.append(f"NOT ({meta}.file_name = {_sql_string(f.name)} "
                              f"AND {meta}.row_index < {f.lo})")
        if f.hi < f.records:
            conditions.append(f"NOT ({meta}.file_name = {_sql_string(f.name)} "
                              f"AND {meta}.row_index >= {f.hi})")
    return conditions


def _per_file_values(
    spark: Any, df: DataFrame, files: Sequence[ScanFile], meta: str, taken: set[str]
) -> tuple[DataFrame, str, str]:
    """Each row's offset (its fragment's start + its row index) and write time, as SQL
    expressions over `df` (or over what it becomes).

    Few files: one CASE on the file name per value. Many: a left join with a broadcast table
    that is unique on the file name, which Spark removes from queries that use neither value
    (counts and aggregates of payload columns keep reading no more than they need). The join's
    columns take names no payload column has (`taken`).
    """
    if len(files) <= CASE_LIMIT:
        names = [_sql_string(f.name) for f in files]
        start = " ".join(f"WHEN {name} THEN {f.start}" for name, f in zip(names, files, strict=True))
        time_us = " ".join(f"WHEN {name} THEN {f.timestamp_us or 0}" for name, f in zip(names, files, strict=True))
        return (
            df,
            f"CASE {meta}.file_name {start} END + {meta}.row_index",
            f"CASE {meta}.file_name {time_us} END",
        )
    file, row, start, time = (_free_name(n, taken) for n in (_FILE, _ROW, _START, _TIME))
    values = spark.createDataFrame(
        [(f.name, f.start, f.timestamp_us or 0) for f in files],
        f"{file} string, {start} long, {time} long",
    ).groupBy(file).agg(F.max(start).alias(start), F.max(time).alias(time))
    located = df.selectExpr("*", f"{meta}.file_name AS {file}", f"{meta}.row_index AS {row}")
    joined = located.join(F.broadcast(values), file, "left")
    return joined, f"{start} + {row}", time


def _quoted(name: str) -> str:
    """A top-level column's exact name (dots and backticks included) as a SQL identifier."""
    return "`" + name.replace("`", "``") + "`"


def _sql_string(value: str) -> str:
    """`value` as a SQL string literal, read the same whatever `escapedStringLiterals` says
    (a name with a quote or a backslash becomes a cast of its UTF-8 bytes)."""
    if "'" in value or "\\" in value:
        return f"CAST(X'{value.encode().hex()}' AS STRING)"
    return f"'{value}'"


class Wal3Log:
    """A wal3 log, read as DataFrames by Spark's own Parquet reader (see the module docstring;
    setsums are NOT verified: scrub with `jobs/verify.py`)."""

    def __init__(self, spark: Any, url: str, store_options: Mapping[str, str]) -> None:
        self.spark = spark
        self.url = url
        self.store_options = dict(store_options)

    @classmethod
    def forPath(cls, spark: Any, path: str, options: Mapping[str, str] | None = None) -> Wal3Log:
        """The log at `path` (`s3://`, `file://` or a local path, or any Hadoop filesystem URL);
        `options` are the store options of `format("wal3")` (endpoint, region, credentials)."""
        store_options = {k: str(v) for k, v in (options or {}).items()}
        allowed = {name.lower() for name in opts.store_option_names()}
        unknown = sorted(k for k in store_options if k.lower() not in allowed)
        if unknown:
            raise InvalidOption(
                f"Wal3Log.forPath options {unknown} are not store options; valid: "
                f"{', '.join(opts.store_option_names())} (range options go to toDF: "
                f"{', '.join(RANGE_OPTIONS)})"
            )
        found = cls(spark, path, store_options)
        found._reader().manifest()  # a missing log fails here, naming the URL
        return found

    def toDF(self, **options: Any) -> DataFrame:  # named after Delta's toDF
        """The log's records in the range the options name (`startingOffsets`, `endingOffsets`,
        `startingTimestamp`, `endingTimestamp`, `failOnDataLoss`: as for `format("wal3")`),
        by default all of them; with `filterColumn` and `filterValues`, only the rows whose
        column holds one of the values, from the fragments whose stream filters may hold them. A
        fragment garbage collection deletes between this call and the query's action fails the query
        with Spark's missing-file error naming it, or with `failOnDataLoss=false` is skipped
        (Spark's `ignoreMissingFiles`)."""
        unknown = sorted(set(options) - set(RANGE_OPTIONS))
        if unknown:
            raise InvalidOption(
                f"toDF options {unknown} are unknown; valid: {', '.join(RANGE_OPTIONS)}"
            )
        parsed = opts.parse(
            {**self.store_options, **{k: str(v) for k, v in options.items()}, "path": self.url},
            opts.READ,
        )
        store = driver_store(self.spark, self.url, self.store_options)
        plan = plan_scan(store, LogReader(store).manifest(), hadoop_url(self.url), parsed)
        logger.info("%s: native scan of %d fragments", self.url, len(plan.files))
        reader_options = dict(hadoop_options(self.url, self.store_options))
        if not parsed.fail_on_data_loss:
            # a fragment GC deletes after toDF is skipped (Spark logs it), as format("wal3")
            # skips it; otherwise the query fails with Spark's error naming the missing file
            reader_options["ignoreMissingFiles"] = "true"
        return self._dataframe(plan, reader_options, options)

    def _dataframe(self, plan: ScanPlan, reader_options: Mapping[str, str], options: Mapping[str, Any]) -> DataFrame:
        """The DataFrame of `plan` under fresh attribute ids: built, or an earlier call's
        equal build renamed (the module docstring says why never the same DataFrame)."""
        key = (self.url, tuple(sorted(self.store_options.items())),
               tuple(sorted((k, str(v)) for k, v in options.items())))
        frozen_options = tuple(sorted(reader_options.items()))
        built = _BUILT.get(key)
        if (built is not None and built.spark is self.spark and built.plan == plan
                and built.reader_options == frozen_options and built.case_limit == CASE_LIMIT):
            _BUILT.move_to_end(key)
            if plan.files:  # the session may have turned caseSensitive off since (a conf read
                # only for a log with clashing names)
                _check_case_insensitive_names(self.spark, payload_to_spark(plan.payload).names[:-2])
            return built.df.toDF(*built.names)
        df = _build(self.spark, plan, reader_options)
        names = tuple(payload_to_spark(plan.payload).names)
        _BUILT[key] = _Built(self.spark, plan, frozen_options, CASE_LIMIT, df, names)
        _BUILT.move_to_end(key)
        while len(_BUILT) > BUILT_LIMIT:
            _BUILT.popitem(last=False)
        return df.toDF(*names)

    def _reader(self) -> LogReader:
        return LogReader(driver_store(self.spark, self.url, self.store_options))


def _build(spark: Any, plan: ScanPlan, reader_options: Mapping[str, str]) -> DataFrame:
    """The DataFrame of `plan`, with the rows of `filterValues` only when it names them."""
    df = scan_dataframe(spark, plan, reader_options)
    if plan.values is None:
        return df
    # exact (the stream filters' false positives), and Parquet's bloom filters skip row groups
    kind = df.schema[plan.values.column].dataType
    wanted = [_literal(v, kind) for v in plan.values.values]
    return df.where(F.col(plan.values.column).isin(wanted))


def _literal(value: Any, kind: DataType) -> Any:
    """A filter value as the literal Spark compares it with in a column of `kind`: Spark reads a
    uint64 column as DECIMAL(20,0), and a Python int above 2^63-1 given to it as a long fails in
    the JVM, so integers for a decimal column go as Decimal; bytes go as bytearray (binary)."""
    if isinstance(value, bytes):
        return bytearray(value)
    if isinstance(value, int) and isinstance(kind, DecimalType):
        return Decimal(value)
    return value
