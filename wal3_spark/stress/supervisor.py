"""The stress run itself: start the processes, kill and restart them, restart the server
(SeaweedFS or an emulator) when the run started one, print a
summary every so often, then stop the writers and let the readers decide everything.

The end of a run goes in order, because verification needs a complete picture:
1. writers get SIGTERM: each closes its `LogWriter` (every append gets an outcome) and journals
   that it exited (a writer that does not stop in time is killed and marked so);
2. the final tail is read and written to `final.json`;
3. readers read up to it, catch up with the complete journals, decide every append left, and
   exit; the collectors are stopped; the tail must not have moved since 2 (a write landing
   after every writer stopped would otherwise go unverified);
4. `verify` checks every invariant and fragment of the log.

Between those, every `AUDIT_EVERY_S` the supervisor checks that every fragment the log
references exists (`FragmentAudit`): readers read each record once and the final `verify` sees
only what is still referenced at the end, so a fragment deleted while referenced, after every
reader had read it and before GC dropped it, would otherwise go unnoticed.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import random
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Protocol

from wal3_spark.clock import SYSTEM, Clock
from wal3_spark.errors import StorageError, Wal3Error
from wal3_spark.format.layout import FRAGMENT_PREFIX
from wal3_spark.log.committer import Committer
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.reader import LogReader
from wal3_spark.ops.garbage_collector import referenced
from wal3_spark.ops.retention import set_retention
from wal3_spark.ops.verify import verify
from wal3_spark.storage import ObjectStore, open_store
from wal3_spark.storage.retry import retry
from wal3_spark.stress.compactor import HOLD_CURSOR
from wal3_spark.stress.config import StressConfig
from wal3_spark.stress.journal import mark_killed
from wal3_spark.stress.reader import cursor_name
from wal3_spark.stress.rundir import RunDir, read_json, write_json
from wal3_spark.stress.summary import (
    COMPACTED,
    DAMAGE_MANIFEST,
    DAMAGE_REFUSED,
    LATE_LANDED,
    ORPHAN_RACE,
    STORE_FAULTS,
    AppendTally,
    Summary,
    gather,
)
from wal3_spark.testing.emulators import AzureEmulator, AzuriteProcess, FakeGcsProcess, GcsEmulator
from wal3_spark.testing.seaweedfs import SeaweedProcess, SeaweedServer

logger = logging.getLogger(__name__)

TICK_S = 0.1
WRITER_STOP_S = 120.0
#: the end of a run gives up on readers that read nothing new for this long (readers far behind
#: the writers, as on S3 under load, may take longer than that in all to catch up)
READER_STALL_S = 600.0
#: how often the end of a run looks at the readers' states (each several MB of JSON when they lag
#: far behind: parsing them every tick took as much CPU as a reader)
READER_POLL_S = 2.0
COLLECTOR_STOP_S = 60.0
STARTUP_S = 180.0
#: a run stops early once this many processes have crashed (exited on their own)
MAX_CRASHES = 10
#: with require_every_fault, the load goes on for at most this many times the duration more,
#: and at least `MIN_EXTENSION_S` (a bounded run of seconds on a loaded machine may not yet have
#: seen its rarer faults, e.g. a late landing, when its duration ends)
EXTENSION = 3
MIN_EXTENSION_S = 120.0
#: seconds between audits of the referenced fragments
AUDIT_EVERY_S = 10.0


class StressSetupError(Wal3Error):
    """The stress run cannot start (its log location is not empty)."""


class FragmentAudit:
    """Checks that the fragments the log references exist, while the run goes on.

    One audit reads the manifest (M1), lists the fragments, and reads the manifest again (M2); a
    fragment referenced by both but not listed is missing. That is exact despite the writers and
    collectors racing it: a commit only references a fragment already uploaded, so one in M1
    was uploaded before the listing; a fragment leaves the references once and for all (paths
    are unique), so one in M1 and M2 was referenced throughout, and GC deletes only what is no
    longer referenced. An audit that cannot read the log (a server restart, a snapshot deleted
    under it) is skipped and counted.
    """

    def __init__(self, store: ObjectStore, reader: LogReader) -> None:
        self.store = store
        self.reader = reader
        self.done = 0
        self.skipped = 0
        #: fragment path -> "referenced by manifests N1 to N2, yet missing" (the first time seen)
        self.missing: dict[str, str] = {}

    def audit(self) -> None:
        try:
            first = self.reader.manifest()
            before = referenced(self.store, first).fragments
            listed = {m.key for m in self.store.list(FRAGMENT_PREFIX)}
            second = self.reader.manifest()
            after = referenced(self.store, second).fragments
        except Wal3Error as exc:
            self.skipped += 1
            logger.info("fragment audit skipped: %s", exc)
            return
        self.done += 1
        for path in sorted((before & after) - listed):
            self.missing.setdefault(path, f"{path}: referenced by the manifests at tails "
                                          f"{first.next_offset} and {second.next_offset}, yet missing")

    def counts(self) -> dict[str, int]:
        return {"audits": self.done, "audits skipped": self.skipped,
                "referenced fragments missing": len(self.missing)}


class Restartable(Protocol):
    """A server the run started and restarts under load (SeaweedFS, a persistent emulator)."""

    restart_fault: str

    def restart(self) -> object: ...


@dataclass
class Process:
    role: str
    slot: str
    name: str
    popen: subprocess.Popen[bytes]


class Supervisor:
    def __init__(self, config: StressConfig, run: RunDir, server: Restartable | None = None,
                 out: IO[str] = sys.stdout, clock: Clock = SYSTEM) -> None:
        """`clock` paces the run: its ticks, schedules, deadlines and waits."""
        self.config = config
        self.clock = clock
        self.run_dir = run
        #: the server the run started, which it restarts under load
        self.server = server
        self.out = out
        self.rng = random.Random(f"{config.seed}/supervisor")
        self.processes: list[Process] = []
        self.generations: Counter[str] = Counter()
        self.kills: Counter[str] = Counter()
        self.crashes: Counter[str] = Counter()
        self.restarts: Counter[str] = Counter()
        self.tally = AppendTally()
        #: reads the log without faults
        self.reader = LogReader(open_store(config.url, config.options))
        self.audit = FragmentAudit(open_store(config.url, config.options), self.reader)
        self.started = self.clock.monotonic()
        #: why the run stopped early, if it did
        self.aborted: str | None = None
        self._next_fault_check = 0.0

    # -- the run ----------------------------------------------------------------------

    def run(self) -> Summary:
        self.prepare()
        try:
            for role, slot in self.slots():
                self.spawn(role, slot)
            self.await_started()
            self.steady()
            return self.finish()
        finally:
            for p in self.processes:
                if p.popen.poll() is None:
                    p.popen.kill()
                    p.popen.wait()

    def slots(self) -> list[tuple[str, str]]:
        c = self.config
        return ([("writer", f"w{i}") for i in range(c.writers)]
                + [("reader", f"r{i}") for i in range(c.readers)]
                + [("collector", f"gc{i}") for i in range(c.collectors)]
                + [("compactor", f"compact{i}") for i in range(c.compactors)])

    def prepare(self) -> None:
        """A fresh log, and every reader's cursor at its start before any collector runs."""
        self.run_dir.create()
        self.config.save(self.run_dir.config)
        store = open_store(self.config.url, self.config.options)
        committer = Committer(store, writer="wal3 stress")
        existing = committer.load()
        if existing is not None and existing[0].next_offset > 1:
            raise StressSetupError(
                f"{self.config.url} already holds a log with records; a stress run needs a fresh "
                "location (its readers verify every record as a stress message)"
            )
        committer.create()
        if self.config.retention_bytes:
            set_retention(store, max_bytes=self.config.retention_bytes)
        cursors = CursorStore(store, writer="wal3 stress")
        for role, slot in self.slots():
            if role == "reader" and cursors.get(cursor_name(slot)) is None:
                cursors.create(cursor_name(slot), 1)
        if self.config.compactors and cursors.get(HOLD_CURSOR) is None:
            cursors.create(HOLD_CURSOR, 1)

    def await_started(self) -> None:
        """Start the clock once every process is up (imports take seconds on a busy machine)."""
        deadline = self.clock.monotonic() + STARTUP_S
        while self.clock.monotonic() < deadline and self.aborted is None:
            self.reap()
            if all(self.run_dir.stats(p.name).exists() for p in self.processes):
                break
            self.clock.sleep(TICK_S)
        self.started = self.clock.monotonic()

    def required(self) -> list[str]:
        """Every fault kind this run is configured to inject, and a GC that collects."""
        c = self.config
        kinds = [kind for kind in STORE_FAULTS if c.faults.injects(kind)]
        if c.faults.injects("late_landing"):
            kinds.append(LATE_LANDED)
        if c.kill_every_s > 0:
            kinds += [f"kill {role}" for role in self.roles()]
        if self.server is not None and c.server_restart_every_s > 0:
            kinds.append(self.server.restart_fault)
        if c.collectors and c.faults.injects("orphan_race"):
            kinds.append(ORPHAN_RACE)
        if c.readers and c.faults.injects("damage_manifest"):
            kinds += [DAMAGE_MANIFEST, DAMAGE_REFUSED]
        if c.collectors:
            kinds.append("gc apply")
        if c.compactors:
            kinds.append(COMPACTED)
        return kinds

    def roles(self) -> list[str]:
        return list(dict.fromkeys(role for role, _ in self.slots()))

    def steady(self) -> None:
        c = self.config
        roles = self.roles()
        kill_order = itertools.cycle(self.rng.sample(roles, len(roles)))
        victim_role = next(kill_order)
        next_kill = self._after(c.kill_every_s)
        next_restart = self._after(min(c.server_restart_every_s, c.duration_s / 2), jitter=False)
        next_summary = self.started + c.summary_every_s
        next_audit = self.started + min(AUDIT_EVERY_S, c.duration_s / 2)
        end = self.started + c.duration_s
        while self.aborted is None and self.keep_going(self.clock.monotonic(), end):
            now = self.clock.monotonic()
            self.reap()
            # a role whose processes are all still starting keeps its turn (on a loaded machine
            # imports take seconds, and a turn passed on would leave that role unkilled for long)
            if now >= next_kill and self.kill_one(victim_role):
                victim_role = next(kill_order)
                next_kill = self._after(c.kill_every_s)
            if self.server is not None and c.server_restart_every_s > 0 and now >= next_restart:
                logger.info("restarting the server (%s)", self.server.restart_fault)
                self.server.restart()
                self.restarts[self.server.restart_fault] += 1
                next_restart = self.clock.monotonic() + c.server_restart_every_s
            if now >= next_audit:
                self.audit.audit()
                next_audit = self.clock.monotonic() + AUDIT_EVERY_S
            if now >= next_summary:
                self.print(self.summary())
                next_summary = now + c.summary_every_s
            self.clock.sleep(TICK_S)

    def keep_going(self, now: float, end: float) -> bool:
        """Until the end; with `require_every_fault`, then on (for at most `EXTENSION` times the
        duration, and at least `MIN_EXTENSION_S`) until every fault kind was injected and GC
        collected, checked every second."""
        if now < end:
            return True
        extension = max(EXTENSION * self.config.duration_s, MIN_EXTENSION_S)
        if not self.config.require_every_fault or now > end + extension:
            return False
        if now < self._next_fault_check:
            return True
        self._next_fault_check = now + 1.0
        return bool(self.summary().missing())

    def finish(self) -> Summary:
        self.stop_role("writer", WRITER_STOP_S)
        tail = self.final_tail()
        write_json(self.run_dir.final, {"tail": tail})
        notes = self.await_readers()
        self.stop_role("collector", COLLECTOR_STOP_S)
        self.stop_role("compactor", COLLECTOR_STOP_S)
        after = self.final_tail()
        if after != tail:  # a write landed after every writer had stopped: nobody verified it
            notes.append(f"the log grew after the writers stopped: offsets [{tail}, {after}) "
                         "were never verified")
        summary = self.summary(final=True)
        summary.notes += notes + ([self.aborted] if self.aborted else [])
        summary.verify_problems = self.verify()
        write_json(self.run_dir.summary, summary.to_json())
        self.print(summary)
        return summary

    # -- processes --------------------------------------------------------------------

    def spawn(self, role: str, slot: str) -> Process:
        self.generations[slot] += 1
        name = f"{slot}.{self.generations[slot]}"
        cmd = [sys.executable, "-m", "wal3_spark.stress.worker", str(self.run_dir.root), role, name,
               "--slot", slot]
        with open(self.run_dir.log(name), "ab") as log_file:
            popen = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        process = Process(role, slot, name, popen)
        self.processes.append(process)
        return process

    def live(self, role: str) -> list[Process]:
        return [p for p in self.processes if p.role == role and p.popen.poll() is None]

    def kill_one(self, role: str) -> bool:
        """SIGKILL a random process of `role` that is up (not still importing); False if none."""
        candidates = [p for p in self.live(role) if self.run_dir.stats(p.name).exists()]
        if not candidates:
            return False
        victim = self.rng.choice(candidates)
        victim.popen.kill()
        victim.popen.wait()
        self.kills[role] += 1
        logger.info("killed %s", victim.name)
        self.ended(victim, killed=True)
        self.spawn(role, victim.slot)
        return True

    def reap(self) -> None:
        """Processes that exited by themselves before the end crashed: count and replace them."""
        for p in list(self.processes):
            code = p.popen.poll()
            if code is None:
                continue
            self.processes.remove(p)
            if p.role == "reader" and (read_json(self.run_dir.reader_state(p.slot)) or {}).get("finished"):
                continue
            self.crashes[p.role] += 1
            logger.error("%s exited with status %s; see %s", p.name, code, self.run_dir.log(p.name))
            self.ended(p, killed=code != 0)
            if sum(self.crashes.values()) >= MAX_CRASHES:
                self.aborted = (f"stopped early: {sum(self.crashes.values())} processes crashed "
                                f"(the last: {p.name}, see {self.run_dir.log(p.name)})")
                continue
            self.spawn(p.role, p.slot)

    def ended(self, p: Process, *, killed: bool) -> None:
        if killed and p.role == "writer" and self.run_dir.journal(p.name).exists():
            mark_killed(self.run_dir.journal(p.name), self.tail_now())
        if p in self.processes:
            self.processes.remove(p)

    def stop_role(self, role: str, timeout_s: float) -> None:
        stopping = self.live(role)
        for p in stopping:
            p.popen.terminate()
        deadline = self.clock.monotonic() + timeout_s
        for p in stopping:
            try:
                code = p.popen.wait(max(0.0, deadline - self.clock.monotonic()))
            except subprocess.TimeoutExpired:
                logger.error("%s did not stop within %.0f s; killing it", p.name, timeout_s)
                p.popen.kill()
                code = p.popen.wait()
            # -SIGTERM: it was still starting, before it could handle the signal
            if code not in (0, -signal.SIGTERM):
                self.crashes[role] += 1
            self.ended(p, killed=code != 0)

    def await_readers(self) -> list[str]:
        """Wait for every reader to finish, for as long as one makes progress; returns notes
        about those that did not finish."""
        slots = [slot for role, slot in self.slots() if role == "reader"]
        progress: dict[str, int] = {}
        deadline = self.clock.monotonic() + READER_STALL_S
        while self.clock.monotonic() < deadline:
            self.reap()
            states = {s: read_json(self.run_dir.reader_state(s)) or {} for s in slots}
            if all(state.get("finished") for state in states.values()):
                return []
            positions = {s: state["ledger"]["position"] for s, state in states.items() if state}
            if positions != progress:
                progress = positions
                deadline = self.clock.monotonic() + READER_STALL_S
            self.clock.sleep(READER_POLL_S)
        return [f"reader {s} did not finish: nothing new read for {READER_STALL_S:.0f} s" for s in slots
                if not (read_json(self.run_dir.reader_state(s)) or {}).get("finished")]

    # -- the log ----------------------------------------------------------------------

    def final_tail(self) -> int:
        return retry(lambda: self.reader.manifest().next_offset, attempts=10, what="read the final tail")

    def tail_now(self) -> int | None:
        """The log's next offset, or None while the store is unreachable (a server restart)."""
        try:
            return self.reader.manifest().next_offset
        except StorageError as exc:
            logger.warning("could not read the tail: %s", exc)
            return None

    def verify(self) -> list[str]:
        report = verify(open_store(self.config.url, self.config.options))
        return [str(p) for p in report.problems if p.kind != "extra"]

    # -- reporting --------------------------------------------------------------------

    def summary(self, final: bool = False) -> Summary:
        summary = gather(self.run_dir, self.tally, self.config.url, self.clock.monotonic() - self.started,
                         self.config.duration_s, self.kills, self.crashes, self.restarts)
        summary.final = final
        summary.required = self.required()
        summary.audit = self.audit.counts()
        summary.missing_fragments = list(self.audit.missing.values())
        return summary

    def print(self, summary: Summary) -> None:
        self.out.write(summary.table() + "\n")
        self.out.flush()

    def _after(self, mean_s: float, jitter: bool = True) -> float:
        if mean_s <= 0:
            return float("inf")
        return self.clock.monotonic() + mean_s * (self.rng.uniform(0.5, 1.5) if jitter else 1.0)


