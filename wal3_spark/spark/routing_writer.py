"""Writing by key: `df.write.format("wal3").option("logColumn", "tenant").save(prefix)`.

Each row goes to the log `<prefix>/<value of logColumn>`, created on first use; the column itself
is not stored (a log-set read gives it back as `_log`). Both the batch sink and the exactly-once
streaming sink route.

- **Tasks** split their Arrow batches by the column and buffer each log's rows; a log's rows
  become a fragment once `fragmentBytes` of them are waiting, and when all the task's logs
  together hold `fragmentBytes`, the largest is written out, so a task's memory stays bounded
  however many logs it feeds. Each task reads a target log's manifest once (its schema, item
  hash and whether it is sealed); a log that does not exist yet gets the DataFrame's schema.
- **The driver** commits each log's fragments with that log's own compare-and-swap, in
  parallel. Each log's commit is atomic; the job's is not: when some logs fail, the others stay
  committed and `RoutedCommitFailed` lists both. With `writerId`/`writerVersion` (batch) or a
  checkpoint (stream), every log's commit carries the `txns` entry, so a rerun or a replayed
  batch commits exactly the logs still missing that version and skips (deleting the copies)
  where it is already recorded.

Design: docs/design/52-logset-stream-and-routing-sink.md.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Self, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StringType, StructType

from wal3_spark.errors import (
    InvalidLogName,
    InvalidOption,
    LogNotFound,
    RoutedCommitFailed,
    Wal3Error,
)
from wal3_spark.format.incarnation import UNPINNED, pinned
from wal3_spark.format.manifest import Manifest
from wal3_spark.format.schema import RAW_SCHEMA, check_columns, conform
from wal3_spark.format.stream_filter import check_filter_column
from wal3_spark.log.committer import Committer
from wal3_spark.log.fragment_io import iter_write_fragments
from wal3_spark.logset.dirty import DirtyLog
from wal3_spark.logset.logs import LogSet, check_log_name
from wal3_spark.spark.batch_writer import (
    check_not_overwrite,
    dirty_log,
    prepare_target,
    task_context,
    writer_name,
)
from wal3_spark.spark.commit import commit_files, delete_files
from wal3_spark.spark.logset_reader import LOG_COLUMN
from wal3_spark.spark.options import Wal3Options
from wal3_spark.spark.schemas import appended_schema
from wal3_spark.storage.base import ObjectStore

logger = logging.getLogger(__name__)

#: manifest reads and fragment uploads a task runs at once
TASK_THREADS = 8


@dataclass(frozen=True)
class LogFiles:
    """What one task wrote to one log: the schema and item hash its fragments were built with,
    the log's tail when the task read its manifest (where a commit of them can start) and its
    incarnation then (`UNPINNED`: no log yet)."""

    log: str
    target: pa.Schema | None
    since: int
    files: tuple
    incarnation: object = UNPINNED


@dataclass(frozen=True)
class RoutedCommitMessage(WriterCommitMessage):
    logs: tuple[LogFiles, ...]
    partition: int = -1
    attempt: int = 0


@dataclass(frozen=True)
class Destination:
    """A target log as one task sees it (from one manifest read)."""

    store: ObjectStore
    target: pa.Schema | None
    item_hash: str | None
    since: int
    incarnation: object


def split_by(batch: pa.RecordBatch, column: str) -> Iterator[tuple[str, pa.RecordBatch]]:
    """(log name, the rows for it without the column), rows in their original order."""
    keys = batch.column(batch.schema.get_field_index(column))
    if keys.null_count:
        raise InvalidOption(
            f"logColumn {column!r} is null in {keys.null_count} row(s): every row must name its "
            "log (filter them out, or fill the column, e.g. with coalesce)"
        )
    payload = batch.drop_columns([column])
    encoded = pc.dictionary_encode(keys)
    order = pc.sort_indices(encoded.indices)  # stable: rows keep their order within a log
    ids = encoded.indices.take(order).to_numpy()
    rows = payload.take(order)
    cuts = [0, *(np.flatnonzero(np.diff(ids)) + 1).tolist(), len(ids)]
    names = encoded.dictionary.to_pylist()
    for lo, hi in itertools.pairwise(cuts):
        if hi > lo:
            yield names[ids[lo]], rows.slice(lo, hi - lo)


class RoutingSink:
    """The driver-side checks, the task side (route, buffer, write) and the per-log commits
    that the batch and streaming routing sinks share."""

    def __init__(self, options: Wal3Options, appended: pa.Schema | None) -> None:
        self.options = options
        #: the rows' schema without the log column (None: raw `body` records)
        self.appended = appended

    @classmethod
    def create(cls, options: Wal3Options, schema: StructType, overwrite: bool) -> Self:
        check_not_overwrite(overwrite, options.url)
        column = options.log_column
        assert column is not None
        field = next((f for f in schema.fields if f.name == column), None)
        if field is None or not isinstance(field.dataType, StringType):
            found = "is not a string column" if field is not None else "is not a column"
            raise InvalidOption(
                f"logColumn {column!r} {found} of the DataFrame (columns: "
                f"{', '.join(f'{f.name} {f.dataType.simpleString()}' for f in schema.fields)}); "
                "name a string column holding each row's log name"
            )
        rest = StructType([f for f in schema.fields if f.name != column])
        if LOG_COLUMN in rest.names:
            raise InvalidOption(
                f"column {LOG_COLUMN} would be stored in the routed logs, but a log-set read adds "
                f"{LOG_COLUMN} (each row's log name) and could not read them back: drop it, or "
                f"route by it (logColumn={LOG_COLUMN})"
            )
        if not rest.fields:
            raise InvalidOption(f"logColumn {column!r} is the DataFrame's only column: no data")
        appended = appended_schema(rest)
        if appended is not None:
            check_columns(appended)
        if options.filter_column is not None:
            check_filter_column(appended, options.filter_column, options.url)
        return cls(options, appended)

    # -- tasks ------------------------------------------------------------------------------

    def destination(self, log_set: LogSet, name: str) -> Destination:
        """Where a task writes log `name`'s rows: its schema and item hash from its manifest, or
        the DataFrame's for a log that does not exist yet (the driver's commit creates it)."""
        try:
            check_log_name(name)
        except InvalidLogName as exc:
            raise InvalidLogName(f"logColumn {self.options.log_column!r} holds an {exc}") from None
        store = log_set.log_store(name)
        committer = Committer(store, writer=writer_name(self.options))
        try:
            target = prepare_target(committer, self.appended, self.options.merge_schema, create=False)
            manifest = committer.last_seen
            assert manifest is not None
        except LogNotFound:
            target = self.appended
            manifest = Manifest.empty(writer_name(self.options))
            return Destination(store, target, manifest.append_item_hash(target is not None),
                               manifest.next_offset, UNPINNED)
        return Destination(store, target, manifest.append_item_hash(target is not None),
                           manifest.next_offset, manifest.incarnation)

    def write(self, iterator: Iterable[pa.RecordBatch]) -> RoutedCommitMessage:
        pool = ThreadPoolExecutor(TASK_THREADS, thread_name_prefix="wal3-route")
        router = Router(self, self.options.log_set(), pool)
        try:
            with pool:  # leaving waits for every upload in flight
                for batch in iterator:
                    if batch.num_rows:
                        router.add(batch)
                router.flush_all()
        except BaseException:
            router.delete_written()
            raise
        partition, attempt = task_context()
        return RoutedCommitMessage(router.written(), partition, attempt)

    # -- driver -----------------------------------------------------------------------------

    @staticmethod
    def by_log(messages: Sequence[RoutedCommitMessage | None]) -> dict[str, list[LogFiles]]:
        """Every successful task's fragments per log, in partition order."""
        found: dict[str, list[LogFiles]] = {}
        for message in messages:
            if message is not None:
                for part in message.logs:
                    found.setdefault(part.log, []).append(part)
        return found

    def commit_messages(self, messages: Sequence[RoutedCommitMessage | None], **txn: Any) -> None:
        """One compare-and-swap per log, in parallel; raises RoutedCommitFailed naming the logs
        that failed (and saying how many committed) when any did."""
        logs = self.by_log(messages)
        if not logs:
            return
        log_set = self.options.log_set()

        def commit(name: str, recorder: DirtyLog | None) -> Exception | None:
            parts = logs[name]
            try:
                commit_files(log_set.log_store(name), [f for p in parts for f in p.files],
                             target=parts[0].target, merge_schema=self.options.merge_schema,
                             writer=writer_name(self.options), since=min(p.since for p in parts),
                             incarnation=pinned(p.incarnation for p in parts), dirty_log=recorder, **txn)
            except Wal3Error as exc:
                return exc
            return None

        try:
            with dirty_log(self.options, log_set.store) as recorder, ThreadPoolExecutor(
                    min(log_set.max_workers, len(logs)), thread_name_prefix="wal3-commit") as pool:
                outcomes = dict(zip(logs, pool.map(lambda n: commit(n, recorder), logs), strict=True))
        finally:
            log_set.store.close()
        failed = {name: exc for name, exc in outcomes.items() if exc is not None}
        if failed:
            raise RoutedCommitFailed(self.options.url, len(logs) - len(failed), failed,
                                     self.options.writer_id is not None)
        logger.info("routed commit: %d logs under %s", len(logs), self.options.url)

    def abort_messages(self, messages: Sequence[RoutedCommitMessage | None]) -> None:
        """Delete the job's fragments when no commit ran (a task failed); after a commit
        attempt every log's commit already deleted what a definite failure left, and kept what
        an unknown outcome may still publish."""
        if messages and all(m is not None for m in messages):
            logger.warning("abort after a routed commit attempt: fragments left to the commits' "
                        "own clean-up and to garbage collection")
            return
        log_set = self.options.log_set()
        for name, parts in self.by_log(messages).items():
            delete_files(log_set.log_store(name), [f for p in parts for f in p.files],
                         min(p.since for p in parts))


