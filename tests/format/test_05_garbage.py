"""Garbage collection's decisions as pure functions over manifest values (no storage)."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.support.fakes import FakeFragment as Frag
from tests.support.fakes import chroma_testdata
from wal3_spark.errors import CorruptLog, GarbageStale
from wal3_spark.format.garbage import Garbage, apply_garbage, compute_garbage
from wal3_spark.format.layout import seq_no_fragment_path
from wal3_spark.format.manifest import Manifest, Snapshot, SnapshotOptions
from wal3_spark.format.setsum import Setsum


def frag(i: int, records: int = 10) -> Frag:
    u = str(uuid.UUID(int=(0x0190_0000_0000 + i) << 80 | 0x7 << 76 | 0b10 << 62 | i))
    return Frag(f"log/Uuid={u}.parquet", u, records, 100, Setsum.of(b"frag-%d" % i))


class Snapshots(dict):
    """An in-memory snapshot loader (path -> Snapshot)."""

    def __call__(self, pointer):
        return self[pointer.path_to_snapshot]


def build(n: int, rollover: int | None = None) -> tuple[Manifest, Snapshots]:
    """A manifest of n 10-record fragments (offsets 1..10n+1), rolled into snapshots."""
    snaps = Snapshots()
    options = SnapshotOptions(rollover, rollover) if rollover else None
    m = Manifest.empty("test")
    for i in range(n):
        m = m.with_fragments([frag(i)], "test")
        while options and (s := m.generate_snapshot(options, "test")) is not None:
            snaps[s.path] = s
            m = m.apply_snapshot(s)
    m.scrub()
    return m, snaps


def all_fragments(m: Manifest, snaps: Snapshots) -> list:
    out = []

    def walk(p):
        s = snaps[p.path_to_snapshot]
        for c in s.snapshots:
            walk(c)
        out.extend(s.fragments)

    for p in m.snapshots:
        walk(p)
    return out + list(m.fragments)


def collect(m: Manifest, snaps: Snapshots, cutoff: int) -> tuple[Garbage, Manifest]:
    g = compute_garbage(m, cutoff, snaps)
    assert g is not None
    for s in g.snapshots_to_make:
        snaps[s.path] = s
    new = apply_garbage(m, g)
    assert new is not None
    return g, new


def test_00_flat_manifest_drops_exactly_whole_fragments_below_the_cutoff():
    m, snaps = build(6)  # fragments [1,11) [11,21) ... [51,61)
    g, new = collect(m, snaps, 25)
    assert g.first_to_keep == 21
    assert [f.start for f in new.fragments] == [21, 31, 41, 51]
    assert new.initial_offset == 21 and new.oldest_offset == 21
    assert new.setsum == m.setsum
    assert new.collected == m.collected + m.fragments[0].setsum + m.fragments[1].setsum
    assert g.setsum_to_discard == m.fragments[0].setsum + m.fragments[1].setsum
    new.scrub()
    # UUID fragments: the limit is the smallest UUID still in the manifest
    assert g.fragments_are_uuids and g.fragments_to_drop_uuid_limit == m.fragments[2].seq_no
    assert (g.fragments_to_drop_start, g.fragments_to_drop_limit) == (0, 0)


def test_01_cutoff_on_a_fragment_boundary_keeps_the_fragment_starting_there():
    m, snaps = build(4)
    g, new = collect(m, snaps, 21)
    assert g.first_to_keep == 21 and new.fragments[0].start == 21


def test_02_nothing_to_collect():
    m, snaps = build(4)
    assert compute_garbage(m, 1, snaps) is None
    assert compute_garbage(m, 10, snaps) is None  # inside the first fragment: kept whole
    _, new = collect(m, snaps, 15)
    assert compute_garbage(new, 15, snaps) is None  # already collected


def test_03_cutoff_at_the_tail_drops_everything_and_appends_continue():
    m, snaps = build(3)
    g, new = collect(m, snaps, m.next_offset)
    assert new.fragments == () and new.snapshots == ()
    assert new.next_offset == m.next_offset == new.oldest_offset
    assert uuid.UUID(g.fragments_to_drop_uuid_limit).int == uuid.UUID(m.fragments[-1].seq_no).int + 1
    after = new.with_fragments([frag(99)], "w")
    after.scrub()
    assert after.fragments[0].start == m.next_offset


@pytest.mark.parametrize("cutoff", [2, 11, 35, 101, 155, 177, 250, 333, 401, 480, 500, 501])
def test_04_snapshot_trees_every_cutoff_balances_and_keeps_every_offset_at_or_after_it(cutoff):
    m, snaps = build(50, rollover=3)  # depth-3 snapshot trees
    assert max(p.depth for p in m.snapshots) >= 3
    before = all_fragments(m, snaps)
    g = compute_garbage(m, cutoff, snaps)
    if g is None:
        # nothing lies below the cutoff, or the first snapshot straddles it and would keep a
        # single whole snapshot or fragment: then it is kept whole (test_11)
        first = m.snapshots[0]
        assert before[0].limit > cutoff or first.start < cutoff < first.limit
        return
    for s in g.snapshots_to_make:
        s.scrub()
        snaps[s.path] = s
    new = apply_garbage(m, g)
    new.scrub()
    assert new.setsum == m.setsum
    assert new.collected == m.collected + g.setsum_to_discard
    after = all_fragments(new, snaps)
    # exactly the fragments from the first kept on: every one holding an offset >= cutoff, and
    # those of a straddling snapshot kept whole (test_11)
    kept = [f for f in before if f.limit > g.first_to_keep]
    assert after == kept
    assert new.oldest_offset == g.first_to_keep <= cutoff
    assert Setsum.sum(f.setsum for f in before if f.limit <= g.first_to_keep) == g.setsum_to_discard
    # at most one snapshot of the manifest was replaced, at the same place (depth order kept)
    assert len([p for p in new.snapshots if p not in m.snapshots]) <= 1
    depths = [p.depth for p in new.snapshots]
    assert depths == sorted(depths, reverse=True)
    # applying again is a no-op
    assert apply_garbage(new, g) is None


def test_05_garbage_json_round_trips_with_chroma_field_names():
    m, snaps = build(30, rollover=3)
    g = compute_garbage(m, 123, snaps)
    doc = json.loads(g.to_bytes())
    assert list(doc) == [
        "snapshots_to_drop", "snapshots_to_make", "snapshot_for_root", "fragments_to_drop_start",
        "fragments_to_drop_limit", "fragments_to_drop_uuid_limit", "fragments_are_uuids",
        "setsum_to_discard", "first_to_keep", "fragment_paths_to_drop",
    ]
    assert doc["fragment_paths_to_drop"] == [f.path for f in all_fragments(m, snaps) if f.limit <= 123]
    assert Garbage.from_bytes(g.to_bytes()) == g
    assert Garbage.from_bytes(Garbage.empty().to_bytes()).is_empty()
    assert Garbage.from_bytes(b"").is_empty()
    empty = json.loads(Garbage.empty().to_bytes())
    assert empty["snapshot_for_root"] is None and empty["first_to_keep"] == {"offset": 1}


def test_06_chroma_garbage_json_from_its_test_suite_parses():
    chroma = {
        "snapshots_to_drop": [{
            "setsum": "25bdf4e28c8079d3e0324db417fa28eede29f8d7cc34c71fac19c39ca4691792",
            "path_to_snapshot": "snapshot/SNAPSHOT.25bdf4e28c8079d3e0324db417fa28eede29f8d7cc34c71fac19c39ca4691792",
            "depth": 1, "start": {"offset": 1}, "limit": {"offset": 2379}, "num_bytes": 3796051}],
        "snapshots_to_make": [],
        "snapshot_for_root": None,
        "fragments_to_drop_start": 100,
        "fragments_to_drop_limit": 200,
        "setsum_to_discard": "c921d21a0820be5d3b6f2d90942648f2853188bb0e3c6a22fe3dbd81c1e1c380",
        "first_to_keep": {"offset": 900883},
    }
    g = Garbage.from_bytes(json.dumps(chroma).encode())
    assert g.first_to_keep == 900883 and len(g.fragment_paths()) == 100
    assert g.fragment_paths()[0] == "log/Bucket=0000000000000000/FragmentSeqNo=0000000000000064.parquet"
    assert seq_no_fragment_path(4097) == "log/Bucket=0000000000001000/FragmentSeqNo=0000000000001001.parquet"
    assert not g.fragments_are_uuids and g.snapshot_for_root is None


def test_07_stale_garbage_is_detected_when_a_writer_rolled_the_fragments():
    m, snaps = build(5)
    g = compute_garbage(m, 25, snaps)
    # a writer appends and rolls the oldest fragments into a snapshot before phase 2
    rolled = m.with_fragments([frag(50)], "w")
    s = rolled.generate_snapshot(SnapshotOptions(2, 2), "w")
    rolled = rolled.apply_snapshot(s)
    with pytest.raises(GarbageStale):
        apply_garbage(rolled, g)


def test_08_concurrent_appends_between_phase_1_and_2_are_kept():
    m, snaps = build(5)
    g = compute_garbage(m, 25, snaps)
    later = m.with_fragments([frag(60), frag(61)], "w")
    new = apply_garbage(later, g)
    new.scrub()
    assert new.next_offset == later.next_offset
    assert [f.seq_no for f in new.fragments[-2:]] == [frag(60).uuid, frag(61).uuid]


def test_09_chroma_regression_bad_manifest1_at_9340():
    """Chroma's `s3_bad_manifest1` case: computing garbage at 9340 must succeed (a sequence-
    numbered log with a depth-3/2/2 snapshot tree straddled near its end)."""
    manifest = Manifest.from_bytes(chroma_testdata("bad_manifest1.json").read_bytes())
    snaps = Snapshots()
    for doc in json.loads(chroma_testdata("bad_snapshots1.json").read_bytes()):
        s = Snapshot.from_dict(doc, doc["path"])
        snaps[s.path] = s
    before = all_fragments(manifest, snaps)
    g = compute_garbage(manifest, 9340, snaps)
    assert g is not None and not g.fragments_are_uuids
    # The straddling depth-2 snapshot [6556, 9341) would keep a single fragment, which cannot be
    # a snapshot of its own depth (it would share its child's path): it is kept whole, as
    # Chroma's own computation does, so the first offset kept is 6556.
    assert g.first_to_keep == 6556
    kept = [f for f in before if f.limit > g.first_to_keep]
    dropped = [f for f in before if f.limit <= g.first_to_keep]
    assert (g.fragments_to_drop_start, g.fragments_to_drop_limit) == (
        dropped[0].seq_no, dropped[-1].seq_no + 1)
    assert g.setsum_to_discard == Setsum.sum(f.setsum for f in dropped)
    for s in g.snapshots_to_make:
        snaps[s.path] = s
    new = apply_garbage(manifest, g)
    new.scrub()
    assert all_fragments(new, snaps) == kept
    assert new.initial_seq_no == g.fragments_to_drop_limit
    assert new.setsum == manifest.setsum
    # round trip through Chroma's JSON keeps the decision
    assert Garbage.from_bytes(g.to_bytes()) == g


def test_10_corrupt_snapshot_setsum_is_refused():
    m, snaps = build(10, rollover=3)
    p = m.snapshots[0]
    s = snaps[p.path_to_snapshot]
    snaps[p.path_to_snapshot] = Snapshot(s.path, s.depth, Setsum.of(b"x"), s.writer, s.snapshots, s.fragments)
    with pytest.raises(CorruptLog):
        compute_garbage(m, m.next_offset, snaps)


def test_11_a_rebuilt_snapshot_never_takes_the_path_of_another():
    """Snapshot paths are content-addressed by setsum alone, and a store keeps the first object
    written at a path ("exists" is success). A snapshot GC makes whose setsum equals an existing
    snapshot's (its kept part is exactly one whole child, opened up) would leave the manifest
    pointing, with its own depth, at that other snapshot: `wal3 stress` ran into it as a depth-2
    pointer to a depth-1 file (every later GC run then failed with CorruptLog)."""
    m, snaps = build(50, rollover=3)
    for cutoff in range(2, m.next_offset + 1):
        g = compute_garbage(m, cutoff, snaps)
        if g is None:
            continue
        for made in g.snapshots_to_make:
            existing = snaps.get(made.path)
            assert existing is None or existing.pointer() == made.pointer(), (
                f"cutoff {cutoff}: {made.path} (depth {made.depth}) would collide with an "
                f"existing depth-{existing.depth} snapshot"
            )
