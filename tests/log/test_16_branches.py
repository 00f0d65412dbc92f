"""Branches: a log forked at an offset reads its parent's records below the branch point through
the parent's own fragments, takes its own appends from there, and keeps its parent's garbage
collection from removing what it reads (a pin written before the branch is published); every
crash point of creating, checkpointing and deleting one is safe; checkpoint, verify, info and
copy know branches."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from tests.ops.test_02_gc import Crash, crash_after
from wal3_spark.clock import ManualClock, SystemClock
from wal3_spark.errors import BranchError, DataLost, LogNotFound
from wal3_spark.format.layout import MANIFEST_KEY
from wal3_spark.format.lineage import PIN_PREFIX
from wal3_spark.format.manifest import SnapshotOptions
from wal3_spark.log.branches import CREATE_STEPS, DELETE_STEPS, branch, delete_branch
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.holds import list_pins
from wal3_spark.log.reader import LogReader
from wal3_spark.log.writer import LogWriter, LogWriterOptions
from wal3_spark.ops.checkpoint import CHECKPOINT_STEPS, checkpoint
from wal3_spark.ops.copy import copy_log
from wal3_spark.ops.garbage_collector import MIN_ORPHAN_GRACE_S, GarbageCollector, GCOptions
from wal3_spark.ops.verify import verify
from wal3_spark.storage import StoreLike, open_store
from wal3_spark.storage.common import file_url
from wal3_spark.testing.hooks import after_steps, hooked

pytestmark = pytest.mark.timeout(300)


def fill(url: StoreLike, appends: int = 10, per: int = 5, prefix: str = "p", start: int = 0, **kw) -> None:
    writer = LogWriter(url, LogWriterOptions(**kw))
    for i in range(appends):
        writer.append([f"{prefix}{start + i * per + j:04d}".encode() for j in range(per)])


def bodies(url: str, start: int | None = None, limit: int | None = None) -> list[tuple[int, bytes]]:
    table = LogReader(url).read_table(start, limit)
    return list(zip(table.column("_offset").to_pylist(), table.column("body").to_pylist()))


def parent_records(n: int, start: int = 1) -> list[tuple[int, bytes]]:
    return [(start + i, f"p{start - 1 + i:04d}".encode()) for i in range(n)]


def collect(url: StoreLike, keep_from: int | None = None, **kw) -> object:
    """Collect the log with no grace, its cursor at `keep_from` (default: its tail)."""
    tail = LogReader(url).manifest().next_offset
    CursorStore(url).move("gc", tail if keep_from is None else keep_from, allow_backwards=True)
    return hooked(GarbageCollector(url, GCOptions(grace_s=0, force=True)), **kw).run()


ORPHANS_OLD = SystemClock(skew_s=MIN_ORPHAN_GRACE_S + 60)  # every pin is older than the grace


@pytest.fixture
def urls(tmp_path):
    return {name: file_url(str(tmp_path / name)) for name in ("src", "dst", "dst2", "copy")}


def test_00_branch_reads_its_parent_below_the_point_and_its_own_after(urls):
    fill(urls["src"])  # offsets [1, 51), fragments of 5
    report = branch(urls["src"], urls["dst"], at=23)  # inside the fragment [21, 26)
    assert (report.offset, report.start) == (23, 1)
    assert LogReader(urls["dst"]).bounds() == (1, 23)
    LogWriter(urls["dst"]).append([b"own0", b"own1"])
    fill(urls["src"], appends=1, per=3, start=50)  # the parent goes on: [51, 54)
    assert bodies(urls["dst"]) == parent_records(22) + [(23, b"own0"), (24, b"own1")]
    assert bodies(urls["src"]) == parent_records(53)  # the parent never saw the branch's appends
    # ranges across the branch point, and within each side
    assert bodies(urls["dst"], 20, 24) == parent_records(3, 20) + [(23, b"own0")]
    assert bodies(urls["dst"], 23) == [(23, b"own0"), (24, b"own1")]
    assert [o for o, _ in bodies(urls["dst"], 5, 9)] == [5, 6, 7, 8]
    scan = LogReader(urls["dst"]).scan(21, 25)
    assert scan.reader.read_all().column("_offset").to_pylist() == [21, 22, 23, 24]
    assert verify(urls["dst"]).ok and verify(urls["src"]).ok


def test_01_a_branch_of_a_branch_walks_the_chain(urls):
    fill(urls["src"])
    branch(urls["src"], urls["dst"], at=30)
    LogWriter(urls["dst"]).append([b"b0", b"b1", b"b2"])
    branch(urls["dst"], urls["dst2"], at=32)  # two of the first branch's own, 31 of the root's
    LogWriter(urls["dst2"]).append([b"c0"])
    assert bodies(urls["dst2"]) == parent_records(29) + [(30, b"b0"), (31, b"b1"), (32, b"c0")]
    report = verify(urls["dst2"])
    assert report.ok and report.records == 32, report.problems
    # the middle branch cannot be deleted while the second reads through it
    with pytest.raises(BranchError, match="1 branch.*reading through it"):
        delete_branch(urls["dst"])


def test_02_bad_input_gets_clear_errors(urls, tmp_path):
    with pytest.raises(BranchError, match="no wal3 log at .* to branch from"):
        branch(urls["src"], urls["dst"])
    fill(urls["src"])
    with pytest.raises(BranchError, match=r"offset 99: it holds offsets \[1, 51\); give --at within \[1, 51\]"):
        branch(urls["src"], urls["dst"], at=99)
    with pytest.raises(BranchError, match="its own location"):
        branch(urls["src"], urls["src"])
    collect(urls["src"], keep_from=21)
    with pytest.raises(BranchError, match="garbage collection removed offsets below 21"):
        branch(urls["src"], urls["dst"], at=10)
    fill(urls["copy"], appends=1)
    with pytest.raises(BranchError, match="already holds a log"):
        branch(urls["src"], urls["copy"])
    assert list_pins(open_store(urls["src"])) == {}  # nothing refused left a pin
    # a branch whose parent is gone, or was created again, says so
    branch(urls["src"], urls["dst"], at=30)
    src = open_store(urls["src"])
    for meta in list(src.list()):
        src.delete(meta.key)
    with pytest.raises(BranchError, match="is a branch of .* and that log is gone"):
        bodies(urls["dst"])
    assert bodies(urls["dst"], 30) == []  # its own records stay readable
    fill(urls["src"], appends=8)
    with pytest.raises(BranchError, match="deleted and created again since the branch was taken"):
        bodies(urls["dst"])
    # a branch of a sealed log takes appends (the parent is only read)
    fill(urls["dst2"], appends=2)
    from wal3_spark.log.committer import Committer
    Committer(open_store(urls["dst2"])).seal()
    sealed_branch = file_url(str(tmp_path / "of-sealed"))
    branch(urls["dst2"], sealed_branch)
    LogWriter(sealed_branch).append([b"after"])
    assert bodies(sealed_branch)[-1] == (11, b"after")


def test_03_the_parents_gc_keeps_what_a_branch_reads_until_it_is_deleted(urls):
    fill(urls["src"])
    collect(urls["src"], keep_from=11)  # oldest 11
    report = branch(urls["src"], urls["dst"], at=40)
    assert report.start == 11
    fill(urls["src"], appends=4, start=50)
    gc = collect(urls["src"])  # the cursor at the tail: only the pin holds the log back
    assert gc.holds == {f"{PIN_PREFIX}{report.pin}.json": 11}
    assert LogReader(urls["src"]).manifest().oldest_offset == 11
    assert bodies(urls["dst"]) == parent_records(29, 11)
    delete_branch(urls["dst"])
    assert list(open_store(urls["dst"]).list()) == []
    assert list_pins(open_store(urls["src"])) == {}
    collect(urls["src"])
    assert LogReader(urls["src"]).manifest().oldest_offset > 40


@pytest.mark.parametrize("step", CREATE_STEPS)
def test_04_a_crash_at_each_step_of_branching_is_safe(urls, step):
    fill(urls["src"])
    src = open_store(urls["src"])
    with pytest.raises(Crash):
        with after_steps(crash_after(step)):
            branch(urls["src"], urls["dst"], at=20)
    published = open_store(urls["dst"]).exists(MANIFEST_KEY)
    assert published == (step == "publish")
    assert len(list_pins(src)) == 1  # the pin is written first, whatever comes after
    fill(urls["src"], appends=2, start=50)
    collect(urls["src"])  # a young pin holds the log either way
    assert LogReader(urls["src"]).manifest().oldest_offset == 1
    report = collect(urls["src"], orphan_clock=ORPHANS_OLD)
    if published:  # the branch reads through it: kept, and the branch reads its parent
        assert report.pins_dropped == [] and len(list_pins(src)) == 1
        assert bodies(urls["dst"]) == parent_records(19)
    else:  # a pin without a branch: dropped once older than the orphan grace, then collected
        assert len(report.pins_dropped) == 1 and list_pins(src) == {}
        collect(urls["src"])
        assert LogReader(urls["src"]).manifest().oldest_offset > 20
        branch(urls["src"], urls["dst"])  # the location is free: branching again works


def test_05_a_branch_is_published_within_its_pin_deadline_or_not_at_all(urls):
    fill(urls["src"], appends=2)
    clock = ManualClock(now=SystemClock().now())

    def slow(step: str) -> None:
        if step == "settle":
            clock.advance(10)

    with pytest.raises(BranchError, match="took longer than 5 s"):
        with after_steps(slow):
            branch(urls["src"], urls["dst"], clock=clock, pin_deadline_s=5)
    assert not open_store(urls["dst"]).exists(MANIFEST_KEY)
    assert list_pins(open_store(urls["src"])) == {}


def test_06_gc_racing_branch_creation_never_drops_what_the_branch_reads(urls):
    """Both orders of the race: a collection that decided before the pin existed, and a pin
    written between a collection's decision and its apply step."""
    fill(urls["src"])
    # 1. garbage computed (cutoff 31) before the branch's pin: the branch starts at 31
    CursorStore(urls["src"]).create("gc", 31)
    with pytest.raises(Crash):
        hooked(GarbageCollector(urls["src"], GCOptions(grace_s=0, force=True)), after_step=crash_after("compute")).run()
    report = branch(urls["src"], urls["dst"], at=40)
    assert report.start == 31  # settled on the pending garbage
    GarbageCollector(urls["src"], GCOptions(grace_s=0, force=True)).run()  # the pin (at 1) resets it
    assert bodies(urls["dst"]) == parent_records(9, 31)
    # 2. the branch is created in the middle of a collection, after its garbage was written
    other = urls["dst2"]
    created = {}

    def race(step: str) -> None:
        if step == "compute" and not created:
            created["report"] = branch(urls["src"], other, at=48)

    CursorStore(urls["src"]).move("gc", 50, allow_backwards=True)
    delete_branch(urls["dst"])  # only the racing branch holds the log now
    gc = hooked(GarbageCollector(urls["src"], GCOptions(grace_s=0, force=True)), after_step=race).run()
    start = created["report"].start
    assert any("a hold at" in note for note in gc.notes) or start > 1
    assert LogReader(urls["src"]).manifest().oldest_offset <= start
    assert bodies(other) == parent_records(48 - start, start)
    # branching below what the racing collection removes is refused, leaving no pin
    delete_branch(other)
    CursorStore(urls["src"]).move("gc", 51, allow_backwards=True)

    def too_low(step: str) -> None:
        if step == "compute":
            with pytest.raises(BranchError, match="running at the same moment"):
                branch(urls["src"], urls["dst"], at=LogReader(urls["src"]).manifest().oldest_offset)

    hooked(GarbageCollector(urls["src"], GCOptions(grace_s=0, force=True)), after_step=too_low).run()
    assert list_pins(open_store(urls["src"])) == {}


