"""Appending from plain Python: `LogWriter` turns records into fragments and commits them.

Two ways to append:
- `append(data)` writes the data as one fragment (or several past `fragment_bytes`) and commits
  it before returning: simple, one fragment upload and one manifest write per call;
- `submit(data)` returns a future and pipelines many small appends (Chroma's wal3 design, "Reduced
  Tail Latency"): appends are cut into a batch every `batch_interval_s` (Chroma's default, 20 ms) or
  once `batch_bytes` wait; each batch becomes a fragment, uploaded while earlier batches are still
  uploading or committing; every batch that has landed is committed, in cut order, by one manifest
  write sent at once, conditioned on the manifest write still in flight where the store's ETags are
  predictable (`wal3_spark.log.chain`). Under object-store latency an append then costs about half a
  batch interval, one fragment upload and one manifest write.

Both upload through `write_fragment` (as the Spark sink's tasks do): create-if-absent at a fresh
UUIDv7 path, retried, and the `FragmentFile` it returns is all the committer needs and small
enough to travel from a Spark executor to the driver.

Design: docs/design/16-stream-filters.md, docs/design/21-pipelined-manifest-writes.md.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures._base import PENDING
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import pyarrow as pa

from wal3_spark.clock import SYSTEM, Clock
from wal3_spark.errors import (
    CommitFailed,
    CommitOutcomeUnknown,
    CorruptLog,
    DataLost,
    LogNotFound,
    LogSealed,
    SchemaMismatch,
    StorageError,
)
from wal3_spark.format.incarnation import UNRECORDED
from wal3_spark.format.layout import FRAGMENT_PREFIX, SNAPSHOT_PREFIX
from wal3_spark.format.manifest import NewFragment, SnapshotOptions
from wal3_spark.format.schema import RAW_SCHEMA, conform, is_raw_schema, same_schema
from wal3_spark.format.stream_filter import check_filter_column
from wal3_spark.log import auto_compaction
from wal3_spark.log.auto_compaction import AutoCompactOptions
from wal3_spark.log.cas import InFlight
from wal3_spark.log.chain import ManifestChain
from wal3_spark.log.committer import CommitResult, Committer, DirtyRecorder
from wal3_spark.log.fragment_io import FragmentFile, write_fragments
from wal3_spark.storage import StoreLike, resolve_store
from wal3_spark.storage.base import ObjectStore
from wal3_spark.storage.hedged import HedgedStore, HedgePolicy

logger = logging.getLogger(__name__)

_BACKOFF_BASE_S = 0.1
_BACKOFF_CAP_S = 2.0

Appendable: TypeAlias = bytes | Sequence[bytes] | pa.Table | pa.RecordBatch


@dataclass(frozen=True)
class Appended:
    """Where one submitted append landed: offsets [start, limit) of the log's `incarnation` (the
    one its fragments were written for: a commit lands in no other)."""

    start: int
    limit: int
    incarnation: str | None = None


def to_batches(data: Appendable) -> tuple[list[pa.RecordBatch], pa.Schema | None]:
    """Record batches for `data` and its payload schema (None for raw `body` records)."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        data = [bytes(data)]
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    if isinstance(data, pa.Table):
        if is_raw_schema(data.schema):
            body = data.column("body").cast(pa.binary())
            return [pa.RecordBatch.from_arrays([c], schema=RAW_SCHEMA) for c in body.chunks], None
        return data.to_batches(), data.schema
    body = pa.array(list(data), pa.binary())
    if body.null_count:
        raise ValueError("raw records cannot be None")
    return [pa.RecordBatch.from_arrays([body], schema=RAW_SCHEMA)], None


