"""Commits under writes whose outcome is unknown: a manifest PUT that times out and lands late,
after the committer has already reloaded the manifest, must neither duplicate records nor, when the
commit gives up, have its fragments deleted under it."""

from __future__ import annotations

import functools
from dataclasses import replace

import pytest

from tests.support.fakes import CountingStore, FailingStore
from tests.support.memory import memory_store
from wal3_spark.clock import SYSTEM, SystemClock
from wal3_spark.errors import (
    AlreadyCollected,
    CommitOutcomeUnknown,
    PastOrphanHorizon,
    TransientError,
)
from wal3_spark.format.layout import MANIFEST_KEY
from wal3_spark.format.manifest import Manifest, Snapshot, SnapshotOptions
from wal3_spark.log.committer import Committer
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.fragment_io import write_fragments
from wal3_spark.log.reader import LogReader
from wal3_spark.log.snapshots import load_snapshot, roll_snapshots, write_snapshot
from wal3_spark.log.writer import LogWriter, LogWriterOptions, to_batches
from wal3_spark.ops.garbage_collector import GarbageCollector, GCOptions
from wal3_spark.ops.verify import verify
from wal3_spark.spark import commit as spark_commit
from wal3_spark.spark.commit import commit_files
from wal3_spark.storage import open_store
from wal3_spark.storage.forwarding import ForwardingStore
from wal3_spark.testing import LateLandingStore


def raw_files(store, bodies):
    batches, _ = to_batches(bodies)
    return write_fragments(store, batches, None, fragment_bytes=1 << 20)


def bodies(store) -> list[bytes]:
    return LogReader(store).read_table().column("body").to_pylist()


def late_manifest_writes(store, **kw) -> LateLandingStore:
    return LateLandingStore(store, keys=[MANIFEST_KEY], **kw)


def test_00_a_manifest_write_landing_right_after_the_reload_is_committed_once(store):
    LogWriter(store).append(b"r0")
    late = late_manifest_writes(store, writes=[1], land="after_get")
    result = LogWriter(late).append([b"r1", b"r2"])
    assert late.counts["landed"] == 1, late.counts  # the scenario really happened
    assert bodies(store) == [b"r0", b"r1", b"r2"]
    assert (result.start, result.limit) == (2, 4)
    assert verify(store).ok


def test_01_an_idempotent_commit_whose_own_write_landed_late_is_not_a_duplicate(store):
    LogWriter(store).append(b"r0")
    late = late_manifest_writes(store, writes=[1], land="after_get")
    result = Committer(late).commit(raw_files(store, [b"r1", b"r2"]), app_id="q", version=0)
    assert late.counts["landed"] == 1, late.counts
    assert not result.duplicate and (result.start, result.limit) == (2, 4)
    assert bodies(store) == [b"r0", b"r1", b"r2"]
    assert LogReader(store).manifest().txns["q"].version == 0


def test_02_the_spark_commit_path_deletes_nothing_when_the_outcome_is_unknown(store, monkeypatch):
    """Every manifest write times out; the commit gives up; the first write lands afterwards."""
    monkeypatch.setattr(spark_commit, "Committer", functools.partial(Committer, max_attempts=3))
    LogWriter(store).append(b"r0")
    late = late_manifest_writes(store, probability=1.0, land="manual")
    files = raw_files(store, [b"r1", b"r2"])
    with pytest.raises(CommitOutcomeUnknown, match="wal3 verify"):
        commit_files(late, files, target=None, merge_schema=False, writer="t", since=2,
                     incarnation=LogReader(store).manifest().incarnation)
    assert all(store.exists(f.path) for f in files)
    late.land_all()  # the store finally processes the requests it had received
    assert late.counts["landed"] == 1 and late.counts["condition_lost"] == 2, late.counts
    assert bodies(store) == [b"r0", b"r1", b"r2"]
    assert verify(store).ok


