"""Garbage collection of a log set: the logs under a prefix, and its dirty log.

With a dirty log (`wal3_spark.logset.dirty`), a run collects only the logs recorded there since the
previous run, which it remembers as the cursor `gc` on the dirty log; that cursor is also what
lets the dirty log itself be collected. A run:

1. `plan`: reads the dirty log's tail, then picks the logs: those recorded from the `gc` cursor
   on; every log of the prefix (one delimiter listing) on the first run, with `full_scan`, or
   when there is no dirty log or it cannot be read;
2. collects each picked log (the caller chooses how: threads, Spark tasks);
3. `finish`: records the logs whose collection failed in the dirty log again (the next run
   retries them), advances the `gc` cursor to the tail read in step 1, rolls the dirty log's
   records below it up (`dirty.roll_up`) and collects the dirty log below the rolled-up offset.

Reading the tail before choosing the logs is what makes skipping safe: a commit whose record
lies past that tail is picked by the next run. A change without a record (a crash between a
commit and its record, a writer without the dirty log) waits for a later append to that log or
a `full_scan` run; garbage collection that is late is never unsafe.

Design: docs/design/40-log-sets-and-the-dirty-log.md.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from wal3_spark.errors import LogNotFound, Wal3Error
from wal3_spark.format.layout import FIRST_OFFSET
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.reader import LogReader
from wal3_spark.logset.dirty import (
    GC_CURSOR,
    DirtyLog,
    dirty_store,
    read_dirty,
    roll_up,
    rolled_up_to,
)
from wal3_spark.logset.logs import LogSet
from wal3_spark.ops.garbage_collector import GCOptions, GCReport, collect_garbage
from wal3_spark.storage import StoreLike, resolve_store

logger = logging.getLogger(__name__)

@dataclass(frozen=True)
class PrefixGCPlan:
    """The logs one run collects. `dirty_tail` is the dirty log's tail read before they were
    chosen (None: no dirty log); `tails` the tails the dirty log recorded for them."""

    names: list[str]
    full_scan: bool
    dirty_tail: int | None
    tails: dict[str, int] = field(default_factory=dict)


def plan(
    prefix: StoreLike, *, options: Mapping[str, str] | None = None, full_scan: bool = False
) -> PrefixGCPlan:
    """Which logs of the prefix (a URL opened with `options`, or a store) this run collects
    (see the module docstring)."""
    prefix = resolve_store(prefix, options)
    logs = LogSet(prefix)
    store = dirty_store(prefix)
    try:
        manifest = LogReader(store).manifest()
    except LogNotFound:
        return PrefixGCPlan(logs.names(), True, None)
    try:
        cursor = CursorStore(store).get(GC_CURSOR)
        if cursor is not None and not full_scan:
            tails, tail = read_dirty(store, cursor.cursor.offset, manifest)
            names = sorted(name for name in tails if logs.selection.matches(name))
            return PrefixGCPlan(names, False, tail, {n: tails[n] for n in names})
    except Wal3Error as exc:
        logger.warning("%s: cannot read the dirty log or its gc cursor (%s); collecting every log",
                    prefix.url, exc)
    return PrefixGCPlan(logs.names(), True, manifest.next_offset)


@dataclass
class DirtyGCReport:
    """What `finish` did to the dirty log."""

    cursor: int
    retried: list[str]
    rolled_up_to: int | None
    gc: GCReport | None = None
    error: str | None = None

    def to_dict(self) -> dict:
        return {
            "cursor": self.cursor,
            "retried": self.retried,
            "rolled_up_to": self.rolled_up_to,
            "gc_steps": self.gc.steps if self.gc is not None else [],
            "oldest_offset": self.gc.oldest_offset if self.gc is not None else None,
            "error": self.error,
        }


def finish(
    prefix: StoreLike,
    run: PrefixGCPlan,
    failed: Collection[str],
    *,
    grace_s: float,
    writer: str = "wal3-spark gc",
    options: Mapping[str, str] | None = None,
) -> DirtyGCReport | None:
    """Step 3 of the module docstring, once the planned logs were collected (`failed`: the
    names whose collection failed). None when the prefix has no dirty log."""
    prefix = resolve_store(prefix, options)
    if run.dirty_tail is None:
        return None
    store = dirty_store(prefix)
    retried = sorted(failed)
    if retried:
        with DirtyLog(prefix, writer=writer) as dirty:
            dirty.record({name: run.tails.get(name, FIRST_OFFSET) for name in retried}).result()
    CursorStore(store, writer).advance(GC_CURSOR, run.dirty_tail)
    report = DirtyGCReport(run.dirty_tail, retried, None)
    try:
        roll_up(prefix, run.dirty_tail, writer=writer)
        report.rolled_up_to = rolled_up_to(LogReader(store).manifest())
        if report.rolled_up_to is not None:
            # The head below the roll-up is summarised after it: dropping all of it is the point.
            report.gc = collect_garbage(
                store, GCOptions(grace_s=grace_s, force=True, writer=writer), keep_from=report.rolled_up_to
            )
    except Wal3Error as exc:
        report.error = str(exc)
        logger.warning("%s: rolling up or collecting the dirty log failed: %s", store.url, exc)
    return report