@dataclass(frozen=True)
class _FragmentFormat:
    """How an appended schema's fragments are written: in the log's schema (None: raw), with
    the log's setsum item hash."""

    schema: pa.Schema | None
    item_hash: str | None
    #: the log's incarnation when this was decided: fragments written for it commit only into it
    incarnation: object = UNRECORDED
    #: the column each fragment gets a stream filter of (docs/format.md section 4, "Stream
    #: filters"), or None
    filter_column: str | None = None

    def write(
        self, store: ObjectStore, batches: list[pa.RecordBatch], fragment_bytes: int, clock: Clock
    ) -> list[FragmentFile]:
        return write_fragments(store, batches, self.schema, fragment_bytes=fragment_bytes,
                               item_hash=self.item_hash, clock=clock, filter_column=self.filter_column)


class _Condition(threading.Condition):
    """A `threading.Condition` over its own `RLock` whose lock methods live on the class.

    `Condition.__init__` binds five of the lock's methods on every instance. Futures had one
    each, and at 10,000 appends/s with a few thousand appends in flight those bound methods were
    almost half the objects the cyclic garbage collector traversed: its full collections
    stalled the whole process for tens to hundreds of milliseconds (docs/benchmarks.md).
    Behaviour is `Condition`'s own: only where its methods are found changes. The appends
    submitted between two cuts now share one (`_AppendFuture`)."""

    def __init__(self) -> None:  # Condition.__init__'s state, without the bound methods
        self._lock = threading.RLock()
        self._waiters: deque = deque()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()

    # The RLock's private methods Condition calls (typeshed does not declare them).
    def _release_save(self) -> Any:  # the RLock's own state
        return self._lock._release_save()  # type: ignore[attr-defined]

    def _acquire_restore(self, state: Any) -> None:
        self._lock._acquire_restore(state)  # type: ignore[attr-defined]

    def _is_owned(self) -> bool:
        return self._lock._is_owned()  # type: ignore[attr-defined]


class _AppendFuture(Future):
    """What `submit` returns: a `concurrent.futures.Future` (every method is Future's but the
    two that block) whose condition is shared with the other appends submitted between two
    cuts, which resolve together. A condition of its own (a `_Condition`, its lock and its
    waiters' deque) per append was three of the seven objects the cyclic garbage collector
    traversed per append in flight, and a third of `submit`'s time (docs/benchmarks.md). Sets
    the attributes `Future.__init__` sets (tests/log/test_07_writer.py checks they are the same)."""

    def __init__(self, condition: _Condition) -> None:  # Future.__init__ would build a Condition
        self._condition = condition
        self._state = PENDING
        self._result = None
        self._exception = None
        self._waiters: list = []
        self._done_callbacks: list = []

    # A shared condition is notified when any of its futures resolves: Future's result() and
    # exception() wait once and take a wake-up for their own future's outcome, so these wait
    # until this future is done (or the timeout passes), then answer as Future does.
    def result(self, timeout: float | None = None) -> Any:
        self._wait_done(timeout)
        return super().result(timeout=0)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._wait_done(timeout)
        return super().exception(timeout=0)

    def _wait_done(self, timeout: float | None) -> None:
        with self._condition:
            self._condition.wait_for(self.done, timeout)


@dataclass(slots=True)
class _Append:
    """One submitted append: raw bodies, or record batches of `schema`. Raw bodies are a tuple:
    the garbage collector stops tracking a tuple of bytes at its first collection, so an append
    in flight is one object fewer for every later collection to traverse."""

    payload: tuple[bytes, ...] | list[pa.RecordBatch]
    schema: pa.Schema | None
    records: int
    nbytes: int
    future: _AppendFuture


