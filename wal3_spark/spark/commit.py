"""What a sink's driver does with its tasks' fragments: commit them, or clean them up.

`commit_files` places every task's fragments in one manifest compare-and-swap; `delete_files`
cleans up after aborts, never deleting a fragment that some manifest references. Nothing is
deleted after a commit whose outcome is unknown: a manifest write may still land and publish the
fragments (if it never does, garbage collection removes them as orphans).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence

import pyarrow as pa

from wal3_spark.clock import SYSTEM, Clock
from wal3_spark.errors import (
    CommitFailed,
    CommitOutcomeUnknown,
    LogNotFound,
    LogSealed,
    SchemaMismatch,
    Wal3Error,
)
from wal3_spark.format.garbage import load_garbage
from wal3_spark.log.committer import CommitResult, Committer, DirtyRecorder
from wal3_spark.log.fragment_io import FragmentFile
from wal3_spark.log.reader import LogReader, iter_fragments
from wal3_spark.log.replaced import replaced_paths
from wal3_spark.spark.write_tasks import delete_quietly
from wal3_spark.storage.base import ObjectStore

logger = logging.getLogger(__name__)


def published(store: ObjectStore, paths: set[str], since: int) -> set[str]:
    """Which of `paths` the current manifest references at or after offset `since`: fragments a
    commit published, so data (not `gc.referenced`, every path a manifest references)."""
    if not paths:
        return set()
    try:
        manifest = LogReader(store).manifest()
        return {ref.path for ref in iter_fragments(store, manifest, since)} & paths
    except LogNotFound:
        return set()
    except Wal3Error as exc:
        # Cannot tell what is data: keep everything, garbage collection sorts it out later.
        logger.warning("cannot read the manifest to check fragments before deleting them: %s", exc)
        return set(paths)


def collected(store: ObjectStore, paths: set[str]) -> set[str]:
    """Which of `paths` the pending garbage lists: fragments a commit published and garbage
    collection has since dropped from the manifest, which readers of a manifest from before its
    apply step may read until its delete step (docs/design/32-orphan-horizon.md). Read after the
    manifest (`published`): garbage applied before that read is still listed here, or its grace
    has passed (the order `GarbageCollector._held` relies on too)."""
    if not paths:
        return set()
    try:
        return set(load_garbage(store)[0].fragment_paths()) & paths
    except Wal3Error as exc:
        logger.warning("cannot read the pending garbage to check fragments before deleting them: %s", exc)
        return set(paths)


def compacted(store: ObjectStore, paths: set[str]) -> set[str]:
    """Which of `paths` a compaction replaced: they were committed, and readers of a manifest
    from before the compaction may read them until garbage collection's orphan grace has passed
    (`wal3_spark.log.replaced`)."""
    try:
        return replaced_paths(store, paths)
    except Wal3Error as exc:
        logger.warning("cannot read the compaction records to check fragments before deleting them: %s", exc)
        return set(paths)


def delete_files(store: ObjectStore, files: Sequence[FragmentFile], since: int) -> None:
    """Delete an aborted job's fragments, except any that a manifest references (a commit whose
    outcome was ambiguous may have landed: then they are data, not garbage) or that the pending
    garbage lists (they were data: a commit reported already in the log, whose records garbage
    collection applied meanwhile, leaves them to its delete step and its grace interval)."""
    paths = {f.path for f in files}
    keep = published(store, paths, since)
    keep |= collected(store, paths - keep)
    keep |= compacted(store, paths - keep)
    if keep:
        logger.warning("%d fragment(s) of an aborted job are referenced by the log or its pending "
                    "garbage; kept", len(keep))
    delete_quietly(store, sorted(paths - keep))


def commit_files(
    store: ObjectStore,
    files: Sequence[FragmentFile],
    *,
    target: pa.Schema | None,
    merge_schema: bool,
    writer: str,
    since: int,
    incarnation: object,
    app_id: str | None = None,
    version: int | None = None,
    dirty_log: DirtyRecorder | None = None,
    clock: Clock = SYSTEM,
) -> CommitResult:
    """One manifest CAS for all of `files` (in order), recorded in `dirty_log` when given, into
    the log's `incarnation` the files were written for (the one seen when the write was
    planned; `UNPINNED` when there was no log: `invariants.check_same_log`). Definite
    failures delete the files; an unknown outcome (`CommitOutcomeUnknown`) deletes nothing."""
    committer = Committer(store, writer=writer, dirty_log=dirty_log, clock=clock)
    t0 = clock.monotonic()
    try:
        result = committer.commit(
            list(files), schema=target, merge_schema=merge_schema, app_id=app_id, version=version,
            incarnation=incarnation,
        )
    except (CommitFailed, LogSealed, SchemaMismatch):
        delete_files(store, files, since)
        raise
    except CommitOutcomeUnknown:
        logger.warning("the commit of %d fragments has an unknown outcome; none deleted", len(files))
        raise
    elapsed = clock.monotonic() - t0
    logger.info("committed %d fragments to offsets [%d, %d) in %.1f ms (%d attempts)",
             len(files), result.start, result.limit, elapsed * 1000, result.attempts)
    _record_metrics(seconds=elapsed, fragments=len(files), attempts=result.attempts,
                    conflicts=result.conflicts, duplicate=result.duplicate)
    if result.duplicate:
        # an exactly-once writer re-ran a batch that is already in the log: drop the copy
        delete_files(store, files, since)
    return result


def _record_metrics(**values: float | int | bool) -> None:
    """Append commit metrics to $WAL3_SPARK_METRICS_FILE when set (used by jobs/benchmark.py)."""
    path = os.environ.get("WAL3_SPARK_METRICS_FILE")
    if not path:
        return
    try:
        with open(path, "a") as f:
            f.write(json.dumps(values) + "\n")
    except OSError as exc:
        logger.warning("could not record commit metrics in %s: %s", path, exc)
