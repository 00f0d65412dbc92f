"""Batch sink: `df.write.format("wal3").mode("append").save(url)`.

On the driver, `Wal3BatchWriter.create` checks the log (exists or is created, not sealed, schema
compatible) before any task runs. Each task streams its Arrow batches into fragments written
straight to the store and returns their descriptions; the driver's `commit` places all of them in
one manifest compare-and-swap (rebasing on conflicts), `abort` deletes them when that is safe.
Fragments of failed or speculative attempts are never in a commit message, so never referenced.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Self, cast

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from wal3_spark.errors import InvalidOption, SchemaMismatch
from wal3_spark.format.incarnation import UNPINNED, pinned
from wal3_spark.format.manifest import Manifest
from wal3_spark.format.stream_filter import check_filter_column
from wal3_spark.log import auto_compaction
from wal3_spark.log.committer import Committer
from wal3_spark.log.fragment_io import FragmentFile
from wal3_spark.logset.dirty import DirtyLog, split_log_url
from wal3_spark.logset.logs import check_log_name
from wal3_spark.spark.commit import commit_files, delete_files
from wal3_spark.spark.options import Wal3Options
from wal3_spark.spark.schemas import appended_schema, as_log_types
from wal3_spark.spark.table import drop_system_columns
from wal3_spark.spark.write_tasks import write_partition
from wal3_spark.storage.base import ObjectStore

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Wal3CommitMessage(WriterCommitMessage):
    """What one task wrote: its fragments (path, uuid, records, bytes, setsum), in order, and
    the log's incarnation they were written for (the one the driver saw when it planned the
    write: a streaming sink's commit runs in a writer made afresh for it)."""

    files: tuple[FragmentFile, ...]
    partition: int = -1
    attempt: int = 0
    incarnation: object = UNPINNED


def check_not_overwrite(overwrite: bool, url: str) -> None:
    if overwrite:
        raise InvalidOption(
            f"a wal3 log is append-only: mode(\"overwrite\") (or complete output mode) cannot "
            f"replace {url}. Use mode(\"append\") (outputMode(\"append\") for streams), or write "
            "to a new log URL"
        )


def prepare(options: Wal3Options, schema: StructType) -> tuple[pa.Schema | None, Manifest]:
    """Driver-side checks before any task runs: the target schema and the log's manifest now
    (created if need be), whose tail, incarnation and `item_hash` (the log's, never changed by a
    writer: the tasks hash setsum items with it) the write is planned on."""
    check_dirty_log(options)
    appended = appended_schema(schema)
    if options.filter_column is not None:  # before the log is created
        check_filter_column(appended, options.filter_column, options.url)
    store = options.open_store()
    committer = Committer(store, writer=writer_name(options))
    target = prepare_target(committer, appended, options.merge_schema)
    manifest = committer.last_seen
    assert manifest is not None  # prepare read or created it
    return target, manifest


def prepare_target(
    committer: Committer, appended: pa.Schema | None, merge: bool, create: bool = True
) -> pa.Schema | None:
    """`Committer.prepare` for the DataFrame's Arrow schema; when the log refuses it, once more
    with the columns the log reads widened (a uint32 column reads as long) as the log's types
    (`schemas.as_log_types`), which the tasks' checked cast then stores. The second manifest GET
    is paid only by such logs."""
    try:
        return committer.prepare(appended, merge_schema=merge, create=create)
    except SchemaMismatch:
        seen = committer.last_seen
        log = seen.arrow_schema() if seen is not None else None
        narrowed = as_log_types(appended, log) if appended is not None and log is not None else None
        if narrowed is None or narrowed.equals(appended):
            raise
        return committer.prepare(narrowed, merge_schema=merge, create=create)


@contextmanager
def dirty_log(options: Wal3Options, prefix: ObjectStore | None = None) -> Iterator[DirtyLog | None]:
    """The dirty log the sink's commits are recorded in (None without `dirtyLog`): that of
    `prefix` (a routing sink's), else of the log's parent. Leaving waits for the records."""
    if not options.dirty_log:
        yield None
        return
    if prefix is not None:  # already opened with the store options
        recording = DirtyLog(prefix)
    else:
        recording = DirtyLog(split_log_url(options.url)[0], options=dict(options.store_options) or None)
    with recording as recorder:
        yield recorder


def check_dirty_log(options: Wal3Options) -> None:
    """With `dirtyLog`, the log must lie under a prefix and have a log name (before any task)."""
    if options.dirty_log:
        check_log_name(split_log_url(options.url)[1])


def writer_name(options: Wal3Options) -> str:
    """The manifest's `writer` field: never anything from the store options."""
    if options.role == "streamWrite":
        return f"wal3-spark stream {options.writer_id}"
    if options.writer_id is not None:
        return f"wal3-spark batch {options.writer_id}"
    return "wal3-spark batch"


