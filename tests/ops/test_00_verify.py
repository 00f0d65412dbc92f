"""verify finds what is wrong and names the object: a flipped byte, a deleted fragment, an
edited manifest setsum, a missing snapshot; unreferenced files are reported but not failures."""

from __future__ import annotations

import itertools
import json

import pyarrow as pa
import pytest

from tests.support.fakes import FailingStore, HookedStore
from wal3_spark.errors import AccessDenied, CorruptLog, TransientError
from wal3_spark.format.layout import FRAGMENT_PREFIX, MANIFEST_KEY
from wal3_spark.format.manifest import SnapshotOptions
from wal3_spark.format.setsum import Setsum
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.fragment_io import write_fragments
from wal3_spark.log.reader import LogReader
from wal3_spark.log.snapshots import load_snapshot
from wal3_spark.log.writer import LogWriter, LogWriterOptions, to_batches
from wal3_spark.ops.garbage_collector import GarbageCollector, GCOptions
from wal3_spark.ops.verify import verify
from wal3_spark.storage import open_store

_names = itertools.count()


@pytest.fixture(params=["raw", "structured"])
def log_store(request):
    store = open_store(f"memory://verify-{next(_names)}")
    writer = LogWriter(store, LogWriterOptions(snapshot_options=SnapshotOptions(2, 3)))
    for i in range(8):
        if request.param == "raw":
            writer.append([f"record {i}.{j}".encode() for j in range(20)])
        else:
            writer.append(pa.table({"i": pa.array(range(20), pa.int64()), "s": [f"v{i}"] * 20}))
    return store


def _fragment_paths(store):
    return [r.ref.path for r in LogReader(store).plan()]


def _rewrite(store, key, data):
    store.put_if_match(key, data, store.get(key).etag) if key == MANIFEST_KEY else _replace(store, key, data)


def _replace(store, key, data):
    store.delete(key)
    store.put_if_absent(key, data)


def test_00_a_healthy_log_verifies_clean(log_store):
    report = verify(log_store)
    assert report.ok and not report.problems
    assert report.fragments == 8 and report.records == 160 and report.snapshots >= 2


