"""The end-to-end verification stress test (`wal3 stress`, docs/stress.md).

First the ledger, the part that decides: given journals and records it must call every kind of
violation by its name (a checker that cannot fail proves nothing). Then a stress reader on a real
log written by stress writers, with the log broken on purpose. Then bounded runs of the whole
thing, on the local filesystem and on SeaweedFS, with every kind of fault: 0 lost, 0 duplicated,
0 misplaced, and every fault kind really injected.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from wal3_spark.clock import ManualClock
from wal3_spark.errors import CorruptLog, PastOrphanHorizon
from wal3_spark.format.layout import MANIFEST_KEY
from wal3_spark.format.manifest import Manifest
from wal3_spark.format.setsum import Setsum
from wal3_spark.log.committer import Committer
from wal3_spark.log.fragment_io import write_fragments
from wal3_spark.log.reader import LogReader
from wal3_spark.log.writer import LogWriter, to_batches
from wal3_spark.storage import open_store
from wal3_spark.storage.common import file_url
from wal3_spark.stress import supervisor
from wal3_spark.stress.collector import StressCollector
from wal3_spark.stress.config import FaultRates, LogSetStressConfig, StressConfig
from wal3_spark.stress.damage import Damage, ManifestDamage, judge
from wal3_spark.stress.journal import (
    ACK,
    EXIT,
    FAILED,
    KILLED,
    UNKNOWN,
    End,
    Intent,
    Journal,
    Outcome,
    read_new,
)
from wal3_spark.stress.ledger import VIOLATIONS, IntervalSet, Ledger
from wal3_spark.stress.logset import VIOLATIONS as LOGSET_VIOLATIONS, Ack, run_logset_stress, tally
from wal3_spark.stress.reader import StressReader
from wal3_spark.stress.rundir import RunDir, read_json, write_json
from wal3_spark.stress.streams import (
    Message,
    MessageMismatch,
    StreamPicker,
    decode,
    encode,
)
from wal3_spark.stress.summary import (
    COMPACTED,
    DAMAGE_MANIFEST,
    DAMAGE_REFUSED,
    LATE_LANDED,
    ORPHAN_RACE,
    STORE_FAULTS,
)
from wal3_spark.stress.supervisor import (
    READER_STALL_S,
    FragmentAudit,
    Supervisor,
    run_stress,
)
from wal3_spark.stress.writer import Regime, StressWriter, open_writer

SEED = 7


def body(writer: str, append: int, index: int, stream: int = 0, seq: int | None = None) -> bytes:
    return encode(SEED, Message(stream, writer, append * 10 + index if seq is None else seq, append, index))


def intent(append: int, n: int, stream: int = 0) -> Intent:
    return Intent(append, tuple((stream, append * 10 + i) for i in range(n)), "append")


def violations(ledger: Ledger) -> dict[str, int]:
    return {k: v for k, v in ledger.counts.violations().items() if v}


# ------------------------------------------------------------------------------ streams


def test_00_a_message_is_regenerated_from_its_stream_seed_and_any_change_is_caught() -> None:
    m = Message(3, "w1.2", 41, 5, 2)
    data = encode(SEED, m)
    assert decode(SEED, data) == m
    assert encode(SEED, m) == data  # deterministic
    for broken in (data[:-1], data[:-1] + bytes([data[-1] ^ 1]), data.replace(b"w1.2", b"w1.3", 1),
                   b"no header at all"):
        with pytest.raises(MessageMismatch):
            decode(SEED, broken)
    with pytest.raises(MessageMismatch):
        decode(SEED + 1, data)  # another run's seed regenerates other streams


def test_01_streams_are_chosen_with_skew_and_numbered_per_stream() -> None:
    import random

    picker = StreamPicker(random.Random(1), 16, 1.2)
    taken = [picker.take() for _ in range(4000)]
    per_stream = [sum(1 for s, _ in taken if s == k) for k in range(16)]
    assert per_stream[0] > 5 * per_stream[15] > 0  # hot and cold streams
    for k in range(16):
        assert [q for s, q in taken if s == k] == list(range(per_stream[k]))


# ------------------------------------------------------------------------------- ledger


def test_02_interval_set_merges_neighbours() -> None:
    s = IntervalSet()
    for x in (5, 3, 4, 9, 7, 8, 0):
        s.add(x)
    assert s.spans() == [[0, 1], [3, 6], [7, 10]]
    assert 4 in s and 6 not in s and 10 not in s and -1 not in s
    s.add(6)
    assert s.spans() == [[0, 1], [3, 10]]


def test_03_acknowledged_appends_read_once_where_acknowledged_are_verified() -> None:
    ledger = Ledger(SEED)
    ledger.note("w0.1", intent(0, 2))
    ledger.note("w0.1", intent(1, 3, stream=4))
    for offset, data in enumerate([body("w0.1", 0, 0), body("w0.1", 0, 1)] +
                                  [body("w0.1", 1, i, stream=4) for i in range(3)], 1):
        ledger.observe(offset, data)
    ledger.settle()
    assert ledger.undecided() == 2  # no outcome journaled yet: nothing decided
    ledger.note("w0.1", Outcome(0, ACK, 1, 3))
    ledger.note("w0.1", Outcome(1, ACK, 3, 6))
    ledger.settle()
    assert ledger.undecided() == 0
    assert ledger.counts.verified == 5 and ledger.counts.appends_verified == 2
    assert violations(ledger) == {}


def test_04_an_acknowledged_record_never_read_is_lost() -> None:
    ledger = Ledger(SEED)
    ledger.note("w0.1", intent(0, 2))
    ledger.note("w0.1", Outcome(0, ACK, 1, 3))
    ledger.observe(1, body("w0.1", 0, 0))
    ledger.settle()
    assert ledger.undecided() == 1  # offset 2 not read yet
    ledger.observe(2, body("w9.9", 0, 0))  # someone else's record where ours should be
    ledger.note("w9.9", intent(0, 1))
    ledger.note("w9.9", Outcome(0, ACK, 2, 3))  # offset 2 acknowledged twice: one of them lost
    ledger.settle()
    assert violations(ledger) == {"lost": 1}
    assert "writer w0.1 append 0 record 1" in ledger.examples["lost"][0]


def test_05_a_fragment_referenced_twice_counts_duplicated_and_misplaced() -> None:
    """A commit whose manifest write timed out, landed late and was retried: the log holds r0, r1,
    r2, r1, r2 and the append reported offsets [4, 6)."""
    ledger = Ledger(SEED)
    ledger.note("w0.1", intent(0, 1))
    ledger.note("w0.1", Outcome(0, ACK, 1, 2))
    ledger.note("w0.1", intent(1, 2))
    ledger.note("w0.1", Outcome(1, ACK, 4, 6))
    for offset, data in enumerate([body("w0.1", 0, 0), body("w0.1", 1, 0), body("w0.1", 1, 1),
                                   body("w0.1", 1, 0), body("w0.1", 1, 1)], 1):
        ledger.observe(offset, data)
    ledger.settle()
    assert violations(ledger) == {"duplicated": 2}
    ledger.note("w0.1", intent(2, 1))
    ledger.note("w0.1", Outcome(2, ACK, 6, 7))
    ledger.observe(6, body("w0.1", 2, 0))
    ledger.settle()
    ledger.observe(7, body("w0.1", 2, 0))  # a copy long after its append was decided
    assert violations(ledger) == {"duplicated": 3}


def test_06_records_of_a_failed_append_are_unexpected_whenever_they_appear() -> None:
    ledger = Ledger(SEED)
    ledger.note("w0.1", intent(0, 1))
    ledger.note("w0.1", Outcome(0, FAILED, error="CommitFailed"))
    ledger.settle()
    assert ledger.counts.failed_absent == 1 and violations(ledger) == {}
    ledger.observe(1, body("w0.1", 0, 0))  # its manifest write landed late after all
    assert violations(ledger) == {"unexpected": 1}
    ledger.note("w0.1", intent(1, 1))
    ledger.observe(2, body("w0.1", 1, 0))
    ledger.note("w0.1", Outcome(1, FAILED))
    ledger.settle()
    assert violations(ledger) == {"unexpected": 2}


def test_07_unknown_outcomes_may_land_at_most_once_and_all_or_nothing() -> None:
    ledger = Ledger(SEED)
    for append in range(4):
        ledger.note("w0.1", intent(append, 2))
    ledger.note("w0.1", Outcome(0, UNKNOWN, error="CommitOutcomeUnknown"))
    ledger.note("w0.1", Outcome(1, UNKNOWN))
    ledger.note("w0.1", Outcome(2, UNKNOWN))
    ledger.note("w0.1", End(KILLED))  # append 3 never got an outcome
    records = [body("w0.1", 1, 0), body("w0.1", 1, 1), body("w0.1", 2, 0), body("w0.1", 3, 0),
               body("w0.1", 3, 1)]
    for offset, data in enumerate(records, 1):
        ledger.observe(offset, data)
    ledger.settle()
    assert ledger.counts.unknown_landed == 2  # appends 1 and 3, read once in full: decided at once
    assert violations(ledger) == {}
    ledger.observe(6, body("w0.1", 3, 0))  # append 3 again
    ledger.observe(7, body("w0.1", 3, 1))
    assert violations(ledger) == {"duplicated": 2}
    ledger.settle(final=True)
    assert ledger.counts.unknown_absent == 1  # append 0
    assert ledger.counts.unknown_landed == 3  # and append 2, in part
    assert violations(ledger) == {"duplicated": 2, "lost": 1}  # append 2 landed torn


def test_08_unknown_appends_of_a_killed_writer_are_decided_once_the_log_moved_past_its_death() -> None:
    ledger = Ledger(SEED)
    ledger.note("w0.1", intent(0, 1))
    ledger.note("w0.1", intent(1, 2))
    ledger.note("w0.1", End(KILLED, tail=2))  # nothing of w0.1 had landed when it was reaped
    ledger.note("w1.1", intent(0, 1))
    ledger.note("w1.1", Outcome(0, ACK, 1, 2))
    ledger.observe(1, body("w1.1", 0, 0))
    ledger.settle()
    assert ledger.undecided() == 2  # a write w0.1 left in flight may still land at offset 2
    ledger.observe(2, body("w0.1", 1, 0))  # and one does
    ledger.settle()
    assert ledger.undecided() == 1  # offset 2 exists now: append 0 never lands; append 1 is half read
    ledger.observe(3, body("w0.1", 1, 1))
    ledger.settle()
    assert ledger.undecided() == 0
    assert (ledger.counts.unknown_landed, ledger.counts.unknown_absent) == (1, 1)
    assert violations(ledger) == {}


def test_09_corrupt_and_unannounced_records_are_violations() -> None:
    ledger = Ledger(SEED)
    good = body("w0.1", 0, 0)
    ledger.observe(1, good[:-1] + bytes([good[-1] ^ 0xFF]))
    ledger.observe(2, b"not a stress record")
    ledger.observe(3, body("w7.7", 0, 0))  # no journal ever announced it
    ledger.settle(final=True)
    assert violations(ledger) == {"corrupt": 2, "unexpected": 1}


def test_10_a_skipped_range_is_unreadable_and_its_acknowledged_records_lost() -> None:
    ledger = Ledger(SEED)
    ledger.note("w0.1", intent(0, 3))
    ledger.note("w0.1", Outcome(0, ACK, 1, 4))
    ledger.observe(1, body("w0.1", 0, 0))
    ledger.skip(4, "garbage-collected before this reader read them")
    ledger.settle()
    assert violations(ledger) == {"unreadable": 2, "lost": 2}
    with pytest.raises(ValueError, match="in order"):
        ledger.observe(7, body("w0.1", 0, 0))


def test_11_the_ledger_survives_a_json_round_trip_mid_run() -> None:
    import json

    ledger = Ledger(SEED)
    ledger.note("w0.1", intent(0, 2))
    ledger.note("w0.1", intent(1, 1))
    ledger.note("w0.1", Outcome(1, ACK, 1, 2))
    ledger.observe(1, body("w0.1", 1, 0))
    ledger.observe(2, body("w0.1", 0, 0))
    ledger.settle()
    again = Ledger.from_json(json.loads(json.dumps(ledger.to_json())))
    assert again.to_json() == ledger.to_json()
    again.observe(3, body("w0.1", 1, 0))  # append 1 was decided before the round trip
    again.observe(4, body("w0.1", 0, 1))
    again.note("w0.1", Outcome(0, ACK, 2, 4))
    again.settle()
    assert violations(again) == {"duplicated": 1, "misplaced": 1}
    assert again.counts.verified == 2


# ------------------------------------------------------- stress writers and readers, real log


def _write_some(run: RunDir, url: str, name: str, appends: int) -> None:
    config = StressConfig(url=url, seed=SEED)
    journal = Journal(run.journal(name))
    writer = StressWriter(config, name, open_writer(config, name, open_store(url)), journal, time.monotonic)
    for i in range(appends):
        writer.append_one(Regime("append" if i % 2 else "submit", 0.0, 8, float("inf")))
    writer.writer.close()
    journal.write(End(EXIT))
    journal.close()


def _read_all(run: RunDir, url: str) -> StressReader:
    (tail := open_store(url).get(MANIFEST_KEY))  # the log exists
    reader = StressReader(run, SEED, "r0", open_store(url), read_chunk=7)
    write_json(run.final, {"tail": Manifest.from_bytes(tail.data).next_offset})
    stop = threading.Event()
    timer = threading.Timer(120, stop.set)  # a hung reader fails the test instead of hanging it
    timer.start()
    try:
        reader.run(stop)
    finally:
        timer.cancel()
    assert reader.finished
    return reader


def test_12_stress_readers_verify_a_real_log_and_resume_from_their_saved_state(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run").create()
    url = file_url(str(tmp_path / "log"))
    _write_some(run, url, "w0.1", 12)
    _write_some(run, url, "w1.1", 5)
    entries, _ = read_new(run.journal("w0.1"), 0)
    acked = sum(e.limit - e.start for e in entries if isinstance(e, Outcome) and e.kind == ACK)
    reader = StressReader(run, SEED, "r0", open_store(url), read_chunk=7)
    assert reader.read_some()  # one chunk, then the process "dies": state saved, cursor moved
    reader.catch_up_journals()
    reader.save()
    reader.advance_cursor()
    resumed = _read_all(run, url)
    counts = resumed.ledger.counts
    assert counts.violations() == dict.fromkeys(VIOLATIONS, 0)
    assert counts.verified == counts.records_read >= acked > 0
    assert counts.appends_verified == 17


def test_18_a_stress_reader_past_its_cycle_time_stops_after_the_fragment_it_is_reading(
    tmp_path: Path,
) -> None:
    """Progress counts once persisted: a reader that takes longer than the kills come must end its
    cycle early, or it loses every chunk (an S3 run's reader fell 130,000 records behind)."""
    run = RunDir(tmp_path / "run").create()
    url = file_url(str(tmp_path / "log"))
    _write_some(run, url, "w0.1", 12)
    reader = StressReader(run, SEED, "r0", open_store(url), read_chunk=10_000, cycle_s=0.0)
    parts = reader.reader.plan(1)
    assert len(parts) > 2
    for part in parts[:2]:
        assert reader.read_some()
        assert reader.ledger.position == part.limit
    patient = StressReader(run, SEED, "r1", open_store(url), read_chunk=10_000)
    assert patient.read_some()
    assert patient.ledger.position == parts[-1].limit


def test_13_stress_readers_report_a_fragment_lost_from_under_the_log(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run").create()
    url = file_url(str(tmp_path / "log"))
    _write_some(run, url, "w0.1", 6)
    store = open_store(url)
    victim = Manifest.from_bytes(store.get(MANIFEST_KEY).data).fragments[2]
    store.delete(victim.path)
    counts = _read_all(run, url).ledger.counts
    assert counts.unreadable == victim.limit - victim.start
    assert counts.lost == victim.limit - victim.start
    assert counts.verified == counts.records_read


def test_14_stress_readers_catch_records_of_appends_journaled_as_failed(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run").create()
    url = file_url(str(tmp_path / "log"))
    _write_some(run, url, "w0.1", 3)
    lines = run.journal("w0.1").read_text().splitlines()
    ack = next(i for i, line in enumerate(lines) if '"kind":"ack"' in line)
    lines[ack] = lines[ack].split(',"kind"')[0] + ',"kind":"failed"}'  # the API "said" failed
    run.journal("w0.1").write_text("\n".join(lines) + "\n")
    counts = _read_all(run, url).ledger.counts
    assert counts.unexpected > 0 and counts.lost == 0


def test_16_a_racing_sweep_deletes_an_uncommitted_fragment_and_its_commit_is_refused(tmp_path: Path) -> None:
    """The orphan race as a collector injects it: a fragment uploaded a moment ago, not yet
    committed, is swept as an orphan by a run whose clock is ahead; its commit must then be
    refused with `PastOrphanHorizon` (what the writers count), and the race is counted once.
    A run without the race leaves the young fragment alone."""
    url = file_url(str(tmp_path / "log"))
    store = open_store(url)
    LogWriter(store).append(b"r0")
    batches, _ = to_batches([b"r1"])
    files = write_fragments(store, batches, None, fragment_bytes=1 << 20)
    calm = StressCollector(replace(BOUNDED, url=url, faults=FaultRates(orphan_race=0.0)), "gc0", store,
                           after_run=lambda: None)
    calm.collect_once()
    assert calm.faults() == {"orphan_race": 0} and not calm.counts["orphans deleted"]
    racing = StressCollector(replace(BOUNDED, url=url, faults=FaultRates(orphan_race=1.0)), "gc1", store,
                             after_run=lambda: None)
    racing.collect_once()
    assert racing.faults() == {"orphan_race": 1}
    assert racing.counts["races that raised the horizon"] == racing.counts["orphans deleted in races"] == 1
    with pytest.raises(PastOrphanHorizon, match="rerun the append"):
        Committer(store).commit(files)
    assert LogWriter(store).append(b"r1 again").start == 2


def test_17_the_audit_finds_a_referenced_fragment_deleted_after_every_reader_read_it(tmp_path: Path) -> None:
    """Readers read a record once and `verify` runs only at the end, so a fragment deleted while
    the manifest still references it is found only by the supervisor's audit."""
    store = open_store(file_url(str(tmp_path / "log")))
    with LogWriter(store) as writer:
        for i in range(4):
            writer.append([b"r%d" % i])
    orphan = write_fragments(store, to_batches([b"never committed"])[0], None, fragment_bytes=1 << 20)[0]
    audit = FragmentAudit(store, LogReader(store))
    audit.audit()
    assert audit.counts() == {"audits": 1, "audits skipped": 0, "referenced fragments missing": 0}
    store.delete(orphan.path)  # unreferenced: nobody's business
    victim = Manifest.from_bytes(store.get(MANIFEST_KEY).data).fragments[1]
    store.delete(victim.path)
    audit.audit()
    assert list(audit.missing) == [victim.path]
    assert "yet missing" in audit.missing[victim.path]


class _ReaderClock(ManualClock):
    """The supervisor's clock: each sleep advances it and lets a simulated reader move its saved
    position by `step` until it reaches `finish_at` (where it finishes), or stall at `stall_at`
    (never finishing)."""

    def __init__(self, run: RunDir, step: int, finish_at: int, stall_at: int | None = None) -> None:
        super().__init__(monotonic=0.0)
        self.run, self.step, self.finish_at, self.stall_at = run, step, finish_at, stall_at
        self.position = 1
        self.moved_at = 0.0
        self._save()

    def sleep(self, seconds: float) -> None:
        super().sleep(seconds)
        if self.stall_at is None or self.position < self.stall_at:
            self.position += self.step
            self.moved_at = self.monotonic()
        self._save()

    def _save(self) -> None:
        write_json(self.run.reader_state("r0"), {"ledger": {"position": self.position},
                                                 "finished": self.position >= self.finish_at})


def test_19_the_end_of_a_run_waits_for_readers_while_they_progress_and_gives_up_once_they_stall(
    tmp_path: Path,
) -> None:
    """Readers far behind (S3 under load) may need longer than any fixed wait to catch up; one that
    reads nothing new for READER_STALL_S is stuck."""
    run = RunDir(tmp_path / "run").create()
    config = StressConfig(url=file_url(str(tmp_path / "log")), writers=1, readers=1, collectors=0)
    slow = _ReaderClock(run, step=1, finish_at=2 * int(READER_STALL_S))  # a few steps per stall time
    assert Supervisor(config, run, clock=slow).await_readers() == []
    assert slow.monotonic() > READER_STALL_S

    stuck = _ReaderClock(run, step=1, finish_at=10**9, stall_at=50)
    assert Supervisor(config, run, clock=stuck).await_readers() == [f"reader r0 did not finish: nothing new read for {READER_STALL_S:.0f} s"]
    assert READER_STALL_S <= stuck.monotonic() - stuck.moved_at <= READER_STALL_S + supervisor.READER_POLL_S


# ----------------------------------------------------------------------- bounded runs


BOUNDED = StressConfig(
    url="",
    seed=11,
    duration_s=6.0,  # at least; then on until every fault kind was injected and GC collected
    writers=2,
    readers=2,
    collectors=1,
    kill_every_s=1.5,
    server_restart_every_s=0.0,
    summary_every_s=5.0,
    require_every_fault=True,
    gc_grace_s=1.0,
    gc_every_s=0.5,
    read_chunk=2000,
    faults=FaultRates(drop=0.03, delay=0.08, max_delay_s=0.1, error_5xx=0.03, timeout_after_write=0.03,
                      precondition_storm=0.03, storm_every_s=3.0, storm_length_s=1.0, storm_rate=0.7,
                      late_landing=0.03, orphan_race=0.6, damage_manifest=0.2),
)
KILLS = ("kill writer", "kill reader", "kill collector")
DAMAGE = (DAMAGE_MANIFEST, DAMAGE_REFUSED)


def _assert_clean_run(summary, required: tuple[str, ...]) -> None:
    assert sorted(summary.required) == sorted(required)
    table = summary.table()
    assert summary.final, table
    assert summary.violations() == {**dict.fromkeys(VIOLATIONS, 0), "shortened by a damaged manifest": 0}, table
    assert summary.verified() >= summary.records_acknowledged > 0, table
    assert not summary.verify_problems, table
    assert not summary.crashes.get("writer") and not summary.crashes.get("reader"), table
    assert summary.audit["audits"] > 0 and not summary.missing_fragments, table
    assert summary.ok, table
    assert summary.missing() == [], table


@pytest.mark.slow
def test_20_bounded_stress_run_on_the_local_filesystem(tmp_path: Path) -> None:
    """With a compactor racing the appends (and killed in turn): its compactions committed, and
    every record read once where it was acknowledged."""
    config = replace(BOUNDED, url=file_url(str(tmp_path / "log")), compactors=1, compact_every_s=0.2,
                     kill_every_s=3.0)  # each role killed every ~15 s: the compactor gets to run
    summary = run_stress(config, tmp_path / "run", out=open(tmp_path / "out.txt", "w"))
    _assert_clean_run(summary, STORE_FAULTS + (LATE_LANDED, ORPHAN_RACE) + KILLS + DAMAGE
                      + ("gc apply", "kill compactor", COMPACTED))
    assert summary.compaction["fragments merged"] > summary.compaction["fragments written"] > 0


@pytest.mark.slow
@pytest.mark.s3
def test_21_bounded_stress_run_on_seaweedfs_with_a_server_restart(tmp_path: Path) -> None:
    config = replace(BOUNDED, server_restart_every_s=60.0)  # one restart, at mid-run
    summary = run_stress(config, tmp_path / "run", s3=True, out=open(tmp_path / "out.txt", "w"))
    assert summary.url.startswith("s3://")
    _assert_clean_run(summary, STORE_FAULTS + (LATE_LANDED, ORPHAN_RACE) + KILLS + DAMAGE
                      + ("seaweed_restart", "gc apply"))



def test_22_a_damaged_manifest_is_judged_by_what_the_read_delivered() -> None:
    """The fault "damage a manifest digit": the store damages one digit per manifest GET; a
    read that planned on a damaged manifest is refused, or harmless, or (acting on it) a
    violation. A damage crafted to pass every check (the last fragment dropped, the setsum
    rebalanced) is how a shortened read would look: `judge` must call it one."""
    store = open_store("memory://stress-damage")
    writer = LogWriter(store)
    for i in range(3):
        writer.append([f"r{3 * i + j}".encode() for j in range(3)])
    damaged = ManifestDamage(store, probability=1.0, seed=3)
    original = store.get(MANIFEST_KEY).data
    assert damaged.get(MANIFEST_KEY).data != original and len(damaged.take()) == 1
    doc = json.loads(original)
    last = doc["fragments"].pop()
    doc["setsum"] = (Setsum.from_hexdigest(doc["setsum"]) - Setsum.from_hexdigest(last["setsum"])).hexdigest()
    doc["acc_bytes"] -= last["num_bytes"]
    smart = Damage(original, json.dumps(doc).encode())
    assert judge(smart, start=1, end=7, wanted=100, cut_short=False) == "damage_shortened"
    assert judge(smart, start=1, end=7, wanted=6, cut_short=False) == "damage_harmless"  # read all it wanted
    assert judge(smart, start=1, end=4, wanted=100, cut_short=True) == "damage_harmless"  # its deadline
    writer_only = json.loads(original)
    writer_only["writer"] = "someone else"
    assert judge(Damage(original, json.dumps(writer_only).encode()), 1, 1, 100, False) == "damage_harmless"
    for _ in range(50):  # each damage it serves is refused, or reads the whole log unchanged
        served = damaged.get(MANIFEST_KEY).data
        store.put_if_match(MANIFEST_KEY, served, store.get(MANIFEST_KEY).etag)
        try:
            rows = LogReader(store).read_table().num_rows
        except CorruptLog:
            continue
        finally:
            store.put_if_match(MANIFEST_KEY, original, store.get(MANIFEST_KEY).etag)
        assert judge(Damage(original, served), 1, 1 + rows, 100, False) == "damage_harmless"


def test_15_run_files_are_replaced_atomically_by_threads_writing_at_once(tmp_path: Path) -> None:
    """A collector writes its stats after each run while its watch thread writes them every
    second: two threads replacing one file at once must both succeed (a 20-minute run lost two
    collectors to a shared temporary name)."""
    target = tmp_path / "stats.json"
    errors: list[BaseException] = []

    def hammer(n: int) -> None:
        try:
            for i in range(300):
                write_json(target, {"thread": n, "i": i})
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=hammer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert read_json(target)["i"] == 299


# ----------------------------------------------------------------------------- log sets


def test_23_the_log_set_ledger_tells_gone_with_a_deleted_log_from_lost() -> None:
    acks = {f"r{i}": Ack("a", "old", i) for i in range(4)} | {"s0": Ack("a", "new", 0), "s1": Ack("a", "new", 1)}
    survivors = {"a": "new"}
    clean = tally(acks, set(), [("a", "old", 0, "r0"), ("a", "old", 1, "r1"), ("a", "new", 0, "s0"),
                                ("a", "new", 1, "s1")], survivors)
    assert (clean.lost, clean.gone_with_deleted_log, clean.ok or clean.verify_ok) == (0, 2, False)
    # a record skipped before the last one read of a deleted log is lost, not gone with it
    skipped = tally(acks, set(), [("a", "old", 0, "r0"), ("a", "old", 2, "r2"), ("a", "new", 0, "s0"),
                                  ("a", "new", 1, "s1")], survivors)
    assert (skipped.lost, skipped.gone_with_deleted_log) == (1, 1)
    # the surviving log's tail is never "gone"; duplicates, strays and misplaced records are named
    bad = tally(acks, {"u0"}, [("a", "new", 0, "s0"), ("a", "new", 0, "s0"), ("a", "new", 5, "x"),
                              ("a", "new", 7, "u0"), ("a", "old", 1, "s1")], survivors)
    assert (bad.lost, bad.duplicated, bad.unacknowledged, bad.misplaced, bad.delivered_unknown) == (0, 1, 1, 1, 1)
    assert bad.gone_with_deleted_log == 4 and not bad.ok


def test_24_bounded_log_set_run_with_logs_deleted_and_created_again_while_streamed(tmp_path: Path) -> None:
    config = LogSetStressConfig(url=file_url(str(tmp_path / "logs")), logs=3, writers=2, duration_s=3.0,
                                seed=SEED, recreate_every_s=0.3, damage_manifest=0.05)
    t = run_logset_stress(config, tmp_path / "run")
    assert t.recreations >= 1 and t.damaged_manifest_reads >= 1, t
    assert t.acknowledged > t.acknowledged_pipelined > 0 and t.delivered > 0, t  # both paths ran
    assert {v: getattr(t, v) for v in LOGSET_VIOLATIONS} == dict.fromkeys(LOGSET_VIOLATIONS, 0), t.examples
    assert t.verify_ok, t.verify_problems
    assert t.ok


@pytest.mark.slow
def test_25_bounded_branch_run_with_kill_9(tmp_path: Path) -> None:
    """`wal3 stress --branches`: branches created, written, checkpointed and deleted under
    appends and collection of their parent, workers killed, every branch checked throughout."""
    from wal3_spark.stress.branches import run_branch_stress

    stats = run_branch_stress(tmp_path / "run", branches=4, duration_s=20, seed=SEED, kill_every_s=3,
                              out=open(tmp_path / "out.txt", "w"))
    assert stats.ok, stats.failures
    assert stats.kills >= 1 and stats.branches_seen >= 1 and stats.records_checked > 0, stats
    assert stats.operations.get("create_done", 0) >= 1 and stats.operations.get("append_done", 0) >= 1, stats
    assert stats.verified_at_end == stats.live_at_end


def test_26_the_branch_checker_catches_a_branch_whose_parent_lost_its_records(tmp_path: Path) -> None:
    """The branch run's check fails when garbage collection took a range a branch reads (here:
    its pin deleted by hand), and when a branch holds a record nobody appended."""
    from wal3_spark.log.branches import branch
    from wal3_spark.log.cursors import CursorStore
    from wal3_spark.log.reader import LogReader
    from wal3_spark.log.writer import LogWriter
    from wal3_spark.ops.garbage_collector import GarbageCollector, GCOptions
    from wal3_spark.storage import open_store
    from wal3_spark.stress.branches import BranchStats, Checker

    base = tmp_path / "run"
    root, fork = file_url(str(base / "root")), file_url(str(base / "b" / "b00000"))
    writer = LogWriter(root)
    for i in range(6):
        writer.append([f"root:{i}:{j}".encode() for j in range(5)])
    branch(root, fork, at=20)
    stats = BranchStats()
    checker = Checker(base, stats)
    checker.check_all()
    checker.check_all()
    assert stats.ok and stats.branches_seen == 1
    LogWriter(fork).append([b"b00000:7"])  # never journaled as acknowledged: fine, written once
    checker.check_all()
    assert stats.ok
    LogWriter(fork).append([b"someone-else"])
    checker.check_all()
    checker.check_all()
    assert any("never given" in f for f in stats.failures), stats.failures
    stats.failures.clear()
    other = file_url(str(base / "b" / "b00001"))
    branch(root, other, at=20)
    checker.check_all()
    for meta in list(open_store(root).list("pin/")):
        open_store(root).delete(meta.key)
    CursorStore(root).create("gc", LogReader(root).manifest().next_offset)
    GarbageCollector(root, GCOptions(grace_s=0, force=True)).run()
    checker.check_all()
    checker.check_all()
    assert any("b00001" in f for f in stats.failures), stats.failures


@pytest.mark.slow
@pytest.mark.parametrize("backend", [pytest.param("gcs", marks=pytest.mark.gcs),
                                     pytest.param("azure", marks=pytest.mark.azure)])
def test_27_bounded_branch_run_with_tags_on_the_emulators(tmp_path: Path, request: pytest.FixtureRequest,
                                                         backend: str) -> None:
    """The branch run's whole mix (branches created, written, checkpointed, deleted; tags held
    and not, deleted; collection; kill -9) on fake-gcs-server and Azurite, its processes reaching
    the emulator through the store options handed down to them."""
    from tests.support.emulators import cloud_url
    from wal3_spark.stress.branches import run_branch_stress

    url, options = cloud_url(request, backend)
    stats = run_branch_stress(tmp_path / "run", branches=3, duration_s=25, seed=SEED, kill_every_s=4,
                              out=open(tmp_path / "out.txt", "w"), url=url, options=options)
    assert stats.ok, stats.failures
    assert stats.kills >= 1 and stats.branches_seen >= 1 and stats.tag_checks >= 1, stats
    assert stats.operations.get("tag_done", 0) >= 1 and stats.operations.get("create_done", 0) >= 1, stats
    assert stats.verified_at_end == stats.live_at_end


def test_28_the_branch_checker_catches_what_nobody_asked_for(tmp_path: Path) -> None:
    """The checker fails a run when a branch disappears that the operator never set out to
    delete (a deletion that took the wrong log), when a mistake was accepted, when a tag is gone
    that nobody deleted, and when a held tag reads other records than when it was made."""
    from wal3_spark.log.branches import branch
    from wal3_spark.log.tags import TagStore
    from wal3_spark.stress.branches import TAG_CHECK_EVERY, BranchStats, Checker, _digest

    base = tmp_path / "run"
    root, fork = file_url(str(base / "root")), file_url(str(base / "b" / "b00000"))
    LogWriter(root).append([f"root:{i}".encode() for i in range(30)])
    branch(root, fork, at=20)
    TagStore(root).create("t00000", at=10, hold=True)
    TagStore(root).create("t00001", at=5, hold=True)
    bodies = LogReader(root).read_table(1, 10).column("body").to_pylist()
    notes = [{"tagged": "t00000", "log": "root", "hold": True, "start": 1, "offset": 10, "digest": _digest(bodies)},
             {"tagged": "t00001", "log": "root", "hold": True, "start": 1, "offset": 5, "digest": _digest([])}]
    (base / "ops.jsonl").write_text("".join(json.dumps(n) + "\n" for n in notes))
    stats = BranchStats()
    checker = Checker(base, stats)
    for _ in range(2 * TAG_CHECK_EVERY):  # two rounds of tag checks: a failure is one twice in a row
        checker.check_all()
    assert stats.branches_seen == 1 and stats.tag_checks == 4
    assert stats.failures == ["tag t00001 of root reads other records than when it was made"]
    stats.failures.clear()
    for meta in list(open_store(fork).list()):  # gone, and no deletion was noted
        open_store(fork).delete(meta.key)
    TagStore(root).delete("t00000")
    with open(base / "ops.jsonl", "a") as ops:
        ops.write(json.dumps({"accepted": "delete the folder of the branches"}) + "\n")
    for _ in range(2 * TAG_CHECK_EVERY):
        checker.check_all()
    assert "a mistake was accepted: delete the folder of the branches" in stats.failures
    assert "b00000: the branch is gone, and nobody deleted it" in stats.failures
    assert "tag t00000 of root is gone, and nobody deleted it" in stats.failures
    stats.failures.clear()
    with open(base / "ops.jsonl", "a") as ops:  # the operator's deletions explain both
        ops.write(json.dumps({"intent": "delete", "name": "b00000"}) + "\n")
        ops.write(json.dumps({"intent": "untag", "name": "t00000", "log": "root"}) + "\n")
        ops.write(json.dumps({"intent": "untag", "name": "t00001", "log": "root"}) + "\n")
    for _ in range(2 * TAG_CHECK_EVERY):
        checker.check_all()
    assert stats.ok, stats.failures


def test_29_recreating_a_log_keeps_the_logs_nested_below_it(tmp_path: Path) -> None:
    """The log-set run's re-creator deletes one log's objects, never those of a log nested
    below its URL (`a/sub`) or of a sibling sharing its name's prefix (`a2`)."""
    from wal3_spark.stress.logset import recreate

    prefix = open_store(file_url(str(tmp_path / "set")))
    for name in ("a", "a/sub", "a2"):
        LogWriter(file_url(str(tmp_path / "set" / name))).append([b"x", b"y"])
    others = {m.key for m in prefix.list() if m.key.startswith(("a/sub/", "a2/"))}
    recreate(prefix, "a")
    assert {m.key for m in prefix.list() if not m.key.startswith("a/") or m.key.startswith("a/sub/")} == others
    assert LogReader(file_url(str(tmp_path / "set" / "a"))).manifest().next_offset == 1
    assert LogReader(file_url(str(tmp_path / "set" / "a" / "sub"))).manifest().next_offset == 3


def test_30_records_a_retention_policy_removed_unread_are_accounted_not_lost() -> None:
    ledger = Ledger(SEED)
    ledger.note("w0.1", intent(0, 3))
    ledger.note("w0.1", Outcome(0, ACK, 1, 4))
    ledger.observe(1, body("w0.1", 0, 0))
    ledger.remove(4)  # the policy removed [2, 4) before this reader read them
    ledger = Ledger.from_json(json.loads(json.dumps(ledger.to_json())))
    ledger.settle()
    assert violations(ledger) == {}
    assert (ledger.counts.verified, ledger.counts.removed_by_retention) == (1, 2)


@pytest.mark.slow
def test_31_bounded_stress_run_with_the_retention_actor(tmp_path: Path) -> None:
    config = replace(BOUNDED, url=file_url(str(tmp_path / "log")), retention_bytes=2 << 10,
                     require_every_fault=False, duration_s=15.0)
    summary = run_stress(config, tmp_path / "run", out=open(tmp_path / "out.txt", "w"))
    table = summary.table()
    assert summary.final and summary.ok, table
    assert summary.violations() == {**dict.fromkeys(VIOLATIONS, 0), "shortened by a damaged manifest": 0}, table
    assert summary.gc.get("records removed by retention", 0) > 0, table
    for reader in summary.readers.values():  # every acknowledged record verified, or removed unread
        counts = reader["counts"]
        assert counts["verified"] + counts["removed_by_retention"] >= summary.records_acknowledged, table
    assert any(r["counts"]["removed_by_retention"] for r in summary.readers.values()), table
