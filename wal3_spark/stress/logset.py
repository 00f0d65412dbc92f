"""`wal3 stress --logs N`: the stress test of a log set whose logs are deleted and created again
while a reader streams them (docs/stress.md, "Log sets").

Writer threads append to N logs under one prefix, recording each commit in the prefix's dirty
log. A reader process follows the set as a log-set stream does: `changes_since` says which logs
changed, and each log is read from its own cursor (which records the log's incarnation) with
`on_recreated_log="restart"`. A fault thread now and then deletes every object of one log (its
manifest first, so that the log is gone at once, then its fragments, snapshots and cursors) and
creates it again. The reader's manifest GETs are damaged now and then as well (`damage.py`).

The ledger is per (log, incarnation), and the writers' acknowledgements say which incarnation
each record landed in (the commit's manifest). Every acknowledged record is delivered exactly
once, at the offset it was acknowledged at, unless its incarnation was deleted before the reader
reached it: the reader reads each incarnation in offset order, so the records it missed must be
a tail of that incarnation, after the last one it delivered ("gone with the deleted log"). A
missed record before that point, or in the incarnation that survives, is lost. Nothing is
delivered that no append sent, and no read hands over fewer records than it planned without an
error (shortened).
"""

from __future__ import annotations

import json
import logging
import random
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from wal3_spark.errors import CorruptLog, LogNotFound, LogRecreated, Wal3Error
from wal3_spark.format.deletion import is_log_object
from wal3_spark.format.layout import MANIFEST_KEY
from wal3_spark.format.schema import OFFSET_COLUMN
from wal3_spark.log.committer import Committer
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.manifest_reader import read_manifest
from wal3_spark.log.writer import LogWriter, LogWriterOptions
from wal3_spark.logset.dirty import DirtyLog, DirtyPosition, changes_since
from wal3_spark.logset.logs import LogSelection, LogSet
from wal3_spark.ops.verify import verify
from wal3_spark.storage import ObjectStore, open_store
from wal3_spark.stress.config import LogSetStressConfig
from wal3_spark.stress.damage import ManifestDamage, judge

logger = logging.getLogger(__name__)

CURSOR = "stress"
#: the files of the run directory the reader process writes
CONFIG = "logset-stress.json"
DELIVERED = "delivered.jsonl"
READER = "reader.json"
STOP = "stop"
#: the violations of the ledger: any of them fails the run
VIOLATIONS = ("lost", "duplicated", "unacknowledged", "misplaced", "shortened")


@dataclass
class Tally:
    """The ledger's verdict."""

    acknowledged: int = 0
    #: of them, acknowledged through `submit` (pipelined) rather than `append`
    acknowledged_pipelined: int = 0
    #: appends that failed: their records may or may not be in the log
    unknown_outcome: int = 0
    delivered: int = 0
    #: records of unknown outcome that the reader delivered (they had landed)
    delivered_unknown: int = 0
    gone_with_deleted_log: int = 0
    lost: int = 0
    duplicated: int = 0
    #: delivered, but no append ever sent the record
    unacknowledged: int = 0
    #: delivered from another log, incarnation or offset than it was acknowledged at
    misplaced: int = 0
    shortened: int = 0
    recreations: int = 0
    damaged_manifest_reads: int = 0
    damage_refused: int = 0
    damage_harmless: int = 0
    verify_ok: bool = False
    verify_problems: list[str] = field(default_factory=list)
    examples: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.verify_ok and not any(getattr(self, v) for v in VIOLATIONS)


# ----------------------------------------------------------------------------- the ledger


@dataclass(frozen=True)
class Ack:
    log: str
    incarnation: str | None
    offset: int


