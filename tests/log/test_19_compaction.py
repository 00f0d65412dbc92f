"""Compaction (docs/format.md section 4, "Compacted fragments"): runs of small fragments merged
into one, every record's offset, `_timestamp` and bytes kept, the setsum unchanged; a damaged
fragment refuses it; a racing append rebases, a racing change of the run leaves an orphan; GC's
orphan sweep keeps the replaced fragments for the orphan grace after the compaction."""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import json
import pickle
import subprocess
import sys
import threading

import pyarrow as pa
import pytest

from tests.support import chroma_reader
from tests.support.fakes import CountingStore
from wal3_spark.clock import SYSTEM, ManualClock
from wal3_spark.errors import CompactionRefused, CorruptLog, InvalidOption, LogNotFound, LogSealed
from wal3_spark.format.layout import FRAGMENT_PREFIX
from wal3_spark.format.manifest import SnapshotOptions, Txn
from wal3_spark.log.branches import branch
from wal3_spark.log.committer import Committer
from wal3_spark.log.compaction import SETTLE_FOREIGN_S, CompactOptions, Run, commit, plan, rewrite
from wal3_spark.log.compaction import compact as compact_log
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.reader import LogReader
from wal3_spark.log.replaced import REPLACED_PREFIX
from wal3_spark.log.snapshots import load_snapshot
from wal3_spark.log.writer import LogWriter, LogWriterOptions
from wal3_spark.ops.garbage_collector import GarbageCollector, GCOptions
from wal3_spark.ops.verify import verify
from wal3_spark.storage import resolve_store
from wal3_spark.storage.forwarding import ForwardingStore
from wal3_spark.testing.hooks import after_steps

NOW = 1_800_000_000.0
#: when the tests compact: every fragment written at NOW + a few seconds has settled
LATER = ManualClock(NOW + 3600.0)
#: the raw logs these tests compact are read by no Chroma process: they opt in (test_16 is the
#: refusal without it)
compact = functools.partial(compact_log, allow_chroma_incompatible=True)


def _log(tmp_path, structured: bool, appends: int = 8, clock: ManualClock | None = None) -> str:
    url = f"file://{tmp_path}/log"
    clock = clock or ManualClock(NOW)
    with LogWriter(url, clock=clock) as writer:
        for i in range(appends):
            clock.advance(1.0)
            if structured:
                writer.append(pa.table({"k": pa.array(range(i * 10, i * 10 + 3 + i), pa.int64()),
                                        "v": [f"v{i}-{j}" for j in range(3 + i)]}))
            else:
                writer.append([f"body-{i}-{j}".encode() for j in range(3 + i)])
    return url


def _everything(url: str) -> tuple[pa.Table, str, list[int]]:
    reader = LogReader(url)
    manifest = reader.manifest()
    table = reader.read_table()
    times = sorted({int(t.timestamp() * 1e6) for t in table.column("_timestamp").to_pylist()})
    cuts = [reader.offset_for_timestamp(t + d) for t in times for d in (-1, 0, 1)]
    return table, manifest.setsum.hexdigest(), cuts


@pytest.mark.parametrize("structured", [False, True], ids=["raw", "structured"])
def test_01_compaction_keeps_every_record_time_and_the_setsum(tmp_path, structured):
    url = _log(tmp_path, structured)
    before = _everything(url)
    report = compact(url, clock=LATER, target_bytes=1 << 20)
    assert (report.fragments_before, report.fragments_after, len(report.runs)) == (8, 1, 1)
    after = _everything(url)
    assert after[0].equals(before[0])  # payload, _offset and _timestamp of every record
    assert after[1] == before[1] == report.setsum
    assert after[2] == before[2]  # startingTimestamp cuts at the same offsets
    ref = LogReader(url).manifest().fragments[0]
    assert [s.records for s in ref.segments] == [3 + i for i in range(8)]
    assert ref.blake3 is not None  # verifying reads check the new file's digest
    assert verify(url).ok
    again = compact(url, clock=LATER, target_bytes=1 << 20)  # nothing left to merge
    assert again.runs == [] and again.fragments_after == 1


