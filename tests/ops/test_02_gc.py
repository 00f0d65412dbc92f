"""Garbage collection on real stores (local filesystem and SeaweedFS S3): phases, crashes,
orphans, concurrent writers, safety checks."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace

import pytest

from tests.support.fakes import chroma_testdata
from wal3_spark.clock import ManualClock
from wal3_spark.errors import GCRefused
from wal3_spark.format.fragment import encode_raw
from wal3_spark.format.garbage import Garbage, compute_garbage, load_garbage
from wal3_spark.format.layout import FRAGMENT_PREFIX, GARBAGE_KEY, SNAPSHOT_PREFIX
from wal3_spark.format.manifest import Manifest, Snapshot, SnapshotOptions
from wal3_spark.format.setsum import Setsum
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.fragment_io import write_fragment
from wal3_spark.log.reader import LogReader, iter_fragments
from wal3_spark.log.snapshots import load_snapshot
from wal3_spark.log.writer import LogWriter, LogWriterOptions
from wal3_spark.ops.garbage_collector import PHASES, GarbageCollector, GCOptions, referenced
from wal3_spark.ops.verify import verify
from wal3_spark.storage import open_store
from wal3_spark.testing.hooks import hooked


class Crash(Exception):
    """A collector process dying between two steps."""


def crash_after(step: str):
    """An `after_step` observer that crashes the collector once `step` is done."""

    def observe(done: str) -> None:
        if done == step:
            raise Crash(step)

    return observe


def body(i: int) -> bytes:
    return b"record-%06d" % i


def fill(store, appends: int = 10, per: int = 5, **kw) -> LogWriter:
    writer = LogWriter(store, LogWriterOptions(**kw))
    n = 0
    for _ in range(appends):
        writer.append([body(n + j) for j in range(per)])
        n += per
    return writer


def keys(store, prefix: str) -> set[str]:
    return {m.key for m in store.list(prefix)}


def offsets_and_bodies(store, start: int) -> list[tuple[int, bytes]]:
    table = LogReader(store).read_table(start)
    return list(zip(table.column("_offset").to_pylist(), table.column("body").to_pylist()))


def clean(store) -> None:
    report = verify(store)
    assert report.ok, report.problems
    assert report.problems == [], report.problems  # not even unreferenced objects


@pytest.fixture
def store(store_url, store_options):
    return open_store(store_url, store_options)


def test_00_three_cursors_collect_exactly_the_fragments_below_the_lowest(store):
    fill(store)  # 10 fragments of 5 records: [1,6) [6,11) ... [46,51)
    cursors = CursorStore(store)
    cursors.create("fast", 44)
    cursors.create("slow", 23)
    cursors.create("mid", 31)
    before = Committer_manifest(store)
    expected_dropped = [f for f in before.fragments if f.limit <= 23]
    expected_kept = [f for f in before.fragments if f.limit > 23]
    assert len(expected_dropped) == 4

    report = GarbageCollector(store, GCOptions(grace_s=0)).run()

    after = Committer_manifest(store)
    assert report.cutoff == 23 and report.first_to_keep == 21
    assert report.steps == ["compute", "apply", "mark", "delete", "reset"]
    assert list(after.fragments) == expected_kept
    assert after.setsum == before.setsum
    assert after.collected == before.collected + Setsum.sum(f.setsum for f in expected_dropped)
    assert after.initial_offset == 21 == after.oldest_offset
    assert keys(store, FRAGMENT_PREFIX) == {f.path for f in expected_kept}
    assert load_garbage(store)[0].is_empty() and store.exists(GARBAGE_KEY)
    clean(store)
    # a reader positioned at the cursor continues without loss
    assert offsets_and_bodies(store, 23) == [(o, body(o - 1)) for o in range(23, 51)]
    # and the next append goes on at the tail
    LogWriter(store).append([b"after-gc"])
    assert offsets_and_bodies(store, 50)[-1] == (51, b"after-gc")
    # a second run has nothing to do
    again = GarbageCollector(store, GCOptions(grace_s=0)).run()
    assert again.steps == [] and again.deleted == [] and again.orphans_deleted == []


def Committer_manifest(store) -> Manifest:
    return LogReader(store).manifest()


@pytest.mark.parametrize("phase", PHASES)
def test_01_a_crash_after_any_phase_is_finished_by_the_next_run(store, phase):
    fill(store, appends=8)
    CursorStore(store).create("c", 27)
    before = Committer_manifest(store)
    kept = [f for f in before.fragments if f.limit > 27]
    dropped = [f for f in before.fragments if f.limit <= 27]

    with pytest.raises(Crash):
        hooked(GarbageCollector(store, GCOptions(grace_s=0)), after_step=crash_after(phase)).run()
    # readers keep working from the cursor whatever the step the crash came after
    assert offsets_and_bodies(store, 27)[0] == (27, body(26))
    report = GarbageCollector(store, GCOptions(grace_s=0)).run()
    # the rerun does the remaining steps (deleting again is harmless: deletes are idempotent)
    remaining = list(PHASES[PHASES.index(phase) + 1 :])
    assert report.steps == (["delete", "reset"] if phase == "delete" else remaining)

    # the same end state as an uninterrupted run (test_00)
    after = Committer_manifest(store)
    assert list(after.fragments) == kept
    assert after.collected == Setsum.sum(f.setsum for f in dropped)
    assert after.setsum == before.setsum
    assert keys(store, FRAGMENT_PREFIX) == {f.path for f in kept}
    assert load_garbage(store)[0].is_empty()
    clean(store)


def test_02_phase_3_waits_for_the_grace_interval(store):
    fill(store, appends=6)
    CursorStore(store).create("c", 20)
    t0 = time.time()
    clock = ManualClock(now=t0)
    gc = GarbageCollector(store, GCOptions(grace_s=3600), clock=clock)
    first = gc.run()
    assert first.steps == ["compute", "apply", "mark"]
    assert first.delete_after == pytest.approx(t0 + 3600, abs=1)
    pending, _ = load_garbage(store)
    assert not pending.is_empty() and pending.applied_epoch_us == int(t0 * 1e6)
    # applied: the manifest no longer references them, but the files stay for readers
    assert len(keys(store, FRAGMENT_PREFIX)) == 6
    assert len(Committer_manifest(store).fragments) == 3
    assert verify(store).ok
    clock.set(t0 + 3599)
    assert gc.run().steps == []
    assert len(keys(store, FRAGMENT_PREFIX)) == 6
    clock.set(t0 + 3601)
    assert gc.run().steps == ["delete", "reset"]
    assert len(keys(store, FRAGMENT_PREFIX)) == 3
    clean(store)


def test_03_orphans_of_aborted_appends_go_only_after_the_grace_interval(store):
    fill(store, appends=3)
    # an aborted append: the fragment was written, the commit never happened
    orphan = write_fragment(store, encode_raw([b"lost"], int(time.time() * 1e6)))
    assert orphan.path in keys(store, FRAGMENT_PREFIX)
    t0 = time.time()
    report = GarbageCollector(store, GCOptions(grace_s=3600), clock=ManualClock(now=t0)).run()
    assert report.orphans_deleted == [] and orphan.path in keys(store, FRAGMENT_PREFIX)
    dry = GarbageCollector(store, GCOptions(grace_s=3600), clock=ManualClock(now=t0 + 3601)).run(dry_run=True)
    assert dry.orphans_deleted == [orphan.path] and orphan.path in keys(store, FRAGMENT_PREFIX)
    late = GarbageCollector(store, GCOptions(grace_s=3600), clock=ManualClock(now=t0 + 3601)).run()
    assert late.orphans_deleted == [orphan.path]
    assert orphan.path not in keys(store, FRAGMENT_PREFIX)
    # referenced fragments are never orphans, however old
    assert len(keys(store, FRAGMENT_PREFIX)) == 3
    much_later = GarbageCollector(store, GCOptions(grace_s=0), clock=ManualClock(now=t0 + 10**6)).run()
    assert much_later.orphans_deleted == []
    clean(store)
    assert len(offsets_and_bodies(store, 1)) == 15


def test_04_a_writer_appending_throughout_gc_loses_nothing(store):
    writer = LogWriter(store)
    appended: list[tuple[int, int]] = []
    started = threading.Event()
    stop = threading.Event()
    errors: list[BaseException] = []

    def append_forever() -> None:
        n = 0
        try:
            while not stop.is_set():
                result = writer.append([body(n + j) for j in range(3)])
                appended.append((result.start, n))
                n += 3
                if len(appended) >= 5:
                    started.set()
        except BaseException as exc:  # surfaced below
            errors.append(exc)
            started.set()

    thread = threading.Thread(target=append_forever)
    thread.start()
    try:
        assert started.wait(60)
        cursors = CursorStore(store)
        cutoffs, deleted = [], 0
        for round_ in range(4):
            tail = Committer_manifest(store).next_offset
            cutoffs.append(tail - 4)
            cursors.advance("reader", tail - 4)
            # readers need no grace here; writers do: their fragments are not orphans
            report = GarbageCollector(store, GCOptions(grace_s=0, orphan_grace_s=3600, force=True)).run()
            assert report.orphans_deleted == []
            deleted += len(report.deleted)
    finally:
        stop.set()
        thread.join(60)
    assert not errors, errors
    assert deleted > 0 and len(appended) > 5
    cutoff = cutoffs[-1]
    got = offsets_and_bodies(store, cutoff)
    offsets = [o for o, _ in got]
    assert offsets == list(range(cutoff, Committer_manifest(store).next_offset))  # exactly once
    expected = {}
    for start, n in appended:
        for j in range(3):
            expected[start + j] = body(n + j)
    assert {o: b for o, b in got} == {o: b for o, b in expected.items() if o >= cutoff}
    assert max(expected) == offsets[-1]
    clean(store)


def test_05_refuses_to_drop_too_much_without_force(store):
    fill(store, appends=10)
    CursorStore(store).create("c", 51)  # at the tail: everything would go
    with pytest.raises(GCRefused, match="force"):
        GarbageCollector(store, GCOptions(grace_s=0)).run()
    assert load_garbage(store)[0].is_empty() and len(Committer_manifest(store).fragments) == 10
    report = GarbageCollector(store, GCOptions(grace_s=0, force=True)).run()
    assert report.first_to_keep == 51
    m = Committer_manifest(store)
    assert m.fragments == () and m.oldest_offset == m.next_offset == 51
    clean(store)
    LogWriter(store).append([b"x"])
    assert offsets_and_bodies(store, 51) == [(51, b"x")]


def test_06_keep_from_only_lowers_and_no_cursor_means_no_collection(store):
    fill(store, appends=6)
    assert GarbageCollector(store, GCOptions(grace_s=0)).run(keep_from=20).steps == []  # no cursors
    CursorStore(store).create("c", 21)
    dry = GarbageCollector(store, GCOptions(grace_s=0)).run(keep_from=100, dry_run=True)
    assert dry.cutoff == 21 and dry.first_to_keep == 21 and dry.steps == []
    assert load_garbage(store)[0].is_empty() and len(Committer_manifest(store).fragments) == 6
    report = GarbageCollector(store, GCOptions(grace_s=0)).run(keep_from=11)
    assert report.cutoff == 11 and Committer_manifest(store).oldest_offset == 11
    clean(store)


def test_07_stale_garbage_after_writers_rolled_snapshots_is_recomputed(tmp_path):
    store = open_store(str(tmp_path / "log"))
    options = SnapshotOptions(2, 2)
    fill(store, appends=3)
    CursorStore(store).create("c", 11)
    with pytest.raises(Crash):
        hooked(GarbageCollector(store, GCOptions(grace_s=0)), after_step=crash_after("compute")).run()
    # writers roll the garbage's fragments into snapshots before phase 2 runs
    fill(store, appends=3, snapshot_options=options)
    assert Committer_manifest(store).snapshots
    report = GarbageCollector(store, GCOptions(grace_s=0)).run()
    assert any("stale" in n for n in report.notes)
    assert Committer_manifest(store).oldest_offset <= 11
    assert verify(store).ok
    assert offsets_and_bodies(store, 11)[0][0] == 11


@pytest.mark.parametrize("cutoff", [9, 33, 57, 118, 151])
def test_08_snapshot_trees_collect_and_stay_readable(tmp_path, cutoff):
    store = open_store(str(tmp_path / "log"))
    fill(store, appends=40, per=4, snapshot_options=SnapshotOptions(3, 3))  # offsets 1..160
    before = Committer_manifest(store)
    assert max(p.depth for p in before.snapshots) >= 2
    CursorStore(store).create("c", cutoff)
    GarbageCollector(store, GCOptions(grace_s=0, force=True)).run()
    after = Committer_manifest(store)
    assert after.setsum == before.setsum and after.oldest_offset <= cutoff
    assert offsets_and_bodies(store, cutoff) == [(o, body(o - 1)) for o in range(cutoff, 161)]
    refs = referenced(store, after)
    assert keys(store, SNAPSHOT_PREFIX) == set(refs.snapshots)
    assert keys(store, FRAGMENT_PREFIX) == set(refs.fragments)
    clean(store)
    # writers keep rolling snapshots on the collected manifest
    fill(store, appends=20, per=1, snapshot_options=SnapshotOptions(3, 3))
    assert verify(store).ok


def test_09_chroma_bad_manifest1_from_a_memory_store():
    store = open_store("memory://gc-bad-manifest1")
    for doc in json.loads(chroma_testdata("bad_snapshots1.json").read_bytes()):
        store.put_if_absent(doc["path"], Snapshot.from_dict(doc, doc["path"]).to_bytes())
    manifest = Manifest.from_bytes(chroma_testdata("bad_manifest1.json").read_bytes())
    garbage = compute_garbage(manifest, 9340, lambda p: load_snapshot(store, p))
    assert garbage is not None and garbage.first_to_keep <= 9340
    kept = list(iter_fragments(store, manifest, garbage.first_to_keep))
    assert kept[0].start == garbage.first_to_keep and kept[-1].limit == manifest.next_offset
    assert Garbage.from_bytes(garbage.to_bytes()) == garbage


def test_10_collecting_a_local_log_leaves_no_file_behind(tmp_path):
    # each deleted object used to leave its `.<name>.lock`: 24 after one GC of 12 fragments
    root = tmp_path / "log"
    store = open_store(str(root))
    fill(store, appends=12)  # [1,6) ... [56,61)
    CursorStore(store).create("c", 56)
    report = GarbageCollector(store, GCOptions(grace_s=0, force=True)).run()
    assert len(report.deleted) == 11
    hidden = sorted(p.relative_to(root).as_posix() for p in root.rglob(".*"))
    beside_objects = [p for p in hidden if (root / p).with_name(p.split("/")[-1][1:-len(".lock")]).exists()]
    assert hidden == beside_objects, "lock files of deleted objects were left behind"
    assert len(hidden) <= 3  # the manifest's, the cursor's and gc/GARBAGE's


def test_11_a_rebuilt_snapshot_whose_path_holds_other_offsets_is_not_trusted(store):
    """The kept part of a straddling snapshot is rebuilt at `snapshot/SNAPSHOT.<setsum>`; when
    that path holds the same fragments at other offsets (a commit attempt that lost its race
    wrote it), GC keeps the straddling snapshot whole instead of pointing at that file."""
    fill(store, appends=7, per=1, snapshot_options=SnapshotOptions(3, 3))  # [1,4) [4,7) in snapshots
    manifest = Committer_manifest(store)
    kept = [f for f in iter_fragments(store, manifest, 5) if f.limit <= 7]  # what a rebuild holds
    elsewhere = [replace(f, start=f.start + 10, limit=f.limit + 10) for f in kept]
    planted = Snapshot.of_fragments(elsewhere, "a lost commit attempt")
    assert planted.path == Snapshot.of_fragments(kept, "gc").path
    store.put_if_absent(planted.path, planted.to_bytes())
    CursorStore(store).create("c", 5)
    report = GarbageCollector(store, GCOptions(grace_s=0)).run()
    assert any("kept whole" in note for note in report.notes), report.notes
    assert report.first_to_keep == 4 and Committer_manifest(store).oldest_offset == 4
    assert offsets_and_bodies(store, 4) == [(o, body(o - 1)) for o in range(4, 8)]
    assert verify(store).ok


def test_12_snapshots_left_by_lost_commit_attempts_go_after_the_orphan_grace(store):
    """A commit attempt that lost its race (or whose write never landed) leaves the snapshot it
    rolled; nothing references it, so the orphan sweep deletes it once it is older than the
    orphan grace, and never a snapshot the log references, however old."""
    from wal3_spark.log.snapshots import write_snapshot

    writer = fill(store, appends=6, per=2, snapshot_options=SnapshotOptions(2, 2))
    referenced_snapshots = keys(store, SNAPSHOT_PREFIX)
    assert referenced_snapshots
    loose = LogReader(store).manifest().fragments
    lost = Snapshot.of_fragments(list(loose), "a commit attempt that lost its race")
    assert write_snapshot(store, lost) and lost.path not in referenced_snapshots
    t0 = time.time()
    young = GarbageCollector(store, clock=ManualClock(now=t0)).run()
    assert young.orphans_deleted == [] and lost.path in keys(store, SNAPSHOT_PREFIX)
    old = GarbageCollector(store, clock=ManualClock(now=t0 + 7200)).run()
    assert old.orphans_deleted == [lost.path] and old.orphan_horizon_us is not None
    assert keys(store, SNAPSHOT_PREFIX) == referenced_snapshots
    writer.append([b"after"])
    assert verify(store).ok and len(offsets_and_bodies(store, 1)) == 13


def test_13_a_commit_never_reuses_a_snapshot_written_before_the_orphan_horizon(store):
    """The race the horizon closes for snapshots: a commit rolls exactly the snapshot a lost
    attempt left, which a sweep is deleting. Once the manifest carries a horizon past that
    object, the commit rolls another snapshot (another path) instead of trusting it."""
    from wal3_spark.log.committer import Committer
    from wal3_spark.log.snapshots import roll_snapshots, write_snapshot

    options = SnapshotOptions(2, 2)
    fill(store, appends=3, per=1)
    manifest = LogReader(store).manifest()
    snapshot = manifest.generate_snapshot(options, "w")
    assert snapshot is not None and write_snapshot(store, snapshot)  # the lost attempt's
    assert roll_snapshots(store, manifest, options, "w").snapshots[0].path_to_snapshot == snapshot.path
    horizon_us = int(store.head(snapshot.path).last_modified * 1e6) + 1
    raised = Committer(store).update(lambda m: m.with_orphan_horizon(horizon_us, "gc"))
    rolled = roll_snapshots(store, raised, options, "w")
    assert rolled.snapshots and snapshot.path not in {p.path_to_snapshot for p in rolled.snapshots}
    rolled.scrub()


def test_14_an_apply_never_publishes_a_rebuilt_snapshot_a_concurrent_sweep_deleted(tmp_path):
    """Compute wrote a rebuilt snapshot and the garbage; in between, another run's sweep took
    the snapshot for an orphan (unreferenced, not yet listed by any garbage), raised the horizon
    past it and deleted it. The apply step sees the horizon and computes the garbage again
    instead of publishing a pointer to nothing."""
    from wal3_spark.log.committer import Committer

    store = open_store(str(tmp_path / "log"))
    fill(store, appends=40, per=4, snapshot_options=SnapshotOptions(3, 3))  # offsets 1..160
    CursorStore(store).create("c", 50)
    with pytest.raises(Crash):
        hooked(GarbageCollector(store, GCOptions(grace_s=0, force=True)), after_step=crash_after("compute")).run()
    made = load_garbage(store)[0].snapshots_to_make
    assert made
    horizon_us = max(int(store.head(s.path).last_modified * 1e6) for s in made) + 1
    Committer(store).update(lambda m: m.with_orphan_horizon(horizon_us, "another collector"))
    for snapshot in made:
        store.delete(snapshot.path)
    report = GarbageCollector(store, GCOptions(grace_s=0, force=True)).run()
    assert any("stale garbage reset" in note and "predates the orphan horizon" in note for note in report.notes)
    assert "apply" in report.steps and Committer_manifest(store).oldest_offset <= 50
    assert offsets_and_bodies(store, 50) == [(o, body(o - 1)) for o in range(50, 161)]
    assert verify(store).ok


def test_15_a_hold_made_between_listing_holds_and_writing_the_garbage_is_reported_as_kept(tmp_path):
    """A held tag written after the run listed the holds and before it wrote its garbage makes
    the run compute again and collect nothing; its report said 50 records and 10 fragments
    dropped from the first computation. A report says what the run did."""
    from wal3_spark.log.tags import TagStore
    from wal3_spark.storage.forwarding import ForwardingStore

    class TagBeforeGarbage(ForwardingStore):
        """Creates a held tag (on `inner`) just before the first write of gc/GARBAGE."""

        fired = False

        def _tag_first(self, key: str) -> None:
            if key == GARBAGE_KEY and not self.fired:
                self.fired = True
                TagStore(self.inner).create("audit", hold=True)

        def put_if_absent(self, key: str, data: bytes) -> str:
            self._tag_first(key)
            return super().put_if_absent(key, data)

        def put_if_match(self, key: str, data: bytes, etag: str) -> str:
            self._tag_first(key)
            return super().put_if_match(key, data, etag)

    store = open_store(str(tmp_path / "log"))
    fill(store)  # [1, 51), 10 fragments
    CursorStore(store).create("c", 51)
    hooked = TagBeforeGarbage(store)
    report = GarbageCollector(hooked, GCOptions(grace_s=0, force=True)).run()
    assert hooked.fired
    assert LogReader(store).manifest().oldest_offset == 1 and report.oldest_offset == 1
    assert (report.first_to_keep, report.records_dropped, report.fragments_dropped, report.snapshots_dropped) == (None, 0, 0, 0)
    assert report.holds == {"tag/audit.json": 1} and report.cutoff == 1
    assert "apply" not in report.steps and report.deleted == []
    assert any("a hold at 1 appeared" in note for note in report.notes), report.notes
    # the next run, with the tag gone, collects and says so
    TagStore(store).delete("audit")
    again = GarbageCollector(store, GCOptions(grace_s=0, force=True)).run()
    assert (again.first_to_keep, again.records_dropped, again.fragments_dropped) == (51, 50, 10)


def test_16_a_run_that_finishes_a_crashed_runs_garbage_reports_what_it_drops(tmp_path):
    store = open_store(str(tmp_path / "log"))
    fill(store)  # [1, 51), 10 fragments
    CursorStore(store).create("c", 26)
    with pytest.raises(Crash):
        hooked(GarbageCollector(store, GCOptions(grace_s=0)), after_step=crash_after("compute")).run()
    report = GarbageCollector(store, GCOptions(grace_s=0)).run()
    assert report.steps == ["apply", "mark", "delete", "reset"]
    assert (report.first_to_keep, report.records_dropped, report.fragments_dropped) == (26, 25, 5)


@pytest.mark.parametrize("nested", ["snapshot", "log", "gc", "cursor"])
def test_17_the_orphan_sweep_never_deletes_a_log_nested_below_the_log(tmp_path, nested):
    """A log whose name is one of the layout's folders (`orders/snapshot`, `orders/log`), nested
    below another log, shares the parent's prefixes: the parent's orphan sweep, listing
    `snapshot/` and `log/`, must take only keys of its own layout, never that log's objects."""
    from wal3_spark.storage.common import file_url

    parent = file_url(str(tmp_path / "orders"))
    child = file_url(str(tmp_path / "orders" / nested))
    fill(open_store(child), appends=6, per=2, snapshot_options=SnapshotOptions(2, 2))
    fill(open_store(parent), appends=2)
    before = {m.key for m in open_store(child).list()}
    report = GarbageCollector(parent, clock=ManualClock(now=time.time() + 7200)).run()
    assert not any(key.startswith(f"{nested}/") for key in report.orphans_deleted), report.orphans_deleted
    assert {m.key for m in open_store(child).list()} == before
    assert verify(child).ok