class Router:
    """One task's routing: rows buffered per log, written as fragments, never more than about
    `fragmentBytes` buffered in all. Manifest reads and uploads for different logs run in
    parallel (`pool`): a task feeding hundreds of logs waits for the store, not the CPU."""

    def __init__(self, sink: RoutingSink, log_set: LogSet, pool: ThreadPoolExecutor) -> None:
        self.sink = sink
        self.log_set = log_set
        self.pool = pool
        self.limit = sink.options.fragment_bytes
        self.destinations: dict[str, Destination] = {}
        self.buffers: dict[str, list[pa.RecordBatch]] = {}
        self.sizes: dict[str, int] = {}
        self.files: dict[str, list] = {}

    def add(self, batch: pa.RecordBatch) -> None:
        column = self.sink.options.log_column
        assert column is not None
        routed = list(split_by(batch, column))
        new = [name for name, _ in routed if name not in self.destinations]
        found = self.pool.map(lambda name: self.sink.destination(self.log_set, name), new)
        self.destinations.update(zip(new, found, strict=True))
        full = []
        for name, rows in routed:
            target = self.destinations[name].target
            rows = conform(rows, RAW_SCHEMA if target is None else target)
            self.buffers.setdefault(name, []).append(rows)
            self.sizes[name] = self.sizes.get(name, 0) + rows.nbytes
            if self.sizes[name] >= self.limit:
                full.append(name)
        self.flush(full)
        while sum(self.sizes.values()) >= self.limit:
            self.flush([max(self.sizes, key=self.sizes.__getitem__)])

    def flush(self, names: list[str]) -> None:
        """Write the named logs' buffered rows as fragments (in parallel)."""
        work = [(name, self.buffers.pop(name)) for name in names if name in self.buffers]
        for name, _ in work:
            self.sizes.pop(name, None)
            self.files.setdefault(name, [])

        def upload(item: tuple[str, list[pa.RecordBatch]]) -> None:
            name, batches = item
            where = self.destinations[name]
            # each fragment recorded once uploaded, so a failure can delete every one
            self.files[name].extend(iter_write_fragments(
                where.store, batches, where.target, fragment_bytes=self.limit,
                item_hash=where.item_hash, filter_column=self.sink.options.filter_column))

        list(self.pool.map(upload, work))

    def flush_all(self) -> None:
        self.flush(list(self.buffers))

    def written(self) -> tuple[LogFiles, ...]:
        return tuple(
            LogFiles(name, self.destinations[name].target, self.destinations[name].since,
                     tuple(files), self.destinations[name].incarnation)
            for name, files in sorted(self.files.items())
        )

    def delete_written(self) -> None:
        """A failed attempt deletes what it uploaded (never in a commit message)."""
        for name, files in self.files.items():
            where = self.destinations[name]
            delete_files(where.store, files, where.since)


class RoutingBatchWriter(RoutingSink, DataSourceArrowWriter):
    """`writerId` + `writerVersion` make the routed append idempotent per log."""

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        mine = cast("list[RoutedCommitMessage | None]", messages)  # what write returned
        o = self.options
        if o.writer_id is not None:
            self.commit_messages(mine, app_id=o.writer_id, version=o.writer_version)
        else:
            self.commit_messages(mine)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        self.abort_messages(cast("list[RoutedCommitMessage | None]", messages))


class RoutingStreamWriter(RoutingSink, DataSourceStreamArrowWriter):
    """Exactly-once per log: each micro-batch commits with version = batchId in every log's
    `txns`, so a replayed batch commits only to the logs its first attempt did not reach."""

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        mine = cast("list[RoutedCommitMessage | None]", messages)  # what write returned
        self.commit_messages(mine, app_id=self.options.writer_id, version=int(batchId))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self.abort_messages(cast("list[RoutedCommitMessage | None]", messages))
