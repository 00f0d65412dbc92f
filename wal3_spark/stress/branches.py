"""`wal3 stress --branches N`: branches taken, written, checkpointed and deleted, tags made
(held and not) and removed, under continuous appends and garbage collection of their parent,
with kill -9 of every worker, every record checked (docs/stress.md). The logs live at a URL
(file://, s3://, gs://, az://), the run's notes in a local directory.

Three worker processes, each killed with SIGKILL at random and started again:
- *writer*: appends batches to the root log without pause;
- *collector*: moves the root's cursor close to its tail and collects it with no grace (the
  harshest setting: deleted as soon as applied), its orphan sweep run ahead of the clock so that
  pins left by killed branch creations are dropped within seconds, not the default 15 minutes
  (branch creations get a matching short pin deadline);
- *operator*: creates branches at random offsets of the root or of another branch, appends to
  branches (journaling each acknowledged append), checkpoints and deletes them (at most N
  exist), tags the root or a branch (with and without hold) and deletes tags, and (`--mistakes`)
  now and then makes a mistake an operator could type (deleting the folder of the branches or a
  location holding no log, branching into another log or above one), which must be refused.

The supervisor (this process, never killed) checks every branch every few seconds: its records
below the branch point are exactly the parent's records there, as the operator read them from
the parent right after creating the branch (or, when a kill cut that note, as the parent held
them when the supervisor first saw the branch); its own records are each written once by the
operator, and every acknowledged one is there; it is there until the operator deletes it. Every
few rounds each tag reads exactly the records it named when made (a tag without hold may have
lost them to garbage collection: DataLost, never other rows). At the end: every branch
verifies, every held tag reads exactly, and after a last collection each log holds exactly the
pins of the branches that read it.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO

from wal3_spark.clock import SYSTEM, SystemClock
from wal3_spark.errors import DataLost, LogNotFound, Wal3Error
from wal3_spark.format.layout import MANIFEST_KEY
from wal3_spark.log.branches import branch, delete_branch
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.holds import list_pins
from wal3_spark.log.manifest_reader import read_manifest
from wal3_spark.log.reader import LogReader
from wal3_spark.log.tags import TagStore
from wal3_spark.log.writer import LogWriter
from wal3_spark.ops.checkpoint import checkpoint
from wal3_spark.ops.garbage_collector import MIN_ORPHAN_GRACE_S, GarbageCollector, GCOptions
from wal3_spark.ops.verify import verify
from wal3_spark.storage import ObjectStore, open_store
from wal3_spark.storage.common import file_url
from wal3_spark.testing.hooks import hooked

ROLES = ("writer", "collector", "operator")
#: pins without a branch are dropped once this old (the collector's orphan clock runs ahead)
ORPHAN_AGE_S = 20.0
#: a branch creation publishes within this long of its pin, or gives up
PIN_DEADLINE_S = 5.0
ROOT = "root"
#: the store options of the run's processes (JSON), handed down in the environment
OPTIONS_ENV = "WAL3_STRESS_STORE_OPTIONS"
#: the operator's choices and their shares (create only below the limit of branches)
OPERATIONS = (("create", 0.20), ("append", 0.50), ("checkpoint", 0.07), ("delete", 0.06),
              ("tag", 0.07), ("untag", 0.06), ("mistake", 0.04))
#: what an operator might type by mistake; each must be refused with a wal3 error
MISTAKES = ("delete the folder of the branches", "delete a location holding no log",
            "branch into another log", "branch above other logs")
#: rounds of branch checks between two checks of every tag
TAG_CHECK_EVERY = 5


@dataclass
class BranchStats:
    checks: int = 0
    records_checked: int = 0
    branches_seen: int = 0
    tag_checks: int = 0
    tags_lost_without_hold: int = 0
    kills: int = 0
    restarts: int = 0
    failures: list[str] = field(default_factory=list)
    transient: int = 0
    pins_at_end: int = 0
    live_at_end: int = 0
    verified_at_end: int = 0
    held_tags_at_end: int = 0
    operations: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failures


class Place:
    """Where a run keeps its logs (`url`: the root at `url/root`, branches under `url/b/`) and
    its notes (`base`, a local directory: the operator's journal of acknowledged appends and of
    its operations). Stores are opened once per URL."""

    def __init__(self, base: Path, url: str | None = None,
                 options: dict[str, str] | None = None) -> None:
        self.base = base
        self.url = (url or file_url(str(base))).rstrip("/")
        self.options = options or {}
        self._stores: dict[str, ObjectStore] = {}

    def store(self, url: str) -> ObjectStore:
        if url not in self._stores:
            self._stores[url] = open_store(url, self.options)
        return self._stores[url]

    @property
    def root(self) -> str:
        return f"{self.url}/{ROOT}"

    def branch(self, name: str) -> str:
        return f"{self.url}/b/{name}"

    def log(self, name: str) -> str:
        """The URL of the log a note names: the root or a branch."""
        return self.root if name == ROOT else self.branch(name)

    def names(self) -> list[str]:
        """Every branch name with objects under `b/` (published or not, half deleted or not)."""
        return list(self.store(self.url).list_children("b/"))

    def is_live(self, name: str) -> bool:
        return self.store(self.log(name)).exists(MANIFEST_KEY)

    def live(self) -> list[str]:
        return [n for n in self.names() if self.is_live(n)]


# -------------------------------------------------------------------------- the workers


def _writer(place: Place, rng: random.Random) -> None:
    writer = LogWriter(place.store(place.root))
    tag = f"{os.getpid()}"
    n = 0
    while True:
        size = rng.randint(1, 20)
        writer.append([f"root:{tag}:{n + i}".encode() for i in range(size)])
        n += size


def _collector(place: Place, rng: random.Random) -> None:
    root = place.store(place.root)
    ahead = SystemClock(skew_s=MIN_ORPHAN_GRACE_S - ORPHAN_AGE_S)
    cursors = CursorStore(root, writer="stress collector")
    while True:
        manifest = read_manifest(root)
        target = max(manifest.oldest_offset, manifest.next_offset - rng.randint(20, 400))
        cursors.move("stress", target, allow_backwards=True)
        collector = GarbageCollector(root, GCOptions(grace_s=0, force=True, writer="stress collector"))
        hooked(collector, orphan_clock=ahead).run()
        SYSTEM.sleep(rng.uniform(0.1, 1.0))


def _choose(rng: random.Random, names: list[str], limit: int, mistakes: bool) -> str:
    """The operator's next operation: without branches a creation, a tag of the root or (with
    `mistakes`) a mistake."""
    allowed = [(op, share) for op, share in OPERATIONS
               if (op != "create" or len(names) < limit)
               and (names or op in ("create", "tag", "untag", "mistake")) and (op != "mistake" or mistakes)]
    roll = rng.uniform(0, sum(share for _, share in allowed))
    for op, share in allowed:
        roll -= share
        if roll < 0:
            return op
    return allowed[-1][0]


def _operator(place: Place, rng: random.Random, limit: int, mistakes: bool) -> None:
    journal = (place.base / "acks.jsonl").open("a")
    ops = (place.base / "ops.jsonl").open("a")
    history = _ops(place.base)
    counters = {kind: sum(1 for op in history if op.get("intent") == kind) for kind in ("create", "tag")}
    seq = int(SYSTEM.now() * 1000) * 1000

    def note(doc: dict) -> None:
        ops.write(json.dumps(doc) + "\n")
        ops.flush()
        os.fsync(ops.fileno())

    def next_name(kind: str, prefix: str) -> str:
        name = f"{prefix}{counters[kind]:05d}"
        counters[kind] += 1
        return name

    while True:
        names = place.live()
        op = _choose(rng, names, limit, mistakes)
        try:
            if op == "create":
                name = next_name("create", "b")
                note({"intent": "create", "name": name})
                parent = place.root if not names or rng.random() < 0.7 else place.branch(rng.choice(names))
                m = read_manifest(place.store(parent))
                at = min(rng.randint(m.oldest_offset, m.next_offset) + rng.randint(0, 50), m.next_offset)
                made = branch(place.store(parent), place.store(place.branch(name)), at=at,
                              pin_deadline_s=PIN_DEADLINE_S)
                # what the parent holds below the branch point, read from the parent itself while
                # the pin holds it: the checker compares the branch with it for as long as the
                # branch lives, checkpointed or not
                below = LogReader(place.store(parent)).read_table(made.start, made.offset).column("body")
                note({"created": name, "start": made.start, "offset": made.offset,
                      "digest": _digest(below.to_pylist()),
                      "incarnation": read_manifest(place.store(place.branch(name))).incarnation})
            elif op == "append":
                name = rng.choice(names)
                size = rng.randint(1, 10)
                seqs = list(range(seq, seq + size))
                seq += size
                LogWriter(place.store(place.branch(name))).append([f"{name}:{s}".encode() for s in seqs])
                journal.write(json.dumps({"b": name, "seqs": seqs}) + "\n")
                journal.flush()
                os.fsync(journal.fileno())
            elif op == "checkpoint":
                checkpoint(place.store(place.branch(rng.choice(names))))
            elif op == "delete":
                name = rng.choice(names)
                note({"intent": "delete", "name": name})
                delete_branch(place.store(place.branch(name)))
            elif op == "tag":
                _tag(place, rng, names, next_name("tag", "t"), note)
            elif op == "untag":
                on = ROOT if not names or rng.random() < 0.5 else rng.choice(names)
                tags = TagStore(place.store(place.log(on)))
                present = sorted(t.name for t in tags.list())
                if present:  # the oldest: a held tag holds the log's collection back to it
                    name = present[0]
                    note({"intent": "untag", "name": name, "log": on})
                    tags.delete(name)
            else:
                kind = rng.choice(MISTAKES)
                note({"intent": "mistake", "kind": kind})
                _mistake(place, rng, names, kind)
                note({"accepted": kind})
            note({"done": op})
        except Wal3Error as exc:  # refused (a branch with branches, a range collected meanwhile)
            note({"refused": op, "why": str(exc)[:200]})


def _tag(place: Place, rng: random.Random, names: list[str], name: str, note: Callable[[dict], None]) -> None:
    """Tag the root or a branch at one of its first few hundred offsets, held or not, and note
    the digest of the records the tag names, read back through the tag at once."""
    on = ROOT if not names or rng.random() < 0.5 else rng.choice(names)
    hold = rng.random() < 0.5
    note({"intent": "tag", "name": name, "log": on, "hold": hold})
    log = place.store(place.log(on))
    m = read_manifest(log)
    tags = TagStore(log)
    tags.create(name, at=min(m.oldest_offset + rng.randint(0, 300), m.next_offset), hold=hold)
    start, end = tags.range(name)
    bodies = LogReader(log).read_table(start, end).column("body").to_pylist()
    note({"tagged": name, "log": on, "hold": hold, "start": start, "offset": end, "digest": _digest(bodies)})


def _mistake(place: Place, rng: random.Random, names: list[str], kind: str) -> None:
    """Make the mistake `kind`, which must raise a wal3 error (returning is accepting it)."""
    if kind == "delete the folder of the branches":
        delete_branch(place.store(f"{place.url}/b"))
    elif kind == "delete a location holding no log":
        delete_branch(place.store(place.branch(f"nothing{rng.randrange(1 << 30)}")))
    elif kind == "branch into another log":
        inner = place.branch(rng.choice(names)) if names else place.root
        branch(place.store(place.root), place.store(f"{inner}/inner"), pin_deadline_s=PIN_DEADLINE_S)
    else:
        branch(place.store(place.branch(rng.choice(names)) if names else place.root),
               place.store(f"{place.url}/b"), pin_deadline_s=PIN_DEADLINE_S)


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
    role, base, url, seed, limit, mistakes = argv[0], Path(argv[1]), argv[2], int(argv[3]), int(argv[4]), argv[5]
    place = Place(base, url, json.loads(os.environ.get(OPTIONS_ENV) or "{}"))
    rng = random.Random(seed)
    if role == "writer":
        _writer(place, rng)
    elif role == "collector":
        _collector(place, rng)
    else:
        _operator(place, rng, limit, mistakes == "mistakes")


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
    """The supervisor's checks of what the operator's notes say must hold (module docstring).
    A check that fails is looked at again at the next round (a read racing a deletion or a
    checkpoint); failing twice in a row is a failure."""

    def __init__(self, base: Path, stats: BranchStats, url: str | None = None,
                 options: dict[str, str] | None = None) -> None:
        self.place = Place(base, url, options)
        self.base = base
        self.stats = stats
        self.seen: dict[str, _Seen] = {}
        self.suspect: dict[str, str] = {}
        self.rounds = 0
        self.accepted_mistakes = 0
        self.read_notes()

    def read_notes(self) -> None:
        ops = _ops(self.base)
        #: the operator's notes of the branches it made: what each must read below its point
        self.created = {op["created"]: op for op in ops if "created" in op}
        #: the branches the operator set out to delete, the tags it set out to delete
        self.deleting = {op["name"] for op in ops if op.get("intent") == "delete"}
        self.untagging = {(op["log"], op["name"]) for op in ops if op.get("intent") == "untag"}
        #: the tags made, with the digest of what each named when made
        self.tags = {(op["log"], op["tagged"]): op for op in ops if "tagged" in op}
        self.accepted = [op["accepted"] for op in ops if "accepted" in op]

    def check_all(self) -> None:
        acked = _acked(self.base)
        self.read_notes()
        self.rounds += 1
        self.judge_mistakes()
        if not self.place.is_live(ROOT):
            self._judge("root", f"the root log {self.place.root} is gone")
        for name in sorted(set(self.place.names()) | set(self.seen)):
            try:
                problem = self.check(name, acked.get(name, set()))
            except Wal3Error as exc:  # deleted or checkpointed while read: look again next time
                problem = None if self._gone(name) else f"{name}: read failed: {exc}"
            self._judge(name, problem)
        if self.rounds % TAG_CHECK_EVERY == 0:
            for (log, name), made in sorted(self.tags.items()):
                try:
                    problem = self.check_tag(log, name, made)
                except Wal3Error as exc:
                    problem = f"tag {name} of {log}: read failed: {exc}"
                self._judge(f"tag {log}/{name}", problem)

    def judge_mistakes(self) -> None:
        """Every mistake the operator made and was not refused, once."""
        for kind in self.accepted[self.accepted_mistakes:]:
            self.stats.failures.append(f"a mistake was accepted: {kind}")
        self.accepted_mistakes = len(self.accepted)

    def _judge(self, key: str, problem: str | None) -> None:
        if problem is None:
            self.suspect.pop(key, None)
        elif key in self.suspect:  # failed twice in a row: not a race with an operation
            self.stats.failures.append(problem)
            self.suspect.pop(key)
        else:
            self.stats.transient += 1
            self.suspect[key] = problem

    def _gone(self, name: str) -> bool:
        return not self.place.is_live(name)

    def check(self, name: str, acked: set[int]) -> str | None:
        store = self.place.store(self.place.branch(name))
        try:
            manifest = read_manifest(store)
        except LogNotFound:
            if name in self.seen and name not in self.deleting:
                return f"{name}: the branch is gone, and nobody deleted it"
            self.seen.pop(name, None)
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
            upper = LogReader(self.place.store(parent.log)).read_table(parent.start, parent.offset)
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

    def check_tag(self, log: str, name: str, made: dict) -> str | None:
        """The tag reads exactly the records it named when made; a tag without hold may have
        lost them to garbage collection (DataLost), and a tag goes with its log's deletion."""
        if (log, name) in self.untagging or (log != ROOT and not self.place.is_live(log)):
            return None
        tags = TagStore(self.place.store(self.place.log(log)))
        if not any(t.name == name for t in tags.list()):
            return f"tag {name} of {log} is gone, and nobody deleted it"
        self.stats.tag_checks += 1
        try:
            start, end = tags.range(name)
            table = LogReader(tags.store).read_table(start, end)
        except DataLost as exc:
            if made["hold"]:
                return f"tag {name} of {log} is held, and lost records: {exc}"
            self.stats.tags_lost_without_hold += 1
            return None
        if (start, end) != (made["start"], made["offset"]):
            return f"tag {name} of {log} names [{start}, {end}), made as [{made['start']}, {made['offset']})"
        if _digest(table.column("body").to_pylist()) != made["digest"]:
            return f"tag {name} of {log} reads other records than when it was made"
        return None


