"""Verifications the console runs in the background, one per log at a time, with progress.

`verify` reads every fragment of a log, which takes minutes on a large one: the request that
starts it returns at once, and the verify page shows the run's progress (fragments checked of
how many) until its report is there. Runs are kept in memory for the life of the server; one
started again after it finished replaces its report.

A page gets a copy of its run (`VerifyRuns.get`), taken under the lock the run's thread updates
it under: a page rendered while the run finishes shows it running or finished, never both (a
page that showed the result but still refreshed itself, as a running one does, would reload
under its reader).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, replace

from wal3_spark.clock import SYSTEM, Clock
from wal3_spark.errors import Wal3Error
from wal3_spark.ops.verify import VerifyReport, verify
from wal3_spark.storage.base import ObjectStore

logger = logging.getLogger(__name__)


@dataclass
class VerifyRun:
    """One run: progress while it runs, then its report (or the error that stopped it)."""

    name: str
    started: float
    done: int = 0
    total: int = 0
    finished: float | None = None
    report: VerifyReport | None = None
    error: str | None = None

    @property
    def running(self) -> bool:
        return self.finished is None


class VerifyRuns:
    """The runs of one console, by log name."""

    def __init__(self, clock: Clock = SYSTEM) -> None:
        self.clock = clock
        self._runs: dict[str, VerifyRun] = {}
        self._lock = threading.Lock()

    def get(self, name: str) -> VerifyRun | None:
        """A copy of `name`'s run as it is now (it does not change while a page renders it)."""
        with self._lock:
            run = self._runs.get(name)
            return None if run is None else replace(run)

    def start(self, name: str, store: ObjectStore) -> None:
        """Start verifying `name` unless a run of it is under way (a second start joins it)."""
        with self._lock:
            current = self._runs.get(name)
            if current is not None and current.running:
                return
            run = self._runs[name] = VerifyRun(name, self.clock.now())
        threading.Thread(target=self._run, args=(run, store), name=f"wal3-console-verify-{name}",
                         daemon=True).start()

    def _run(self, run: VerifyRun, store: ObjectStore) -> None:
        def progress(done: int, total: int) -> None:
            with self._lock:
                run.done, run.total = done, total

        report, error = None, None
        try:
            report = verify(store, progress=progress)
        except Wal3Error as exc:
            error = str(exc)
        except Exception as exc:  # a thread's failure must reach the page, not only stderr
            logger.exception("verify of %s failed", store.url)
            error = f"{type(exc).__name__}: {exc}"
        finally:
            with self._lock:  # the outcome and the end together: see `get`
                run.report, run.error = report, error
                if report is not None:
                    run.done = run.total = report.fragments
                run.finished = self.clock.now()