def test_02_compacted_fragments_compact_again_and_a_target_cuts_runs(tmp_path):
    url = _log(tmp_path, structured=True, appends=12)
    before = _everything(url)
    size = LogReader(url).manifest().fragments[0].num_bytes
    first = compact(url, clock=LATER, target_bytes=size * 3)
    assert first.fragments_after < 12 and len(first.runs) > 1
    compact(url, clock=ManualClock(NOW + 7200.0), target_bytes=1 << 20)  # the first's have settled
    assert len(LogReader(url).manifest().fragments) == 1
    assert _everything(url)[0].equals(before[0])
    assert _everything(url)[1:] == before[1:]
    assert verify(url).ok


def test_03_a_damaged_fragment_refuses_compaction_naming_it(tmp_path):
    url = _log(tmp_path, structured=False, appends=4)
    store = resolve_store(url)
    manifest = LogReader(url).manifest()
    victim = manifest.fragments[2]
    data = bytearray(store.get(victim.path).data)
    data[data.index(b"body-2-0")] ^= 1
    store.put_if_match(victim.path, bytes(data), store.head(victim.path).etag)
    with pytest.raises(CorruptLog, match=victim.path):
        compact(url, clock=LATER)
    assert LogReader(url).manifest() == manifest
    assert not list(store.list(REPLACED_PREFIX))


def test_04_an_append_racing_the_compaction_is_rebased(tmp_path):
    url = _log(tmp_path, structured=False, appends=5)
    writer = LogWriter(url)
    with after_steps(lambda step: step == "rewrite" and writer.append([b"late"])):
        report = compact(url, clock=LATER)
    writer.close()
    table = LogReader(url).read_table()
    assert table.column("body").to_pylist()[-1] == b"late"
    assert table.column("_offset").to_pylist() == list(range(1, table.num_rows + 1))
    assert report.conflicts == 0 and len(LogReader(url).manifest().fragments) == 2
    assert verify(url).ok


def test_05_a_run_changed_meanwhile_leaves_the_log_as_the_other_made_it(tmp_path):
    url = _log(tmp_path, structured=True, appends=5)
    before = _everything(url)
    rivals: list[str] = []

    def rival(step: str) -> None:  # another compaction wins (its own step is let pass)
        if not rivals:
            rivals.append(step)
            compact(url, clock=LATER)

    with after_steps(rival):
        report = compact(url, clock=LATER)
    assert report.conflicts == 1
    assert len(LogReader(url).manifest().fragments) == 1
    assert _everything(url)[0].equals(before[0]) and _everything(url)[1:] == before[1:]
    # the loser's fragment is referenced by nothing: an orphan for the sweep
    store = resolve_store(url)
    referenced = {f.path for f in LogReader(url).manifest().fragments}
    assert report.runs[0]["path"] not in referenced and store.exists(report.runs[0]["path"])


def test_06_the_orphan_sweep_keeps_replaced_fragments_for_the_grace(tmp_path):
    clock = ManualClock(NOW)
    url = _log(tmp_path, structured=False, appends=4, clock=clock)
    replaced = [f.path for f in LogReader(url).manifest().fragments]
    clock.advance(7200.0)  # the fragments are two hours old when compacted
    compact(url, clock=clock)
    store = resolve_store(url)
    reader_view = LogReader(url)
    GarbageCollector(url, clock=clock).run()
    assert all(store.exists(path) for path in replaced)  # a reader of the older manifest finishes
    clock.advance(3600.0 + 1)
    report = GarbageCollector(url, clock=clock).run()
    assert sorted(report.orphans_deleted) == sorted(replaced)
    assert not list(store.list(REPLACED_PREFIX))
    assert reader_view.read_table().num_rows == 3 + 4 + 5 + 6


def test_07_bad_input_changes_nothing(tmp_path):
    url = _log(tmp_path, structured=False, appends=3)
    manifest = LogReader(url).manifest()
    for kwargs in ({"target_bytes": 0}, {"target_bytes": -5}, {"min_fragments": 1}):
        with pytest.raises(InvalidOption):
            compact(url, clock=LATER, **kwargs)
    with pytest.raises(LogNotFound):
        compact(f"file://{tmp_path}/missing", clock=LATER)
    assert LogReader(url).manifest() == manifest