@dataclass
class _Run:
    """Consecutive appends of one batch that share a schema: they share fragments and a commit.

    Filled by the upload stage: how the fragments were written (`format`), the fragments, or
    the error that failed exactly these appends."""

    appends: list[_Append]
    format: _FragmentFormat | None = None
    files: list[FragmentFile] = field(default_factory=list)
    error: BaseException | None = None
    #: every append's future was resolved (by the commit thread, which alone reads it)
    resolved: bool = False

    def acknowledge(self, start: int) -> int:
        """Resolve the appends' futures in order from offset `start`; returns the offset after."""
        assert self.format is not None  # a run is committed only once its fragments are written
        incarnation = self.format.incarnation if isinstance(self.format.incarnation, str) else None
        for append in self.appends:
            limit = start + append.records
            append.future.set_result(Appended(start, limit, incarnation))
            start = limit
        self.resolved = True
        return start

    def fail(self, exc: BaseException) -> None:
        """Fail the appends' futures not yet resolved with `exc`."""
        for append in self.appends:
            if not append.future.done():
                append.future.set_exception(exc)
        self.resolved = True

    @property
    def schema(self) -> pa.Schema | None:
        return self.appends[0].schema

    def batches(self, target: pa.Schema | None) -> list[pa.RecordBatch]:
        if target is None:
            bodies = [body for a in self.appends for body in a.payload]
            return [pa.RecordBatch.from_arrays([pa.array(bodies, pa.binary())], schema=RAW_SCHEMA)]
        return [conform(b, target) for a in self.appends for b in a.payload]


@dataclass
class _Batch:
    """What the batcher cut at one moment; batches commit in the order they were cut."""

    seq: int
    runs: list[_Run]
    uploaded: bool = False


@dataclass(frozen=True)
class LogWriterOptions:
    """How a `LogWriter` cuts, uploads and commits appends (Chroma's `LogWriterOptions`): one
    value, so that a writer's tuning is passed, compared and printed whole, and checked once.

    `filter_column`: give every fragment the writer writes a stream filter of that column's
    values (a string, binary or integer column of the log), so that readers of a few of its
    values skip the fragments without them (docs/design/16-stream-filters.md); a column the log
    lacks, or of another type, fails the first append with FilterError."""

    #: longest an append waits before its batch is cut (Chroma's default)
    batch_interval_s: float = 0.02
    #: cut a batch as soon as this many bytes wait
    batch_bytes: int = 8 << 20
    #: `append()` and large batches start a new fragment past this size
    fragment_bytes: int = 64 << 20
    #: fragment uploads in flight at once
    max_uploads: int = 16
    #: manifest writes in flight at once, each chained on the one before (1: wait for each answer)
    max_manifest_writes: int = 1
    #: `True` or a `HedgePolicy`: hedge slow creates of fragments and snapshots
    hedge: bool | HedgePolicy = False
    #: allow appends that add nullable columns (Spark's `mergeSchema`)
    merge_schema: bool = False
    filter_column: str | None = None
    #: the manifest's `writer` field
    writer: str = "wal3-spark LogWriter"
    #: when the manifest rolls fragments into snapshots (None: Chroma's thresholds)
    snapshot_options: SnapshotOptions | None = None
    #: compact the log in the background when small fragments pile up (None: never;
    #: `wal3_spark.log.auto_compaction`): the commits never wait for it
    auto_compact: AutoCompactOptions | None = None

    def __post_init__(self) -> None:
        if (self.batch_interval_s < 0 or self.batch_bytes <= 0 or self.fragment_bytes <= 0
                or self.max_uploads < 1 or self.max_manifest_writes < 1):
            raise ValueError(
                "LogWriterOptions needs batch_interval_s >= 0, batch_bytes > 0, fragment_bytes > 0, "
                f"max_uploads >= 1 and max_manifest_writes >= 1; got {self.batch_interval_s}, "
                f"{self.batch_bytes}, {self.fragment_bytes}, {self.max_uploads}, {self.max_manifest_writes}"
            )


