"""The manifest and snapshots as pure values: Chroma's real manifests, invariants, compaction."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.fakes import FakeFragment as Frag
from tests.support.fakes import chroma_testdata
from wal3_spark.errors import CorruptLog
from wal3_spark.format.layout import FragmentRef
from wal3_spark.format.manifest import Manifest, Snapshot, SnapshotOptions, Txn
from wal3_spark.format.setsum import Setsum
from wal3_spark.format.uuid7 import new_uuid7, uuid7_timestamp_us


def frag(i: int, records: int = 3) -> Frag:
    return Frag(f"log/Uuid={i:032x}.parquet", f"{i:032x}", records, 100 + i, Setsum.of(str(i).encode()))


def test_00_production_manifest_round_trips_byte_for_byte_and_balances():
    raw = chroma_testdata("production_MANIFEST.json").read_bytes()
    manifest = Manifest.from_bytes(raw)
    manifest.scrub()
    assert manifest.to_bytes() == raw.strip()
    assert manifest.uses_seq_nos
    assert (manifest.oldest_offset, manifest.next_offset) == (1, 3521399)
    assert len(manifest.snapshots) == 693 and len(manifest.fragments) == 1059


def test_01_production_manifest_with_one_edited_setsum_names_the_invariant():
    doc = json.loads(chroma_testdata("production_MANIFEST.json").read_bytes())
    doc["fragments"][5]["setsum"] = Setsum.of(b"tampered").hexdigest()
    with pytest.raises(CorruptLog) as err:
        Manifest.from_bytes(json.dumps(doc).encode()).scrub()
    assert err.value.invariant == "setsum == snapshots + fragments + collected"


def test_02_chroma_gc_fixture_is_a_consistent_tree():
    """bad_manifest1/bad_snapshots1 are Chroma's GC regression fixture (garbage at offset 9340
    once failed); every invariant holds, and the pointers match the snapshots they name."""
    manifest = Manifest.from_bytes(chroma_testdata("bad_manifest1.json").read_bytes())
    manifest.scrub()
    snapshots = {
        doc["path"]: Snapshot.from_dict(doc, doc["path"])
        for doc in json.loads(chroma_testdata("bad_snapshots1.json").read_bytes())
    }
    for snapshot in snapshots.values():
        snapshot.scrub()
    pending = list(manifest.snapshots)
    while pending:
        pointer = pending.pop()
        snapshot = snapshots[pointer.path_to_snapshot]
        assert snapshot.pointer() == pointer
        pending.extend(snapshot.snapshots)


@pytest.mark.parametrize(
    "edit, invariant",
    [
        (lambda d: d["fragments"][0].update(start={"offset": 9342}), "snapshots are followed contiguously by fragments"),
        (lambda d: d["fragments"][1].update(start={"offset": 9999}), "fragments are contiguous"),
        (lambda d: d["snapshots"][1].update(limit={"offset": 6000}), "snapshots are contiguous"),
        (lambda d: d.update(collected=Setsum.of(b"x").hexdigest()), "setsum == snapshots + fragments + collected"),
        (lambda d: d.update(initial_offset={"offset": 7}), "initial_offset equals the oldest offset"),
        (lambda d: d["fragments"][1].update(seq_no="0190aaaa-0000-7000-8000-000000000000"),
         "fragment identifiers are all sequence numbers or all UUIDs"),
        (lambda d: d["fragments"][1].update(setsum="zz"), "well-formed setsum"),
        (lambda d: d.pop("acc_bytes"), "required field present"),
    ],
)
def test_03_broken_manifests_name_the_broken_invariant(edit, invariant):
    doc = json.loads(chroma_testdata("bad_manifest1.json").read_bytes())
    edit(doc)
    with pytest.raises(CorruptLog) as err:
        Manifest.from_bytes(json.dumps(doc).encode()).scrub()
    assert err.value.invariant == invariant
    assert str(err.value) == f"{err.value.obj}: {err.value.problem}"  # the object, then what is wrong


@pytest.mark.parametrize(
    "edit, invariant",
    [
        (lambda d: d.update(setsum=Setsum.of(b"x").hexdigest()), "snapshot setsum equals the sum of its children"),
        (lambda d: d.update(depth=1), "snapshot depth exceeds its children's"),
        (lambda d: d["fragments"].append(d["fragments"][0]) if d["fragments"] else d.update(fragments=[{
            "path": "log/x", "seq_no": 1, "start": {"offset": 1}, "limit": {"offset": 2},
            "num_bytes": 1, "setsum": "00" * 32}]), "a snapshot holds fragments or snapshots, never both"),
    ],
)
def test_04_broken_snapshots_name_the_broken_invariant(edit, invariant):
    docs = json.loads(chroma_testdata("bad_snapshots1.json").read_bytes())
    doc = next(d for d in docs if d["depth"] == 2)
    edit(doc)
    with pytest.raises(CorruptLog) as err:
        Snapshot.from_dict(doc, doc["path"]).scrub()
    assert err.value.invariant == invariant


def test_05_extensions_round_trip_and_are_omitted_at_their_defaults():
    manifest = Manifest.empty("w").with_fragments([frag(1)], "w", txn=("app", Txn(3, 42)))
    manifest = manifest.sealed_by("w")
    again = Manifest.from_bytes(manifest.to_bytes())
    assert again == manifest and again.sealed and again.txns == {"app": Txn(3, 42)}
    plain = json.loads(replace(Manifest.empty("w"), incarnation=None).to_bytes())
    assert list(plain) == ["setsum", "collected", "acc_bytes", "writer", "snapshots", "fragments"]


def test_06_fragments_are_placed_contiguously_at_the_tail():
    manifest = Manifest.empty("w").with_fragments([frag(1, 5), frag(2, 2)], "w")
    assert [(f.start, f.limit) for f in manifest.fragments] == [(1, 6), (6, 8)]
    assert manifest.next_offset == 8 and manifest.acc_bytes == 101 + 102
    manifest.scrub()


def _compact(manifest: Manifest, options: SnapshotOptions, store: dict[str, Snapshot]) -> Manifest:
    while (snapshot := manifest.generate_snapshot(options, "w")) is not None:
        snapshot.scrub()
        store[snapshot.path] = snapshot
        manifest = manifest.apply_snapshot(snapshot)
    return manifest


def _flatten(manifest: Manifest, store: dict[str, Snapshot]) -> list[FragmentRef]:
    def walk(path: str) -> list[FragmentRef]:
        snapshot = store[path]
        return [f for p in snapshot.snapshots for f in walk(p.path_to_snapshot)] + list(snapshot.fragments)

    return [f for p in manifest.snapshots for f in walk(p.path_to_snapshot)] + list(manifest.fragments)


def test_07_thousands_of_fragments_compact_into_a_small_manifest_with_nothing_lost():
    options = SnapshotOptions(snapshot_rollover_threshold=4, fragment_rollover_threshold=8)
    store: dict[str, Snapshot] = {}
    manifest = Manifest.empty("w")
    expected = Setsum()
    for i in range(3000):
        f = frag(i, records=1 + i % 3)
        expected = expected + f.setsum
        manifest = _compact(manifest.with_fragments([f], "w"), options, store)
        manifest.scrub()
    flat = _flatten(manifest, store)
    assert [f.path for f in flat] == [frag(i).path for i in range(3000)]
    assert all(a.limit == b.start for a, b in zip(flat, flat[1:]))
    assert manifest.setsum == expected == Setsum.sum(f.setsum for f in flat)
    assert manifest.next_offset == 1 + sum(1 + i % 3 for i in range(3000))
    assert len(manifest.fragments) <= 8 and len(manifest.snapshots) <= 4 * 5
    depths = [p.depth for p in manifest.snapshots]
    assert depths == sorted(depths, reverse=True) and max(depths) >= 3


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 5), min_size=0, max_size=12),
    commits=st.lists(st.integers(1, 4), min_size=1, max_size=40),
    fthreshold=st.integers(2, 6),
    sthreshold=st.integers(2, 4),
)
def test_08_property_apply_compact_scrub(sizes, commits, fthreshold, sthreshold):
    """Any sequence of multi-fragment commits, compacted with any thresholds, keeps every
    fragment exactly once, in order, with offsets contiguous and the setsum conserved."""
    options = SnapshotOptions(sthreshold, fthreshold)
    store: dict[str, Snapshot] = {}
    manifest = Manifest.empty("w")
    made: list[Frag] = []
    for n in commits:
        batch = [frag(len(made) + k, records=(sizes[(len(made) + k) % len(sizes)] if sizes else 1)) for k in range(n)]
        made.extend(batch)
        manifest = _compact(manifest.with_fragments(batch, "w"), options, store)
        manifest.scrub()
        again = Manifest.from_bytes(manifest.to_bytes())
        assert again == manifest
    flat = _flatten(manifest, store)
    assert [f.path for f in flat] == [f.path for f in made]
    assert flat[0].start == 1 and manifest.next_offset == 1 + sum(f.records for f in made)
    assert manifest.setsum == Setsum.sum(f.setsum for f in made)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 30), st.integers(0, 7))
def test_09_property_scrub_rejects_any_lost_or_duplicated_fragment(n, which):
    manifest = Manifest.empty("w").with_fragments([frag(i) for i in range(n + 2)], "w")
    frags = list(manifest.fragments)
    victim = which % len(frags)
    dropped = replace(manifest, fragments=tuple(frags[:victim] + frags[victim + 1 :]))
    doubled = replace(manifest, fragments=tuple(frags + [replace(frags[victim], start=frags[-1].limit,
                                                                  limit=frags[-1].limit + 3)]))
    for broken in (dropped, doubled):
        with pytest.raises(CorruptLog):
            broken.scrub()


def test_10_scrub_rejects_a_fragment_referenced_twice_even_when_the_setsum_balances():
    """What a commit placed twice (a manifest PUT that timed out and landed late) balances: only the
    path check sees it."""
    twice = Manifest.empty("w").with_fragments([frag(1), frag(2)], "w").with_fragments([frag(1)], "w")
    with pytest.raises(CorruptLog) as err:
        twice.scrub()
    assert err.value.invariant == "fragment paths are unique"
    assert frag(1).path in str(err.value)
    snapshot = Snapshot.of_fragments(list(twice.fragments), "w")
    with pytest.raises(CorruptLog, match="is referenced twice") as err:
        snapshot.scrub()
    assert err.value.invariant == "fragment paths are unique"


@settings(max_examples=40, deadline=None)
@given(
    times=st.lists(st.integers(1, 10**6), min_size=1, max_size=60),
    fthreshold=st.integers(2, 5),
    sthreshold=st.integers(2, 3),
)
def test_11_property_rolled_written_us_bounds_every_rolled_fragment(times, fthreshold, sthreshold):
    """Fragments committed in any order of write time: the manifest's `rolled_written_us` is the
    newest write time of the fragments its snapshots hold (what lets a commit skip the snapshot
    walk exactly: docs/design/20-committing.md), through rollups of pointers and a round trip."""
    options = SnapshotOptions(snapshot_rollover_threshold=sthreshold, fragment_rollover_threshold=fthreshold)
    store: dict[str, Snapshot] = {}
    manifest = Manifest.empty("w")
    for i, written in enumerate(times):
        u = str(new_uuid7(written))
        f = Frag(f"log/Uuid={u}.parquet", u, 1, 100, Setsum.of(str(i).encode()))
        manifest = _compact(manifest.with_fragments([f], "w"), options, store)
        rolled = [r for r in _flatten(manifest, store) if r not in manifest.fragments]
        expected = max((uuid7_timestamp_us(r.seq_no) for r in rolled), default=None)
        assert manifest.rolled_written_us == expected
    assert Manifest.from_bytes(manifest.to_bytes()) == manifest


def test_12_rolled_written_us_is_unknown_when_not_known_and_rejects_wrong_types():
    """A manifest compacted before the field (or by another writer) says nothing about its
    snapshots: rolling more keeps it unknown, and so does a fragment without a UUIDv7 time."""
    options = SnapshotOptions(snapshot_rollover_threshold=4, fragment_rollover_threshold=2)
    u = str(new_uuid7(5))
    young = Frag(f"log/Uuid={u}.parquet", u, 1, 100, Setsum.of(b"y"))
    legacy = _compact(Manifest.empty("w").with_fragments([frag(i) for i in range(4)], "w"), options, {})
    assert legacy.snapshots and legacy.rolled_written_us is None
    assert "rolled_written_us" not in json.loads(legacy.to_bytes())
    grown = _compact(legacy.with_fragments([young, frag(9), frag(10)], "w"), options, {})
    assert len(grown.snapshots) > len(legacy.snapshots) and grown.rolled_written_us is None
    known = replace(legacy, rolled_written_us=7)
    assert _compact(known.with_fragments([frag(9), frag(10)], "w"), options, {}).rolled_written_us is None
    for wrong in ("7", -1, True, 1.5):
        doc = json.loads(known.to_bytes())
        doc["rolled_written_us"] = wrong
        with pytest.raises(CorruptLog, match="rolled_written_us"):
            Manifest.from_bytes(json.dumps(doc).encode())


def test_13_collected_written_us_survives_every_rewrite_and_apply_garbage_raises_it():
    """The newest write time GC ever collected is kept by appends, rolls, sealing and the orphan
    horizon, survives a round trip, only grows with each collection (0 for a fragment of unknown
    age), and a log collected before the field gets GC's clock as its bound."""
    from wal3_spark.format.garbage import apply_garbage, compute_garbage

    options = SnapshotOptions(snapshot_rollover_threshold=4, fragment_rollover_threshold=2)
    uuids = [str(new_uuid7(t)) for t in (30, 10, 20, 40)]
    frags = [Frag(f"log/Uuid={u}.parquet", u, 1, 100, Setsum.of(u.encode())) for u in uuids]
    manifest = Manifest.empty("w").with_fragments(frags, "w")
    collected = apply_garbage(manifest, compute_garbage(manifest, 3, lambda p: None))
    assert collected.collected_written_us == uuid7_timestamp_us(uuids[0])  # the newer of 30, 10
    rewritten = _compact(collected.with_fragments([frag(9), frag(10), frag(11)], "w"), options, {})
    rewritten = rewritten.sealed_by("w").with_orphan_horizon(5, "w")
    assert rewritten.collected_written_us == collected.collected_written_us
    assert Manifest.from_bytes(rewritten.to_bytes()) == rewritten
    again = apply_garbage(collected, compute_garbage(collected, 4, lambda p: None))
    assert again.collected_written_us == collected.collected_written_us  # 20 is older: kept
    unknown = Manifest.empty("w").with_fragments([frag(1), frag(2)], "w")
    assert apply_garbage(unknown, compute_garbage(unknown, 4, lambda p: None)).collected_written_us == 0
    legacy = replace(collected, collected_written_us=None)
    later = apply_garbage(legacy, compute_garbage(legacy, 4, lambda p: None), now_us=10**15)
    assert later.collected_written_us == 10**15
    for wrong in ("7", -1, True, 1.5):
        doc = json.loads(collected.to_bytes())
        doc["collected_written_us"] = wrong
        with pytest.raises(CorruptLog, match="collected_written_us"):
            Manifest.from_bytes(json.dumps(doc).encode())
