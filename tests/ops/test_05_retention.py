"""Retention: a policy recorded in the manifest that every garbage collection applies, even
below cursors (Kafka's retention.ms and retention.bytes); pins and held tags hold it back.

The cases run in process on the in-memory store with a manual clock (fragments are stamped by
the writer's clock, so ages are exact); the first runs on the local store and SeaweedFS too.
docs/design/33-retention.md."""

from __future__ import annotations

import os
import threading

import pyarrow as pa
import pytest

from wal3_spark import LogReader, LogWriter, LogWriterOptions, open_store, set_retention
from wal3_spark.clock import ManualClock
from wal3_spark.errors import AmbiguousWrite, DataLost, InvalidOption, LogNotFound
from wal3_spark.format.layout import MANIFEST_KEY, FragmentRef, Segment
from wal3_spark.format.manifest import Manifest, SnapshotOptions
from wal3_spark.format.retention import RetentionPolicy, newest_record_us, parse_age_ms, retention_cutoff
from wal3_spark.format.setsum import Setsum
from wal3_spark.log.branches import branch
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.tags import TagStore
from wal3_spark.ops.garbage_collector import GarbageCollector, GCOptions
from wal3_spark.ops.verify import verify
from wal3_spark.storage.forwarding import ForwardingStore
from wal3_spark.testing.hooks import hooked

HOUR = 3600.0
T0 = 1_800_000_000.0

_names = iter(range(1_000_000))


def hourly_log(store, clock: ManualClock, fragments: int = 10, per: int = 5) -> None:
    """`fragments` appends of `per` records, one an hour: fragment i holds [1 + i*per, 1 + (i+1)*per)
    and was written at T0 + i hours."""
    with LogWriter(store, clock=clock) as writer:
        for i in range(fragments):
            writer.append([b"r%04d" % (i * per + j) for j in range(per)])
            clock.advance(HOUR)


def collect(store, clock, **kw):
    return GarbageCollector(store, GCOptions(grace_s=0, **kw), clock=clock).run()


def offsets(store) -> list[int]:
    return LogReader(store).read_table().column("_offset").to_pylist()


def memory():
    return open_store(f"memory://retention-{next(_names)}")


@pytest.fixture
def store(store_url, store_options):
    return open_store(store_url, store_options)


def test_00_max_age_removes_whole_fragments_below_a_cursor_and_names_what_it_overtook(store):
    clock = ManualClock(now=T0)
    hourly_log(store, clock)  # now T0 + 10 h; fragment i written at T0 + i h
    CursorStore(store).advance("slow", 6)  # read one fragment
    set_retention(store, max_age_s=4 * HOUR)

    report = collect(store, clock)

    # fragments 0..5 are older than 4 h (written before T0 + 6 h); the cursor at 6 is passed
    assert (report.retention_cutoff, report.first_to_keep) == (31, 31)
    assert report.cursors_overtaken == {"slow": 6}
    assert report.retention_removed == {"start": 6, "limit": 31, "records": 25}
    assert report.retention == {"max_age_ms": 4 * 3_600_000}
    assert offsets(store) == list(range(31, 51))
    assert verify(store).ok
    with pytest.raises(DataLost, match=r"retention policy \(max-age 4h\)") as lost:
        LogReader(store).read_table(6)
    assert (lost.value.start, lost.value.oldest, lost.value.retention) == (6, 31, "max-age 4h")
    table = LogReader(store).read_table(6, fail_on_data_loss=False)  # skips ahead
    assert table.column("_offset").to_pylist() == list(range(31, 51))