def tally(acks: dict[str, Ack], unknown: set[str], deliveries: Iterable[tuple[str, str | None, int, str]],
          survivors: dict[str, str | None]) -> Tally:
    """The verdict on `deliveries` (log, incarnation read, offset, record id) given the
    acknowledged records `acks` (by id), the ids of appends of unknown outcome, and each log's
    incarnation at the end (`survivors`: every other incarnation was deleted)."""
    t = Tally(acknowledged=len(acks), unknown_outcome=len(unknown))
    seen: Counter[str] = Counter()
    reached: dict[tuple[str, str | None], int] = {}
    for name, incarnation, offset, rid in deliveries:
        t.delivered += 1
        seen[rid] += 1
        if seen[rid] > 1:
            t.duplicated += 1
            _example(t, f"duplicated: {rid} (again at {name}@{offset})")
            continue
        ack = acks.get(rid)
        if ack is None:
            if rid in unknown:
                t.delivered_unknown += 1
            else:
                t.unacknowledged += 1
                _example(t, f"unacknowledged: {rid} at {name}@{offset}")
            continue
        if (ack.log, ack.incarnation, ack.offset) != (name, incarnation, offset):
            t.misplaced += 1
            _example(t, f"misplaced: {rid} acknowledged at {ack}, delivered at {name} {incarnation} @{offset}")
            continue
        key = (name, incarnation)
        reached[key] = max(reached.get(key, -1), offset)
    for rid, ack in acks.items():
        if seen[rid]:
            continue
        deleted = survivors.get(ack.log) != ack.incarnation
        if deleted and ack.offset > reached.get((ack.log, ack.incarnation), -1):
            t.gone_with_deleted_log += 1
        else:
            t.lost += 1
            _example(t, f"lost: {rid} acknowledged at {ack}")
    return t


def _example(t: Tally, what: str) -> None:
    if len(t.examples) < 20:
        t.examples.append(what)


# ----------------------------------------------------------------------------- writers and faults


class _Writers:
    """Writer threads appending records named `w<writer>-<seq>` to random logs of the set."""

    def __init__(self, config: LogSetStressConfig, stop: threading.Event) -> None:
        self.config = config
        self.stop = stop
        self.lock = threading.Lock()
        self.acks: dict[str, Ack] = {}
        self.unknown: set[str] = set()
        self.pipelined = 0  # records acknowledged through `submit`
        self.dirty = DirtyLog(config.url, batch_interval_s=0.05)

    def run(self, w: int) -> None:
        """Appends of 1-16 records to random logs, half of them by `append` (one commit each),
        half as a burst of 1-8 `submit`s pipelined by one writer (up to 4 manifest writes in
        flight for some logs): both paths into a commit meet logs deleted under them."""
        rng = random.Random(f"{self.config.seed}-writer-{w}")
        writers: dict[str, LogWriter] = {}
        seq = 0
        while not self.stop.is_set():
            name = rng.choice(self.config.names())
            pipelined = rng.random() < 0.5
            appends = []
            for _ in range(rng.randint(1, 8) if pipelined else 1):
                n = rng.randint(1, self.config.max_records_per_append)
                appends.append([f"w{w}-{seq + i}" for i in range(n)])
                seq += n
            if name not in writers:
                writers[name] = LogWriter(
                    f"{self.config.url}/{name}",
                    LogWriterOptions(writer=f"stress writer {w}", batch_interval_s=0,
                                     max_manifest_writes=rng.choice((1, 4))),
                    dirty_log=self.dirty)
            outcomes = (self._submit(writers[name], name, appends) if pipelined
                        else [self._append(writers[name], name, appends[0])])
            if any(isinstance(o, Wal3Error) for o in outcomes):
                _close(writers.pop(name))
        for writer in writers.values():
            _close(writer)

    def _append(self, writer: LogWriter, name: str, ids: list[str]) -> Wal3Error | None:
        try:
            result = writer.append(_bodies(name, ids))
        except Wal3Error as exc:
            return self._failed(name, ids, exc)
        self._acknowledged(name, ids, result.manifest.incarnation, result.start)
        return None

    def _submit(self, writer: LogWriter, name: str, appends: list[list[str]]) -> list[Wal3Error | None]:
        futures = [writer.submit(_bodies(name, ids)) for ids in appends]
        outcomes: list[Wal3Error | None] = []
        for ids, future in zip(appends, futures, strict=True):
            try:
                done = future.result()
            except Wal3Error as exc:
                outcomes.append(self._failed(name, ids, exc))
                continue
            self._acknowledged(name, ids, done.incarnation, done.start)
            with self.lock:
                self.pipelined += len(ids)
            outcomes.append(None)
        return outcomes

    def _failed(self, name: str, ids: list[str], exc: Wal3Error) -> Wal3Error:
        logger.info("append of %d records to %s failed (%s)", len(ids), name, exc)
        with self.lock:
            self.unknown.update(ids)
        return exc

    def _acknowledged(self, name: str, ids: list[str], incarnation: str | None, start: int) -> None:
        with self.lock:
            for i, rid in enumerate(ids):
                self.acks[rid] = Ack(name, incarnation, start + i)