def test_07_checkpoint_makes_a_branch_standalone(urls):
    options = SnapshotOptions(snapshot_rollover_threshold=2, fragment_rollover_threshold=2)
    fill(urls["src"], snapshot_options=options)
    branch(urls["src"], urls["dst"], at=23)
    fill(urls["dst"], appends=6, per=2, prefix="b", snapshot_options=options)  # own snapshots too
    before = bodies(urls["dst"])
    src = open_store(urls["src"])
    report = checkpoint(urls["dst"], snapshot_options=options)
    assert (report.checkpointed, report.records_copied, report.fragments_copied) == (True, 22, 5)
    assert list_pins(src) == {}
    manifest = LogReader(urls["dst"]).manifest()
    assert manifest.parent is None and manifest.snapshots
    for meta in list(src.list()):  # the parent can go now
        src.delete(meta.key)
    assert bodies(urls["dst"]) == before
    assert verify(urls["dst"]).ok
    LogWriter(urls["dst"]).append([b"later"])
    assert bodies(urls["dst"])[-1] == (35, b"later")
    assert checkpoint(urls["dst"]).checkpointed is False  # an ordinary log: nothing to do
    collect(urls["dst"], keep_from=33)  # and its own GC collects what it copied
    assert LogReader(urls["dst"]).manifest().oldest_offset > 1