# -------------------------------------------------------------------------- the run


def _spawn(role: str, place: Place, seed: int, limit: int, mistakes: bool, log_dir: Path) -> subprocess.Popen:
    out = (log_dir / f"{role}.log").open("a")
    return subprocess.Popen(
        [sys.executable, "-m", "wal3_spark.stress.branches", role, str(place.base), place.url,
         str(seed), str(limit), "mistakes" if mistakes else "careful"],
        stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ, OPTIONS_ENV: json.dumps(place.options)})


def run_branch_stress(base: Path, *, branches: int, duration_s: float, seed: int,
                      kill_every_s: float, out: IO[str], url: str | None = None,
                      options: dict[str, str] | None = None, mistakes: bool = False) -> BranchStats:
    """The run (see the module docstring): its notes in the directory `base`, its logs at `url`
    (default: `base` itself) opened with the store `options`; with `mistakes` the operator also
    makes the mistakes of `MISTAKES`, each of which must be refused."""
    base.mkdir(parents=True, exist_ok=True)
    logs = base / "logs"
    logs.mkdir(exist_ok=True)
    place = Place(base, url, options)
    stats = BranchStats()
    rng = random.Random(seed)
    LogWriter(place.store(place.root)).append([b"root:first"])
    CursorStore(place.store(place.root)).create("stress", 1)
    procs = {role: _spawn(role, place, rng.randrange(1 << 30), branches, mistakes, logs) for role in ROLES}
    checker = Checker(base, stats, place.url, place.options)
    end = SYSTEM.monotonic() + duration_s
    next_kill = SYSTEM.monotonic() + rng.expovariate(1 / kill_every_s) if kill_every_s else float("inf")
    next_summary = SYSTEM.monotonic() + 60
    try:
        while SYSTEM.monotonic() < end:
            for role, proc in procs.items():
                if proc.poll() is not None:  # died by itself: show why, start it again
                    stats.failures.append(f"{role} exited with {proc.returncode} (see {logs}/{role}.log)")
                    procs[role] = _spawn(role, place, rng.randrange(1 << 30), branches, mistakes, logs)
            if SYSTEM.monotonic() >= next_kill:
                role = rng.choice(ROLES)
                os.killpg(procs[role].pid, signal.SIGKILL)
                procs[role].wait()
                stats.kills += 1
                procs[role] = _spawn(role, place, rng.randrange(1 << 30), branches, mistakes, logs)
                stats.restarts += 1
                next_kill = SYSTEM.monotonic() + rng.expovariate(1 / kill_every_s)
            checker.check_all()
            if SYSTEM.monotonic() >= next_summary:
                out.write(f"  {_summary(stats, place)}\n")
                out.flush()
                next_summary += 60
            SYSTEM.sleep(1.0)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    _final(place, checker, stats)
    for op in _ops(base):
        for kind in ("done", "refused"):
            if kind in op:
                key = f"{op[kind]}_{kind}"
                stats.operations[key] = stats.operations.get(key, 0) + 1
    acked = _acked(base)
    stats.operations["records_acknowledged"] = sum(len(v) for v in acked.values())
    out.write(f"  {_summary(stats, place)}\n")
    for failure in stats.failures[:20]:
        out.write(f"  FAILURE {failure}\n")
    out.write(json.dumps(asdict(stats)) + "\n")
    return stats