def test_03_a_spark_abort_after_an_unknown_commit_outcome_keeps_the_fragments(store, monkeypatch):
    """Spark calls abort() when commit() raised: every task's message is there then."""
    from wal3_spark.spark.batch_writer import FragmentSink, Wal3CommitMessage
    from wal3_spark.spark.options import WRITE, parse

    monkeypatch.setattr(spark_commit, "Committer", functools.partial(Committer, max_attempts=3))
    LogWriter(store).append(b"r0")
    late = late_manifest_writes(store, probability=1.0, land="manual")
    sink = FragmentSink(parse({"path": store.url}, WRITE), None, 2)
    monkeypatch.setattr(type(sink.options), "open_store", lambda _self: late)
    messages = [Wal3CommitMessage(tuple(raw_files(store, [b"r1"])), 0),
                Wal3CommitMessage(tuple(raw_files(store, [b"r2"])), 1)]
    with pytest.raises(CommitOutcomeUnknown):
        sink.commit_messages(messages)
    sink.abort_messages(messages)
    late.land_all()
    assert bodies(store) == [b"r0", b"r1", b"r2"]
    assert verify(store).ok


def test_04_an_abort_of_a_job_whose_tasks_failed_deletes_its_fragments(store):
    from wal3_spark.spark.batch_writer import FragmentSink, Wal3CommitMessage
    from wal3_spark.spark.options import WRITE, parse

    LogWriter(store).append(b"r0")
    sink = FragmentSink(parse({"path": store.url}, WRITE), None, 2)
    files = raw_files(store, [b"r1"])
    sink.abort_messages([Wal3CommitMessage(tuple(files), 0), None])  # commit was never called
    assert not store.exists(files[0].path)
    assert bodies(store) == [b"r0"]


# -- snapshot paths are setsums: the same fragments at other offsets share one path -----------

SMALL_ROLLS = SnapshotOptions(snapshot_rollover_threshold=1000, fragment_rollover_threshold=2)


class RaceFirstManifestPut(ForwardingStore):
    """Another writer commits right before this committer's first manifest PUT reaches the store."""

    def __init__(self, inner, other) -> None:
        super().__init__(inner)
        self.other, self.fired = other, False

    def put_if_match(self, key, data, etag):
        if key == MANIFEST_KEY and not self.fired:
            self.fired = True
            self.other()
        return self.inner.put_if_match(key, data, etag)


def one_per_record(store, *records: bytes) -> list:
    return [f for record in records for f in raw_files(store, [record])]


def test_05_a_rebased_commit_never_points_at_the_snapshot_its_lost_attempt_wrote(store_url, store_options):
    """No fault at all: A's first attempt rolls two of its own fragments into a snapshot at
    offsets [3, 5) and loses its race; placed again they sit at [5, 7), and the same fragments
    have the same setsum, hence the same snapshot path. Taking that file as "already there"
    published a pointer to offsets the file does not hold: every read failed with CorruptLog."""
    store = open_store(store_url, store_options)
    LogWriter(store, LogWriterOptions(snapshot_options=SMALL_ROLLS)).append(b"R")
    other = functools.partial(
        Committer(store, writer="B", snapshot_options=SMALL_ROLLS).commit, one_per_record(store, b"Q1", b"Q2")
    )
    mine = one_per_record(store, b"X1", b"X2", b"X3", b"X4", b"X5")
    result = Committer(RaceFirstManifestPut(store, other), writer="A", snapshot_options=SMALL_ROLLS).commit(mine)
    assert result.conflicts == 1 and (result.start, result.limit) == (4, 9)
    assert bodies(store) == [b"R", b"Q1", b"Q2", b"X1", b"X2", b"X3", b"X4", b"X5"]
    report = verify(store)
    assert report.ok, report.problems
    CursorStore(store).create("c", 2)
    GarbageCollector(store, GCOptions(grace_s=0)).run()
    assert bodies(store) == [b"Q1", b"Q2", b"X1", b"X2", b"X3", b"X4", b"X5"]
    assert verify(store).ok


def test_06_a_snapshot_path_holding_other_offsets_is_not_ours_but_the_same_one_is(store):
    LogWriter(store, LogWriterOptions(snapshot_options=SMALL_ROLLS)).append([b"a"])
    files = raw_files(store, [b"x"]) + raw_files(store, [b"y"])
    placed = Manifest.empty("w").with_fragments(files, "w")
    elsewhere = LogReader(store).manifest().with_fragments(files, "w")  # the same files at [2, 4)
    ours, theirs = (Snapshot.of_fragments(m.fragments[-2:], "w") for m in (placed, elsewhere))
    assert ours.path == theirs.path and not ours.same_content(theirs)
    assert write_snapshot(store, theirs)
    assert not write_snapshot(store, ours)  # taken: never "already there"
    assert write_snapshot(store, replace(theirs, writer="another writer"))  # the same snapshot
    rolled = roll_snapshots(store, placed.with_fragments(raw_files(store, [b"z"]), "w"), SMALL_ROLLS, "w")
    assert rolled.snapshots[0].path_to_snapshot != ours.path  # a variant with one child fewer
    assert [load_snapshot(store, p).pointer() for p in rolled.snapshots] == list(rolled.snapshots)
    rolled.scrub()