def _bodies(name: str, ids: list[str]) -> list[bytes]:
    return [json.dumps({"log": name, "id": rid}).encode() for rid in ids]


def _close(writer: LogWriter) -> None:
    try:
        writer.close()
    except Wal3Error as exc:  # its failed appends were counted as of unknown outcome
        logger.info("closing %s: %s", writer.url, exc)


def recreate(prefix: ObjectStore, name: str) -> None:
    """Delete every object of log `name` (its manifest first: the log is gone at once) and
    create the log again, empty. Only keys of a log's layout are deleted (`is_log_object`): a
    log nested below `name` is not one of its objects."""
    store = prefix_store(prefix, name)
    try:
        store.delete(MANIFEST_KEY)
    except Wal3Error as exc:
        logger.info("deleting %s's manifest: %s", name, exc)
    for meta in [m for m in store.list("") if is_log_object(m.key)]:
        try:
            store.delete(meta.key)
        except Wal3Error as exc:  # a writer's fragment may come and go meanwhile
            logger.info("deleting %s/%s: %s", name, meta.key, exc)
    Committer(store, writer="stress re-creator").create(None)


def _fault_loop(config: LogSetStressConfig, stop: threading.Event, count: list[int]) -> None:
    rng = random.Random(f"{config.seed}-recreate")
    prefix = open_store(config.url)
    while not stop.wait(rng.expovariate(1 / config.recreate_every_s)):
        name = rng.choice(config.names())
        try:
            recreate(prefix, name)
        except Wal3Error as exc:
            logger.warning("re-creating %s: %s", name, exc)
            continue
        count[0] += 1


# ----------------------------------------------------------------------------- the reader


class _Reader:
    """Follows the set from the dirty log and per-log cursors; writes every delivered record to
    `delivered.jsonl` before it moves the cursor past it."""

    def __init__(self, config: LogSetStressConfig, run_dir: Path) -> None:
        self.config = config
        self.run_dir = run_dir
        self.logs = LogSet(config.url, LogSelection.of(config.names()))
        self.damage = {
            name: ManifestDamage(self.logs.log_store(name), config.damage_manifest, hash((config.seed, name)))
            for name in config.names()
        }
        self.out = (run_dir / DELIVERED).open("a")
        self.counts: Counter[str] = Counter()

    def run(self) -> None:
        position: DirtyPosition | None = None
        while True:
            stopping = (self.run_dir / STOP).exists()
            changes = changes_since(self.logs, None if stopping else position,
                                    full_scan_every_s=self.config.full_scan_every_s)
            position = changes.position
            names = self.config.names() if stopping else sorted(changes.tails)
            read = sum(self.follow(name) for name in names)
            if stopping and read == 0 and not changes.failed:
                break
        self.out.close()
        self.counts["damaged_manifest_reads"] = sum(d.count for d in self.damage.values())
        (self.run_dir / READER).write_text(json.dumps(dict(self.counts)))

    def follow(self, name: str) -> int:
        """Read log `name` from its cursor to its tail; the number of records delivered."""
        damaged = self.damage[name]
        cursors = CursorStore(damaged, writer="stress reader")
        total = 0
        while True:
            damaged.take()
            try:
                before = cursors.incarnation()
                scan = cursors.scan_from(CURSOR, max_records=self.config.read_chunk, on_recreated_log="restart")
                rows = [(o, b) for batch in scan.reader
                        for o, b in zip(batch.column(OFFSET_COLUMN).to_pylist(),
                                        batch.column("body").to_pylist(), strict=True)]
                after = cursors.incarnation()
            except LogNotFound:
                return total  # deleted meanwhile: it is read again once it changes
            except CorruptLog:
                self.counts["damage_refused"] += len(damaged.take())
                continue
            except Wal3Error as exc:  # a fragment deleted with its log while read
                logger.info("reading %s: %s", name, exc)
                return total
            if before != after:
                continue  # the log was re-created during the read: read the new one
            for hit in damaged.take():
                self.counts[judge(hit, scan.start, scan.position, self.config.read_chunk, False)] += 1
            if len(rows) != scan.records:
                self.counts["shortened"] += 1
            for offset, body in rows:
                self.out.write(json.dumps([name, before, offset, json.loads(body)["id"]]) + "\n")
            self.out.flush()
            total += len(rows)
            if not self._advance(cursors, scan.position, before) or scan.records == 0:
                return total

    @staticmethod
    def _advance(cursors: CursorStore, offset: int, incarnation: str | None) -> bool:
        """Move the cursor (retrying damaged manifest reads); False when the log is gone."""
        while True:
            try:
                cursors.advance(CURSOR, offset, incarnation=incarnation)
                return True
            except CorruptLog:
                continue
            except (LogNotFound, LogRecreated):
                return False