def task_context() -> tuple[int, int]:
    """The running task's partition and attempt, carried in its commit message ((-1, 0) outside
    a Spark task)."""
    ctx = TaskContext.get()
    if ctx is None:
        return -1, 0
    return ctx.partitionId(), ctx.attemptNumber()


class FragmentSink:
    """What the batch and streaming sinks share: the driver-side checks before any task runs,
    and the task side, which streams its rows into fragments and reports them."""

    def __init__(
        self,
        options: Wal3Options,
        target: pa.Schema | None,
        since: int,
        system_columns: bool = False,
        *,
        item_hash: str | None = None,
        incarnation: object = UNPINNED,
    ) -> None:
        self.options = options
        self.target = target
        self.since = since
        #: rows come with a catalog table's `_offset`/`_timestamp` (null), to drop (an INSERT)
        self.system_columns = system_columns
        #: the log's setsum item hash, read by the driver: tasks never read the manifest
        self.item_hash = item_hash
        #: the log's incarnation the driver planned the write on: the tasks' fragments commit
        #: only into it (a log deleted since took them with it)
        self.incarnation = incarnation

    @classmethod
    def create(cls, options: Wal3Options, schema: StructType, overwrite: bool, *,
               system_columns: bool = False) -> Self:
        check_not_overwrite(overwrite, options.url)
        target, manifest = prepare(options, schema)
        if options.auto_compact is not None and target is None:
            raise InvalidOption(f"autoCompact=true on {options.url}, a raw log: Chroma's wal3 cannot "
                                "read a compacted raw fragment, so a raw log is compacted only by "
                                "`wal3 compact --allow-chroma-incompatible`; drop autoCompact")
        return cls(options, target, manifest.next_offset, system_columns,
                   item_hash=manifest.append_item_hash(target is not None), incarnation=manifest.incarnation)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Wal3CommitMessage:
        if self.system_columns:
            iterator = drop_system_columns(iterator)
        partition, attempt = task_context()
        files = write_partition(
            self.options.open_store(), iterator, self.target, self.options.fragment_bytes,
            self.item_hash, filter_column=self.options.filter_column,
        )
        return Wal3CommitMessage(tuple(files), partition, attempt, self.incarnation)

    @staticmethod
    def files(messages: Sequence[Wal3CommitMessage | None]) -> list[FragmentFile]:
        """The fragments of every successful task, in partition order."""
        return [f for m in messages if m is not None for f in m.files]

    def commit_messages(self, messages: Sequence[Wal3CommitMessage | None], **txn: Any) -> None:
        """One commit of every task's fragments; with autoCompact, a background compaction
        after it when one is due (the commit does not wait for it)."""
        store = self.options.open_store()
        with dirty_log(self.options) as recorder:
            result = commit_files(
                store,
                self.files(messages),
                target=self.target,
                merge_schema=self.options.merge_schema,
                writer=writer_name(self.options),
                since=self.since,
                incarnation=pinned(m.incarnation for m in messages if m is not None),
                dirty_log=recorder,
                **txn,
            )
        auto_compaction.after_commit(store, result.manifest, self.options.auto_compact)

    def abort_messages(self, messages: Sequence[Wal3CommitMessage | None]) -> None:
        """Delete the job's fragments, unless `commit` may have run.

        Spark aborts a job whose task failed (that task's message is None: commit never ran)
        and a job whose commit raised (every message is there). After a definite commit failure
        the commit deleted the fragments itself; after an unknown outcome a manifest write may
        still land and publish them, so they must stay: garbage collection removes them as
        orphans if it never does.
        """
        if messages and all(m is not None for m in messages):
            logger.warning("abort after a commit attempt: %d fragments left to garbage collection",
                        len(self.files(messages)))
            return
        delete_files(self.options.open_store(), self.files(messages), self.since)


class Wal3BatchWriter(FragmentSink, DataSourceArrowWriter):
    """With writerId and writerVersion the append is idempotent, as Delta's txnAppId/txnVersion:
    it commits with the manifest's `txns`, so a rerun of a version already committed (or of an
    older one) is skipped and its fragments deleted; that makes foreachBatch pipelines
    exactly-once. An empty DataFrame still records its version."""

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        mine = cast("list[Wal3CommitMessage | None]", messages)  # what write returned
        o = self.options
        if o.writer_id is not None:
            self.commit_messages(mine, app_id=o.writer_id, version=o.writer_version)
        elif self.files(mine):  # an empty DataFrame appends nothing (prepare created the log)
            self.commit_messages(mine)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        self.abort_messages(cast("list[Wal3CommitMessage | None]", messages))