@pytest.mark.parametrize("times", [2, None])
def test_07_a_landed_commit_whose_check_cannot_read_a_snapshot_is_never_a_transient_error(store, times):
    """The late write landed and rolled the fragments into a snapshot; looking for them there failed
    transiently, and that TransientError ("nothing changed") escaped the commit: a caller retrying
    on it appended the records twice."""
    LogWriter(store).append(b"r0")
    snapshots_fail = FailingStore(store, lambda key: key.startswith("snapshot/"),
                                  lambda key: TransientError(f"injected: get {key} failed after the store's retries"),
                                  calls=None if times is None else range(times))
    late = late_manifest_writes(snapshots_fail, writes=[1], land="after_get")
    committer = Committer(late, snapshot_options=SMALL_ROLLS, max_attempts=6)
    files = one_per_record(store, b"r1", b"r2", b"r3")
    if times is None:
        with pytest.raises(CommitOutcomeUnknown, match="wal3 verify"):
            committer.commit(files)
    else:
        result = committer.commit(files)
        assert (result.start, result.limit) == (2, 5)
    assert late.counts["landed"] == 1, late.counts
    assert bodies(store) == [b"r0", b"r1", b"r2", b"r3"]


def test_08_an_empty_append_writes_nothing_so_manifest_bytes_never_repeat(store):
    """An empty append once rewrote the manifest with only its `writer` changed, so writers X and Y
    alternating empty appends took it A -> B -> A, and a lost write conditioned on A could land
    after the committer had concluded it never would."""
    x, y = LogWriter(store, LogWriterOptions(writer="X")), LogWriter(store, LogWriterOptions(writer="Y"))
    x.append([b"r0"])
    before = store.head(MANIFEST_KEY).etag
    assert (y.append([]).start, x.append([]).limit) == (2, 2)
    assert y.submit([]).result().start == 2
    empty = Committer(store, writer="Z").commit([])
    assert (empty.start, empty.limit, empty.duplicate) == (2, 2, False)
    assert store.head(MANIFEST_KEY).etag == before
    fresh = memory_store("certainty")
    assert Committer(fresh).commit([]).limit == 1 and LogReader(fresh).manifest().next_offset == 1
    assert Committer(fresh).commit([], app_id="q", version=3).duplicate is False  # records the txn
    assert LogReader(fresh).manifest().txns["q"].version == 3


def test_09_recommitting_after_an_unknown_outcome_reports_where_it_landed(store, caplog):
    """The commit gave up (unknown), its write landed afterwards; the caller commits the very
    same fragments again, or again under the same writer id and version: nothing is written
    twice, and the same fragments are reported already committed at their offsets."""
    LogWriter(store).append(b"r0")
    late = late_manifest_writes(store, probability=1.0, land="manual")
    files = raw_files(store, [b"r1", b"r2"])
    with pytest.raises(CommitOutcomeUnknown):
        Committer(late, max_attempts=3).commit(files, app_id="q", version=7)
    late.land_all()
    again = Committer(store).commit(files)
    assert again.duplicate and (again.start, again.limit) == (2, 4)
    assert "already committed at [2, 4)" in caplog.text
    idempotent = Committer(store).commit(raw_files(store, [b"r1", b"r2"]), app_id="q", version=7)
    assert idempotent.duplicate
    assert bodies(store) == [b"r0", b"r1", b"r2"] and verify(store).ok