def test_08_cli_compact_dry_run_json_and_bad_sizes(tmp_path):
    """Bad sizes exit 2 naming the option, a target that cannot hold one fragment too; a target
    below every fragment of the log merges nothing and says so (no error: a log of large appends
    or a compacted log has nothing to merge)."""
    url = _log(tmp_path, structured=False, appends=3, clock=ManualClock(SYSTEM.now() - 7200.0))
    wal3 = [sys.executable, "-m", "wal3_spark.cli"]
    out = subprocess.run(wal3 + ["compact", url, "--dry-run", "--json", "--allow-chroma-incompatible"],
                         capture_output=True, text=True, check=True)
    doc = json.loads(out.stdout)
    assert doc["dry_run"] and doc["fragments_after"] == 1 and len(LogReader(url).manifest().fragments) == 3
    for bad in (["--target-bytes", "0"], ["--target-bytes", "lots"], ["--min-fragments", "1"]):
        failed = subprocess.run(wal3 + ["compact", url, *bad], capture_output=True, text=True)
        assert failed.returncode == 2 and bad[0] in failed.stderr
    small = subprocess.run(wal3 + ["compact", url, "--target-bytes", "1000", "--allow-chroma-incompatible"],
                           capture_output=True, text=True)
    assert small.returncode == 2 and "cannot hold one fragment" in small.stderr
    assert min(f.num_bytes for f in LogReader(url).manifest().fragments) >= 1024
    below = subprocess.run(wal3 + ["compact", url, "--target-bytes", "1k", "--allow-chroma-incompatible"],
                           capture_output=True, text=True, check=True)  # below every fragment: a note
    assert "0 run(s)" in below.stdout and "nothing to merge" in below.stdout
    refused = subprocess.run(wal3 + ["compact", url], capture_output=True, text=True)
    assert refused.returncode == 1 and "--allow-chroma-incompatible" in refused.stderr
    assert len(LogReader(url).manifest().fragments) == 3
    done = subprocess.run(wal3 + ["compact", url, "--target-bytes", "1m", "--allow-chroma-incompatible"],
                          capture_output=True, text=True, check=True)
    assert "3 -> 1 fragments" in done.stdout
    assert len(LogReader(url).manifest().fragments) == 1


def test_09_timestamps_inside_a_compacted_fragment(tmp_path):
    url = _log(tmp_path, structured=True, appends=4)
    compact(url, clock=LATER)
    reader = LogReader(url)
    second = dt.datetime.fromtimestamp(NOW + 2, dt.UTC)
    # the second append's records (offsets 4..7) were written at NOW + 2
    assert reader.offset_for_timestamp(int((NOW + 2) * 1e6)) == 4
    assert reader.scan(start_time=second).start == 4


def _compact_killed_at(url: str, step: str = "rewrite") -> None:
    """A compaction in another process (its clock `LATER`), killed -9 right after its named
    `step`: "upload" (the new fragment stored, no record), "rewrite" (its record written too,
    nothing committed) or "commit" (the manifest's compare-and-swap answered, not returned)."""
    script = ("import os, signal, sys\n"
              "from wal3_spark import compact\n"
              "from wal3_spark.clock import ManualClock\n"
              "from wal3_spark.testing.hooks import after_steps\n"
              "def kill(step):\n"
              "    if step == sys.argv[2]:\n"
              "        os.kill(os.getpid(), signal.SIGKILL)\n"
              "with after_steps(kill):\n"
              f"    compact(sys.argv[1], clock=ManualClock({LATER.now()}))\n")
    killed = subprocess.run([sys.executable, "-c", script, url, step], capture_output=True, text=True)
    assert killed.returncode == -9, killed.stderr


def test_10_kill_9_before_the_commit_leaves_the_log_as_it_was(tmp_path):
    url = _log(tmp_path, structured=True, appends=5)
    before = _everything(url)
    manifest = LogReader(url).manifest()
    _compact_killed_at(url)
    assert LogReader(url).manifest() == manifest  # the fragment and its record written, nothing committed
    assert _everything(url)[0].equals(before[0]) and verify(url).ok
    report = compact(url, clock=LATER)  # the next run compacts; the dead run's fragment is an orphan
    assert report.fragments_after == 1 and _everything(url)[1:] == before[1:]