def _summary(stats: BranchStats, place: Place) -> str:
    root = read_manifest(place.store(place.root))
    return (f"root [{root.oldest_offset}, {root.next_offset}); branches live {len(place.live())}, "
            f"seen {stats.branches_seen}; checks {stats.checks}, records checked {stats.records_checked}; "
            f"tag checks {stats.tag_checks}; kills {stats.kills}; transient {stats.transient}; "
            f"failures {len(stats.failures)}")


def _final(place: Place, checker: Checker, stats: BranchStats) -> None:
    """Every branch checked once more and verified; then a last collection of every log that
    has pins, after which each holds exactly the pins of branches that read through it, and
    every held tag still reads exactly what it named."""
    acked = _acked(place.base)
    checker.read_notes()
    checker.judge_mistakes()
    live: list[str] = []
    for name in sorted(set(place.names()) | set(checker.seen)):
        store = place.store(place.branch(name))
        problem = checker.check(name, acked.get(name, set()))
        if problem:
            stats.failures.append(f"final: {problem}")
        if not store.exists(MANIFEST_KEY):
            continue
        live.append(name)
        report = verify(store)
        if report.ok:
            stats.verified_at_end += 1
        else:
            stats.failures.append(f"final: {name} does not verify: {report.problems[:3]}")
    stats.live_at_end = len(live)
    ahead = SystemClock(skew_s=MIN_ORPHAN_GRACE_S + 3600)  # every pin is old enough
    readers: dict[str, set[str]] = {}
    for name in live:
        parent = read_manifest(place.store(place.branch(name))).parent
        if parent is not None:
            readers.setdefault(parent.log, set()).add(parent.pin)
    for url in [place.root] + [place.branch(n) for n in live]:
        hooked(GarbageCollector(place.store(url), GCOptions(grace_s=0, force=True)), orphan_clock=ahead).run()
        pins = set(list_pins(place.store(url)))
        stats.pins_at_end += len(pins)
        if pins != readers.get(url, set()):
            stats.failures.append(f"final: {url} holds pins {sorted(pins)}, its branches read through "
                                  f"{sorted(readers.get(url, set()))}")
    for (log, name), made in sorted(checker.tags.items()):
        problem = checker.check_tag(log, name, made)
        if problem:
            stats.failures.append(f"final: {problem}")
        elif made["hold"] and (log, name) not in checker.untagging and (log == ROOT or log in live):
            stats.held_tags_at_end += 1


if __name__ == "__main__":
    worker_main(sys.argv[1:])