def test_10_the_same_fragments_rolled_into_a_snapshot_are_found_there(store):
    """Compaction rolled the first commit's fragments into a snapshot before the second try:
    old fragments are looked for through the snapshot tree (one walk; fresh ones are not)."""
    files = raw_files(store, [b"r1"])
    Committer(store).commit(files)
    writer = LogWriter(store, LogWriterOptions(snapshot_options=SnapshotOptions(2, 2)))
    for i in range(6):
        writer.append(b"x%d" % i)
    assert files[0].path not in {f.path for f in LogReader(store).manifest().fragments}
    later = Committer(store, clock=SystemClock(skew_s=3600))  # the retry comes an hour later
    again = later.commit(files)
    assert again.duplicate and (again.start, again.limit) == (1, 2)
    partly = files + raw_files(store, [b"r2"])
    with pytest.raises(ValueError, match="1 of this commit's 2 fragments .* already in the log"):
        later.commit(partly)
    assert bodies(store) == [b"r1"] + [b"x%d" % i for i in range(6)] and verify(store).ok


def test_11_a_quick_retry_after_an_unknown_outcome_finds_fragments_rolled_meanwhile(store):
    """The commit gave up within milliseconds (a short policy), its write landed, and other
    writers rolled its fragments into a snapshot before the same committer retried: it looks
    through the snapshot tree for the paths it left unknown, however young they are."""
    LogWriter(store).append(b"r0")
    late = late_manifest_writes(store, probability=1.0, land="manual")
    files = raw_files(store, [b"r1"])
    committer = Committer(late, max_attempts=3)
    with pytest.raises(CommitOutcomeUnknown):
        committer.commit(files)
    late.land_all()
    writer = LogWriter(store, LogWriterOptions(snapshot_options=SnapshotOptions(2, 2)))
    for i in range(6):
        writer.append(b"x%d" % i)
    assert files[0].path not in {f.path for f in LogReader(store).manifest().fragments}
    late.probability = 0.0
    again = committer.commit(files)
    assert again.duplicate and (again.start, again.limit) == (2, 3)
    assert bodies(store) == [b"r0", b"r1"] + [b"x%d" % i for i in range(6)] and verify(store).ok



def test_12_another_committer_finds_young_fragments_rolled_into_a_snapshot(store):
    """A commit ended unknown and its write landed; compaction rolled its fragments into a
    snapshot; within the minute a second committer (another process: it knows nothing of the
    first one's outcome) commits the same fragments: they are found there, not appended twice."""
    LogWriter(store).append(b"r0")
    late = late_manifest_writes(store, probability=1.0, land="manual")
    files = raw_files(store, [b"r1"])
    with pytest.raises(CommitOutcomeUnknown):
        Committer(late, max_attempts=3).commit(files)
    late.land_all()
    writer = LogWriter(store, LogWriterOptions(snapshot_options=SnapshotOptions(2, 2)))
    for i in range(6):
        writer.append(b"x%d" % i)
    assert files[0].path not in {f.path for f in LogReader(store).manifest().fragments}
    again = Committer(store).commit(files)
    assert again.duplicate and (again.start, again.limit) == (2, 3)
    assert bodies(store) == [b"r0", b"r1"] + [b"x%d" % i for i in range(6)] and verify(store).ok


def test_13_a_commit_reads_snapshots_only_when_its_fragments_may_be_in_them(store):
    """Fragments written after the newest one the snapshots hold cannot be in them: their commit
    reads no snapshot. A log compacted before `rolled_written_us` existed is walked once, by its
    next commit, which records it; fragments written before a roll are looked for there."""
    writer = LogWriter(store, LogWriterOptions(snapshot_options=SnapshotOptions(2, 2)))
    early = raw_files(store, [b"early"])  # written now, committed after the roll below
    for i in range(6):
        writer.append(b"x%d" % i)
    manifest = LogReader(store).manifest()
    assert manifest.snapshots and manifest.rolled_written_us is not None

    def snapshot_gets(counting: CountingStore) -> int:
        return counting.counts[("get", "snapshot")]

    counting = CountingStore(store)
    assert not Committer(counting).commit(raw_files(store, [b"fresh"])).duplicate
    assert snapshot_gets(counting) == 0
    assert not Committer(counting).commit(early).duplicate  # it may have been rolled: look
    assert snapshot_gets(counting) > 0

    legacy = replace(LogReader(store).manifest(), rolled_written_us=None)
    store.put_if_match(MANIFEST_KEY, legacy.to_bytes(), store.head(MANIFEST_KEY).etag)
    counting = CountingStore(store)
    Committer(counting).commit(raw_files(store, [b"first"]))
    assert snapshot_gets(counting) > 0
    assert LogReader(store).manifest().rolled_written_us == manifest.rolled_written_us
    counting = CountingStore(store)
    Committer(counting).commit(raw_files(store, [b"second"]))
    assert snapshot_gets(counting) == 0
    assert bodies(store)[-4:] == [b"fresh", b"early", b"first", b"second"] and verify(store).ok


