"""A log set under load, as the console's acceptance run and the scrape-cost benchmark both need
it: many small logs (every fourth with a cursor `billing` at its tail), then a few of them
appended to by writers kept open (one `DirtyLog` for the prefix, as a log-set deployment runs)
while consumer threads move each active log's `billing` cursor to somewhere behind the tail."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.reader import LogReader
from wal3_spark.log.writer import LogWriter, LogWriterOptions
from wal3_spark.logset.dirty import DirtyLog
from wal3_spark.logset.logs import LogSet
from wal3_spark.storage.base import ObjectStore

#: the records of one append to a log: (log name, first row number, rows) -> what append takes
Rows = Callable[[str, int, int], Any]

APPENDERS = 4
CONSUMERS = 2


def populate(logs: LogSet, names: list[str], rows: Rows) -> float:
    """Create `names`, each with one append of 20 records and every fourth with a cursor at its
    tail; the seconds it took."""
    def one(index: int, name: str) -> None:
        with LogWriter(logs.log_store(name), LogWriterOptions(batch_interval_s=0)) as writer:
            limit = writer.append(rows(name, 0, 20)).limit
        if index % 4 == 0:
            CursorStore(logs.log_store(name)).create("billing", limit)

    began = time.perf_counter()
    with ThreadPoolExecutor(32) as pool:
        list(pool.map(one, range(len(names)), names))
    return time.perf_counter() - began


def spread(names: list[str], active: int) -> list[str]:
    """`active` of `names`, spread over the set (every seventh from the second)."""
    return names[1: 1 + active * 7: 7][:active]


class Load:
    """Appender and consumer threads on `active` logs of `logs` until `stop`: `records` and
    `commits` count what the appenders appended. `pause_s` is each appender's pause between
    appends."""

    def __init__(self, prefix: ObjectStore, active: list[str], rows: Rows, pause_s: float = 0.0) -> None:
        self.logs = LogSet(prefix)
        self.active = active
        self.stopping = threading.Event()
        self.records = self.commits = 0
        self._counted = threading.Lock()
        self._rows = rows
        self._pause_s = pause_s
        self._dirty = DirtyLog(prefix)
        self._writers = {name: LogWriter(self.logs.log_store(name), dirty_log=self._dirty) for name in active}
        self.threads = [threading.Thread(target=self._append, args=(active[i::APPENDERS],))
                        for i in range(APPENDERS)]
        self.threads += [threading.Thread(target=self._consume, args=(active[i::CONSUMERS],))
                         for i in range(CONSUMERS)]
        for thread in self.threads:
            thread.start()

    def _append(self, mine: list[str]) -> None:
        rng = random.Random(mine[0])
        while not self.stopping.is_set():
            name = rng.choice(mine)
            n = rng.randint(5, 50)
            self._writers[name].append(self._rows(name, 0, n))
            with self._counted:
                self.records += n
                self.commits += 1
            if self._pause_s:
                self.stopping.wait(self._pause_s)

    def _consume(self, mine: list[str]) -> None:
        rng = random.Random(mine[-1])
        while not self.stopping.is_set():
            name = rng.choice(mine)
            store = self.logs.log_store(name)
            oldest, tail = LogReader(store).bounds()
            CursorStore(store).advance("billing", max(oldest, tail - rng.randint(0, 200)))
            self.stopping.wait(0.2)

    def stop(self) -> None:
        """Stop the threads and close the writers and the dirty log (idempotent)."""
        self.stopping.set()
        for thread in self.threads:
            thread.join()
        for writer in self._writers.values():
            writer.close()
        self._dirty.close()
