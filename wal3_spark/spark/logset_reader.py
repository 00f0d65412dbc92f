"""Batch source over a log set: `spark.read.format("wal3").option("logs", "*").load(prefix)`.

A log set (`wal3_spark.logset.logs`) is the logs directly under a prefix: all of them, a list of
names, or those matching a glob (`logs`). The rows of
every selected log come out with the log's columns, then `_log` (the log's name), `_offset` and
`_timestamp`. The query's columns are the union of the selected logs' columns (a log lacking a
column reads it as null); a raw log cannot be mixed with structured ones.

The driver reads the selected logs' manifests in parallel, plans each log's range, and packs the
fragment ranges of many logs into the same input partitions (`pack`: many small logs make a few
balanced tasks, not one tiny task each). With filter pushdown, filters on `_log` (=, IN,
startsWith) narrow the selection before any manifest is read, next to the `_offset` and
`_timestamp` pushdown of a single log, which applies to each log.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    EqualTo,
    Filter,
    In,
    InputPartition,
    StringStartsWith,
)
from pyspark.sql.types import StructType

from wal3_spark.errors import LogNotFound, SchemaMismatch, Wal3Error
from wal3_spark.format.layout import FragmentRef
from wal3_spark.format.manifest import Manifest
from wal3_spark.format.schema import OFFSET_COLUMN, conform, reconcile
from wal3_spark.format.stream_filter import ValueFilter
from wal3_spark.log.fragment_io import Piece, ReadRange, open_range, output_schema
from wal3_spark.logset.logs import LogSet
from wal3_spark.spark.options import Wal3Options
from wal3_spark.spark.planning import Bounds, narrow, pack, plan_range, pushed_values, value_filters
from wal3_spark.spark.read_tasks import READ_BATCH_ROWS, pipelined
from wal3_spark.spark.schemas import arrow_to_spark, spark_to_arrow

#: the column naming each row's log
LOG_COLUMN = "_log"
LOG_FIELD = pa.field(LOG_COLUMN, pa.string(), nullable=False)


# ------------------------------------------------------------------------------ discovery


def read_manifests(log_set: LogSet, names: Iterable[str] | None = None, *,
                   strict: bool) -> dict[str, Manifest]:
    """The manifests of the named (default: the selected) logs that exist, read in parallel. A
    log whose manifest cannot be read fails the call when `strict` (a batch read must not
    silently leave a log out), else it is left out this time (`LogSet` warned, naming it)."""
    found = {}
    for loaded in log_set.manifests(names):
        if loaded.error is not None and strict:
            raise Wal3Error(f"cannot read the log {log_set.log_url(loaded.name)}: "
                            f"{loaded.error}") from loaded.error
        if loaded.manifest is not None:
            found[loaded.name] = loaded.manifest
    return found


# ------------------------------------------------------------------------------- schema


def union_payload(manifests: Mapping[str, Manifest]) -> pa.Schema | None:
    """The columns of every log, in order of first appearance (None: all logs are raw).

    A column is nullable when any log declares it so or lacks it; a column whose type differs
    between logs, or raw logs mixed with structured ones, fail naming two of the logs.
    """
    raw = sorted(n for n, m in manifests.items() if m.is_raw and m.acc_bytes > 0)
    schemas = {n: m.arrow_schema() for n, m in sorted(manifests.items())}
    structured = {n: schema for n, schema in schemas.items() if schema is not None}
    if raw and structured:
        other = next(iter(structured))
        raise SchemaMismatch(
            f"log set mixes raw logs (e.g. {raw[0]}) and structured ones (e.g. {other}); select "
            "one kind with the logs option"
        )
    if not structured:
        return None
    clash = next((n for n, schema in structured.items() if LOG_COLUMN in schema.names), None)
    if clash is not None:
        raise SchemaMismatch(
            f"log {clash} has a column named {LOG_COLUMN}, which a log-set read adds (each row's "
            "log name); read that log on its own, or leave it out of the logs option"
        )
    union: pa.Schema | None = None
    first = ""
    for name, schema in structured.items():
        loose = pa.schema([f.with_nullable(True) for f in schema])
        try:
            union = loose if union is None else reconcile(union, loose, merge=True, raw_log=False)
        except SchemaMismatch as exc:
            raise SchemaMismatch(f"log {name} disagrees with the logs before it (from {first} "
                                 f"on) on a column's type: {exc}") from None
        first = first or name
    assert union is not None
    required = {f.name for f in union}
    for schema in structured.values():
        required &= {f.name for f in schema if not f.nullable}
    return pa.schema([f.with_nullable(f.name not in required) for f in union])


def logset_output_schema(payload: pa.Schema | None) -> pa.Schema:
    """The payload columns, then `_log`, `_offset`, `_timestamp`."""
    single = output_schema(payload)
    at = single.get_field_index(OFFSET_COLUMN)
    return single.insert(at, LOG_FIELD)


def logset_schema(options: Wal3Options) -> StructType:
    """What a read of the log set returns, from the selected logs' manifests."""
    log_set = options.log_set()
    manifests = read_manifests(log_set, strict=True)
    if not manifests:
        raise LogNotFound(
            f"{options.url} (no log there is among {log_set.selection.describe()}; to read or "
            "stream logs that do not exist yet, give their columns with .schema(...))"
        )
    return arrow_to_spark(logset_output_schema(union_payload(manifests)))