def test_11_a_settle_time_keeps_young_fragments_for_writers_that_do_not_know_compaction(tmp_path):
    """Writers that look for their fragments by path without the compaction records (Chroma's,
    older wal3-spark) would append replaced ones again: `settle_s` keeps fragments younger
    than it (900 s for such logs); by default none is kept. A bad value changes nothing."""
    url = _log(tmp_path, structured=False, appends=4)
    soon = ManualClock(NOW + 100.0)  # the appends were written at NOW + 1 .. NOW + 4
    assert compact(url, clock=soon, settle_s=SETTLE_FOREIGN_S).runs == []
    for bad in (-1.0, "5", True):
        with pytest.raises(InvalidOption, match="settle_s"):
            compact(url, clock=soon, settle_s=bad)
    assert len(LogReader(url).manifest().fragments) == 4
    assert compact(url, clock=soon).fragments_after == 1


def test_12_appends_racing_repeated_compactions_lose_and_duplicate_nothing(store_url, store_options):
    """An appender thread and repeated compactions on one log (each store): every record once,
    in its place, the setsum balanced. The compactions run as if the settle time had passed."""
    url = f"{store_url}/race"
    appends, per = 40, 5
    done = threading.Event()

    def append() -> None:
        try:
            with LogWriter(url, options=store_options) as writer:
                for i in range(appends):
                    writer.append(pa.table({"id": pa.array(range(i * per, (i + 1) * per), pa.int64())}))
        finally:
            done.set()

    LogWriter(url, options=store_options).append(pa.table({"id": pa.array([], pa.int64())}))
    thread = threading.Thread(target=append)
    thread.start()
    compactions = conflicts = 0
    try:
        while not done.is_set():
            report = compact(url, options=store_options, clock=ManualClock(SYSTEM.now() + 3600.0))
            compactions += len(report.runs)
            conflicts += report.conflicts
    finally:
        thread.join()
    table = LogReader(url, options=store_options).read_table()
    assert table.column("id").to_pylist() == list(range(appends * per))
    assert table.column("_offset").to_pylist() == list(range(1, appends * per + 1))
    assert compactions >= 1 and len(LogReader(url, options=store_options).manifest().fragments) < appends
    assert verify(url, options=store_options).ok


def test_13_a_collection_racing_the_compaction_leaves_its_output_an_orphan(tmp_path):
    """GC drops the run's first fragments between the compaction's rewrite and its commit: the
    run is not in the manifest as it was, so nothing is committed (records GC dropped are not
    brought back, none is lost or duplicated)."""
    url = _log(tmp_path, structured=False, appends=5)
    kept = LogReader(url).read_table(8)  # offsets 8 on: the third append's first record on
    CursorStore(url).create("consumer", 8)

    def collect(step: str) -> None:
        if step == "rewrite":  # the run's fragment and record written, not yet committed
            report = GarbageCollector(url, GCOptions(grace_s=0, force=True)).run()
            assert report.records_dropped == 7

    with after_steps(collect):
        report = compact(url, clock=LATER)
    assert report.conflicts == 1
    assert LogReader(url).read_table().equals(kept) and verify(url).ok
    again = compact(url, clock=LATER)  # the rest compacts on the next run
    assert again.fragments_after == 1 and LogReader(url).read_table().equals(kept)


def test_14_a_sealed_log_with_txns_is_compacted_and_stays_sealed_with_them(tmp_path):
    """Compaction keeps everything else in the manifest: the seal (records are kept, nothing is
    appended, so a sealed log may be compacted), txns, schema and incarnation."""
    url = _log(tmp_path, structured=True, appends=4)
    committer = Committer(url)
    committer.update(lambda m: m.with_txns({"job": Txn(7, 1)}))
    committer.seal()
    before = LogReader(url).manifest()
    assert compact(url, clock=LATER).fragments_after == 1
    after = LogReader(url).manifest()
    assert after.sealed and dict(after.txns) == {"job": Txn(7, 1)}
    assert (after.schema, after.incarnation, after.setsum, after.acc_bytes) == (
        before.schema, before.incarnation, before.setsum, before.acc_bytes)
    with pytest.raises(LogSealed):
        LogWriter(url).append(pa.table({"k": pa.array([1], pa.int64()), "v": ["x"]}))