def test_01_one_flipped_byte_in_a_fragment_is_found_and_named(log_store):
    victim = _fragment_paths(log_store)[4]
    data = bytearray(log_store.get(victim).data)
    data[len(data) // 3] ^= 0x01
    _replace(log_store, victim, bytes(data))
    report = verify(log_store)
    assert not report.ok
    assert [(p.kind, p.obj) for p in report.problems] == [("corrupt", victim)]
    with pytest.raises(CorruptLog) as err:
        LogReader(log_store).read_table()
    assert victim in str(err.value)


def test_02_a_deleted_fragment_is_found_and_named(log_store):
    victim = _fragment_paths(log_store)[0]  # inside a snapshot
    log_store.delete(victim)
    report = verify(log_store)
    assert [(p.kind, p.obj) for p in report.problems] == [("missing", victim)]


def test_03_an_edited_manifest_setsum_is_found(log_store):
    doc = json.loads(log_store.get(MANIFEST_KEY).data)
    doc["fragments"][-1]["setsum"] = Setsum.of(b"forged").hexdigest()
    _rewrite(log_store, MANIFEST_KEY, json.dumps(doc).encode())
    report = verify(log_store)
    assert not report.ok
    assert any(p.kind == "invariant" and p.obj == MANIFEST_KEY and "setsum" in p.detail for p in report.problems)
    assert any(p.kind == "corrupt" and p.obj == doc["fragments"][-1]["path"] for p in report.problems)


def test_04_a_missing_snapshot_is_found_and_named(log_store):
    manifest = LogReader(log_store).manifest()
    victim = manifest.snapshots[0].path_to_snapshot
    log_store.delete(victim)
    report = verify(log_store)
    assert ("missing", victim) in [(p.kind, p.obj) for p in report.problems]


def test_05_unreferenced_fragments_are_reported_but_do_not_fail(log_store):
    batches, _ = to_batches([b"orphan"]) if LogReader(log_store).manifest().is_raw else to_batches(
        pa.table({"i": pa.array([1], pa.int64()), "s": ["o"]}))
    schema = LogReader(log_store).manifest().arrow_schema()
    orphan = write_fragments(log_store, batches, schema, fragment_bytes=1 << 20)[0]
    report = verify(log_store)
    assert report.ok
    assert [(p.kind, p.obj) for p in report.problems] == [("extra", orphan.path)]


def test_06_a_missing_log_is_reported():
    report = verify(open_store("memory://verify-nothing-here"))
    assert not report.ok and report.problems[0].kind == "missing"


def test_07_problems_are_classified_by_what_failed_not_by_words_in_a_message(log_store):
    manifest = LogReader(log_store).manifest()
    # a snapshot that is there but malformed (the problem says "'depth' is missing") is corrupt
    malformed = load_snapshot(log_store, manifest.snapshots[0]).snapshots[-1].path_to_snapshot
    doc = json.loads(log_store.get(malformed).data)
    del doc["depth"]
    _replace(log_store, malformed, json.dumps(doc).encode())
    # fragments the store fails to serve are unreadable, not missing
    flaky, denied = manifest.fragments[-1].path, manifest.fragments[0].path

    def error(key: str) -> Exception:
        if key == flaky:
            return TransientError(f"get {key} failed: SlowDown (HTTP 503); still failing after 6 attempts")
        return AccessDenied(f"get {key} failed: permission denied")

    report = verify(FailingStore(log_store, lambda key: key in (flaky, denied), error))
    found = {(p.kind, p.obj): p.detail for p in report.problems}
    assert not report.ok
    assert set(found) == {("corrupt", malformed), ("unreadable", flaky), ("unreadable", denied)}
    assert "'depth' is missing" in found["corrupt", malformed]
    assert "HTTP 503" in found["unreadable", flaky] and "permission denied" in found["unreadable", denied]


def test_08_verify_racing_gc_starts_over_instead_of_reporting_collected_objects(log_store):
    def collect():
        CursorStore(log_store).create("c", 41)
        GarbageCollector(log_store, GCOptions(grace_s=0, force=True)).run()

    racing = HookedStore(log_store, lambda key: key.startswith(FRAGMENT_PREFIX), collect)
    report = verify(racing)
    assert racing.fired
    assert report.ok and report.problems == [], report.problems
    assert report.oldest_offset == 41 and report.records == 120


def test_09_a_fragment_in_a_snapshot_and_again_at_the_tail_is_found_and_named(log_store):
    """What a re-commit of fragments rolled into a snapshot once published: the manifest alone
    is well-formed, the setsum balances, so only the walk through the snapshots sees it."""
    from types import SimpleNamespace

    from wal3_spark.format.manifest import Manifest

    blob = log_store.get(MANIFEST_KEY)
    manifest = Manifest.from_bytes(blob.data)
    rolled = LogReader(log_store).plan()[0].ref
    assert rolled.path not in {f.path for f in manifest.fragments}  # it is in a snapshot
    copy = SimpleNamespace(path=rolled.path, uuid=rolled.seq_no, records=rolled.records,
                           num_bytes=rolled.num_bytes, setsum=rolled.setsum,
                           item_hash=manifest.append_item_hash(not manifest.is_raw))
    twice = manifest.with_fragments([copy], "w")
    twice.scrub()  # not checkable without reading the snapshots
    log_store.put_if_match(MANIFEST_KEY, twice.to_bytes(), blob.etag)
    report = verify(log_store)
    assert not report.ok
    assert any(p.kind == "invariant" and f"fragment {rolled.path} is referenced twice" in p.detail
               for p in report.problems), report.problems


def test_10_a_manifest_schema_that_does_not_decode_is_corrupt():
    """The schema is decoded only when a read needs it: verify decodes it (every read would fail)."""
    store = open_store("memory://verify-bad-schema")
    LogWriter(store).append(pa.table({"id": [1, 2]}))
    doc = json.loads(store.get(MANIFEST_KEY).data)
    doc["schema"] = "bm90IGFycm93"  # base64 of "not arrow"
    store.put_if_match(MANIFEST_KEY, json.dumps(doc).encode(), store.get(MANIFEST_KEY).etag)
    report = verify(store)
    assert [(p.kind, p.obj) for p in report.problems] == [("corrupt", MANIFEST_KEY)]
    assert "not base64 Arrow IPC" in report.problems[0].detail


def test_11_a_structured_fragment_whose_path_time_is_not_its_rows_time_is_corrupt(monkeypatch):
    """The native scan and `_timestamp` pushdown take a structured fragment's time from its
    path; the setsum covers the rows' timestamp_us, not the path, so a verifying read checks
    that the two agree."""
    import wal3_spark.log.fragment_io as fragment_io

    store = open_store("memory://verify-path-time")
    LogWriter(store).append(pa.table({"id": [1]}))
    new_uuid7 = fragment_io.new_uuid7
    monkeypatch.setattr(fragment_io, "new_uuid7", lambda ts: new_uuid7(ts + 5))
    LogWriter(store).append(pa.table({"id": [2, 3]}))
    report = verify(store)
    assert [p.kind for p in report.problems] == ["corrupt"]
    assert report.problems[0].obj == _fragment_paths(store)[-1]
    assert "2 of its rows have a timestamp_us other than its path's" in report.problems[0].detail
    with pytest.raises(CorruptLog, match="other than its path's"):
        LogReader(store).read_table()
    assert LogReader(store).read_table(verify=False).num_rows == 3
