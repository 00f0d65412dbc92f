"""A stress garbage-collector process: runs `GarbageCollector` in a loop, as an operator's
schedule of `wal3 gc --force --grace N` would, while writers append and readers move cursors.

`force`, because readers keep up with the writers: their cursors sit near the tail, and GC would
otherwise refuse to drop more than 90% of the log. The grace interval is short so that files
really are deleted during the run.

The orphan race: now and then (`FaultRates.orphan_race`) a run's orphan sweep gets a clock more
than the orphan grace ahead. Every unreferenced fragment then looks like an orphan left long ago,
among them the fragments of appends uploaded but not yet committed: what a GC sees after a
writer stalled for 15 minutes between upload and commit, compressed into milliseconds. The
sweep raises the orphan horizon and deletes them; the orphan horizon must make each such append
either land before the sweep (its fragment spared) or fail cleanly (`PastOrphanHorizon`, counted
by the writers), never be acknowledged without its fragment.
"""

from __future__ import annotations

import logging
import random
import threading
from collections import Counter
from collections.abc import Callable

from wal3_spark.clock import SystemClock
from wal3_spark.errors import Wal3Error
from wal3_spark.ops.garbage_collector import MIN_ORPHAN_GRACE_S, GarbageCollector, GCOptions
from wal3_spark.ops.retention import set_retention
from wal3_spark.storage import ObjectStore
from wal3_spark.stress.config import StressConfig
from wal3_spark.stress.summary import ORPHAN_RACE
from wal3_spark.testing.hooks import hooked

logger = logging.getLogger(__name__)

#: how far past the orphan grace a racing sweep's clock runs: fragments created up to this long
#: after the sweep's start (those of appends being built right then) count as orphans too
ORPHAN_RACE_LEAD_S = 1.0


class StressCollector:
    def __init__(self, config: StressConfig, name: str, store: ObjectStore,
                 after_run: Callable[[], None]) -> None:
        self.config = config
        #: called after every run, so that what a run did is on record before the next kill
        self.after_run = after_run
        self.name = name
        self.store = store
        self.rng = random.Random(f"{config.seed}/{name}")
        self.counts: Counter[str] = Counter()
        #: the orphan races this collector injected: runs whose orphan sweep's clock was ahead
        #: (counted when they start: a kill in mid-race is part of the fault)
        self.races = 0

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.collect_once()
            self.after_run()
            stop.wait(self.rng.uniform(0.5, 1.5) * self.config.gc_every_s)  # the GC schedule

    def counters(self) -> dict[str, int]:
        return dict(self.counts)

    def faults(self) -> dict[str, int]:
        return {ORPHAN_RACE: self.races}

    def retention_once(self) -> None:
        """The retention actor: now and then set the log's policy again, to the configured bytes
        or twice them, racing appends, compactions and the other collectors (one compare-and-swap
        that rebases on them: every record, and the policy set last, must survive)."""
        if not self.config.retention_bytes or self.rng.random() >= 0.3:
            return
        bound = self.config.retention_bytes * self.rng.choice((1, 2))
        try:
            report = set_retention(self.store, max_bytes=bound)
        except Wal3Error as exc:  # a store fault, or a fragment larger than the bound
            self.counts[f"error: {type(exc).__name__}"] += 1
            logger.warning("%s: setting the retention policy failed: %s", self.name, exc)
            return
        self.counts["retention set" if report.changed else "retention unchanged"] += 1

    def collect_once(self) -> None:
        self.retention_once()
        race = self.rng.random() < self.config.faults.orphan_race
        if race:
            self.races += 1
        ahead_s = max(self.config.gc_grace_s, MIN_ORPHAN_GRACE_S) + ORPHAN_RACE_LEAD_S
        collector = hooked(GarbageCollector(
            self.store, GCOptions(grace_s=self.config.gc_grace_s, force=True, writer=f"wal3 stress {self.name}"),
        ), orphan_clock=SystemClock(skew_s=ahead_s) if race else None)
        try:
            report = collector.run()
        except Wal3Error as exc:
            self.counts[f"error: {type(exc).__name__}"] += 1
            logger.warning("%s: gc failed: %s", self.name, exc)
            return
        if race and report.orphan_horizon_us is not None:  # raised past unreferenced fragments
            self.counts["races that raised the horizon"] += 1
            self.counts["orphans deleted in races"] += len(report.orphans_deleted)
        self.counts["runs"] += 1
        self.counts.update(report.steps)
        self.counts["files deleted"] += len(report.deleted)
        self.counts["orphans deleted"] += len(report.orphans_deleted)
        if report.retention_removed is not None:
            self.counts["records removed by retention"] += report.retention_removed["records"]
            self.counts["cursors overtaken"] += len(report.cursors_overtaken)