def collect_below(store, offset: int, *, grace_s: float = 0.0, clock=SYSTEM):
    """Move a cursor to `offset` and run garbage collection (forced: tests drop most records)."""
    CursorStore(store).move("c", offset)
    return GarbageCollector(store, GCOptions(grace_s=grace_s, max_drop_share=1.0, force=True), clock=clock).run()


def committed_then_five_more(store):
    """Record r0, fragment F committed at 2 (returned with its result), then x0-x4 appended by the
    returned writer: a cursor at 5 lets garbage collection collect F's commit."""
    LogWriter(store).append(b"r0")
    files = raw_files(store, [b"F"])
    first = Committer(store).commit(files)
    writer = LogWriter(store)
    for i in range(5):
        writer.append(b"x%d" % i)
    return files, first, writer


def test_14_recommitting_fragments_gc_collected_and_deleted_adds_nothing(store):
    """An earlier commit placed the fragments, a cursor moved past them and garbage collection
    collected and deleted them; another process commits the same fragments again (a retry after
    an unknown outcome): it is refused as already committed and since collected, nothing is
    appended, and no manifest references the deleted file."""
    files, first, _ = committed_then_five_more(store)
    assert first.start == 2
    assert files[0].path in collect_below(store, 5).deleted
    before = LogReader(store).manifest()
    with pytest.raises(AlreadyCollected, match="already committed .* since collected"):
        Committer(store).commit(files)
    after = LogReader(store).manifest()
    assert (after.setsum, after.next_offset) == (before.setsum, before.next_offset)
    assert bodies(store) == [b"x2", b"x3", b"x4"] and verify(store).ok


def test_15_recommitting_fragments_gc_applied_but_has_not_deleted_adds_nothing(store):
    """The same, between garbage collection's apply step and its delete step: the file still
    exists (readers of older manifests may read it), the pending garbage lists it. Appending it
    again would deliver its records twice; it is refused, and the delete step then deletes it."""
    files, _, _ = committed_then_five_more(store)
    report = collect_below(store, 5, grace_s=3600)
    assert report.pending is not None and not report.deleted
    assert store.exists(files[0].path)
    with pytest.raises(AlreadyCollected, match="pending garbage"):
        Committer(store).commit(files)
    assert bodies(store) == [b"x2", b"x3", b"x4"]
    later = collect_below(store, 5, grace_s=3600, clock=SystemClock(skew_s=7200))
    assert files[0].path in later.deleted and verify(store).ok


def test_16_fresh_and_slow_first_commits_after_gc_are_not_refused(store):
    """Fragments written before garbage collection collected newer ones (a slow Spark job, or a
    writer whose clock is behind) are committed: their commit reads `gc/GARBAGE` and looks for
    the files (they are there, unlisted). Fragments written after the newest collected one
    commit with no extra request, as before garbage collection ran."""
    LogWriter(store).append(b"r0")
    slow = raw_files(store, [b"slow"])  # written now, committed after the collection below
    writer = LogWriter(store)
    for i in range(5):
        writer.append(b"x%d" % i)
    collect_below(store, 5)
    assert LogReader(store).manifest().collected_written_us is not None
    counting = CountingStore(store)
    assert Committer(counting).commit(slow).start == 7
    assert counting.counts[("get", "gc")] == 1 and counting.by_operation()["head"] == 1
    counting = CountingStore(store)
    fresh = Committer(counting)
    fresh.commit(raw_files(store, [b"fresh"]))
    fresh.commit(raw_files(store, [b"fresh2"]))
    assert counting.counts[("get", "gc")] == 0 and counting.by_operation()["head"] == 0
    assert counting.by_operation()["put"] == 2
    assert bodies(store)[-3:] == [b"slow", b"fresh", b"fresh2"] and verify(store).ok


