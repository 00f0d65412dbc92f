"""A stress reader process: reads the log in offset order, feeds its ledger, and keeps its
cursor just behind what it has verified.

Each cycle reads up to `read_chunk` records from the ledger's position (fewer when reading them
takes longer than `cycle_s`: a cycle ends after the fragment that passes it), catches up with the
writers' journals (after the read, so that every record read has its intent on disk), decides what
can be decided, *persists its state, then advances its cursor*. Garbage collection only removes what
lies below every reader's cursor, so a reader restarted after a kill -9 resumes from its persisted
position, which its cursor never passed: the collected prefix never hides a record from verification
(the "map of initial states" of Chroma's wal3 design, kept by each reader).

A referenced fragment that cannot be read (a missing object: garbage collection or a commit
went wrong) is retried with a fresh manifest each cycle; after `SKIP_AFTER` failures its records
are skipped and counted `unreadable`, so that one broken fragment does not stop verification.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from typing import Any

from wal3_spark.clock import SYSTEM
from wal3_spark.errors import CorruptLog, Wal3Error
from wal3_spark.format.layout import MANIFEST_KEY
from wal3_spark.format.manifest import Manifest
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.fragment_io import read_range
from wal3_spark.log.reader import LogReader
from wal3_spark.storage import ObjectStore
from wal3_spark.stress.damage import Damage, ManifestDamage, judge
from wal3_spark.stress.journal import read_new
from wal3_spark.stress.ledger import Ledger
from wal3_spark.stress.rundir import RunDir, read_json, write_json

logger = logging.getLogger(__name__)

SKIP_AFTER = 20
POLL_S = 0.2


def cursor_name(reader: str) -> str:
    return f"stress_{reader}"


class StressReader:
    def __init__(self, run: RunDir, seed: int, slot: str, store: ObjectStore, read_chunk: int,
                 cycle_s: float = 5.0) -> None:
        self.rundir = run
        self.slot = slot
        self.store = store
        self.read_chunk = read_chunk
        self.cycle_s = cycle_s
        self.reader = LogReader(store)
        self.cursors = CursorStore(store, writer=f"wal3 stress {slot}")
        self.errors: Counter[str] = Counter()
        #: what became of the damaged manifests this reader's store served (`stress.damage`)
        self.damage: Counter[str] = Counter()
        #: the damaged manifest the current cycle planned on, if it was
        self._planned_on: Damage | None = None
        self.failures: Counter[str] = Counter()  # fragment path -> consecutive read failures
        saved = read_json(run.reader_state(slot))
        self.ledger = Ledger.from_json(saved["ledger"]) if saved else Ledger(seed)
        self.journal_offsets: dict[str, int] = dict(saved["journals"]) if saved else {}
        self.finished = bool(saved and saved.get("finished"))

    def run(self, stop: threading.Event) -> None:
        while not self.finished and not stop.is_set():
            final = read_json(self.rundir.final)
            try:
                progressed = self.read_some()
            except Wal3Error as exc:
                self.errors[type(exc).__name__] += 1
                logger.warning("%s: read failed: %s", self.slot, exc)
                progressed = False
                damaged = self._damaged_store()
                if isinstance(exc, CorruptLog) and damaged is not None:
                    if damaged.take() or self._planned_on is not None:
                        self.damage["damage_refused"] += 1
                    else:  # corruption nobody injected: the log itself is damaged
                        self.errors[f"CorruptLog without damage: {exc}"[:200]] += 1
            self.catch_up_journals()
            self.ledger.settle()
            if final is not None and self.ledger.position >= final["tail"] and not progressed:
                self.finish()
            self.save()
            self.advance_cursor()
            if not progressed:
                stop.wait(POLL_S)  # caught up: poll the manifest again shortly

    def counters(self) -> dict[str, int]:
        return dict(self.errors)

    def faults(self) -> dict[str, int]:
        """What became of the damaged manifests (the damage itself is the store's count)."""
        return dict(self.damage)

    def _damaged_store(self) -> ManifestDamage | None:
        return self.store if isinstance(self.store, ManifestDamage) else None

    def read_some(self) -> bool:
        """Read the next chunk into the ledger; False when there was nothing new."""
        deadline = SYSTEM.monotonic() + self.cycle_s
        damaged = self._damaged_store()
        self._planned_on = None
        if damaged is not None:
            damaged.take()  # served to an earlier cycle, which judged it
        manifest = self.reader.manifest()
        if damaged is not None:
            self._planned_on = next(reversed(damaged.take()), None)
        start = self.ledger.position
        if manifest.next_offset < start:
            raise CorruptLog("a log's tail never moves back", MANIFEST_KEY,
                             f"its tail {manifest.next_offset} is behind offset {start}, which "
                             "this reader has read")
        if start < manifest.oldest_offset:
            self.reader.confirm_oldest(manifest)
            if manifest.retention is not None:  # the policy overtakes cursors: accounted, not lost
                self.ledger.remove(manifest.oldest_offset)
            else:
                self.ledger.skip(manifest.oldest_offset, "garbage-collected before this reader read them")
        limit = min(manifest.next_offset, self.ledger.position + self.read_chunk)
        cut_short = self.ledger.position < limit and self._read_parts(manifest, limit, deadline)
        if self._planned_on is not None:
            outcome = judge(self._planned_on, start, self.ledger.position, self.read_chunk, cut_short)
            self.damage[outcome] += 1
            if outcome == "damage_shortened":
                logger.error("%s: a damaged manifest went unnoticed and shortened a read of [%d, ...) "
                          "to [%d, %d)", self.slot, start, start, self.ledger.position)
        return self.ledger.position > start

    def _read_parts(self, manifest: Manifest, limit: int, deadline: float) -> bool:
        """Read [position, limit) into the ledger; True when the deadline cut it short."""
        for part in self.reader.plan(self.ledger.position, limit, manifest=manifest):
            try:
                batch = read_range(self.store, part, manifest.arrow_schema())
            except CorruptLog as exc:
                self.failures[part.ref.path] += 1
                if self.failures[part.ref.path] < SKIP_AFTER:
                    raise
                logger.error("%s: skipping %s after %d failures: %s", self.slot, part.ref.path,
                          SKIP_AFTER, exc)
                self.ledger.skip(part.limit, f"{part.ref.path}: {exc}")
                continue
            self.failures.pop(part.ref.path, None)
            offsets = batch.column("_offset").to_pylist()
            for offset, body in zip(offsets, batch.column("body").to_pylist(), strict=True):
                self.ledger.observe(offset, body)
            if SYSTEM.monotonic() >= deadline:
                return True  # persist this much before a kill -9 can take it away
        return False

    def catch_up_journals(self) -> None:
        for writer, path in self.rundir.journals():
            entries, self.journal_offsets[writer] = read_new(path, self.journal_offsets.get(writer, 0))
            for entry in entries:
                self.ledger.note(writer, entry)

    def finish(self) -> None:
        """The writers are gone and everything up to the final tail is read: decide the rest."""
        if all(w in self.ledger.ended for w, _ in self.rundir.journals()):
            self.ledger.settle(final=True)
            self.finished = True

    def save(self) -> None:
        state: dict[str, Any] = {
            "ledger": self.ledger.to_json(),
            "journals": self.journal_offsets,
            "finished": self.finished,
        }
        write_json(self.rundir.reader_state(self.slot), state)

    def advance_cursor(self) -> None:
        try:
            self.cursors.advance(cursor_name(self.slot), self.ledger.position)
        except Wal3Error as exc:
            self.errors[f"cursor: {type(exc).__name__}"] += 1
            logger.warning("%s: moving the cursor failed: %s", self.slot, exc)
