"""Appending from plain Python: `LogWriter` turns records into fragments and commits them.

Two ways to append:
- `append(data)` writes the data as one fragment (or several past `fragment_bytes`) and commits
  it before returning: simple, one manifest write per call;
- `submit(data)` returns a future and lets a background thread batch many small appends into one
  fragment, flushed when `batch_bytes` are waiting or `batch_interval_s` has passed (Chroma's
  throttle defaults are 64 MB / 100 ms; ours are smaller because Python holds the batch in memory).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

import pyarrow as pa

from wal3_spark.committer import Committer, CommitResult, now_us
from wal3_spark.fragment import FragmentBuilder, FragmentFile, write_fragment
from wal3_spark.manifest import SnapshotOptions
from wal3_spark.schema import RAW_SCHEMA, conform, is_raw_schema
from wal3_spark.storage import open_store
from wal3_spark.storage.base import ObjectStore

log = logging.getLogger(__name__)

Appendable = bytes | Sequence[bytes] | pa.Table | pa.RecordBatch


@dataclass(frozen=True)
class Appended:
    """Where one submitted append landed: offsets [start, limit)."""

    start: int
    limit: int


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


def write_fragments(
    store: ObjectStore,
    batches: Iterable[pa.RecordBatch],
    schema: pa.Schema | None,
    *,
    fragment_bytes: int,
    timestamp_us: int | None = None,
    item_hash: str | None = None,
) -> list[FragmentFile]:
    """Write `batches` (already in `schema`) as fragments of about `fragment_bytes` each."""
    return list(iter_write_fragments(store, batches, schema, fragment_bytes=fragment_bytes,
                                     timestamp_us=timestamp_us, item_hash=item_hash))


def iter_write_fragments(
    store: ObjectStore,
    batches: Iterable[pa.RecordBatch],
    schema: pa.Schema | None,
    *,
    fragment_bytes: int,
    timestamp_us: int | None = None,
    item_hash: str | None = None,
) -> Iterator[FragmentFile]:
    """Each fragment as soon as it is uploaded, so that a caller holds at most one fragment in
    memory and knows what to clean up if a later one fails. `item_hash` is the log's
    (`Manifest.append_item_hash`)."""
    builder: FragmentBuilder | None = None
    for batch in batches:
        if batch.num_rows == 0:
            continue
        if builder is None:
            builder = FragmentBuilder(schema, timestamp_us or now_us(), item_hash=item_hash)
        builder.add(batch)
        if builder.bytes_buffered >= fragment_bytes:
            encoded, builder = builder.finish(), None
            yield write_fragment(store, encoded)
    if builder is not None:
        yield write_fragment(store, builder.finish())


class LogWriter:
    """Appends to one log from one process. Thread-safe; use as a context manager."""

    def __init__(
        self,
        url: str | ObjectStore,
        *,
        options: dict[str, str] | None = None,
        merge_schema: bool = False,
        writer: str = "wal3-spark LogWriter",
        fragment_bytes: int = 64 << 20,
        batch_bytes: int = 8 << 20,
        batch_interval_s: float = 0.1,
        snapshot_options: SnapshotOptions | None = None,
    ) -> None:
        self.store = url if isinstance(url, ObjectStore) else open_store(url, options)
        self.committer = Committer(self.store, writer=writer, snapshot_options=snapshot_options)
        self.merge_schema = merge_schema
        self.fragment_bytes = fragment_bytes
        self.batch_bytes = batch_bytes
        self.batch_interval_s = batch_interval_s
        self._commit_lock = threading.Lock()
        self._cond = threading.Condition()
        self._pending: list[tuple[list[pa.RecordBatch], pa.Schema | None, Future]] = []
        self._pending_bytes = 0
        #: every future not yet resolved, whether waiting, uploading or committing
        self._unresolved: set[Future] = set()
        self._oldest = 0.0
        self._closed = False
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return self.store.url

    # -- synchronous --------------------------------------------------------------------

    def append(self, data: Appendable) -> CommitResult:
        """Write `data` as fragments and commit them; returns the offsets it got."""
        batches, schema = to_batches(data)
        return self._write_and_commit(batches, schema)

    def _write_and_commit(self, batches: list[pa.RecordBatch], schema: pa.Schema | None) -> CommitResult:
        with self._commit_lock:
            target = self.committer.prepare(schema, merge_schema=self.merge_schema)
            item_hash = self.committer.last_seen.append_item_hash(target is not None)
        if target is not None:
            batches = [conform(b, target) for b in batches]
        files = write_fragments(
            self.store, batches, target, fragment_bytes=self.fragment_bytes, item_hash=item_hash
        )
        with self._commit_lock:
            return self.committer.commit(files, schema=target, merge_schema=self.merge_schema)

    # -- batched ------------------------------------------------------------------------

    def submit(self, data: Appendable) -> Future:
        """Queue `data` for a batched append; the future resolves to `Appended` when durable."""
        batches, schema = to_batches(data)
        future: Future = Future()
        with self._cond:
            if self._closed:
                raise RuntimeError("LogWriter is closed")
            if not self._pending:
                self._oldest = time.monotonic()
            self._pending.append((batches, schema, future))
            self._unresolved.add(future)
            future.add_done_callback(self._resolved)
            self._pending_bytes += sum(b.nbytes for b in batches)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="wal3-writer", daemon=True)
                self._thread.start()
            self._cond.notify_all()
        return future

    def _resolved(self, future: Future) -> None:
        with self._cond:
            self._unresolved.discard(future)

    def flush(self) -> None:
        """Block until everything submitted so far is committed (or failed, its future raising).

        Waits on every unresolved future, including those of a batch the background thread
        already took, and cuts the waiting batch now instead of at its interval.
        """
        with self._cond:
            futures = list(self._unresolved)
            self._oldest = float("-inf")
            self._cond.notify_all()
        for future in futures:
            future.exception()

    def close(self) -> None:
        self.flush()
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> LogWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._due():
                    if self._closed and not self._pending:
                        return
                    timeout = None if not self._pending else self._oldest + self.batch_interval_s - time.monotonic()
                    self._cond.wait(timeout=None if timeout is None else max(timeout, 0.0))
                work, self._pending, self._pending_bytes = self._pending, [], 0
            self._commit_batch(work)

    def _due(self) -> bool:
        if not self._pending:
            return False
        return (
            self._pending_bytes >= self.batch_bytes
            or time.monotonic() >= self._oldest + self.batch_interval_s
            or self._closed
        )

    def _commit_batch(self, work: list[tuple[list[pa.RecordBatch], pa.Schema | None, Future]]) -> None:
        # Appends of different schemas cannot share a fragment: commit each run of one schema.
        runs: list[list[tuple[list[pa.RecordBatch], pa.Schema | None, Future]]] = []
        for item in work:
            if runs and _same_schema(runs[-1][0][1], item[1]):
                runs[-1].append(item)
            else:
                runs.append([item])
        for run in runs:
            futures = [f for _, _, f in run]
            try:
                result = self._write_and_commit([b for bs, _, _ in run for b in bs], run[0][1])
            except BaseException as exc:  # every waiter learns why, the thread keeps serving
                for future in futures:
                    future.set_exception(exc)
                continue
            start = result.start
            for batches, _, future in run:
                rows = sum(b.num_rows for b in batches)
                future.set_result(Appended(start, start + rows))
                start += rows


def _same_schema(a: pa.Schema | None, b: pa.Schema | None) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and a.equals(b))