def run_stress(config: StressConfig, run_dir: Path, *, s3: bool = False, emulator: str | None = None,
               out: IO[str] = sys.stdout) -> Summary:
    """Run a stress test; with `s3`, on a SeaweedFS started under `run_dir/seaweed`, with
    `emulator` ("gcs" or "azure") on fake-gcs-server or Azurite keeping its objects under
    `run_dir/<emulator>`: restarted during the run, whatever `StressConfig.url` says."""
    run = RunDir(run_dir).create()
    if not s3 and emulator is None:
        return Supervisor(config, run, out=out).run()
    with started_server(run.root, s3=s3, emulator=emulator) as (process, server):
        # SeaweedFS's options are a fixed test key; an emulator's key stays out of the saved
        # configuration (the processes find it in the environment)
        config = replace(config, url=server.new_url("stress"),
                         options=server.options if s3 else config.options)
        return Supervisor(config, run, process, out=out).run()


Server = SeaweedServer | GcsEmulator | AzureEmulator


@contextlib.contextmanager
def started_server(root: Path, *, s3: bool = False,
                   emulator: str | None = None) -> Iterator[tuple[Restartable, Server]]:
    """The server a run asked for (SeaweedFS with `s3`, else the `emulator`, "gcs" or "azure",
    persistent, so that a restart keeps its objects) started under `root`, and stopped at the
    end. Every process of the run finds it through the environment (`AWS_ENDPOINT_URL_S3`,
    `STORAGE_EMULATOR_HOST`, `AZURE_STORAGE_CONNECTION_STRING`), as applications find them."""
    process: SeaweedProcess | FakeGcsProcess | AzuriteProcess
    if s3:
        process = SeaweedProcess(root / "seaweed")
    elif emulator == "gcs":
        process = FakeGcsProcess(root / emulator, persistent=True)
    elif emulator == "azure":
        process = AzuriteProcess(root / emulator, persistent=True)
    else:
        raise ValueError(f"unknown emulator {emulator!r}: gcs or azure")
    server = process.start()
    try:
        with _environment(server.env):
            yield process, server
    finally:
        process.stop()


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """`values` in this process's environment (which the run's processes inherit) while it runs."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