def test_15_fragments_a_branch_reads_through_its_pin_are_never_replaced(tmp_path):
    """A branch reads its parent's fragments by their paths: those below its branch point stay
    (the report names the pin), those above are compacted, and the branch reads as before."""
    url = _log(tmp_path, structured=False, appends=6)
    child = f"file://{tmp_path}/child"
    branch(url, child, at=13)  # the first three appends: offsets 1-12
    pinned = [f.path for f in LogReader(url).manifest().fragments if f.start < 13]
    before = LogReader(child).read_table()
    report = compact(url, clock=LATER)
    fragments = LogReader(url).manifest().fragments
    assert [f.path for f in fragments[:len(pinned)]] == pinned and len(fragments) == len(pinned) + 1
    assert any("branches read them" in note for note in report.notes)
    assert LogReader(child).read_table().equals(before) and verify(url).ok


def test_16_a_raw_log_is_compacted_only_with_the_opt_in(tmp_path):
    """Chroma's wal3 cannot read a compacted raw fragment (test_17): without the opt-in a raw log
    is refused, dry run or not, naming the flag, and nothing is written; a structured log (which
    Chroma never reads) needs none."""
    url = _log(tmp_path, structured=False, appends=3)
    store = resolve_store(url)
    before = sorted((m.key, m.etag) for m in store.list())
    for dry_run in (True, False):
        with pytest.raises(CompactionRefused, match="raw log.*--allow-chroma-incompatible"):
            compact_log(url, clock=LATER, dry_run=dry_run)
    assert sorted((m.key, m.etag) for m in store.list()) == before
    assert compact_log(url, clock=LATER, allow_chroma_incompatible=True).fragments_after == 1
    structured = _log(tmp_path / "s", structured=True, appends=3)
    assert compact_log(structured, clock=LATER).fragments_after == 1


@pytest.mark.parametrize("one_time", [False, True], ids=["appends-at-their-times", "one-timestamp"])
def test_17_what_chromas_reader_makes_of_a_compacted_raw_log(tmp_path, one_time):
    """Chroma's own code path (tests/support/chroma_reader): a raw log wal3-spark appended reads
    and scrubs clean there; compacted, its fragment holds rows of several write times, which
    Chroma's `checksum_parquet` rejects on every read and scrub. Even appends that share one
    timestamp, whose compacted file Chroma reads record for record, fail its scrub: the setsum it
    recomputes over the file as one fragment is not the pointer's (the sum of the segments')."""
    clock = ManualClock(NOW)
    url = f"file://{tmp_path}/log"
    with LogWriter(url, clock=clock) as writer:
        for i in range(4):
            clock.advance(0.0 if one_time else 1.0)
            writer.append([f"body-{i}-{j}".encode() for j in range(3 + i)])
    store = resolve_store(url)
    expected = [(o, b) for o, b in zip(LogReader(url).read_table().column("_offset").to_pylist(),
                                       LogReader(url).read_table().column("body").to_pylist())]
    assert chroma_reader.read(store) == expected and chroma_reader.scrub(store) == []
    compact(url, clock=LATER)
    assert verify(url).ok and len(LogReader(url).manifest().fragments) == 1
    if one_time:
        assert chroma_reader.read(store) == expected
        assert chroma_reader.scrub(store) == ["OverallMismatch", "MismatchedFragmentSetsum"]
    else:
        with pytest.raises(chroma_reader.ChromaError, match="inconsistent epoch_micros"):
            chroma_reader.read(store)
        assert chroma_reader.scrub(store) == ["OverallMismatch", "CorruptFragment"]