class LogWriter:
    """Appends to one log from one process. Thread-safe; use as a context manager.

    `submit` pipelines its work (Chroma's wal3 design, "Reduced Tail Latency"): a batcher thread
    cuts the waiting appends into a batch every `batch_interval_s` (or once `batch_bytes` wait), an
    upload pool writes each batch's fragment while earlier ones are still uploading or committing,
    and a commit thread places every batch that has landed, in cut order, in one manifest write. By
    default one manifest write is in flight at a time, and what lands meanwhile shares the next one:
    an append waits for one fragment upload and about one and a half manifest writes. With
    `max_manifest_writes` > 1, up to that many are in flight, each conditioned on the ETag the one
    before will have (`wal3_spark.log.chain`; one at a time where the store's ETags are not
    predictable): an append then waits for one fragment upload and one manifest write while the
    writes arrive in order, but a chained write that reaches the store before its predecessor is
    applied loses and costs a round trip (docs/benchmarks.md: on the local filesystem and SeaweedFS
    it lost often enough to cost p99 on the loaded test machine, hence opt-in). Offsets follow
    submit order, and appends are acknowledged in offset order.
    """

    def __init__(
        self,
        log: StoreLike,
        writer_options: LogWriterOptions | None = None,
        *,
        options: Mapping[str, str] | None = None,
        dirty_log: DirtyRecorder | None = None,
        clock: Clock = SYSTEM,
    ) -> None:
        """`writer_options`: how appends are cut, uploaded and committed (`LogWriterOptions`);
        `options`: the store options that open a URL.

        `clock` stamps the fragments (their UUIDv7 names) and txns, times the batch interval,
        the backoff of uploads and commits, and the hedging thresholds.

        `dirty_log` (a `wal3_spark.logset.dirty.DirtyLog` of the prefix the log lies under): record each
        commit there. Records are written in the background, batched with those of other
        writers sharing the `DirtyLog` (`CommitResult.dirty` is the record's future); `flush`
        and `close` wait until the records of everything committed are durable."""
        settings = writer_options or LogWriterOptions()
        hedge, writer = settings.hedge, settings.writer
        store = resolve_store(log, options)
        self._hedged: HedgedStore | None = None
        if hedge:
            # Fragment paths are fresh and snapshots content-addressed: their creates may be hedged.
            self._hedged = HedgedStore(
                store, hedge if isinstance(hedge, HedgePolicy) else None,
                create_prefixes=(FRAGMENT_PREFIX, SNAPSHOT_PREFIX), clock=clock,
            )
            store = self._hedged
        self.store = store
        self.clock = clock
        self.dirty_log = dirty_log
        self.committer = Committer(
            self.store, writer=writer, snapshot_options=settings.snapshot_options, dirty_log=dirty_log,
            clock=clock,
        )
        self.writer_options = settings
        self.merge_schema = settings.merge_schema
        self.filter_column = settings.filter_column
        self.fragment_bytes = settings.fragment_bytes
        self.batch_bytes = settings.batch_bytes
        self.batch_interval_s = settings.batch_interval_s
        self.max_uploads = settings.max_uploads
        self.max_manifest_writes = settings.max_manifest_writes
        self.auto_compact = settings.auto_compact
        self._commit_lock = threading.RLock()  # the commit thread holds it around the chain, which commits
        #: how appends of each schema are written, found once (the commit re-checks it)
        self._formats: dict[pa.Schema | None, _FragmentFormat] = {}
        self._schema_committer = Committer(self.store, writer=writer, clock=clock)
        self._schema_lock = threading.Lock()
        lock = threading.Lock()
        self._wake_batcher = threading.Condition(lock)  # appends waiting, flush, close
        self._progress = threading.Condition(lock)  # a batch landed or finished
        self._pending: list[_Append] = []
        #: the condition of the futures submitted until the next cut, which resolve together
        self._submit_condition = _Condition()
        self._pending_bytes = 0
        self._oldest = 0.0
        self._cut_now = False
        self._batches: deque[_Batch] = deque()  # cut, not yet taken by the commit thread, in cut order
        self._committing: deque[_Batch] = deque()  # taken, not yet finished, in cut order
        self._next_seq = 0
        self._finished_through = -1
        self._closed = False
        self._batcher_done = False
        self._threads: list[threading.Thread] = []
        self._uploads: ThreadPoolExecutor | None = None
        self._chain: ManifestChain[list[_Run]] | None = None

    @property
    def url(self) -> str:
        return self.store.url

    # -- synchronous --------------------------------------------------------------------

    def append(self, data: Appendable) -> CommitResult:
        """Write `data` as fragments and commit them; returns the offsets it got. Ends in one of
        the three outcomes (docs/design/20-committing.md): the offsets, `CommitFailed` (nothing
        written; also when the log could not be read or a fragment not written) or
        `CommitOutcomeUnknown`, besides the refusals that name their cause (`SchemaMismatch`,
        `LogSealed`, ...)."""
        batches, schema = to_batches(data)
        with _before_commit(self.url):
            fmt = self._format(schema)
            if fmt.schema is not None:
                batches = [conform(b, fmt.schema) for b in batches]
            files = fmt.write(self.store, batches, self.fragment_bytes, self.clock)
        return self._commit(files, fmt.schema, incarnation=fmt.incarnation)

    def _format(self, schema: pa.Schema | None) -> _FragmentFormat:
        """How appends of `schema` are written; creates the log on first use. Asked of the store
        once per schema: the commit checks it again against the manifest it replaces, so a log
        that changed since fails that commit, not silently."""
        with self._schema_lock:
            if schema not in self._formats:
                target = self._schema_committer.prepare(schema, merge_schema=self.merge_schema)
                manifest = self._schema_committer.last_seen
                assert manifest is not None  # prepare read or created it
                item_hash = manifest.append_item_hash(target is not None)
                if self.filter_column is not None:
                    check_filter_column(target, self.filter_column, self.url)
                self._formats[schema] = _FragmentFormat(target, item_hash, manifest.incarnation,
                                                        self.filter_column)
            return self._formats[schema]

    def _commit(
        self, files: Sequence[NewFragment], schema: pa.Schema | None,
        in_flight: InFlight | None = None, since: int | None = None, incarnation: object = UNRECORDED,
    ) -> CommitResult:
        """Commit by the ordinary compare-and-swap (`in_flight`: resolve that pipelined write;
        `incarnation`: the log's when the fragments were written)."""
        try:
            with self._commit_lock:
                result = self.committer.commit(files, schema=schema, merge_schema=self.merge_schema,
                                               in_flight=in_flight, since=since, incarnation=incarnation)
        except (SchemaMismatch, LogSealed, LogNotFound, CommitFailed):
            with self._schema_lock:
                self._formats.clear()  # the log may have changed under us: ask again next time
            raise
        auto_compaction.after_commit(self.store, result.manifest, self.auto_compact, self.clock)
        return result

    # -- batched ------------------------------------------------------------------------

    def submit(self, data: Appendable) -> Future:
        """Queue `data` for a batched append; the future resolves to `Appended` when committed,
        or raises what failed the fragment or commit that carried it."""
        append = _to_append(data, self._submit_condition)  # read unlocked: any condition is correct
        with self._wake_batcher:
            if self._closed:
                raise RuntimeError("LogWriter is closed")
            if not self._threads:
                self._start()
            if not self._pending:
                self._oldest = self.clock.monotonic()
                self._wake_batcher.notify()
            self._pending.append(append)
            self._pending_bytes += append.nbytes
            if self._pending_bytes >= self.batch_bytes:
                self._wake_batcher.notify()
        return append.future

    def flush(self) -> None:
        """Block until everything submitted before this call is committed (or failed, its future
        raising). The waiting appends are cut into a batch now instead of at their interval."""
        with self._wake_batcher:
            last = self._next_seq if self._pending else self._next_seq - 1
            if self._pending:
                self._cut_now = True
                self._wake_batcher.notify()
            while self._finished_through < last:
                self._progress.wait()
        if self.dirty_log is not None:
            self.dirty_log.flush()

    def close(self) -> None:
        self.flush()
        with self._wake_batcher:
            self._closed = True
            self._wake_batcher.notify_all()
            self._progress.notify_all()
        for thread in self._threads:
            thread.join()
        if self._uploads is not None:
            self._uploads.shutdown()
        if self._chain is not None:
            self._chain.shutdown()
        if self._hedged is not None:
            self._hedged.shutdown()

    def __enter__(self) -> LogWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self) -> None:
        self._uploads = ThreadPoolExecutor(self.max_uploads, thread_name_prefix="wal3-upload")
        self._chain = ManifestChain(self.committer, self._commit, depth=self.max_manifest_writes,
                                    merge_schema=self.merge_schema, notify=self._answered)
        for target, name in ((self._batch_loop, "wal3-batcher"), (self._commit_loop, "wal3-committer")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    # -- stage 1: cut batches -----------------------------------------------------------

    def _batch_loop(self) -> None:
        assert self._uploads is not None
        while True:
            with self._wake_batcher:
                while not self._due():
                    if self._closed and not self._pending:
                        self._batcher_done = True
                        self._progress.notify_all()
                        return
                    timeout = self._oldest + self.batch_interval_s - self.clock.monotonic() if self._pending else None
                    self._wake_batcher.wait(None if timeout is None else max(timeout, 0.0))
                batch = self._cut()
            self._uploads.submit(self._upload, batch)

    def _due(self) -> bool:
        return bool(self._pending) and (
            self._cut_now
            or self._closed
            or self._pending_bytes >= self.batch_bytes
            or self.clock.monotonic() >= self._oldest + self.batch_interval_s
        )

    def _cut(self) -> _Batch:
        """Take every waiting append (under the lock) as the next batch; cancelled ones drop out
        here, and from here on their futures can no longer be cancelled."""
        appends = [a for a in self._pending if a.future.set_running_or_notify_cancel()]
        self._pending, self._pending_bytes, self._cut_now = [], 0, False
        self._submit_condition = _Condition()
        batch = _Batch(self._next_seq, _runs(appends))
        self._next_seq += 1
        self._batches.append(batch)
        return batch

    # -- stage 2: upload fragments, many batches at once ---------------------------------

    def _upload(self, batch: _Batch) -> None:
        for run in batch.runs:
            try:
                with _before_commit(self.url):
                    run.format = self._format(run.schema)
                    run.files = run.format.write(
                        self.store, run.batches(run.format.schema), self.fragment_bytes, self.clock
                    )
            except BaseException as exc:  # noqa: BLE001 - fails exactly this run's appends
                run.error = exc
        with self._progress:
            batch.uploaded = True
            self._progress.notify_all()

    # -- stage 3: commit every landed batch, in cut order, pipelining manifest writes ------

    def _answered(self) -> None:
        """A manifest write was answered (called from the chain's sending threads)."""
        with self._progress:
            self._progress.notify_all()

    def _commit_loop(self) -> None:
        chain = self._chain
        assert chain is not None
        while True:
            with self._progress:
                while not (self._batches and self._batches[0].uploaded and chain.room()) and not chain.ready():
                    if self._batcher_done and not self._batches and chain.empty():
                        return
                    self._progress.wait()
                landed = []
                while chain.room() and self._batches and self._batches[0].uploaded:
                    landed.append(self._batches.popleft())
            self._committing.extend(landed)
            try:
                with self._commit_lock:
                    self._send(chain, [run for batch in landed for run in batch.runs])
                    resolved = chain.settle()
            except BaseException as exc:  # a bug here must not leave waiters hanging forever
                logger.exception("%s: the commit thread failed", self.url)
                unknown = CommitOutcomeUnknown(
                    f"the commit thread of the LogWriter for {self.url} failed ({exc!r}): these "
                    "appends may or may not be in the log; run `wal3 verify` on it")
                unknown.__cause__ = exc
                for batch in self._committing:
                    for run in batch.runs:
                        run.fail(unknown)
                with self._commit_lock:
                    chain.abandon()
                resolved = []
            for outcome in resolved:
                start = outcome.start
                for run in outcome.payload:
                    if outcome.error is not None:
                        run.fail(outcome.error)
                        continue
                    assert start is not None
                    start = run.acknowledge(start)
            if any(outcome.error is None for outcome in resolved):
                auto_compaction.after_commit(self.store, self.committer.last_seen, self.auto_compact,
                                             self.clock)
            self._finish()

    def _send(self, chain: ManifestChain[list[_Run]], runs: list[_Run]) -> None:
        """Fail the runs whose upload failed (exactly their appends; their fragments stay: GC
        collects what no manifest references) and send one manifest write per group of runs
        that share a fragment schema."""
        for run in runs:
            if run.error is not None:
                run.fail(run.error)
        for group in _groups([run for run in runs if run.error is None]):
            assert group[0].format is not None
            chain.send(group, [f for run in group for f in run.files], group[0].format.schema,
                       group[0].format.incarnation)

    def _finish(self) -> None:
        """Report batches whose every append is resolved, in cut order (what `flush` waits for)."""
        finished = None
        while self._committing and all(run.resolved for run in self._committing[0].runs):
            finished = self._committing.popleft().seq
        if finished is not None:
            with self._progress:
                self._finished_through = finished
                self._progress.notify_all()


@contextmanager
def _before_commit(url: str) -> Iterator[None]:
    """An append that fails before its commit (the log's manifest not read, a fragment not
    written) wrote nothing the log references: `CommitFailed`, not the store's or a reader's
    error (a fragment left behind is an orphan that garbage collection removes)."""
    try:
        yield
    except (StorageError, CorruptLog, DataLost) as exc:
        raise CommitFailed.nothing_written(url, exc) from exc


def _to_append(data: Appendable, condition: _Condition) -> _Append:
    """Raw bodies stay Python bytes until their batch is cut: building one Arrow array per batch
    instead of per append keeps `submit` cheap at thousands of appends per second."""
    if isinstance(data, bytes):
        return _Append((data,), None, 1, len(data), _AppendFuture(condition))
    if isinstance(data, (bytearray, memoryview)):
        body = bytes(data)
        return _Append((body,), None, 1, len(body), _AppendFuture(condition))
    if not isinstance(data, (pa.Table, pa.RecordBatch)):
        bodies = list(data)
        for body in bodies:
            if not isinstance(body, (bytes, bytearray, memoryview)):
                raise ValueError(f"raw records must be bytes, got {type(body).__name__}")
        raw = tuple(bytes(b) for b in bodies)
        return _Append(raw, None, len(raw), sum(len(b) for b in raw), _AppendFuture(condition))
    batches, schema = to_batches(data)
    if schema is None:  # a table with a single binary `body` column: raw records
        column = tuple(b for batch in batches for b in batch.column(0).to_pylist())
        return _Append(column, None, len(column), sum(len(b) for b in column), _AppendFuture(condition))
    return _Append(batches, schema, sum(b.num_rows for b in batches), sum(b.nbytes for b in batches),
                   _AppendFuture(condition))


def _runs(appends: list[_Append]) -> list[_Run]:
    """Appends of different schemas cannot share a fragment: split a batch where it changes."""
    runs: list[_Run] = []
    for append in appends:
        if runs and same_schema(runs[-1].schema, append.schema):
            runs[-1].appends.append(append)
        else:
            runs.append(_Run([append]))
    return runs


def _groups(runs: list[_Run]) -> list[list[_Run]]:
    """Consecutive runs written the same way: one commit each."""
    groups: list[list[_Run]] = []
    for run in runs:
        if groups and _same_format(groups[-1][0].format, run.format):
            groups[-1].append(run)
        else:
            groups.append([run])
    return groups


def _same_format(a: _FragmentFormat | None, b: _FragmentFormat | None) -> bool:
    return (a is not None and b is not None and a.item_hash == b.item_hash and same_schema(a.schema, b.schema)
            and a.incarnation == b.incarnation)