def test_01_max_bytes_removes_the_oldest_fragments_until_the_log_fits_and_keeps_the_newest():
    store, clock = memory(), ManualClock(now=T0)
    hourly_log(store, clock)
    refs = LogReader(store).manifest().fragments
    size = refs[0].num_bytes
    set_retention(store, max_bytes=3 * size + size // 2)  # room for 3 fragments

    report = collect(store, clock)

    assert report.first_to_keep == refs[-3].start
    after = LogReader(store).manifest()
    assert sum(f.num_bytes for f in after.fragments) <= 3 * size + size // 2
    assert report.cursors_overtaken == {} and report.retention_removed == {
        "start": 1, "limit": refs[-3].start, "records": refs[-3].start - 1}

    # a bound exactly the newest fragment's size keeps that fragment alone
    with LogWriter(store, clock=clock) as writer:
        writer.append([os.urandom(20_000)])
    newest = LogReader(store).manifest().fragments[-1]
    set_retention(store, max_bytes=newest.num_bytes)
    collect(store, clock)
    assert offsets(store) == [51]
    # and one fragment is never removed for size, however large it grew
    policy = RetentionPolicy(max_bytes=1)
    assert retention_cutoff([newest], newest.num_bytes, newest.limit, policy, now_us=0) is None


def test_02_a_log_without_cursors_is_collected_by_its_policy_and_not_without_one():
    store, clock = memory(), ManualClock(now=T0)
    hourly_log(store, clock)
    assert collect(store, clock).cutoff is None  # no cursors, no policy: nothing is consumed
    assert offsets(store)[0] == 1

    set_retention(store, max_age_s=2 * HOUR)
    report = collect(store, clock)
    assert report.first_to_keep == 41 and offsets(store) == list(range(41, 51))

    clock.advance(10 * HOUR)  # every record is past the age: the log is emptied, offsets go on
    collect(store, clock)
    manifest = LogReader(store).manifest()
    assert (manifest.oldest_offset, manifest.next_offset) == (51, 51)
    with LogWriter(store, clock=clock) as writer:
        writer.append([b"next"])
    assert offsets(store) == [51]


def test_03_a_compacted_fragment_goes_only_when_its_newest_segment_is_past_the_age():
    setsum = Setsum()
    compacted = FragmentRef("log/Uuid=c.parquet", "00000000-0000-7000-8000-000000000000", 1, 11, 100,
                            setsum, segments=(Segment(5, 1_000), Segment(5, 9_000)))
    plain = FragmentRef("log/Uuid=p.parquet", "00000000-0000-7000-8000-000000000001", 11, 16, 50, setsum)
    policy = RetentionPolicy(max_age_ms=1)  # 1000 µs
    assert newest_record_us(compacted) == 9_000

    def times(ref):
        return newest_record_us(ref) if ref.segments else 9_500

    def cutoff(now_us):
        return retention_cutoff([compacted, plain], 150, 16, policy, now_us=now_us, written_us=times)

    # the first segment is past the age, the second not: the whole fragment stays, and all after
    assert cutoff(9_500) is None
    assert cutoff(10_001) == 11
    assert cutoff(10_501) == 16
    # a fragment of unknown time stays, and so does everything after it
    assert retention_cutoff([plain, compacted], 150, 16, policy, now_us=99_999, written_us=lambda r: None) is None


def test_04_a_held_tag_and_a_branch_pin_hold_retention_back_and_the_report_says_by_how_much():
    store, clock = memory(), ManualClock(now=T0)
    hourly_log(store, clock)
    TagStore(store).create("audit", at=21, hold=True)  # holds [1, 21)
    CursorStore(store).advance("reader", 50)
    set_retention(store, max_age_s=2 * HOUR)  # would keep from 41

    report = collect(store, clock)

    assert report.first_to_keep is None and offsets(store)[0] == 1
    assert report.retention_cutoff == 41
    assert report.retention_held_back == {"tag/audit.json": 40}
    assert any("held back by tag/audit.json (40 records kept)" in n for n in report.notes)

    TagStore(store).delete("audit")
    other = memory()
    branch(store, other, at=16)  # the branch reads [1, 16) through its pin
    report = collect(store, clock)
    assert report.first_to_keep is None and offsets(store)[0] == 1  # the pin holds [1, 16)
    [(pin, kept)] = report.retention_held_back.items()
    assert pin.startswith("pin/") and kept == 40
    assert LogReader(other).read_table().column("_offset").to_pylist() == list(range(1, 16))


@pytest.mark.parametrize("kwargs, problem", [
    ({"max_age_s": 0}, "max_age_s=0"),
    ({"max_age_s": -1.0}, "max_age_s=-1.0"),
    ({"max_age_s": float("nan")}, "max_age_s=nan"),
    ({"max_age_s": True}, "max_age_s=True"),
    ({"max_age_s": 1e12}, "at most 100 years"),
    ({"max_bytes": 0}, "max_bytes=0"),
    ({"max_bytes": -5}, "max_bytes=-5"),
    ({"max_bytes": 1.5}, "max_bytes=1.5"),
    ({"max_bytes": "1g"}, "max_bytes='1g'"),
    ({"clear": True, "max_age_s": 60}, "clear=True removes the policy"),
    ({}, "needs max_age_s or max_bytes"),
    ({"max_bytes": 10}, "cannot hold the log's largest fragment"),
])
def test_05_bad_input_is_refused_by_name_and_changes_nothing(kwargs, problem):
    store, clock = memory(), ManualClock(now=T0)
    hourly_log(store, clock, fragments=2)
    before = store.get(MANIFEST_KEY)
    with pytest.raises(InvalidOption, match=problem):
        set_retention(store, **kwargs)
    assert store.get(MANIFEST_KEY) == before


def test_06_a_policy_on_a_missing_log_is_log_not_found_and_creates_nothing():
    store = memory()
    with pytest.raises(LogNotFound):
        set_retention(store, max_age_s=60)
    assert list(store.list()) == []


@pytest.mark.parametrize("text, ms", [("7d", 604_800_000), ("12h", 43_200_000), ("30m", 1_800_000),
                                      ("90s", 90_000), ("500ms", 500), ("2w", 1_209_600_000), ("1.5h", 5_400_000)])
def test_07_ages_parse_with_their_unit(text, ms):
    assert parse_age_ms(text) == ms


@pytest.mark.parametrize("text", ["", "7", "0d", "-1d", "1y", "nan", "inf h", "1e3s", "1000000000w"])
def test_08_ages_without_a_unit_or_out_of_range_are_refused(text):
    with pytest.raises(InvalidOption, match="not a retention age"):
        parse_age_ms(text)


def test_09_the_policy_round_trips_the_manifest_and_survives_appends_and_the_seal():
    store, clock = memory(), ManualClock(now=T0)
    hourly_log(store, clock, fragments=1)
    set_retention(store, max_age_s=HOUR, max_bytes=1 << 30)
    with LogWriter(store, clock=clock) as writer:
        writer.append([b"more"])
    from wal3_spark.log.committer import Committer
    Committer(store).seal()
    manifest = LogReader(store).manifest()
    assert manifest.retention == RetentionPolicy(3_600_000, 1 << 30)
    data = store.get(MANIFEST_KEY).data
    assert data.endswith(b',"retention":{"max_age_ms":3600000,"max_bytes":1073741824}}')
    assert Manifest.from_bytes(data).to_bytes() == data
    report = set_retention(store, max_age_s=HOUR, max_bytes=1 << 30)
    assert not report.changed and store.get(MANIFEST_KEY).data == data  # the same policy: no write


def test_10_setting_a_policy_while_appends_land_keeps_every_record_and_the_policy():
    store = memory()
    with LogWriter(store) as writer:
        writer.append([b"first"])
    done = threading.Event()

    def append() -> None:
        with LogWriter(store) as w:
            for i in range(40):
                w.append([b"a%d" % i])
        done.set()

    thread = threading.Thread(target=append)
    thread.start()
    for i in range(20):
        set_retention(store, max_age_s=1000 + i)
    thread.join()
    assert done.is_set()
    manifest = LogReader(store).manifest()
    assert manifest.retention == RetentionPolicy(max_age_ms=1_019_000)
    assert offsets(store) == list(range(1, 42)) and verify(store).ok


def test_11_gc_applying_retention_while_an_append_lands_keeps_the_append():
    store, clock = memory(), ManualClock(now=T0)
    hourly_log(store, clock)
    set_retention(store, max_age_s=4 * HOUR)

    def append_after_compute(step: str) -> None:
        if step == "compute":
            with LogWriter(store, clock=clock) as writer:
                writer.append([b"late"])

    report = hooked(GarbageCollector(store, GCOptions(grace_s=0), clock=clock),
                    after_step=append_after_compute).run()
    assert "apply" in report.steps and report.first_to_keep == 31
    assert offsets(store) == list(range(31, 52)) and verify(store).ok


class TimeoutAfterManifestWrite(ForwardingStore):
    """The first manifest compare-and-swap while armed lands, then reports a timeout."""

    armed = False

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        if key == MANIFEST_KEY and self.armed:
            self.armed = False
            self.inner.put_if_match(key, data, etag)
            raise AmbiguousWrite(key, "timed out after the write landed")
        return self.inner.put_if_match(key, data, etag)


def test_12_a_gc_whose_apply_timed_out_after_it_landed_finishes_and_drops_nothing_twice():
    inner, clock = memory(), ManualClock(now=T0)
    hourly_log(inner, clock)
    set_retention(inner, max_age_s=4 * HOUR)
    store = TimeoutAfterManifestWrite(inner)
    store.armed = True  # the compute step writes gc/GARBAGE; the apply is the first manifest write

    report = GarbageCollector(store, GCOptions(grace_s=0), clock=clock).run()

    assert not store.armed and report.first_to_keep == 31
    assert offsets(inner) == list(range(31, 51))
    manifest = LogReader(inner).manifest()
    assert manifest.retention == RetentionPolicy(max_age_ms=4 * 3_600_000)
    assert verify(inner).ok
    again = collect(inner, clock)
    assert again.first_to_keep is None and offsets(inner) == list(range(31, 51))


def test_13_a_broken_cursor_does_not_stop_the_policy_but_releases_nothing_itself():
    store, clock = memory(), ManualClock(now=T0)
    hourly_log(store, clock)
    CursorStore(store).advance("ok", 50)
    store.put_if_absent("cursor/broken.json", b"not json")
    set_retention(store, max_age_s=4 * HOUR)

    report = collect(store, clock)

    assert report.first_to_keep == 31  # the policy's cutoff, not the good cursor's 50
    assert any("broken" in note for note in report.notes)


def test_14_fragments_inside_snapshots_go_by_the_policy_and_the_rebuilt_tree_verifies():
    store, clock = memory(), ManualClock(now=T0)
    options = LogWriterOptions(snapshot_options=SnapshotOptions(2, 2))  # snapshots roll at once
    with LogWriter(store, options, clock=clock) as writer:
        for i in range(12):
            writer.append([b"r%04d" % (i * 5 + j) for j in range(5)])
            clock.advance(HOUR)
    assert LogReader(store).manifest().snapshots  # most fragments sit in snapshots
    set_retention(store, max_age_s=3 * HOUR)  # written before T0 + 9 h: fragments 0..8

    report = collect(store, clock)

    # a whole snapshot [1, 41) dropped, the one straddling 46 rebuilt without [41, 46)
    assert report.first_to_keep == 46 and report.snapshots_dropped >= 1
    assert offsets(store) == list(range(46, 61))
    assert verify(store).ok


def test_15_the_gc_job_applies_the_policy_of_each_log_it_collects(tmp_path):
    from wal3_spark.jobs.gc import JobSettings, collect_one

    clock = ManualClock(now=T0)
    kept, bounded = open_store(str(tmp_path / "a")), open_store(str(tmp_path / "b"))
    hourly_log(kept, clock, fragments=4)
    hourly_log(bounded, clock, fragments=4)
    size = LogReader(bounded).manifest().fragments[-1].num_bytes
    set_retention(bounded, max_bytes=size)  # neither log has a cursor
    settings = JobSettings(options={}, dry_run=False, grace_s=0.0, max_drop_share=0.9, force=False)

    results = [collect_one(str(tmp_path / name), settings) for name in ("a", "b")]

    assert results[0]["ok"] and results[0]["cutoff"] is None and offsets(kept)[0] == 1
    assert results[1]["ok"] and results[1]["retention"] == {"max_bytes": size}
    assert results[1]["retention_removed"] == {"start": 1, "limit": 16, "records": 15}
    assert offsets(bounded) == list(range(16, 21))


def test_16_a_policy_set_between_gc_compute_and_apply_survives_the_apply():
    store, clock = memory(), ManualClock(now=T0)
    hourly_log(store, clock)
    CursorStore(store).advance("reader", 21)

    def set_policy(step: str) -> None:
        if step == "compute":
            set_retention(store, max_age_s=HOUR)

    report = hooked(GarbageCollector(store, GCOptions(grace_s=0), clock=clock), after_step=set_policy).run()

    assert report.first_to_keep == 21  # this run computed from the cursor; the next applies the policy
    assert LogReader(store).manifest().retention == RetentionPolicy(max_age_ms=3_600_000)
    assert collect(store, clock).first_to_keep == 46 and offsets(store) == list(range(46, 51))


def test_17_a_compacted_fragment_keeps_the_policy_and_goes_only_once_all_of_it_is_past_the_age():
    from wal3_spark import compact

    store, clock = memory(), ManualClock(now=T0)
    with LogWriter(store, clock=clock) as writer:
        for i in range(6):
            writer.append(pa.table({"id": pa.array(range(i * 5, i * 5 + 5), pa.int64())}))
            clock.advance(HOUR)  # fragment i written at T0 + i h
    set_retention(store, max_age_s=2.5 * HOUR)
    report = compact(store, clock=clock, settle_s=0, min_fragments=6)
    assert report.fragments_after == 1
    manifest = LogReader(store).manifest()
    assert manifest.retention == RetentionPolicy(max_age_ms=9_000_000)  # the compaction kept it
    assert [s.timestamp_us for s in manifest.fragments[0].segments] == [int((T0 + i * HOUR) * 1e6) for i in range(6)]

    clock.set(T0 + 7 * HOUR)  # the first five segments are past 2.5 h, the newest (T0 + 5 h) is not
    assert collect(store, clock).first_to_keep is None and offsets(store) == list(range(1, 31))
    clock.set(T0 + 7.6 * HOUR)  # now all of it is
    assert collect(store, clock).first_to_keep == 31 and offsets(store) == []