def test_18_the_steps_pickle_and_one_compare_and_swap_commits_every_run(tmp_path):
    """plan -> rewrite -> commit, as a Spark job runs them (each run and each rewritten result
    pickled to and from an executor): every rewritten run of the log is replaced with one
    manifest write; a run another process changed meanwhile is a conflict, its fragment an
    orphan, while the other runs are committed."""
    url = _log(tmp_path, structured=True, appends=12)
    before = _everything(url)
    store = resolve_store(url)
    size = LogReader(url).manifest().fragments[0].num_bytes
    planned = plan(store, CompactOptions(target_bytes=size * 3), LATER)
    assert len(planned.runs) >= 2

    def on_executor(run):
        return pickle.loads(pickle.dumps(rewrite(store, pickle.loads(pickle.dumps(run)), LATER)))

    rewritten = [on_executor(run) for run in planned.runs]
    rival = plan(store, CompactOptions(target_bytes=size * 3), LATER)  # merges the first run first
    assert commit(store, rival, [rewrite(store, rival.runs[0], LATER)]).conflicts == 0
    counting = CountingStore(store)
    report = commit(counting, planned, rewritten)
    assert counting.by_operation()["put"] == 1  # the manifest, once
    assert report.conflicts == 1 and report.runs[0]["conflict"] and "conflict" not in report.runs[1]
    fragments = LogReader(url).manifest().fragments
    assert report.fragments_after == len(fragments) == len(planned.runs)
    assert rewritten[0].fragment.path not in {f.path for f in fragments}
    assert _everything(url)[0].equals(before[0]) and _everything(url)[1:] == before[1:]
    assert verify(url).ok


#: rollover thresholds small enough that a few appends roll the oldest fragments into snapshots
SMALL_ROLLS = SnapshotOptions(snapshot_rollover_threshold=4, fragment_rollover_threshold=4)


def _rolled_log(tmp_path, appends: int, clock: ManualClock | None = None) -> str:
    """A structured log whose oldest fragments sit in depth-1 snapshots of four."""
    url = f"file://{tmp_path}/rolled"
    clock = clock or ManualClock(NOW)
    with LogWriter(url, LogWriterOptions(snapshot_options=SMALL_ROLLS), clock=clock) as writer:
        for i in range(appends):
            clock.advance(1.0)
            writer.append(pa.table({"k": pa.array(range(i * 10, i * 10 + 3), pa.int64()),
                                    "v": [f"v{i}-{j}" for j in range(3)]}))
    return url


def test_19_the_youngest_snapshots_fragments_are_compacted_by_lifting_it(tmp_path):
    """The youngest snapshot's fragments are merged with the manifest's: its pointer is replaced
    by them, every record, time and the setsum kept. A reader that planned on the older
    manifest finishes: the lifted snapshot and its fragments stay for the orphan grace, then GC
    deletes them. Older snapshots stay, and are lifted by later compactions in turn."""
    clock = ManualClock(NOW)
    url = _rolled_log(tmp_path, appends=10, clock=clock)
    store = resolve_store(url)
    before, old = _everything(url), LogReader(url).manifest()
    assert [p.depth for p in old.snapshots] == [1, 1] and len(old.fragments) == 2
    youngest = old.snapshots[-1]
    children = [f.path for f in load_snapshot(store, youngest).fragments]
    clock.advance(7200.0)
    report = compact(url, clock=clock)
    after = LogReader(url).manifest()
    assert report.snapshots_lifted == 1 and report.conflicts == 0
    assert after.snapshots == old.snapshots[:1] and len(after.fragments) == 1
    assert _everything(url)[0].equals(before[0]) and _everything(url)[1:] == before[1:]
    assert verify(url).ok
    GarbageCollector(url, clock=clock).run()  # within the grace: what the old manifest names stays
    assert store.exists(youngest.path_to_snapshot) and all(store.exists(p) for p in children)
    clock.advance(3600.0 + 1)
    swept = GarbageCollector(url, clock=clock).run()
    assert youngest.path_to_snapshot in swept.orphans_deleted
    assert set(children) <= set(swept.orphans_deleted)
    assert _everything(url)[0].equals(before[0]) and verify(url).ok
    clock.advance(7200.0)
    assert compact(url, clock=clock).snapshots_lifted == 1  # the older snapshot's turn
    assert LogReader(url).manifest().snapshots == () and verify(url).ok
    assert _everything(url)[0].equals(before[0])


