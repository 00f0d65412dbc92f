"""What `wal3 ls` and `wal3 info` show of a log set: each log's size, tail, seal and cursor lag,
and a summary of the whole set and of its dirty log.

Per log this costs one listing of its cursors, a GET per cursor and the manifest GET (run
`LogSet.max_workers` logs at a time); bytes come from the manifest's fragment sizes and snapshot
pointers' subtree totals, so no snapshot is read except those a cursor's lag straddles
(`wal3_spark.log.cursor_lag`) and, to count fragments, those the `TreeCounts` memo does not know yet
(`wal3_spark.log.tree`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from wal3_spark.clock import micros
from wal3_spark.errors import LogNotFound, Wal3Error
from wal3_spark.format.manifest import Manifest
from wal3_spark.log.cursor_lag import CursorLag, bytes_from, cursor_lags
from wal3_spark.log.cursors import BrokenCursor, CursorState, CursorStore
from wal3_spark.log.reader import LogReader
from wal3_spark.log.snapshots import SnapshotCache
from wal3_spark.log.tree import TreeCounts, last_written_us, tree_counts
from wal3_spark.logset.dirty import GC_CURSOR, dirty_store, rolled_up_to
from wal3_spark.logset.logs import LogSet
from wal3_spark.storage.base import ObjectStore


@dataclass(frozen=True)
class LogSummary:
    """One log of a set; `error` is set (and the rest empty) when it could not be read."""

    name: str
    oldest_offset: int = 0
    next_offset: int = 0
    bytes: int = 0
    sealed: bool = False
    cursors: tuple[CursorLag, ...] = ()
    broken_cursors: dict[str, str] = field(default_factory=dict)
    error: str | None = None
    fragments: int = 0
    snapshots: int = 0
    #: when the newest fragment was written (µs since the epoch; `log.tree.last_written_us`)
    last_commit_us: int | None = None
    #: the broken cursors that are stale (set in an earlier incarnation of the log)
    stale_cursors: tuple[str, ...] = ()

    @property
    def records(self) -> int:
        return self.next_offset - self.oldest_offset

    @property
    def most_behind(self) -> CursorLag | None:
        """The cursor furthest from the tail (what pins garbage collection)."""
        return max(self.cursors, key=lambda c: c.records_behind, default=None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "records": self.records,
            "bytes": self.bytes,
            "oldest_offset": self.oldest_offset,
            "next_offset": self.next_offset,
            "sealed": self.sealed,
            "cursors": [lag.to_dict() for lag in self.cursors],
            "broken_cursors": self.broken_cursors,
            "error": self.error,
            "fragments": self.fragments,
            "snapshots": self.snapshots,
            "last_commit_us": self.last_commit_us,
        }


@dataclass
class SummaryCaches:
    """What summaries of the same logs share across calls: loaded snapshots (those cursors
    straddle) and snapshot subtrees' counts, both immutable, so never stale."""

    snapshots: SnapshotCache = field(default_factory=lambda: SnapshotCache(limit=256))
    counts: TreeCounts = field(default_factory=TreeCounts)


def summary_of(
    name: str, store: ObjectStore, manifest: Manifest, cursors: list[CursorState],
    broken: list[BrokenCursor], at_us: int, caches: SummaryCaches | None = None,
) -> LogSummary:
    """A log's summary from its manifest and cursors as read (reading only the snapshots
    `caches` does not hold that the figures need)."""
    caches = SummaryCaches() if caches is None else caches
    counts = tree_counts(store, manifest, caches.snapshots, caches.counts)
    return LogSummary(
        name,
        manifest.oldest_offset,
        manifest.next_offset,
        bytes_from(store, manifest, manifest.oldest_offset, caches.snapshots),
        manifest.sealed,
        tuple(cursor_lags(store, manifest, cursors, at_us, caches.snapshots)),
        {b.name: b.problem for b in broken},
        fragments=counts.fragments,
        snapshots=counts.snapshots,
        last_commit_us=last_written_us(manifest),
        stale_cursors=tuple(b.name for b in broken if b.stale),
    )


def summarise_log(
    name: str, store: ObjectStore, at_us: int, *, named: bool = False,
    manifest: Manifest | None = None, caches: SummaryCaches | None = None,
) -> LogSummary | None:
    """One log's summary; None when there is no log (a directory without a manifest), unless
    the log was `named` explicitly: then its absence is its error (a mistyped name must not
    read as a log set without it, as the batch source fails on it too). The manifest is the
    one read after the cursors, else `manifest` (read before: a log without cursors), else
    read now."""
    try:
        cursors, broken, after = CursorStore(store).list_all_with_manifest()
        manifest = after or manifest or LogReader(store).manifest()
        return summary_of(name, store, manifest, cursors, broken, at_us, caches)
    except LogNotFound as exc:
        return LogSummary(name, error=str(exc)) if named else None
    except Wal3Error as exc:
        return LogSummary(name, error=str(exc))


def summarise(logs: LogSet) -> list[LogSummary]:
    """Every selected log's summary, in name order (directories that hold no log left out; an
    explicitly named log that does not exist is reported as an error)."""
    at = micros()
    named = logs.selection.is_explicit
    caches = SummaryCaches()
    found = logs.map(lambda name: summarise_log(name, logs.log_store(name), at, named=named, caches=caches))
    return [summary for summary in found if summary is not None]


def dirty_log_info(prefix: ObjectStore) -> dict[str, Any] | None:
    """The dirty log's offsets, its garbage-collection cursor and roll-up; None without one."""
    store = dirty_store(prefix)
    try:
        manifest = LogReader(store).manifest()
    except LogNotFound:
        return None
    cursor = CursorStore(store).get(GC_CURSOR)
    return {
        "url": store.url,
        "oldest_offset": manifest.oldest_offset,
        "next_offset": manifest.next_offset,
        "gc_cursor": None if cursor is None else cursor.cursor.offset,
        "rolled_up_to": rolled_up_to(manifest),
    }


def set_info(logs: LogSet, summaries: list[LogSummary]) -> dict[str, Any]:
    """`wal3 info PREFIX`: totals over the set, the laggiest cursor, unreadable logs, the dirty
    log."""
    readable = [s for s in summaries if s.error is None]
    lagging = [(s.name, s.most_behind) for s in readable if s.most_behind is not None]
    worst = max(lagging, key=lambda item: item[1].records_behind, default=None)
    return {
        "url": logs.url,
        "logs": len(summaries),
        "records": sum(s.records for s in readable),
        "bytes": sum(s.bytes for s in readable),
        "sealed": sorted(s.name for s in readable if s.sealed),
        "logs_with_cursors": len(lagging),
        "most_behind": None if worst is None else {"log": worst[0], **worst[1].to_dict()},
        "broken_cursors": {s.name: s.broken_cursors for s in readable if s.broken_cursors},
        "unreadable": {s.name: s.error for s in summaries if s.error is not None},
        "dirty_log": dirty_log_info(logs.store),
    }
