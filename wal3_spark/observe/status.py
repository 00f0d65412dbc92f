"""The status of one log or of every log under a prefix, as a console page or a Prometheus
scrape shows it, kept fresh at a bounded cost.

Per log: oldest and next offset, records, bytes, fragments, snapshots, sealed, the last
commit's time; per cursor: offset, records and bytes behind, the age of the oldest unread
record, broken or stale (a `LogSummary` of `wal3_spark.logset.info`, which `wal3 ls` prints).

A `StatusModel` answers `status()` from memory while its last refresh is younger than `ttl_s`,
so any number of viewers and scrapers cost one refresh per `ttl_s` at most. A refresh of a log
costs one listing of its cursors, a GET per cursor and a manifest GET. A refresh of a log set
does not read every log: it reads the set's dirty log (`wal3_spark.logset.dirty`: one manifest
GET, plus one GET per dirty-log fragment appended since the last refresh) and re-reads only

- the logs the dirty log names with a tail other than the one known (appended to);
- the logs whose cursors trail their tail, or are broken, once per `cursors_every_s`: a
  consumer catching up moves its cursor without the dirty log knowing (cursors at the tail of
  a log nothing is appended to cannot move forward, so they are not re-read);
- every log, at the first refresh and then every `full_scan_every_s` (`changes_since` decides):
  what the dirty log does not record (an appender that did not opt in, a lost record, garbage
  collection moving the oldest offset, a seal, a new cursor on an idle log, a deleted log)
  shows at the latest then. Without a dirty log every refresh is a full one.

Snapshots are immutable, so the loaded ones and each subtree's counts are kept for the life of
the model (`SummaryCaches`): a log's snapshots are read once, not once per refresh.
docs/design/61-scrape-cost.md measures it on 1,000 logs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from wal3_spark.clock import SYSTEM, Clock, micros
from wal3_spark.errors import Wal3Error
from wal3_spark.format.layout import MANIFEST_KEY
from wal3_spark.format.manifest import Manifest
from wal3_spark.logset.dirty import DirtyPosition, changes_since
from wal3_spark.logset.info import LogSummary, SummaryCaches, summarise_log
from wal3_spark.logset.logs import ALL_LOGS, DEFAULT_WORKERS, LogSelection, LogSet
from wal3_spark.storage import StoreLike, resolve_store
from wal3_spark.storage.base import ObjectStore

logger = logging.getLogger(__name__)

#: how long a status is served from memory before the next request refreshes it
DEFAULT_TTL_S = 10.0
#: how often every log of a set is read, dirty log or not: the longest a change the dirty log
#: does not record (a seal, garbage collection, a new cursor on an idle log) goes unseen
DEFAULT_FULL_SCAN_EVERY_S = 300.0
#: how often the cursors of a log nothing is appended to are re-read while they trail its tail
DEFAULT_CURSORS_EVERY_S = 30.0


@dataclass(frozen=True)
class Status:
    """A log's or a log set's figures at `measured_us` (µs since the epoch). `logs` is in name
    order (one entry for a single log). `error` says why the last refresh failed (the figures
    are then those of the refresh before, as of `measured_us`)."""

    url: str
    is_log_set: bool
    logs: tuple[LogSummary, ...]
    measured_us: int
    #: when every log was last read (µs since the epoch)
    full_scan_us: int
    #: whether the last refresh read only the logs the dirty log named (and lagging ones),
    #: not every log
    incremental: bool = False
    error: str | None = None

    def log(self, name: str) -> LogSummary | None:
        return next((s for s in self.logs if s.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "is_log_set": self.is_log_set,
            "measured_us": self.measured_us,
            "full_scan_us": self.full_scan_us,
            "incremental": self.incremental,
            "error": self.error,
            "logs": [s.to_dict() for s in self.logs],
        }


def log_name(url: str) -> str:
    """The name a single log goes by in a status: the last segment of its URL."""
    return url.rstrip("/").rpartition("/")[2] or url


class StatusModel:
    """The status of the log at `target`, or of the logs of `selection` under it when it holds
    no log (decided once, here: a log's URL holds `manifest/MANIFEST`). Thread-safe: a request
    arriving during a refresh waits for it and shares its result."""

    def __init__(
        self,
        target: StoreLike,
        *,
        options: Mapping[str, str] | None = None,
        selection: LogSelection = ALL_LOGS,
        ttl_s: float = DEFAULT_TTL_S,
        full_scan_every_s: float = DEFAULT_FULL_SCAN_EVERY_S,
        cursors_every_s: float = DEFAULT_CURSORS_EVERY_S,
        max_workers: int = DEFAULT_WORKERS,
        clock: Clock = SYSTEM,
    ) -> None:
        for name, value in (("ttl_s", ttl_s), ("full_scan_every_s", full_scan_every_s),
                            ("cursors_every_s", cursors_every_s)):
            if not value >= 0:
                raise ValueError(f"{name} must be >= 0 seconds, got {value}")
        self.store: ObjectStore = resolve_store(target, options)
        self.is_log_set = not self.store.exists(MANIFEST_KEY)
        self.logs = LogSet(self.store, selection, max_workers=max_workers) if self.is_log_set else None
        self.ttl_s = ttl_s
        self.full_scan_every_s = full_scan_every_s
        self.cursors_every_s = cursors_every_s
        self.clock = clock
        self.caches = SummaryCaches()
        self._lock = threading.Lock()
        self._status: Status | None = None
        self._refreshed_at: float | None = None  # the clock's monotonic time
        self._position: DirtyPosition | None = None
        self._summaries: dict[str, LogSummary] = {}
        #: when each log was last read (its figures are as of then: see `_aged`)
        self._read_us: dict[str, int] = {}

    @property
    def url(self) -> str:
        return self.store.url

    def __repr__(self) -> str:
        return f"StatusModel({self.url!r}, {'log set' if self.is_log_set else 'log'})"

    def status(self) -> Status:
        """The status, refreshed first when the last refresh is `ttl_s` old or more."""
        with self._lock:
            now = self.clock.monotonic()
            if self._status is None or self._refreshed_at is None or now - self._refreshed_at >= self.ttl_s:
                self._status = self._refresh()
                self._refreshed_at = now
            return self._status

    def refresh(self) -> Status:
        """The status refreshed now, whatever its age."""
        with self._lock:
            self._status = self._refresh()
            self._refreshed_at = self.clock.monotonic()
            return self._status

    # -- refreshing (under the lock) ----------------------------------------------------

    def _refresh(self) -> Status:
        now_us = micros(self.clock)
        try:
            incremental = self._refresh_set(now_us) if self.is_log_set else self._refresh_log(now_us)
        except Wal3Error as exc:
            logger.warning("%s: cannot refresh the status (%s); serving the last one", self.url, exc)
            previous = self._status
            if previous is None:
                return Status(self.url, self.is_log_set, (), now_us, 0, error=str(exc))
            return Status(previous.url, previous.is_log_set, previous.logs, previous.measured_us,
                          previous.full_scan_us, previous.incremental, str(exc))
        full_scan_us = self._position.full_scan_us if self._position is not None else now_us
        logs = tuple(_aged(self._summaries[n], now_us - self._read_us.get(n, now_us)) for n in sorted(self._summaries))
        return Status(self.url, self.is_log_set, logs, now_us, full_scan_us, incremental)

    def _refresh_log(self, now_us: int) -> bool:
        name = log_name(self.url)
        summary = summarise_log(name, self.store, now_us, named=True, caches=self.caches)
        assert summary is not None  # a named log's absence is its error
        self._summaries = {name: summary}
        self._read_us = {name: now_us}
        return False

    def _refresh_set(self, now_us: int) -> bool:
        assert self.logs is not None
        changes = changes_since(self.logs, self._position, full_scan_every_s=self.full_scan_every_s,
                                clock=self.clock)
        self._position = changes.position
        if changes.full_scan:
            names = set(changes.tails) | set(changes.failed)
            if self.logs.selection.names is not None:
                names |= set(self.logs.selection.names)  # a named log's absence is its error
            self._summaries = {}
            self._read_us = {}
            self._read(sorted(names), now_us, changes.manifests)
        else:
            todo = {name for name, tail in changes.tails.items() if self._changed(name, tail)}
            todo |= {name for name, summary in self._summaries.items()
                     if _cursors_may_move(summary)
                     and now_us - self._read_us.get(name, 0) >= self.cursors_every_s * 1e6}
            self._read(sorted(todo), now_us, {})
        return not changes.full_scan

    def _changed(self, name: str, tail: int) -> bool:
        known = self._summaries.get(name)
        return known is None or known.error is not None or known.next_offset != tail

    def _read(self, names: Iterable[str], now_us: int, manifests: Mapping[str, Manifest]) -> None:
        assert self.logs is not None
        logs = self.logs
        named = logs.selection.is_explicit

        def one(name: str) -> tuple[str, LogSummary | None]:
            return name, summarise_log(name, logs.log_store(name), now_us, named=named,
                                       manifest=manifests.get(name), caches=self.caches)

        for name, summary in logs.map(one, list(names)):
            if summary is None:  # deleted since it was listed or recorded
                self._summaries.pop(name, None)
                self._read_us.pop(name, None)
            else:
                self._summaries[name] = summary
                self._read_us[name] = now_us


def _cursors_may_move(summary: LogSummary) -> bool:
    """Whether a log's cursors may have moved although nothing was appended to it: a cursor
    trails the tail (its consumer catches up), a cursor is broken (it may be mended), or the
    log could not be read."""
    return summary.error is not None or bool(summary.broken_cursors) or any(
        c.records_behind > 0 for c in summary.cursors)


def _aged(summary: LogSummary, elapsed_us: int) -> LogSummary:
    """`summary`, read `elapsed_us` ago and unchanged since as far as the model knows, as of
    now: its cursors' ages (the oldest unread record's, the last move's) grew by that much."""
    if elapsed_us <= 0 or not summary.cursors:
        return summary
    elapsed_s = elapsed_us / 1e6
    return replace(summary, cursors=tuple(
        replace(c, moved_ago_s=c.moved_ago_s + elapsed_s,
                lag_s=c.lag_s + elapsed_s if c.lag_s is not None and c.records_behind else c.lag_s)
        for c in summary.cursors))