def test_17_a_first_commit_of_fragments_swept_as_orphans_is_still_an_orphan_horizon_refusal(store):
    """Fragments written long before their first commit, swept as orphans, on a log where GC
    also collected newer fragments: gone, and older than the orphan horizon, they may have been
    either; the commit fails definitely as before (`PastOrphanHorizon`), saying both."""
    LogWriter(store).append(b"r0")
    stale = raw_files(store, [b"stale"])
    writer = LogWriter(store)
    for i in range(5):
        writer.append(b"x%d" % i)
    report = collect_below(store, 5, clock=SystemClock(skew_s=7 * 86400))
    assert stale[0].path in report.orphans_deleted
    with pytest.raises(PastOrphanHorizon, match="as orphans .* rerun the append.* already committed"):
        Committer(store).commit(stale)
    assert bodies(store) == [b"x3", b"x4"] and verify(store).ok


def test_18_a_log_collected_before_the_bound_checks_until_its_next_collection(store):
    """A log collected before `collected_written_us` existed does not know what was collected:
    every commit looks (and a re-commit of collected fragments is refused); its next collection
    records a bound (GC's clock), after which fresh commits make no extra request."""
    files, _, writer = committed_then_five_more(store)
    collect_below(store, 5)
    legacy = replace(LogReader(store).manifest(), collected_written_us=None)
    store.put_if_match(MANIFEST_KEY, legacy.to_bytes(), store.head(MANIFEST_KEY).etag)
    with pytest.raises(AlreadyCollected):
        Committer(store).commit(files)
    counting = CountingStore(store)
    Committer(counting).commit(raw_files(store, [b"y"]))
    assert counting.counts[("get", "gc")] == 1
    writer.append(b"z")
    collect_below(store, 8)
    assert LogReader(store).manifest().collected_written_us is not None
    counting = CountingStore(store)
    Committer(counting).commit(raw_files(store, [b"fresh"]))
    assert counting.counts[("get", "gc")] == 0 and counting.by_operation()["head"] == 0
    assert verify(store).ok


def test_19_deleting_a_jobs_fragments_keeps_what_the_pending_garbage_lists(store):
    """The Spark sink deletes a job's fragments after a definite failure, an abort or a commit
    found already in the log, keeping those the manifest references; fragments of that job that
    garbage collection applied meanwhile are unreferenced yet pending: readers of a manifest from
    before the apply may read them until the delete step, so they are kept too."""
    LogWriter(store).append(b"r0")
    files = raw_files(store, [b"F"])
    Committer(store).commit(files)
    old_reader = LogReader(store)
    old_manifest = old_reader.manifest()
    writer = LogWriter(store)
    for i in range(5):
        writer.append(b"x%d" % i)
    assert collect_below(store, 5, grace_s=3600).pending is not None
    unrelated = raw_files(store, [b"aborted"])
    spark_commit.delete_files(store, files + unrelated, since=1)
    assert store.exists(files[0].path) and not store.exists(unrelated[0].path)
    batches = old_reader.read(2, 3, manifest=old_manifest)
    assert [b for batch in batches for b in batch.column("body").to_pylist()] == [b"F"]


@pytest.mark.parametrize("grace_s", [3600.0, 0.0], ids=["pending", "deleted"])
def test_20_a_commit_gc_collected_in_part_is_reported_at_its_offsets(store, grace_s):
    """A cursor stopped inside a commit of two fragments: GC collected the first one and kept
    the second at the oldest offset. A re-commit of both (another process) is that commit,
    already in the log: reported at its offsets, nothing appended, not "partly committed"."""
    LogWriter(store).append(b"r0")
    files = raw_files(store, [b"F"]) + raw_files(store, [b"G"])
    assert (Committer(store).commit(files).start) == 2
    LogWriter(store).append(b"x")
    collect_below(store, 3, grace_s=grace_s)
    assert LogReader(store).manifest().oldest_offset == 3
    again = Committer(store).commit(files)
    assert again.duplicate and (again.start, again.limit) == (2, 4)
    assert bodies(store) == [b"G", b"x"] and verify(store).ok
    lone = Committer(store)
    with pytest.raises(ValueError, match="1 of this commit's 2 fragments"):
        lone.commit(files[1:] + raw_files(store, [b"H"]))  # G was committed, but not with H