def _reader_main(run_dir: Path) -> None:
    logging.basicConfig(level=logging.WARNING)
    config = LogSetStressConfig(**json.loads((run_dir / CONFIG).read_text()))
    _Reader(config, run_dir).run()


if __name__ == "__main__":  # the reader process: python -m wal3_spark.stress.logset RUN_DIR
    _reader_main(Path(sys.argv[1]))


# ----------------------------------------------------------------------------- the run


def run_logset_stress(config: LogSetStressConfig, run_dir: Path, out: IO[str] | None = None) -> Tally:
    """Run the writers, the re-creations and the reader for `LogSetStressConfig.duration_s`, then let the
    reader drain the set and judge what it delivered."""
    run_dir.mkdir(parents=True, exist_ok=True)
    prefix = open_store(config.url)
    for name in config.names():
        Committer(prefix_store(prefix, name)).create(None)
    (run_dir / CONFIG).write_text(json.dumps(asdict(config)))
    reader = subprocess.Popen([sys.executable, "-m", __name__, str(run_dir)])
    stop = threading.Event()
    writers = _Writers(config, stop)
    recreations = [0]
    threads = [threading.Thread(target=writers.run, args=(w,)) for w in range(config.writers)]
    threads.append(threading.Thread(target=_fault_loop, args=(config, stop, recreations)))
    for thread in threads:
        thread.start()
    try:
        stop.wait(config.duration_s)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
        writers.dirty.close()
        (run_dir / STOP).touch()
        status = reader.wait()
    if status != 0:
        raise RuntimeError(f"the stress reader exited with status {status} (see its output)")
    survivors = {name: read_manifest(prefix_store(prefix, name)).incarnation for name in config.names()}
    with (run_dir / DELIVERED).open() as f:
        deliveries = [tuple(json.loads(line)) for line in f]
    t = tally(writers.acks, writers.unknown, deliveries, survivors)
    counts = json.loads((run_dir / READER).read_text())
    t.recreations = recreations[0]
    t.acknowledged_pipelined = writers.pipelined
    t.shortened += counts.get("shortened", 0) + counts.get("damage_shortened", 0)
    t.damaged_manifest_reads = counts.get("damaged_manifest_reads", 0)
    t.damage_refused = counts.get("damage_refused", 0)
    t.damage_harmless = counts.get("damage_harmless", 0)
    for name in config.names():
        report = verify(prefix_store(prefix, name))
        t.verify_problems += [f"{name}: {p}" for p in report.problems]
        t.verify_ok = report.ok if name == config.names()[0] else t.verify_ok and report.ok
    (run_dir / "summary.json").write_text(json.dumps({**asdict(t), "ok": t.ok}, indent=2))
    if out is not None:
        _print(t, out)
    return t


def prefix_store(prefix: ObjectStore, name: str) -> ObjectStore:
    return open_store(f"{prefix.url.rstrip('/')}/{name}")


def _print(t: Tally, out: IO[str]) -> None:
    doc: dict[str, Any] = {k: v for k, v in asdict(t).items() if k not in ("examples", "verify_problems")}
    for key, value in doc.items():
        out.write(f"  {key:24} {value}\n")
    for line in t.examples + ([] if t.verify_ok else t.verify_problems):
        out.write(f"  ! {line}\n")
    out.write(f"wal3 stress --logs: {'OK' if t.ok else 'FAILED'}\n")