@pytest.mark.parametrize("step", CHECKPOINT_STEPS)
def test_08_a_crash_at_each_step_of_a_checkpoint_is_safe(urls, step):
    fill(urls["src"])
    branch(urls["src"], urls["dst"], at=23)
    LogWriter(urls["dst"]).append([b"own"])
    before = bodies(urls["dst"])
    with pytest.raises(Crash):
        with after_steps(crash_after(step)):
            checkpoint(urls["dst"])
    assert bodies(urls["dst"]) == before
    # the branch's own collection sweeps none of the copies while it still names its parent
    hooked(GarbageCollector(urls["dst"], GCOptions(grace_s=0)), orphan_clock=ORPHANS_OLD).run()
    assert bodies(urls["dst"]) == before
    checkpoint(urls["dst"])  # run again: finishes (reusing the copies)
    assert LogReader(urls["dst"]).manifest().parent is None and verify(urls["dst"]).ok
    collect(urls["src"], orphan_clock=ORPHANS_OLD)  # a pin left by the crash is dropped
    assert list_pins(open_store(urls["src"])) == {}
    assert bodies(urls["dst"]) == before


@pytest.mark.parametrize("step", DELETE_STEPS)
def test_09_a_crash_at_each_step_of_deleting_a_branch_is_safe(urls, step):
    fill(urls["src"])
    branch(urls["src"], urls["dst"], at=23)
    with pytest.raises(Crash):
        with after_steps(crash_after(step)):
            delete_branch(urls["dst"])
    if step != "record":
        with pytest.raises(LogNotFound):
            LogReader(urls["dst"]).manifest()  # no longer a log once its manifest is removed
    if step != "remove":  # (after the last step there is nothing left to finish)
        report = delete_branch(urls["dst"])  # finishes what is left, from the deletion record
        assert report.resumed == (step != "record") and report.parent == urls["src"]
    assert list(open_store(urls["dst"]).list()) == []
    assert list_pins(open_store(urls["src"])) == {}  # released by the re-run, not left to GC
    with pytest.raises(LogNotFound, match="nothing was deleted"):
        delete_branch(urls["dst"])  # done: nothing there any more


