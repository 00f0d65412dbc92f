"""The real work of the wal3 data source, as plain functions (the Spark classes stay thin).

Writing: `write_partition` streams a task's Arrow batches into fragments of about
`fragment_bytes`, each written straight to the store as soon as it is full, so that a task holds
at most one fragment (about twice `fragment_bytes` while encoding) whatever its partition size.
`commit_files` places every task's fragments in one manifest compare-and-swap; `delete_files`
cleans up after aborts, never deleting a fragment that some manifest references. Nothing is
deleted after a commit whose outcome is unknown: a manifest write may still land and publish the
fragments (if it never does, garbage collection removes them as orphans).

Reading: `pack` bin-packs fragment ranges into input partitions; `read_partition` yields each
range's records as Arrow batches in exactly the schema Spark declared.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa

from wal3_spark.committer import DirtyRecorder
from wal3_spark.errors import (
    CommitFailed,
    CommitOutcomeUnknown,
    LogNotFound,
    LogSealed,
    SchemaMismatch,
    Wal3Error,
)
from wal3_spark.schema import RAW_SCHEMA, conform

log = logging.getLogger(__name__)

#: rows per Arrow batch handed back to Spark by read()
READ_BATCH_ROWS = int(os.environ.get("WAL3_READ_BATCH_ROWS", 1 << 16))
#: Spark's spark.sql.files.openCostInBytes: the smallest partition worth a task
OPEN_COST_BYTES = 4 << 20


# ------------------------------------------------------------------------------ writing


def write_partition(
    store,
    batches: Iterable[pa.RecordBatch],
    target: pa.Schema | None,
    fragment_bytes: int,
    item_hash: str | None = None,
) -> list:
    """Write a task's batches as fragments, their setsum items hashed as the log's `item_hash`
    (read by the driver); on failure delete what this attempt wrote."""
    from wal3_spark.writer import iter_write_fragments

    schema = RAW_SCHEMA if target is None else target
    conformed = (conform(batch, schema) for batch in batches if batch.num_rows)
    files: list = []
    try:
        for written in iter_write_fragments(
            store, conformed, target, fragment_bytes=fragment_bytes, item_hash=item_hash
        ):
            files.append(written)
    except BaseException:
        _delete_quietly(store, [f.path for f in files])
        raise
    return files


def _delete_quietly(store, paths: Sequence[str]) -> None:
    for path in paths:
        try:
            store.delete(path)
        except Exception as exc:  # garbage collection removes what is left
            log.warning("could not delete unreferenced fragment %s: %s", path, exc)


def referenced(store, paths: set[str], since: int) -> set[str]:
    """Which of `paths` the current manifest references at or after offset `since`."""
    from wal3_spark.reader import LogReader, iter_fragments

    if not paths:
        return set()
    try:
        manifest = LogReader(store).manifest()
        return {ref.path for ref in iter_fragments(store, manifest, since)} & paths
    except LogNotFound:
        return set()
    except Wal3Error as exc:
        # Cannot tell what is data: keep everything, garbage collection sorts it out later.
        log.warning("cannot read the manifest to check fragments before deleting them: %s", exc)
        return set(paths)


def delete_files(store, files: Sequence, since: int) -> None:
    """Delete an aborted job's fragments, except any that a manifest references (a commit whose
    outcome was ambiguous may have landed: then they are data, not garbage)."""
    paths = {f.path for f in files}
    keep = referenced(store, paths, since)
    if keep:
        log.warning("%d fragment(s) of an aborted job are referenced by the log; kept", len(keep))
    _delete_quietly(store, sorted(paths - keep))


def commit_files(
    store,
    files: Sequence,
    *,
    target: pa.Schema | None,
    merge_schema: bool,
    writer: str,
    since: int,
    app_id: str | None = None,
    version: int | None = None,
    dirty_log: DirtyRecorder | None = None,
):
    """One manifest CAS for all of `files` (in order), recorded in `dirty_log` when given.
    Definite failures delete the files; an unknown outcome (`CommitOutcomeUnknown`) deletes
    nothing."""
    from wal3_spark.committer import Committer

    committer = Committer(store, writer=writer, dirty_log=dirty_log)
    t0 = time.perf_counter()
    try:
        result = committer.commit(
            list(files), schema=target, merge_schema=merge_schema, app_id=app_id, version=version
        )
    except (CommitFailed, LogSealed, SchemaMismatch):
        delete_files(store, files, since)
        raise
    except CommitOutcomeUnknown:
        log.warning("the commit of %d fragments has an unknown outcome; none deleted", len(files))
        raise
    elapsed = time.perf_counter() - t0
    log.info("committed %d fragments to offsets [%d, %d) in %.1f ms (%d attempts)",
             len(files), result.start, result.limit, elapsed * 1000, result.attempts)
    _record_metrics(seconds=elapsed, fragments=len(files), attempts=result.attempts,
                    conflicts=result.conflicts, duplicate=result.duplicate)
    if result.duplicate:
        # an exactly-once writer re-ran a batch that is already in the log: drop the copy
        delete_files(store, files, since)
    return result


def _record_metrics(**values) -> None:
    """Append commit metrics to $WAL3_SPARK_METRICS_FILE when set (used by jobs/benchmark.py)."""
    path = os.environ.get("WAL3_SPARK_METRICS_FILE")
    if not path:
        return
    try:
        with open(path, "a") as f:
            f.write(json.dumps(values) + "\n")
    except OSError as exc:
        log.warning("could not record commit metrics in %s: %s", path, exc)


# ------------------------------------------------------------------------------ reading


@dataclass(frozen=True)
class Part:
    """One input partition's work: contiguous fragment ranges (never re-planned on executors)."""

    ranges: tuple  # of wal3_spark.reader.ReadRange

    @property
    def records(self) -> int:
        return sum(r.records for r in self.ranges)


