"""`wal3 stress --branches N`: branches taken, written, checkpointed and deleted under continuous
appends and garbage collection of their parent, with kill -9 of every worker, every record
checked (docs/stress.md).

Three worker processes, each killed with SIGKILL at random and started again:
- *writer*: appends batches to the root log without pause;
- *collector*: moves the root's cursor close to its tail and collects it with no grace (the
  harshest setting: deleted as soon as applied), its orphan sweep run ahead of the clock so that
  pins left by killed branch creations are dropped within seconds, not the default 15 minutes
  (branch creations get a matching short pin deadline);
- *operator*: creates branches at random offsets of the root or of another branch, appends to
  branches (journaling each acknowledged append), checkpoints and deletes them; at most N exist.

The supervisor (this process, never killed) checks every branch every few seconds: its records
below the branch point are exactly the parent's records there, as the operator read them from
the parent right after creating the branch (or, when a kill cut that note, as the parent held
them when the supervisor first saw the branch); its own records are each written once by the
operator, and every acknowledged one is there. At the end: every branch verifies, and after a last
collection the root holds exactly the pins of the branches that read it.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO

from wal3_spark.clock import SYSTEM, SystemClock
from wal3_spark.errors import LogNotFound, Wal3Error
from wal3_spark.format.layout import MANIFEST_KEY
from wal3_spark.log.branches import branch, delete_branch
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.holds import list_pins
from wal3_spark.log.manifest_reader import read_manifest
from wal3_spark.log.reader import LogReader
from wal3_spark.log.writer import LogWriter
from wal3_spark.ops.checkpoint import checkpoint
from wal3_spark.ops.garbage_collector import MIN_ORPHAN_GRACE_S, GarbageCollector
from wal3_spark.ops.verify import verify
from wal3_spark.storage import open_store
from wal3_spark.storage.common import file_url

ROLES = ("writer", "collector", "operator")
#: pins without a branch are dropped once this old (the collector's orphan clock runs ahead)
ORPHAN_AGE_S = 20.0
#: a branch creation publishes within this long of its pin, or gives up
PIN_DEADLINE_S = 5.0
ROOT = "root"


@dataclass
class BranchStats:
    checks: int = 0
    records_checked: int = 0
    branches_seen: int = 0
    kills: int = 0
    restarts: int = 0
    failures: list[str] = field(default_factory=list)
    transient: int = 0
    pins_at_end: int = 0
    live_at_end: int = 0
    verified_at_end: int = 0
    operations: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failures


def _url(base: Path, name: str) -> str:
    return file_url(str(base / name))


def _branch_names(base: Path) -> list[str]:
    folder = base / "b"
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


# -------------------------------------------------------------------------- the workers


def _writer(base: Path, rng: random.Random) -> None:
    writer = LogWriter(_url(base, ROOT))
    tag = f"{os.getpid()}"
    n = 0
    while True:
        size = rng.randint(1, 20)
        writer.append([f"root:{tag}:{n + i}".encode() for i in range(size)])
        n += size


def _collector(base: Path, rng: random.Random) -> None:
    root = _url(base, ROOT)
    ahead = SystemClock(skew_s=MIN_ORPHAN_GRACE_S - ORPHAN_AGE_S)
    cursors = CursorStore(root, writer="stress collector")
    while True:
        manifest = read_manifest(open_store(root))
        target = max(manifest.oldest_offset, manifest.next_offset - rng.randint(20, 400))
        cursors.move("stress", target, allow_backwards=True)
        GarbageCollector(root, grace_s=0, force=True, orphan_clock=ahead,
                         writer="stress collector").run()
        SYSTEM.sleep(rng.uniform(0.1, 1.0))


def _operator(base: Path, rng: random.Random, limit: int) -> None:
    journal = (base / "acks.jsonl").open("a")
    ops = (base / "ops.jsonl").open("a")
    created = sum(1 for op in _ops(base) if op.get("intent") == "create")
    seq = int(SYSTEM.now() * 1000) * 1000

    def note(doc: dict) -> None:
        ops.write(json.dumps(doc) + "\n")
        ops.flush()
        os.fsync(ops.fileno())

    while True:
        names = [n for n in _branch_names(base) if open_store(_url(base / "b", n)).exists(MANIFEST_KEY)]
        roll = rng.random()
        op = "create" if roll < 0.25 and len(names) < limit else (
            "append" if roll < 0.85 else "checkpoint" if roll < 0.93 else "delete") if names else "create"
        try:
            if op == "create":
                name = f"b{created:05d}"
                created += 1
                note({"intent": "create", "name": name})
                parent = _url(base, ROOT) if not names or rng.random() < 0.7 else _url(base / "b", rng.choice(names))
                m = read_manifest(open_store(parent))
                at = min(rng.randint(m.oldest_offset, m.next_offset) + rng.randint(0, 50), m.next_offset)
                made = branch(parent, _url(base / "b", name), at=at, pin_deadline_s=PIN_DEADLINE_S)
                # what the parent holds below the branch point, read from the parent itself while
                # the pin holds it: the checker compares the branch with it for as long as the
                # branch lives, checkpointed or not
                below = LogReader(parent).read_table(made.start, made.offset).column("body").to_pylist()
                note({"created": name, "start": made.start, "offset": made.offset,
                      "digest": _digest(below),
                      "incarnation": read_manifest(open_store(_url(base / "b", name))).incarnation})
            elif op == "append":
                name = rng.choice(names)
                size = rng.randint(1, 10)
                seqs = list(range(seq, seq + size))
                seq += size
                LogWriter(_url(base / "b", name)).append([f"{name}:{s}".encode() for s in seqs])
                journal.write(json.dumps({"b": name, "seqs": seqs}) + "\n")
                journal.flush()
                os.fsync(journal.fileno())
            elif op == "checkpoint":
                checkpoint(_url(base / "b", rng.choice(names)))
            else:
                delete_branch(_url(base / "b", rng.choice(names)))
            note({"done": op})
        except Wal3Error as exc:  # refused (a branch with branches, a range collected meanwhile)
            note({"refused": op, "why": str(exc)[:200]})


def _ops(base: Path) -> list[dict]:
    path = base / "ops.jsonl"
    found = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                found.append(json.loads(line))
            except ValueError:
                continue  # a line cut by kill -9
    return found


def worker_main(argv: list[str]) -> None:
    role, base, seed, limit = argv[0], Path(argv[1]), int(argv[2]), int(argv[3])
    rng = random.Random(seed)
    if role == "writer":
        _writer(base, rng)
    elif role == "collector":
        _collector(base, rng)
    else:
        _operator(base, rng, limit)


# -------------------------------------------------------------------------- the checker


@dataclass
class _Seen:
    incarnation: str | None
    offset: int
    start: int
    below: str  # digest of the bodies of [start, offset)


def _digest(bodies: list[bytes]) -> str:
    h = hashlib.sha256()
    for body in bodies:
        h.update(len(body).to_bytes(8, "little") + body)
    return h.hexdigest()


def _acked(base: Path) -> dict[str, set[int]]:
    acked: dict[str, set[int]] = {}
    path = base / "acks.jsonl"
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                doc = json.loads(line)
            except ValueError:
                continue  # a line cut by kill -9 was never acknowledged
            acked.setdefault(doc["b"], set()).update(doc["seqs"])
    return acked


class Checker:
    def __init__(self, base: Path, stats: BranchStats) -> None:
        self.base = base
        self.stats = stats
        self.seen: dict[str, _Seen] = {}
        self.suspect: dict[str, str] = {}
        #: the operator's notes of the branches it made: what each must read below its point
        self.created: dict[str, dict] = {}

    def check_all(self) -> None:
        acked = _acked(self.base)
        self.created = {op["created"]: op for op in _ops(self.base) if "created" in op}
        for name in _branch_names(self.base):
            try:
                problem = self.check(name, acked.get(name, set()))
            except Wal3Error as exc:  # deleted or checkpointed while read: look again next time
                problem = None if self._gone(name) else f"{name}: read failed: {exc}"
            if problem is None:
                self.suspect.pop(name, None)
                continue
            if name in self.suspect:  # failed twice in a row: not a race with an operation
                self.stats.failures.append(problem)
                self.suspect.pop(name)
            else:
                self.stats.transient += 1
                self.suspect[name] = problem

    def _gone(self, name: str) -> bool:
        return not open_store(_url(self.base / "b", name)).exists(MANIFEST_KEY)

    def check(self, name: str, acked: set[int]) -> str | None:
        store = open_store(_url(self.base / "b", name))
        try:
            manifest = read_manifest(store)
        except LogNotFound:
            return None
        seen = self.seen.get(name)
        table = LogReader(store).read_table()
        offsets = table.column("_offset").to_pylist()
        bodies = table.column("body").to_pylist()
        self.stats.checks += 1
        self.stats.records_checked += len(offsets)
        if offsets and offsets != list(range(offsets[0], offsets[0] + len(offsets))):
            return f"{name}: offsets are not consecutive"
        parent = manifest.parent
        if seen is None and name in self.created:  # as the operator read the parent at creation
            made = self.created[name]
            seen = _Seen(made["incarnation"], made["offset"], made["start"], made["digest"])
            self.seen[name] = seen
            self.stats.branches_seen += 1
        if seen is None:
            if parent is None:
                return None  # its creation note was cut by a kill, and it was checkpointed since
            upper = LogReader(open_store(parent.log)).read_table(parent.start, parent.offset)
            mine = [b for o, b in zip(offsets, bodies, strict=True) if o < parent.offset]
            if upper.column("body").to_pylist() != mine or (offsets and offsets[0] != parent.start):
                return f"{name}: its records below {parent.offset} differ from its parent's"
            seen = _Seen(manifest.incarnation, parent.offset, parent.start, _digest(mine))
            self.seen[name] = seen
            self.stats.branches_seen += 1
        if manifest.incarnation != seen.incarnation:
            return f"{name}: another log under its name"
        below = [b for o, b in zip(offsets, bodies, strict=True) if o < seen.offset]
        if offsets and offsets[0] != seen.start:
            return f"{name}: starts at {offsets[0]}, not {seen.start}"
        if _digest(below) != seen.below:
            return f"{name}: its records below the branch point {seen.offset} changed"
        own = [b.decode() for o, b in zip(offsets, bodies, strict=True) if o >= seen.offset]
        seqs = [int(b.split(":", 1)[1]) for b in own if b.startswith(name + ":")]
        if len(seqs) != len(own):
            return f"{name}: holds records it was never given"
        if len(set(seqs)) != len(seqs):
            return f"{name}: a record appears twice"
        missing = acked - set(seqs)
        if missing:
            return f"{name}: {len(missing)} acknowledged records are missing"
        return None


# -------------------------------------------------------------------------- the run


def _spawn(role: str, base: Path, seed: int, limit: int, log_dir: Path) -> subprocess.Popen:
    out = (log_dir / f"{role}.log").open("a")
    return subprocess.Popen(
        [sys.executable, "-m", "wal3_spark.stress.branches", role, str(base), str(seed), str(limit)],
        stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def run_branch_stress(base: Path, *, branches: int, duration_s: float, seed: int,
                      kill_every_s: float, out: IO[str]) -> BranchStats:
    """The run (see the module docstring) in the directory `base`."""
    base.mkdir(parents=True, exist_ok=True)
    (base / "b").mkdir(exist_ok=True)
    logs = base / "logs"
    logs.mkdir(exist_ok=True)
    stats = BranchStats()
    rng = random.Random(seed)
    LogWriter(_url(base, ROOT)).append([b"root:first"])
    CursorStore(_url(base, ROOT)).create("stress", 1)
    procs = {role: _spawn(role, base, rng.randrange(1 << 30), branches, logs) for role in ROLES}
    checker = Checker(base, stats)
    end = SYSTEM.monotonic() + duration_s
    next_kill = SYSTEM.monotonic() + rng.expovariate(1 / kill_every_s) if kill_every_s else float("inf")
    next_summary = SYSTEM.monotonic() + 60
    try:
        while SYSTEM.monotonic() < end:
            for role, proc in procs.items():
                if proc.poll() is not None:  # died by itself: show why, start it again
                    stats.failures.append(f"{role} exited with {proc.returncode} (see {logs}/{role}.log)")
                    procs[role] = _spawn(role, base, rng.randrange(1 << 30), branches, logs)
            if SYSTEM.monotonic() >= next_kill:
                role = rng.choice(ROLES)
                os.killpg(procs[role].pid, signal.SIGKILL)
                procs[role].wait()
                stats.kills += 1
                procs[role] = _spawn(role, base, rng.randrange(1 << 30), branches, logs)
                stats.restarts += 1
                next_kill = SYSTEM.monotonic() + rng.expovariate(1 / kill_every_s)
            checker.check_all()
            if SYSTEM.monotonic() >= next_summary:
                out.write(f"  {_summary(stats, base)}\n")
                out.flush()
                next_summary += 60
            SYSTEM.sleep(1.0)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    _final(base, checker, stats)
    for op in _ops(base):
        for kind in ("done", "refused"):
            if kind in op:
                key = f"{op[kind]}_{kind}"
                stats.operations[key] = stats.operations.get(key, 0) + 1
    acked = _acked(base)
    stats.operations["records_acknowledged"] = sum(len(v) for v in acked.values())
    out.write(f"  {_summary(stats, base)}\n")
    for failure in stats.failures[:20]:
        out.write(f"  FAILURE {failure}\n")
    out.write(json.dumps(asdict(stats)) + "\n")
    return stats


def _summary(stats: BranchStats, base: Path) -> str:
    root = read_manifest(open_store(_url(base, ROOT)))
    live = sum(1 for n in _branch_names(base) if open_store(_url(base / "b", n)).exists(MANIFEST_KEY))
    return (f"root [{root.oldest_offset}, {root.next_offset}); branches live {live}, "
            f"seen {stats.branches_seen}; checks {stats.checks}, records checked {stats.records_checked}; "
            f"kills {stats.kills}; transient {stats.transient}; failures {len(stats.failures)}")


def _final(base: Path, checker: Checker, stats: BranchStats) -> None:
    """Every branch checked once more and verified; then a last collection of every log that
    has pins, after which each holds exactly the pins of branches that read through it."""
    acked = _acked(base)
    checker.created = {op["created"]: op for op in _ops(base) if "created" in op}
    live: list[str] = []
    for name in _branch_names(base):
        store = open_store(_url(base / "b", name))
        if not store.exists(MANIFEST_KEY):
            continue
        live.append(name)
        problem = checker.check(name, acked.get(name, set()))
        if problem:
            stats.failures.append(f"final: {problem}")
        report = verify(store)
        if report.ok:
            stats.verified_at_end += 1
        else:
            stats.failures.append(f"final: {name} does not verify: {report.problems[:3]}")
    stats.live_at_end = len(live)
    ahead = SystemClock(skew_s=MIN_ORPHAN_GRACE_S + 3600)  # every pin is old enough
    readers: dict[str, set[str]] = {}
    for name in live:
        parent = read_manifest(open_store(_url(base / "b", name))).parent
        if parent is not None:
            readers.setdefault(parent.log, set()).add(parent.pin)
    for url in [_url(base, ROOT)] + [_url(base / "b", n) for n in live]:
        GarbageCollector(url, grace_s=0, force=True, orphan_clock=ahead).run()
        pins = set(list_pins(open_store(url)))
        stats.pins_at_end += len(pins)
        if pins != readers.get(url, set()):
            stats.failures.append(f"final: {url} holds pins {sorted(pins)}, its branches read through "
                                  f"{sorted(readers.get(url, set()))}")


if __name__ == "__main__":
    worker_main(sys.argv[1:])