# ----------------------------------------------------------------------------- partitions


@dataclass(frozen=True)
class LogRange:
    """A fragment range of one log of the set (`ref` and `records` as `pack` expects)."""

    log: str
    range: ReadRange

    @property
    def ref(self) -> FragmentRef:
        return self.range.ref

    @property
    def records(self) -> int:
        return self.range.records


@dataclass(frozen=True)
class LogMeta:
    """What reading one log's fragments needs from its manifest, and the rows wanted of them
    (`filterColumn`/`filterValues`, as that log's column type reads them; None: all)."""

    payload: pa.Schema | None
    item_hash: str | None
    values: ValueFilter | None = None


def log_values(options: Wal3Options, manifest: Manifest, url: str) -> tuple[bool, ValueFilter | None]:
    """Whether a log of the set may hold wanted rows at all, and its `ValueFilter` for the
    read's filterColumn/filterValues: a log without the column holds none (its rows would read
    it as null, which equals no value), one whose column cannot be filtered is a FilterError."""
    column = options.filter_column
    if column is None or options.filter_values is None:
        return True, None
    schema = manifest.arrow_schema()
    if schema is not None and column not in schema.names:
        return False, None
    return True, value_filters(manifest, (column, options.filter_values), url=url)[0]


class LogSetPartition(InputPartition):
    """Fragment ranges of several logs, with each log's payload schema and item hash."""

    def __init__(self, index: int, ranges: tuple[LogRange, ...], logs: dict[str, LogMeta]) -> None:
        super().__init__(index)
        self.index = index
        self.ranges = ranges
        self.logs = logs


def partitions_for(
    options: Wal3Options, planned: Mapping[str, tuple[Manifest, list[ReadRange]]]
) -> list[LogSetPartition]:
    """Pack every log's ranges (logs in name order, offsets in order) into input partitions."""
    ranges = [LogRange(name, r) for name in sorted(planned) for r in planned[name][1]]
    parts = pack(ranges, options.max_partition_bytes, options.min_partitions)
    result = []
    for i, part in enumerate(parts):
        names = {r.log for r in part.ranges}
        metas = {n: LogMeta(planned[n][0].arrow_schema(), planned[n][0].item_hash,
                            log_values(options, planned[n][0], options.url)[1]) for n in names}
        result.append(LogSetPartition(i, part.ranges, metas))
    return result


# --------------------------------------------------------------------------------- reading


def conform_to(batch: pa.RecordBatch, target: pa.Schema, name: str) -> pa.RecordBatch:
    """A log's batch in the query's schema: `_log` added, columns this log lacks as nulls,
    columns the query does not know (added to the log since it started) left out."""
    names = pa.array([name] * batch.num_rows, LOG_FIELD.type)
    return conform(batch.append_column(LOG_FIELD, names), target, against="query")


def read_log_ranges(
    options: Wal3Options, partition: LogSetPartition, target: pa.Schema,
    batch_rows: int = READ_BATCH_ROWS,
) -> Iterator[pa.RecordBatch]:
    """The partition's records, log by log in offset order, as batches of `target`; the next
    row group decodes (and the next fragment is fetched and checked) while Spark consumes this one."""
    log_set = options.log_set()

    def conformed(piece: Piece, log: str) -> pa.RecordBatch:
        return conform_to(piece(), target, log)

    def pieces(r: LogRange) -> list[Piece]:
        meta = partition.logs[r.log]
        opened = open_range(log_set.log_store(r.log), r.range, meta.payload,
                            verify=options.verify_on_read, records=options.verify_records,
                            item_hash=meta.item_hash, fail_on_data_loss=options.fail_on_data_loss,
                            values=meta.values)
        return [partial(conformed, p, r.log) for p in opened]

    return pipelined(partition.ranges, pieces, batch_rows)