def test_18_garbage_naming_another_logs_object_deletes_only_this_logs(tmp_path):
    """A garbage file that lists a key outside the log's layout (damaged, or written by hand:
    another log's manifest nested below this one) is not trusted with it: the delete step
    removes what it can prove is one of this log's objects, and keeps the rest with a note."""
    from wal3_spark.storage.common import file_url

    store = open_store(file_url(str(tmp_path / "orders")))
    fill(store)
    LogWriter(file_url(str(tmp_path / "orders" / "sub"))).append([b"nested"])
    CursorStore(store).create("c", 26)
    with pytest.raises(Crash):
        hooked(GarbageCollector(store, GCOptions(grace_s=0)), after_step=crash_after("compute")).run()
    garbage, etag = load_garbage(store)
    stray = "sub/manifest/MANIFEST"
    damaged = replace(garbage, fragment_paths_to_drop=garbage.fragment_paths_to_drop + (stray,))
    store.put_if_match(GARBAGE_KEY, damaged.to_bytes(), etag)
    report = GarbageCollector(store, GCOptions(grace_s=0)).run()
    assert stray not in report.deleted and any("not one of this log's objects" in n for n in report.notes)
    assert open_store(file_url(str(tmp_path / "orders" / "sub"))).exists("manifest/MANIFEST")
    assert LogReader(store).manifest().oldest_offset == 26 and verify(store).ok


def test_19_a_name_without_a_log_above_a_nested_log_is_not_fenced_or_swept(tmp_path):
    """Prefix GC's sweep of a name without a manifest (a failed job's leftovers) must not take a
    log nested below that name (`team/snapshot`) for leftovers: it would create an empty log
    above it and sweep its objects as orphans."""
    from wal3_spark.storage.common import file_url

    nested = file_url(str(tmp_path / "team" / "snapshot"))
    fill(open_store(nested), appends=6, per=2, snapshot_options=SnapshotOptions(2, 2))
    before = {m.key for m in open_store(nested).list()}
    from wal3_spark.errors import LogNotFound

    with pytest.raises(LogNotFound):  # nothing of its own to sweep: no log there
        GarbageCollector(file_url(str(tmp_path / "team")), GCOptions(orphans_without_log=True),
                         clock=ManualClock(now=time.time() + 7200)).run()
    assert not open_store(file_url(str(tmp_path / "team"))).exists("manifest/MANIFEST")
    assert {m.key for m in open_store(nested).list()} == before and verify(nested).ok
