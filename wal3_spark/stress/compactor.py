"""A stress compactor process: runs `compact` in a loop, as an operator's schedule of `wal3
compact` would, while writers append, readers read and move cursors and collectors collect.

Each run merges the manifest's settled small fragments into fragments of about
`compact_target_bytes` with one compare-and-swap per run of fragments, racing the writers'
commits (which rebase on it), the collectors' (a run they changed first leaves the compaction's
output an orphan: counted as `conflicts`), other compactors and kill -9. The readers, which read
the log through everything, are what checks it: a record lost, duplicated or moved by a
compaction is a violation there, and the final `verify` recomputes every compacted fragment's
setsum from its segments.

A compactor is also a slow consumer: it holds the cursor `compactor` at the first of the
manifest's fragments written (by its UUIDv7) in the last `compact_hold_s`, so that garbage
collection leaves it that much of the log to compact (readers that keep up would otherwise leave
it only the fragments appended since the last collection), and its cursor moves race the
collectors too. The position comes from the log, not from the process, so a compactor killed
every few seconds still moves it.

The stress log is raw, which Chroma's wal3 cannot read once compacted; nothing but the run reads
it, so the compactor passes `allow_chroma_incompatible`. Fragments younger than
`compact_settle_s` are left alone (see `StressConfig.compact_settle_s`).
"""

from __future__ import annotations

import logging
import random
import threading
from collections import Counter
from collections.abc import Callable

from wal3_spark.clock import SYSTEM, micros
from wal3_spark.errors import Wal3Error
from wal3_spark.format.uuid7 import uuid7_timestamp_us
from wal3_spark.log.compaction import compact
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.reader import LogReader
from wal3_spark.storage import ObjectStore
from wal3_spark.stress.config import StressConfig

logger = logging.getLogger(__name__)

#: the cursor a compactor holds back (see the module docstring)
HOLD_CURSOR = "compactor"


class StressCompactor:
    def __init__(self, config: StressConfig, name: str, store: ObjectStore,
                 after_run: Callable[[], None]) -> None:
        self.config = config
        #: called after every run, so that what a run did is on record before the next kill
        self.after_run = after_run
        self.name = name
        self.store = store
        self.rng = random.Random(f"{config.seed}/{name}")
        self.counts: Counter[str] = Counter()
        self.cursors = CursorStore(store, writer=f"wal3 stress {name}")

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.compact_once()
            self.after_run()
            stop.wait(self.rng.uniform(0.5, 1.5) * self.config.compact_every_s)

    def counters(self) -> dict[str, int]:
        return dict(self.counts)

    def faults(self) -> dict[str, int]:
        return {}

    def compact_once(self) -> None:
        try:
            self.hold()
        except Wal3Error as exc:
            self.counts[f"hold error: {type(exc).__name__}"] += 1
            logger.warning("%s: moving the held cursor failed: %s", self.name, exc)
        try:
            report = compact(self.store, target_bytes=self.config.compact_target_bytes,
                             settle_s=self.config.compact_settle_s, allow_chroma_incompatible=True)
        except Wal3Error as exc:  # a store fault or a racing GC: the next run tries again
            self.counts[f"error: {type(exc).__name__}"] += 1
            logger.warning("%s: compaction failed: %s", self.name, exc)
            return
        self.counts["runs"] += 1
        merged = [run for run in report.runs if not run.get("conflict")]
        self.counts["fragments merged"] += sum(run["fragments"] for run in merged)
        self.counts["fragments written"] += len(merged)
        self.counts["records rewritten"] += sum(run["limit"] - run["start"] for run in merged)
        self.counts["conflicts"] += report.conflicts

    def hold(self) -> None:
        """Advance the held cursor to the first fragment written in the last `compact_hold_s`
        (the tail if none was)."""
        manifest = LogReader(self.store).manifest()
        since_us = micros(SYSTEM) - int(self.config.compact_hold_s * 1e6)
        held = next((f.start for f in manifest.fragments
                     if (uuid7_timestamp_us(str(f.seq_no)) or 0) >= since_us), manifest.next_offset)
        self.cursors.advance(HOLD_CURSOR, held)