# ------------------------------------------------------------------------------ batch read


def log_filters(filters: Iterable) -> tuple[tuple[str, str | frozenset[str]], ...]:
    """The pushed-down filters on `_log` a log set can apply: (=, name), (in, names),
    (prefix, text)."""
    kept: list[tuple[str, str | frozenset[str]]] = []
    for f in filters:
        if getattr(f, "attribute", None) != (LOG_COLUMN,):
            continue
        if isinstance(f, EqualTo) and isinstance(f.value, str):
            kept.append(("=", f.value))
        elif isinstance(f, In) and all(isinstance(v, str) for v in f.value):
            kept.append(("in", frozenset(f.value)))
        elif isinstance(f, StringStartsWith) and isinstance(f.value, str):
            kept.append(("prefix", f.value))
    return tuple(kept)


def passes(name: str, filters: Iterable[tuple[str, str | frozenset[str]]]) -> bool:
    """Whether log `name` can hold rows matching every `_log` filter."""
    for kind, value in filters:
        if kind == "=" and name != value:
            return False
        if kind == "in" and name not in value:
            return False
        if kind == "prefix" and not name.startswith(value):  # type: ignore[arg-type]
            return False
    return True


def log_position(position: tuple[str, int], per_log: Mapping[str, int], name: str,
                 unnamed: str) -> tuple[str, int]:
    """One log's position: from per-log offsets (`unnamed` for a log they do not name) or the
    position every log shares (earliest, latest, a timestamp)."""
    if position[0] != "logs":
        return position
    offset = per_log.get(name)
    return (unnamed, 0) if offset is None else ("offset", offset)


class LogSetBatchReader(DataSourceReader):
    def __init__(self, options: Wal3Options, schema: StructType) -> None:
        self.options = options
        self.target = spark_to_arrow(schema)
        self.offsets = Bounds()
        self.times = Bounds()
        self.log_filters: tuple[tuple[str, str | frozenset[str]], ...] = ()
        #: pushed-down equality filters on other columns, for stream filters to skip fragments
        self.pushed: list[tuple[str, tuple]] = []
        self.starting_logs = dict(options.starting_logs)
        self.ending_logs = dict(options.ending_logs)
        self.log_set = options.log_set()

    def partitions(self) -> Sequence[LogSetPartition]:
        names = [n for n in self.log_set.names() if passes(n, self.log_filters)]
        manifests = read_manifests(self.log_set, names, strict=True)
        if self.log_set.selection.is_explicit:
            missing = sorted(set(names) - manifests.keys())
            if missing:
                raise LogNotFound(self.log_set.log_url(missing[0]))
        planned = {}
        for name, manifest in manifests.items():
            ranges = self._plan(name, manifest)
            if ranges:
                planned[name] = (manifest, ranges)
        return partitions_for(self.options, planned)

    def _plan(self, name: str, manifest: Manifest) -> list[ReadRange]:
        o = self.options
        url = self.log_set.log_url(name)
        wanted, values = log_values(o, manifest, url)
        if not wanted:
            return []
        skipping = value_filters(manifest, (None, None), self.pushed, url)[1]
        return plan_range(
            self.log_set.log_store(name), manifest,
            log_position(o.starting, self.starting_logs, name, "earliest"),
            log_position(o.ending, self.ending_logs, name, "latest"),
            self.offsets, self.times, o.fail_on_data_loss, values, skipping,
        )

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, LogSetPartition):  # Spark's stand-in when partitions() found nothing
            return
        yield from read_log_ranges(self.options, partition, self.target)


class LogSetPushdownReader(LogSetBatchReader):
    """With filter pushdown: `_log` narrows the logs read, `_offset`/`_timestamp` each log's
    range, `column = v` and `column IN (...)` each log's fragments by their stream filters
    (Spark re-checks every filter; this only skips what cannot match)."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        filters = list(filters)
        self.offsets, self.times = Bounds(), Bounds()
        narrow(filters, self.offsets, self.times)
        self.log_filters = log_filters(filters)
        self.pushed = pushed_values(filters)
        return filters