def test_20_a_rollover_racing_a_lift_leaves_the_snapshots_runs_orphans(tmp_path):
    """Appends that roll a new snapshot between the compaction's rewrite and its commit: the
    lifted snapshot is no longer the youngest pointer, so the runs among its fragments are not
    committed (orphans), nothing is lost, duplicated or re-ordered, and the next compaction
    starts from the new snapshots."""
    url = _rolled_log(tmp_path, appends=6)
    writer = LogWriter(url, LogWriterOptions(snapshot_options=SMALL_ROLLS))
    appended: list[str] = []

    def roll(step: str) -> None:
        if not appended:
            appended.append(step)
            for i in range(5):  # four more fragments than the threshold: a rollover
                writer.append(pa.table({"k": pa.array([1000 + i], pa.int64()), "v": ["late"]}))

    old = LogReader(url).manifest()
    with after_steps(roll):
        report = compact(url, clock=LATER)
    writer.close()
    now = LogReader(url).manifest()
    assert len(now.snapshots) > len(old.snapshots) and report.snapshots_lifted == 0
    assert report.conflicts == len(report.runs) >= 1
    keys = LogReader(url).read_table().column("k").to_pylist()
    assert keys == [k for i in range(6) for k in range(i * 10, i * 10 + 3)] + [1000 + i for i in range(5)]
    assert verify(url).ok


def test_21_kill_9_before_a_lifts_commit_leaves_the_log_as_it_was(tmp_path):
    url = _rolled_log(tmp_path, appends=6)
    before, manifest = _everything(url), LogReader(url).manifest()
    assert manifest.snapshots
    _compact_killed_at(url)
    assert LogReader(url).manifest() == manifest and verify(url).ok
    report = compact(url, clock=LATER)
    assert report.snapshots_lifted == 1 and _everything(url)[1:] == before[1:]
    assert _everything(url)[0].equals(before[0]) and verify(url).ok


def test_22_appends_rolling_snapshots_race_repeated_compactions(tmp_path):
    """An appender thread that rolls snapshots every few appends, and compactions back to back
    (as if the settle time had passed) that lift them: every id once, in order, at dense
    offsets; verify passes."""
    url = f"file://{tmp_path}/race"
    appends, per = 40, 3
    done = threading.Event()
    LogWriter(url).append(pa.table({"id": pa.array([], pa.int64())}))

    def append() -> None:
        try:
            with LogWriter(url, LogWriterOptions(snapshot_options=SMALL_ROLLS)) as writer:
                for i in range(appends):
                    writer.append(pa.table({"id": pa.array(range(i * per, (i + 1) * per), pa.int64())}))
        finally:
            done.set()

    thread = threading.Thread(target=append)
    thread.start()
    lifted = 0
    try:
        while not done.is_set():
            lifted += compact(url, clock=ManualClock(SYSTEM.now() + 3600.0)).snapshots_lifted
    finally:
        thread.join()
    # the race decides what the snapshots hold by now (the compactions may have merged every
    # fragment before it rolled): appends without a compaction roll small fragments into a
    # fresh snapshot, which the last compaction lifts whatever happened above
    with LogWriter(url, LogWriterOptions(snapshot_options=SMALL_ROLLS)) as writer:
        for i in range(appends, appends + 8):
            writer.append(pa.table({"id": pa.array(range(i * per, (i + 1) * per), pa.int64())}))
    total = (appends + 8) * per
    lifted += compact(url, clock=ManualClock(SYSTEM.now() + 3600.0)).snapshots_lifted
    table = LogReader(url).read_table()
    assert table.column("id").to_pylist() == list(range(total))
    assert table.column("_offset").to_pylist() == list(range(1, total + 1))
    assert lifted >= 1 and verify(url).ok


def test_23_a_collection_racing_a_lift_leaves_its_runs_orphans(tmp_path):
    """GC drops both snapshots (a cursor past them) between the compaction's rewrite and its
    commit: the lifted snapshot is not in the manifest any more, so its run is a conflict;
    what GC kept reads as before, and the next compaction merges the rest."""
    url = _rolled_log(tmp_path, appends=10)  # snapshots [1, 13) and [13, 25), fragments [25, 31)
    CursorStore(url).create("consumer", 25)
    kept = LogReader(url).read_table(25)
    collected: list[int] = []

    def collect(step: str) -> None:
        if not collected:
            collected.append(GarbageCollector(url, GCOptions(grace_s=0, force=True)).run().records_dropped)

    with after_steps(collect):
        report = compact(url, clock=LATER)
    assert collected == [24] and report.conflicts == 1 and report.snapshots_lifted == 0
    assert LogReader(url).read_table().equals(kept) and verify(url).ok
    again = compact(url, clock=LATER)
    assert again.fragments_after == 1 and LogReader(url).read_table().equals(kept) and verify(url).ok