def range_bytes(r) -> int:
    """The bytes a range costs to read (the whole fragment is fetched)."""
    return max(1, r.ref.num_bytes)


def pack(ranges: Sequence, max_partition_bytes: int, min_partitions: int | None = None) -> list[Part]:
    """Bin-pack consecutive ranges into balanced partitions of at most about
    `max_partition_bytes`, and into at least `min_partitions` (default: the driver's cores) when
    the read is big enough (Spark's file-split rule, with its 4 MB open cost as the floor).
    A fragment is never split, so each is fetched once; order is kept."""
    if not ranges:
        return []
    sizes = [range_bytes(r) for r in ranges]
    total = sum(sizes)
    cores = min_partitions or os.cpu_count() or 1
    wanted = max(math.ceil(total / max_partition_bytes),
                 min(cores, max(1, total // OPEN_COST_BYTES)))
    wanted = max(1, min(wanted, len(ranges)))
    parts: list[list] = [[] for _ in range(wanted)]
    seen = 0
    for r, size in zip(ranges, sizes):
        # the partition whose share of the bytes holds this range's midpoint: contiguous, even
        index = min(wanted - 1, int((seen + size / 2) * wanted / total))
        parts[index].append(r)
        seen += size
    return [Part(tuple(p)) for p in parts if p]


def rebuild(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """`batch` with exactly the declared schema (types cast only where they differ).

    Columns are taken by name: a log may have gained columns (mergeSchema) since the query fixed
    its schema, and those are left out.
    """
    columns = []
    for f in target:
        idx = batch.schema.get_field_index(f.name)
        if idx < 0:
            raise SchemaMismatch(
                f"column {f.name!r} of this query is no longer in the log (its schema is now "
                f"{batch.schema}); restart the query to read with the log's current schema"
            )
        column = batch.column(idx)
        if not column.type.equals(f.type):
            column = column.cast(f.type)
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, schema=target)


def read_partition(
    store,
    part: Part,
    payload: pa.Schema | None,
    target: pa.Schema,
    *,
    verify: bool,
    batch_rows: int = READ_BATCH_ROWS,
    item_hash: str | None = None,
    fail_on_data_loss: bool = True,
) -> Iterator[pa.RecordBatch]:
    """The records of `part` in offset order, as batches of the declared Arrow schema; a
    fragment GC deleted since the driver planned is DataLost, or skipped with a warning under
    failOnDataLoss=false (`read_range`)."""
    from concurrent.futures import ThreadPoolExecutor

    from wal3_spark.reader import read_range

    def load(r):
        return rebuild(read_range(store, r, payload, verify=verify, item_hash=item_hash,
                                  fail_on_data_loss=fail_on_data_loss), target)

    # Fetch, decode and verify the next fragment while Spark consumes this one (Parquet decoding
    # and SHA3 release the GIL); at most two fragments are in memory.
    with ThreadPoolExecutor(1, thread_name_prefix="wal3-prefetch") as pool:
        pending = pool.submit(load, part.ranges[0]) if part.ranges else None
        for i in range(len(part.ranges)):
            batch = pending.result()
            pending = pool.submit(load, part.ranges[i + 1]) if i + 1 < len(part.ranges) else None
            for lo in range(0, batch.num_rows, batch_rows):
                yield batch.slice(lo, batch_rows)
            del batch
