"""The log-set stream's acceptance scenario, shared by the local[2] tests and the `local-cluster`
script: a herd of 50 logs under one prefix, streamed as one.

Writers append to a skewed subset (three hot logs get most records, the others a few), logs are
created while the query runs and while it is stopped, one log is sealed mid-stream, one is
garbage-collected under the stream's cursor, and the query is restarted from its checkpoint.
Every record carries its log's name (`src`) and a unique `id`, so the sink shows whether each
was delivered exactly once and with the right `_log`. Appends go through the core `LogWriter`
(fast, on the driver); only the stream runs on Spark.
"""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path

import pyarrow as pa

from wal3_spark.log.committer import Committer
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.reader import LogReader
from wal3_spark.log.writer import LogWriter
from wal3_spark.logset.dirty import DirtyLog
from wal3_spark.ops.garbage_collector import GCOptions, collect_garbage
from wal3_spark.storage import open_store

HOT = ("t00", "t01", "t02")
GC_LOG, SEALED_LOG = "t03", "t10"
CURSOR = "herd"


class Herd:
    """The logs under `prefix` and every record appended to them (recorded in `dirty`, the
    prefix's dirty log, when given)."""

    def __init__(self, prefix: str, options: dict[str, str], dirty: DirtyLog | None) -> None:
        self.prefix = prefix
        self.options = options
        self.dirty = dirty
        self.ids = itertools.count()
        #: (log, id) of every record appended
        self.appended: list[tuple[str, int]] = []

    def url(self, name: str) -> str:
        return f"{self.prefix}/{name}"

    def store(self, name: str):
        return open_store(self.url(name), self.options or None)

    def append(self, name: str, n: int, times: int = 1) -> None:
        with LogWriter(self.url(name), options=self.options or None,
                       dirty_log=self.dirty) as writer:
            for _ in range(times):
                ids = [next(self.ids) for _ in range(n)]
                writer.append(pa.table({"id": pa.array(ids, pa.int64()), "src": [name] * n}))
                self.appended.extend((name, i) for i in ids)

    def hot_appends(self) -> None:
        for name in HOT:
            self.append(name, 40, times=2)


def start(spark, herd: Herd, work: Path):
    """The stream (every log under the prefix, fair batches of 300 records, a cursor on every
    log) into Parquet, on a checkpoint that survives restarts."""
    return (
        spark.readStream.format("wal3").options(**herd.options)
        .option("logs", "*").option("maxRecordsPerTrigger", "300").option("cursor", CURSOR)
        .load(herd.prefix)
        .select("id", "src", "_log", "_offset")
        .writeStream.format("parquet").option("path", str(work / "out"))
        .option("checkpointLocation", str(work / "ckpt")).start()
    )


def run(spark, prefix: str, options: dict[str, str], work: Path, *, dirty: bool) -> dict:
    """Run the scenario, with every writer recording its commits in the prefix's dirty log
    (`dirty`: the stream then learns what changed from it) or none (the stream reads every
    manifest each trigger); return what the checks need (JSON-able, for the cluster script)."""
    if dirty:
        with DirtyLog(prefix, options=options or None) as recorder:
            return _run(spark, Herd(prefix, options, recorder), work)
    return _run(spark, Herd(prefix, options, None), work)


def _run(spark, herd: Herd, work: Path) -> dict:
    options = herd.options
    for i in range(45):
        herd.append(f"t{i:02d}", 3)
    herd.hot_appends()
    herd.append(GC_LOG, 10, times=3)
    herd.append(SEALED_LOG, 5, times=2)

    query = start(spark, herd, work)
    query.processAllAvailable()
    first_batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    herd.append("t45", 2)  # logs created while the query runs
    herd.append("t46", 2)
    herd.hot_appends()
    herd.append(SEALED_LOG, 5)
    Committer(herd.store(SEALED_LOG)).seal()
    query.processAllAvailable()
    query.stop()

    # GC under the stream's cursor, then more records for that log
    cursor = CursorStore(herd.store(GC_LOG)).get(CURSOR).cursor.offset
    collect_garbage(herd.url(GC_LOG), GCOptions(grace_s=0, force=True), options=options or None)
    gc_oldest = LogReader(herd.store(GC_LOG)).bounds()[0]
    herd.append(GC_LOG, 10)
    for i in range(47, 50):  # logs created while the query is stopped
        herd.append(f"t{i:02d}", 4)
    herd.hot_appends()

    query = start(spark, herd, work)  # restart from the checkpoint
    query.processAllAvailable()
    herd.append("t20", 3)
    herd.append("t33", 3)
    herd.hot_appends()
    query.processAllAvailable()
    query.stop()

    rows = spark.read.parquet(str(work / "out")).collect()
    delivered = Counter((r.src, r.id) for r in rows)
    expected = set(herd.appended)
    return {
        "logs": len({name for name, _ in herd.appended}),
        "appended": len(herd.appended),
        "delivered": len(rows),
        "missing": len(expected - delivered.keys()),
        "unexpected": len(delivered.keys() - expected),
        "duplicated": sum(1 for n in delivered.values() if n > 1),
        "wrong_log": sum(1 for r in rows if r._log != r.src),
        "offsets_repeated": len(rows) - len({(r._log, r._offset) for r in rows}),
        "first_batches": first_batches,
        "gc_cursor": cursor,
        "gc_oldest": gc_oldest,
    }