def test_10_verify_info_and_copy_know_branches(urls, capsys):
    from wal3_spark.cli.main import main

    fill(urls["src"])
    branch(urls["src"], urls["dst"], at=23)
    LogWriter(urls["dst"]).append([b"own"])
    report = verify(urls["dst"])
    assert report.ok and report.records == 23 and report.parent["offset"] == {"offset": 23}
    # info shows the parent (on the branch) and the pin (on the parent)
    assert main(["info", urls["dst"], "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["parent"]["log"] == urls["src"] and info["oldest_offset"] == 1
    assert main(["info", urls["src"], "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["pins"][0]["branch"] == urls["dst"]
    # copy of a branch: a standalone log with the same records
    copied = copy_log(urls["dst"], urls["copy"])
    assert copied.records == 23 and LogReader(urls["copy"]).manifest().parent is None
    assert bodies(urls["copy"]) == bodies(urls["dst"])
    # a pin gone, or a parent fragment damaged: verify says so
    src = open_store(urls["src"])
    pin = next(iter(list_pins(src)))
    src.delete(f"{PIN_PREFIX}{pin}.json")
    problems = verify(urls["dst"]).problems
    assert any("pin this branch holds in its parent is missing" in p.detail for p in problems)
    ref = LogReader(urls["src"]).manifest().fragments[0]
    path = os.path.join(src.root, ref.path)
    with open(path, "r+b") as f:
        f.seek(ref.num_bytes // 2)
        f.write(b"\x00\x01\x02\x03")
    report = verify(urls["dst"])
    assert not report.ok and any(p.obj.startswith(urls["src"]) for p in report.problems)


def test_11_writes_to_a_branch_never_touch_its_parent(urls):
    fill(urls["src"])
    src = open_store(urls["src"])
    before = {m.key: src.get(m.key).data for m in src.list()}
    branch(urls["src"], urls["dst"], at=23)
    fill(urls["dst"], appends=5, prefix="b")
    collect(urls["dst"])  # the branch's own collection (its cursor at its tail)
    checkpoint(urls["dst"])
    after = {m.key: src.get(m.key).data for m in src.list()}
    assert after == before  # the pin came and went; nothing else of the parent changed


def test_12_the_cli_branches_checkpoints_and_deletes(urls, capsys):
    from wal3_spark.cli.main import main

    fill(urls["src"])
    assert main(["branch", urls["src"], urls["dst"], "--at", "23", "--json"]) == 0
    made = json.loads(capsys.readouterr().out)
    assert list(made) == ["branch", "parent", "offset", "start", "pin", "setsum"] and made["offset"] == 23
    assert main(["branch", urls["src"], urls["dst2"], "--at", "99"]) == 1
    assert "give --at within [1, 51]" in capsys.readouterr().err
    assert main(["checkpoint", urls["dst"], "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["records_copied"] == 22
    assert main(["branch", "--delete", urls["dst"], "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["log"] == urls["dst"]
    assert not open_store(urls["dst"]).exists(MANIFEST_KEY)


_KILLER = textwrap.dedent("""
    import os, signal, sys
    from wal3_spark.log.branches import branch
    from wal3_spark.ops.checkpoint import checkpoint
    from wal3_spark.testing.hooks import after_steps
    what, step, src, dst = sys.argv[1:5]
    def die(done):
        if done == step:
            os.kill(os.getpid(), signal.SIGKILL)
    if what == "branch":
        with after_steps(die):
            branch(src, dst, at=20)
    else:
        with after_steps(die):
            checkpoint(dst)
""")


@pytest.mark.slow
def test_13_kill_9_at_each_step_in_another_process(urls):
    """SIGKILL (no clean-up runs) of a process branching or checkpointing, at each step."""
    fill(urls["src"])
    for what, steps in (("branch", CREATE_STEPS), ("checkpoint", CHECKPOINT_STEPS)):
        for step in steps:
            if what == "checkpoint" and not open_store(urls["dst"]).exists(MANIFEST_KEY):
                branch(urls["src"], urls["dst"], at=20)
            proc = subprocess.run([sys.executable, "-c", _KILLER, what, step, urls["src"], urls["dst"]],
                                  capture_output=True, timeout=120)
            assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
            if open_store(urls["dst"]).exists(MANIFEST_KEY):
                assert bodies(urls["dst"]) == parent_records(19)
                checkpoint(urls["dst"])  # finishes a killed checkpoint, or makes one
                assert bodies(urls["dst"]) == parent_records(19) and verify(urls["dst"]).ok
                delete_branch(urls["dst"])
            collect(urls["src"], keep_from=1, orphan_clock=ORPHANS_OLD)
            assert list_pins(open_store(urls["src"])) == {}, (what, step)


_GC_LOOP = textwrap.dedent("""
    import sys, time
    from wal3_spark.log.cursors import CursorStore
    from wal3_spark.log.reader import LogReader
    from wal3_spark.log.writer import LogWriter
    from wal3_spark.ops.garbage_collector import GarbageCollector, GCOptions
    src, seconds = sys.argv[1], float(sys.argv[2])
    writer, end, n = LogWriter(src), time.monotonic() + seconds, 0
    while time.monotonic() < end:
        writer.append([b"x%d" % (n + i) for i in range(5)]); n += 5
        tail = LogReader(src).manifest().next_offset
        CursorStore(src).move("gc", tail, allow_backwards=True)
        GarbageCollector(src, GCOptions(grace_s=0, force=True)).run()
""")


@pytest.mark.slow
def test_14_branches_created_while_another_process_appends_and_collects(urls, tmp_path):
    """Cross-process: each branch reads exactly what its parent held below its point when it
    was taken, though the parent's collector (another process) runs without pause."""
    fill(urls["src"], appends=4)
    CursorStore(urls["src"]).create("gc", 1)
    proc = subprocess.Popen([sys.executable, "-c", _GC_LOOP, urls["src"], "20"])
    try:
        made = []
        while proc.poll() is None and len(made) < 30:
            manifest = LogReader(urls["src"]).manifest()
            dst = file_url(str(tmp_path / f"b{len(made)}"))
            try:
                report = branch(urls["src"], dst, at=manifest.next_offset)
            except BranchError:
                continue  # collected past the point meanwhile: refused cleanly
            # what the branch reads now is the parent's, and it keeps reading it
            first = bodies(dst)
            assert [o for o, _ in first] == list(range(report.start, report.offset))
            made.append((dst, first))
        for dst, first in made:
            assert bodies(dst) == first
        assert len(made) >= 5
    finally:
        proc.wait(timeout=120)
    assert proc.returncode == 0
    for dst, first in made:
        assert bodies(dst) == first and verify(dst).ok


def test_15_a_branch_on_s3_reaches_its_parent_with_its_own_store_options(request):
    """S3 (SeaweedFS): the parent is opened with the settings of the store the branch was opened
    with (endpoint, credentials), on the driver and wherever a range is read."""
    from tests.support.emulators import cloud_url

    base, options = cloud_url(request, "s3")
    src, dst = f"{base}/src", f"{base}/dst"
    fill(open_store(src, options))
    report = branch(src, dst, at=23, options=options)
    LogWriter(open_store(dst, options)).append([b"own"])
    got = LogReader(open_store(dst, options)).read_table()
    assert got.column("_offset").to_pylist() == list(range(1, 24))
    assert got.column("body").to_pylist()[-2:] == [b"p0021", b"own"]
    collect(open_store(src, options))
    assert LogReader(open_store(src, options)).manifest().oldest_offset == report.start
    assert verify(open_store(dst, options)).ok
    assert checkpoint(open_store(dst, options)).records_copied == 22


def test_16_cursor_lag_on_a_branch_counts_the_parent_fragments_still_to_read(urls):
    from wal3_spark.log.cursor_lag import cursor_lags

    fill(urls["src"])  # fragments of 5 records
    branch(urls["src"], urls["dst"], at=23)
    LogWriter(urls["dst"]).append([b"own"])
    cursors = CursorStore(urls["dst"])
    cursors.create("reader", 11)  # below the branch point: the parent's [11, 26) and its own
    manifest = LogReader(urls["dst"]).manifest()
    parent = LogReader(urls["src"]).manifest()
    lag = cursor_lags(open_store(urls["dst"]), manifest, cursors.list())[0]
    assert lag.records_behind == 13
    want = sum(f.num_bytes for f in parent.fragments if f.limit > 11 and f.start < 23)
    assert lag.bytes_behind == want + manifest.fragments[0].num_bytes
    assert lag.lag_s is not None  # the parent's fragment's write time


def test_17_a_publish_that_may_still_land_keeps_its_pin(urls):
    """The branch's manifest write times out (held back, to land later) and the pin deadline
    passes before the next attempt: the creation fails, but the pin stays, since the held write
    may still publish the branch; once it lands, the parent's GC keeps the pin (live)."""
    from wal3_spark.errors import AmbiguousWrite, CommitOutcomeUnknown
    from wal3_spark.storage.forwarding import ForwardingStore

    fill(urls["src"], appends=2)
    clock = ManualClock(now=SystemClock().now())
    held: list[tuple[str, bytes]] = []

    class Late(ForwardingStore):
        def put_if_absent(self, key: str, data: bytes) -> str:
            if key == MANIFEST_KEY and not held:
                held.append((key, data))
                clock.advance(10)
                raise AmbiguousWrite(key, "timed out")
            return self.inner.put_if_absent(key, data)

    dst = Late(open_store(urls["dst"]))
    with pytest.raises(CommitOutcomeUnknown, match="could not establish whether the branch's manifest"):
        branch(urls["src"], dst, clock=clock, pin_deadline_s=5)
    src = open_store(urls["src"])
    assert len(list_pins(src)) == 1  # kept: the write may still land
    open_store(urls["dst"]).put_if_absent(*held[0])  # ... and it does
    collect(urls["src"], orphan_clock=ORPHANS_OLD)
    assert len(list_pins(src)) == 1 and bodies(urls["dst"]) == parent_records(10)


def test_18_a_destination_that_reaches_another_server_is_refused(request, tmp_path):
    """A branch opened with settings (an endpoint) other than its parent's would read its parent
    on the wrong server, and the parent's collection would find no branch at its URL and drop the
    pin after the orphan grace: creating it is refused before anything is written."""
    from wal3_spark.testing.seaweedfs import running_seaweed

    first = request.getfixturevalue("seaweed")
    src = first.new_url("src")
    fill(open_store(src, first.options), appends=2)
    with running_seaweed(tmp_path / "second") as second:  # same bucket and credentials
        dst = second.new_url("dst")
        with pytest.raises(BranchError, match="not the same log"):
            branch(src, dst, at=5, options=first.options, destination_options=second.options)
        assert not open_store(dst, second.options).exists(MANIFEST_KEY)
    assert list_pins(open_store(src, first.options)) == {}


def test_19_a_branch_whose_parent_lost_its_range_names_the_branchs_offsets(urls):
    """A pin removed by hand lets the parent collect what the branch reads: the read fails with
    DataLost in the branch's own terms (its offsets, from where it can still be read), never
    with the parent's oldest offset, which may lie past the branch's own records."""
    fill(urls["src"])
    branch(urls["src"], urls["dst"], at=30)
    LogWriter(urls["dst"]).append([b"own"])
    src = open_store(urls["src"])
    for key in list_pins(src):
        src.delete(f"{PIN_PREFIX}{key}.json")
    collect(urls["src"])
    assert LogReader(urls["src"]).manifest().oldest_offset == 51
    with pytest.raises(DataLost, match=r"offsets \[1, 30\) of \S+/dst .*from 30 on") as info:
        bodies(urls["dst"])
    assert "failOnDataLoss" not in str(info.value)
    assert bodies(urls["dst"], 30) == [(30, b"own")]


def test_20_a_creator_whose_clock_is_behind_keeps_its_pin_while_it_publishes(urls):
    """A pin is old enough to drop as an orphan only when the store's clock says so too: a
    creator an hour behind writes a pin that its own clock dates an hour back, and a collection
    running before the branch is published must keep it."""
    fill(urls["src"])
    seen = []

    def collect_meanwhile(step: str) -> None:
        if step == "pin":
            seen.append(collect(urls["src"]).pins_dropped)

    with after_steps(collect_meanwhile):
        branch(urls["src"], urls["dst"], at=20, clock=SystemClock(skew_s=-3600))
    assert seen == [[]] and len(list_pins(open_store(urls["src"]))) == 1
    fill(urls["src"], appends=2, start=50)
    collect(urls["src"])
    assert bodies(urls["dst"]) == parent_records(19)


@pytest.fixture(params=["file", "s3", "gcs", "azure"])
def where(request, tmp_path) -> tuple[str, dict[str, str]]:
    """A fresh base URL on every kind of store, and the store options that reach it."""
    if request.param == "file":
        return file_url(str(tmp_path / "base")), {}
    from tests.support.emulators import cloud_url

    return cloud_url(request, request.param)


def _everything(base: str, options: dict[str, str]) -> dict[str, bytes]:
    store = open_store(base, options)
    return {meta.key: store.get(meta.key).data for meta in store.list()}


def test_21_a_location_without_a_log_of_its_own_is_never_deleted(where):
    """`wal3 branch --delete` of a log set's prefix, or of a mistyped URL, deletes nothing and
    says so: before, a missing manifest was taken for a deletion that crashed half way, and every
    log below the prefix was removed (a log a branch reads included)."""
    base, options = where
    orders, events = f"{base}/set/orders", f"{base}/set/events"
    fill(open_store(orders, options), appends=3)
    fill(open_store(events, options), appends=2)
    branch(orders, f"{base}/reader", at=8, options=options)
    before = _everything(base, options)
    for url in (f"{base}/set", f"{base}/set/order", f"{base}/nothing-here"):
        with pytest.raises(LogNotFound, match="nothing was deleted"):
            delete_branch(url, options=options)
    assert _everything(base, options) == before
    assert bodies_of(orders, options)[:3] == [(1, b"p0000"), (2, b"p0001"), (3, b"p0002")]


def bodies_of(url: str, options: dict[str, str]) -> list[tuple[int, bytes]]:
    table = LogReader(open_store(url, options)).read_table()
    return list(zip(table.column("_offset").to_pylist(), table.column("body").to_pylist()))


def test_22_deleting_a_log_never_removes_another_logs_objects(where):
    """A log with other logs below its root (one named like each directory of the layout) and a
    sibling whose name starts with its own: its deletion removes its own objects only, reports
    the others as left, and every other log still reads and verifies."""
    base, options = where
    log = f"{base}/a"
    fill(open_store(log, options), appends=3)
    CursorStore(open_store(log, options)).create("reader", 2)
    TagStore = __import__("wal3_spark.log.tags", fromlist=["TagStore"]).TagStore
    TagStore(open_store(log, options)).create("q3.close", at=5, hold=True)
    others = [f"{log}/orders", f"{log}/log", f"{log}/manifest", f"{log}/cursor", f"{log}/tag",
              f"{log}/snapshot", f"{log}/gc", f"{log}/pin", f"{base}/a2", f"{base}/a-b"]
    for url in others:
        fill(open_store(url, options), appends=2, prefix="o")
    kept = {url: bodies_of(url, options) for url in others}
    report = delete_branch(log, options=options)
    assert report.objects_removed > 5 and report.objects_left > 0 and not report.resumed
    with pytest.raises(LogNotFound):
        LogReader(open_store(log, options)).manifest()
    for url in others:
        assert bodies_of(url, options) == kept[url], url
        assert verify(open_store(url, options)).ok, url


def test_23_a_branch_is_created_only_outside_every_other_log(urls, tmp_path):
    """A branch above its parent (the parent inside it), inside its parent or inside another
    log, or in a location that holds anything, is refused before anything is written: such a
    branch and the log it shares a location with could not be deleted one without the other."""
    fill(urls["src"])
    base = file_url(str(tmp_path / "set"))
    fill(f"{base}/orders", appends=2)
    cases = {
        base: "it is not empty",  # `wal3 branch set/orders set`: the parent is inside it
        f"{base}/orders/inner": "lies inside the log at",
        f"{urls['src']}/inner": "lies inside the log at",
    }
    os.makedirs(tmp_path / "junk")
    (tmp_path / "junk" / "notes.txt").write_text("not a log")
    cases[file_url(str(tmp_path / "junk"))] = "it is not empty"
    for source in (f"{base}/orders", urls["src"]):
        for dst, why in cases.items():
            with pytest.raises(BranchError, match=why):
                branch(source, dst)
    assert list_pins(open_store(urls["src"])) == {} and list_pins(open_store(f"{base}/orders")) == {}
    assert not open_store(f"{base}/orders/inner").exists(MANIFEST_KEY)


def test_24_only_live_branches_block_deleting_their_parent(urls):
    """A pin blocks its parent's deletion while its branch reads through it, or may still be
    published; not when its branch is gone or half deleted (the deletion record says so), nor
    when it is older than the orphan grace."""
    fill(urls["src"])
    branch(urls["src"], urls["dst"], at=20)
    branch(urls["src"], urls["dst2"], at=30)
    with pytest.raises(BranchError, match=r"2 branch\(es\) reading through it"):
        delete_branch(urls["src"])
    with pytest.raises(Crash):  # killed after removing the manifest, before releasing its pin
        with after_steps(crash_after("unpublish")):
            delete_branch(urls["dst"])
    with pytest.raises(BranchError, match=r"1 branch\(es\) reading through it \(\S+/dst2\)"):
        delete_branch(urls["src"])  # dst2 only: dst is being deleted
    delete_branch(urls["dst2"])
    # a pin whose branch never appeared: blocks while young (a creation may still publish it)
    with pytest.raises(Crash):
        with after_steps(crash_after("pin")):
            branch(urls["src"], urls["copy"], at=10)
    with pytest.raises(BranchError, match="being created"):
        delete_branch(urls["src"])
    report = delete_branch(urls["src"], clock=ORPHANS_OLD)  # once older than the grace it does not
    assert report.objects_left == 0 and list(open_store(urls["src"]).list()) == []
    delete_branch(urls["dst"])  # the half-deleted branch finishes; its parent's pin is gone already
    assert list(open_store(urls["dst"]).list()) == []


def test_25_forcing_deletes_a_parent_its_branches_read(urls):
    fill(urls["src"])
    branch(urls["src"], urls["dst"], at=20)
    report = delete_branch(urls["src"], force=True)
    assert report.parent is None and list(open_store(urls["src"]).list()) == []
    with pytest.raises(BranchError, match="that log is gone"):
        bodies(urls["dst"])


@pytest.mark.parametrize("fails", ["pin", "settle", "publish"])
def test_26_a_creation_that_fails_definitely_releases_its_pin(urls, fails):
    """Whatever the error (a storage error, access denied), a creation that failed before any
    manifest write could land releases its pin at once: before, only BranchError did, and the
    parent's collection was held back for the orphan grace."""
    from wal3_spark.errors import AccessDenied, AmbiguousWrite
    from wal3_spark.storage.forwarding import ForwardingStore

    fill(urls["src"], appends=2)

    class Failing(ForwardingStore):
        """The pin's write times out after landing, the settle step's read is denied, or the
        branch's manifest write is denied."""

        def put_if_absent(self, key: str, data: bytes) -> str:
            etag = self.inner.put_if_absent(key, data)
            if fails == "pin" and key.startswith(PIN_PREFIX):
                raise AmbiguousWrite(key, "timed out (it landed)")
            if fails == "publish" and key == MANIFEST_KEY:
                self.inner.delete(key)
                raise AccessDenied(f"{key}: denied")
            return etag

        def get(self, key: str):
            if fails == "settle" and key == "gc/GARBAGE":
                raise AccessDenied(f"{key}: denied")
            return self.inner.get(key)

    src = Failing(open_store(urls["src"]))
    dst = Failing(open_store(urls["dst"])) if fails == "publish" else open_store(urls["dst"])
    with pytest.raises((AccessDenied, AmbiguousWrite)):
        branch(src, dst, at=5)
    assert list_pins(open_store(urls["src"])) == {}
    assert not open_store(urls["dst"]).exists(MANIFEST_KEY)


_DELETE_KILLER = textwrap.dedent("""
    import os, signal, sys
    from wal3_spark.log.branches import delete_branch
    from wal3_spark.testing.hooks import after_steps
    step, dst = sys.argv[1:3]
    def die(done):
        if done == step:
            os.kill(os.getpid(), signal.SIGKILL)
    with after_steps(die):
        delete_branch(dst)
""")


@pytest.mark.slow
def test_27_a_deletion_killed_at_each_step_is_finished_by_a_rerun(urls):
    """SIGKILL of a process deleting a branch, at each step: a re-run finishes it (the pin is
    released at once, every object of the branch removed), and the parent can then be deleted."""
    fill(urls["src"])
    for step in DELETE_STEPS:
        branch(urls["src"], urls["dst"], at=20)
        LogWriter(urls["dst"]).append([b"own"])
        proc = subprocess.run([sys.executable, "-c", _DELETE_KILLER, step, urls["dst"]],
                              capture_output=True, timeout=120)
        assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
        # killed after its last step, the deletion is whole: nothing is left to finish
        assert main_cli(["branch", "--delete", urls["dst"]]) == (1 if step == "remove" else 0), step
        assert list(open_store(urls["dst"]).list()) == [] and list_pins(open_store(urls["src"])) == {}, step
    delete_branch(urls["src"])
    assert list(open_store(urls["src"]).list()) == []


def main_cli(argv: list[str]) -> int:
    from wal3_spark.cli.main import main

    return main(argv)


def test_28_the_cli_reports_a_deletion_and_refuses_an_unknown_location(urls, tmp_path, capsys):
    fill(urls["src"])
    branch(urls["src"], urls["dst"], at=20)
    assert main_cli(["branch", "--delete", urls["dst"]]) == 0
    out = capsys.readouterr().out
    assert f"deleted {urls['dst']}: " in out and f"its pin in {urls['src']} released" in out
    fill(f"{urls['copy']}/orders", appends=1)
    assert main_cli(["branch", "--delete", urls["copy"]]) == 1
    assert "nothing was deleted" in capsys.readouterr().err
    assert main_cli(["branch", "--delete", urls["dst2"], "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["error"]["type"] == "LogNotFound"
    assert LogReader(f"{urls['copy']}/orders").manifest().next_offset == 6
    branch(urls["src"], urls["dst"], at=20)
    assert main_cli(["branch", "--delete", urls["dst"], "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc == {"log": urls["dst"], "parent": urls["src"], "objects_removed": doc["objects_removed"],
                   "objects_left": 0, "resumed": False} and doc["objects_removed"] == 1  # its manifest


def test_29_a_deletion_or_checkpoint_releases_only_a_pin_naming_its_branch(urls):
    """A branch's manifest naming another branch's pin (damaged, or edited by hand) must not
    make deleting or checkpointing it delete that pin: the other branch would lose what it
    reads to the parent's next collection. The pin is released only when it names this branch."""
    from dataclasses import replace

    from wal3_spark.log.manifest_reader import read_manifest

    fill(urls["src"])
    branch(urls["src"], urls["dst"], at=23)
    branch(urls["src"], urls["dst2"], at=30)
    theirs = read_manifest(open_store(urls["dst2"])).parent.pin
    for op in (checkpoint, delete_branch):
        if op is delete_branch:  # the checkpoint made it standalone: branch it again
            delete_branch(urls["dst"])
            branch(urls["src"], urls["dst"], at=23)
        dst = open_store(urls["dst"])
        mine = read_manifest(dst)
        blob = dst.get(MANIFEST_KEY)
        dst.put_if_match(MANIFEST_KEY, replace(mine, parent=replace(mine.parent, pin=theirs)).to_bytes(),
                         blob.etag)
        op(urls["dst"])
        assert theirs in list_pins(open_store(urls["src"])), op.__name__
    collect(urls["src"])
    assert bodies(urls["dst2"]) == parent_records(29)
