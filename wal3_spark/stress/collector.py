"""A stress garbage-collector process: runs `GarbageCollector` in a loop, as an operator's
schedule of `wal3 gc --force --grace N` would, while writers append and readers move cursors.

`force`, because readers keep up with the writers: their cursors sit near the tail, and GC would
otherwise refuse to drop more than 90% of the log. The grace interval is short so that files
really are deleted during the run.
"""

from __future__ import annotations

import logging
import random
import threading
from collections import Counter
from collections.abc import Callable

from wal3_spark.errors import Wal3Error
from wal3_spark.gc import GarbageCollector
from wal3_spark.storage import ObjectStore
from wal3_spark.stress.config import StressConfig

log = logging.getLogger(__name__)


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

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.collect_once()
            self.after_run()
            stop.wait(self.rng.uniform(0.5, 1.5) * self.config.gc_every_s)  # the GC schedule

    def counters(self) -> dict[str, int]:
        return dict(self.counts)

    def collect_once(self) -> None:
        collector = GarbageCollector(
            self.store, grace_s=self.config.gc_grace_s, force=True, writer=f"wal3 stress {self.name}"
        )
        try:
            report = collector.run()
        except Wal3Error as exc:
            self.counts[f"error: {type(exc).__name__}"] += 1
            log.warning("%s: gc failed: %s", self.name, exc)
            return
        self.counts["runs"] += 1
        self.counts.update(report.steps)
        self.counts["files deleted"] += len(report.deleted)
        self.counts["orphans deleted"] += len(report.orphans_deleted)