def test_24_runs_of_the_manifests_own_fragments_lift_nothing(tmp_path):
    """A caller that keeps only runs of the manifest's own fragments from a plan that would lift
    the youngest snapshot (as automatic compaction picks its groups) commits them without the
    lift: the snapshot stays referenced, nothing is left unheld for GC's sweep."""
    url = _rolled_log(tmp_path, appends=10)
    store = resolve_store(url)
    planned = plan(store, CompactOptions(), LATER)
    assert planned.lifted and planned.lifts
    manifest = planned.manifest
    own = Run(0, manifest.fragments, manifest.arrow_schema(), manifest.item_hash, manifest.incarnation)
    top_only = dataclasses.replace(planned, runs=(own,))
    assert top_only.report().snapshots_lifted == 0 and top_only.report().fragments_after == 1
    report = commit(store, top_only, [rewrite(store, own, LATER)])
    after = LogReader(url).manifest()
    assert after.snapshots == manifest.snapshots and len(after.fragments) == 1
    assert report.snapshots_lifted == 0 and report.conflicts == 0 and verify(url).ok


@pytest.mark.parametrize("step", ["upload", "rewrite", "commit"])
def test_25_kill_9_after_each_step_leaves_the_log_reading_as_before_and_gc_sweeps_the_rest(tmp_path, step):
    """Killed after the upload (an orphan without a record), after the record (an orphan the
    record lists) or after the compare-and-swap (compacted; the replaced fragments held by the
    record): the log reads exactly as before (records, times, setsum, verify clean), and a
    garbage collection after the orphan grace deletes what the dead run left, never a fragment
    the manifest references; one within the grace deletes nothing."""
    url = _log(tmp_path, structured=True, appends=5)
    store = resolve_store(url)
    before, manifest = _everything(url), LogReader(url).manifest()
    _compact_killed_at(url, step)
    after = LogReader(url).manifest()
    assert (len(after.fragments) == 1) if step == "commit" else (after == manifest)
    assert _everything(url)[0].equals(before[0]) and _everything(url)[1:] == before[1:]
    assert verify(url).ok
    live = {f.path for f in after.fragments}
    left = {m.key for m in store.list(FRAGMENT_PREFIX)} - live  # what the dead run left unreferenced
    assert len(left) == (len(manifest.fragments) if step == "commit" else 1)
    records = list(store.list(REPLACED_PREFIX))
    assert len(records) == (0 if step == "upload" else 1)
    grace = GarbageCollector(url).orphan_grace_s
    within = GarbageCollector(url, clock=ManualClock(LATER.now() + grace / 2)).run()
    assert within.orphans_deleted == [] and {m.key for m in store.list(FRAGMENT_PREFIX)} == live | left
    swept = GarbageCollector(url, clock=ManualClock(LATER.now() + grace + 1)).run()
    assert set(swept.orphans_deleted) == left and not list(store.list(REPLACED_PREFIX))
    assert {m.key for m in store.list(FRAGMENT_PREFIX)} == live
    assert LogReader(url).manifest().fragments == after.fragments
    assert _everything(url)[0].equals(before[0]) and _everything(url)[1:] == before[1:]
    assert verify(url).ok


class _MeetingStore(ForwardingStore):
    """Each fragment GET waits (at most 30 s) until `parties` of them are in flight at once."""

    def __init__(self, inner, parties: int) -> None:
        super().__init__(inner)
        self.barrier = threading.Barrier(parties, timeout=30)

    def get(self, key: str):
        if key.startswith(FRAGMENT_PREFIX):
            self.barrier.wait()
        return super().get(key)


def test_26_a_runs_fragments_are_fetched_several_at_a_time(tmp_path):
    """`rewrite` fetches a run's fragments concurrently (a serial fetch never has two GETs in
    flight: the barrier would break) and builds in the run's order (a damaged one still refuses
    the compaction naming it: test_03)."""
    url = _log(tmp_path, structured=True, appends=8)
    before = _everything(url)
    store = resolve_store(url)
    report = compact(_MeetingStore(store, parties=4), clock=LATER)
    assert report.fragments_after == 1
    assert _everything(url)[0].equals(before[0]) and _everything(url)[1:] == before[1:] and verify(url).ok
