"""Reading: the tail in one GET, plans that load only the snapshots they need (cached), and
logs written by Chroma's S3 backend (absolute `offset` column, sequence-numbered paths)."""

from __future__ import annotations

import itertools
import pickle
from collections import Counter

import pyarrow as pa
import pytest

from tests.support.fakes import (
    CountingStore,
    HookedStore,
    chroma_fragment,
    snapshotted_log,
    write_chroma_s3_log,
)
from wal3_spark.errors import CorruptLog, DataLost, Wal3Error
from wal3_spark.format.layout import FRAGMENT_PREFIX, MANIFEST_KEY, SNAPSHOT_PREFIX
from wal3_spark.format.manifest import SnapshotOptions
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.reader import LogReader, iter_fragments
from wal3_spark.log.writer import LogWriter, LogWriterOptions
from wal3_spark.ops.garbage_collector import GarbageCollector, GCOptions
from wal3_spark.ops.verify import verify
from wal3_spark.storage import open_store

_names = itertools.count()


class Counting:
    """Counts GETs by key on the way to the wrapped store."""

    def __init__(self, inner):
        self.inner, self.url, self.gets = inner, inner.url + "#counting", Counter()

    def get(self, key):
        self.gets[key] += 1
        return self.inner.get(key)

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.fixture(scope="module")
def long_log():
    """1,200 one-record commits compacted with thresholds (3, 8): a snapshot tree of depth 4+."""
    return snapshotted_log(f"memory://reader-{next(_names)}", 1200, SnapshotOptions(3, 8))


def test_00_compaction_leaves_reads_offsets_and_setsums_unchanged(long_log):
    manifest = LogReader(long_log).manifest()
    assert len(manifest.fragments) <= 8 and max(p.depth for p in manifest.snapshots) >= 4
    table = LogReader(long_log).read_table()
    assert table.column("body").to_pylist() == [f"record {i}".encode() for i in range(1200)]
    assert table.column("_offset").to_pylist() == list(range(1, 1201))
    report = verify(long_log)
    assert report.ok and report.fragments == 1200 and report.setsum == manifest.setsum.hexdigest()


def test_01_the_tail_is_one_get_of_the_manifest(long_log):
    counting = Counting(long_log)
    assert LogReader(counting).bounds() == (1, 1201)
    assert counting.gets == Counter({MANIFEST_KEY: 1})


def test_02_plans_load_only_the_snapshots_covering_the_range_and_cache_them(long_log):
    counting = Counting(long_log)
    reader = LogReader(counting)
    tail = reader.plan(1195, 1201)
    assert [p.ref.start for p in tail] == list(range(1195, 1201))
    assert set(counting.gets) == {MANIFEST_KEY}, "reading the tail loaded snapshots"
    counting.gets.clear()
    middle = reader.plan(600, 601)
    loaded = [k for k in counting.gets if k.startswith("snapshot/")]
    depth = max(p.depth for p in reader.manifest().snapshots)
    assert [p.ref.start for p in middle] == [600]
    assert 1 <= len(loaded) <= depth, f"one root-to-leaf path, got {len(loaded)} snapshots"
    counting.gets.clear()
    reader.plan(600, 601)
    assert not [k for k in counting.gets if k.startswith("snapshot/")], "snapshots were not cached"


@pytest.fixture
def chroma_log():
    return write_chroma_s3_log(open_store(f"memory://chroma-{next(_names)}"))


def test_03_a_chroma_s3_log_reads_and_verifies(chroma_log):
    table = LogReader(chroma_log).read_table()
    assert table.column("_offset").to_pylist() == list(range(1, 10))
    assert table.column("body").to_pylist()[:3] == [b"chroma 1.0", b"chroma 1.1", b"chroma 2.0"]
    assert LogReader(chroma_log).read_table(3, 5).column("body").to_pylist() == [b"chroma 2.0", b"chroma 2.1"]
    assert verify(chroma_log).ok
    assert LogReader(chroma_log).offset_for_timestamp(1_700_000_000_000_002) == 3


def test_04_appending_to_a_chroma_s3_log_is_refused_with_the_fix(chroma_log):
    with pytest.raises(Wal3Error, match="wal3 copy"):
        LogWriter(chroma_log).append(b"mixed")


def test_05_a_fragment_whose_stored_offsets_disagree_with_the_manifest_is_corrupt(chroma_log):
    manifest = LogReader(chroma_log).manifest()
    first = manifest.fragments[0]
    data, _ = chroma_fragment(7, [b"chroma 1.0", b"chroma 1.1"], 1_700_000_000_000_001)
    chroma_log.delete(first.path)
    chroma_log.put_if_absent(first.path, data)
    with pytest.raises(CorruptLog, match="stored offsets|setsum"):
        LogReader(chroma_log).read_table()
    assert not verify(chroma_log).ok


# ----------------------------------------------------------------- racing garbage collection


def _collect(store, cutoff: int):
    """What `wal3 gc --grace 0` does to a log whose only consumer read up to `cutoff`."""

    def run():
        CursorStore(store).create("consumer", cutoff)
        GarbageCollector(store, GCOptions(grace_s=0, force=True)).run()

    return run


def test_06_a_read_that_loses_a_race_with_gc_gets_the_garbage_collected_range():
    store = open_store(f"memory://reader-{next(_names)}")
    writer = LogWriter(store)
    for i in range(6):
        writer.append([b"%d" % i] * 5)  # [1,6) [6,11) ... [26,31)
    # the reader has read the manifest; GC collects [1, 11) before its first fragment GET
    racing = HookedStore(store, lambda key: key.startswith(FRAGMENT_PREFIX), _collect(store, 13))
    with pytest.raises(DataLost) as info:
        LogReader(racing).read_table(1)
    assert racing.fired
    assert (info.value.start, info.value.oldest) == (1, 11)
    assert "[1, 11)" in str(info.value) and "garbage-collected" in str(info.value)
    # what GC left is read as before, and a fragment missing for another reason is corrupt
    assert LogReader(store).read_table(11).column("_offset").to_pylist() == list(range(11, 31))
    store.delete(LogReader(store).plan(26)[0].ref.path)
    with pytest.raises(CorruptLog, match="is missing, and the manifest still references it"):
        LogReader(store).read_table(11)


def _snapshotted_log():
    """Offsets [1, 61) in fragments of 2, rolled into snapshots (the first starts at 1)."""
    store = open_store(f"memory://reader-{next(_names)}")
    writer = LogWriter(store, LogWriterOptions(snapshot_options=SnapshotOptions(3, 3)))
    for i in range(30):
        writer.append([b"%d" % i] * 2)
    first = LogReader(store).manifest().snapshots[0]
    assert first.start == 1 and first.limit > 25
    return store, first


def test_07_a_walk_through_a_snapshot_gc_replaced_continues_in_the_current_manifest():
    store, first = _snapshotted_log()
    manifest = LogReader(store).manifest()
    # GC at offset 9 rebuilds the snapshot straddling it (deleting the old one) while a reader
    # walks that snapshot from its old manifest, for offsets GC kept
    racing = HookedStore(store, lambda key: key.startswith(SNAPSHOT_PREFIX), _collect(store, 9))
    refs = list(iter_fragments(racing, manifest, 15, 25))
    assert racing.fired and not store.exists(first.path_to_snapshot)
    assert [r.start for r in refs] == list(range(15, 25, 2))
    # for offsets GC removed, the reader is told which
    store, _ = _snapshotted_log()
    racing = HookedStore(store, lambda key: key.startswith(SNAPSHOT_PREFIX), _collect(store, 9))
    manifest = LogReader(racing).manifest()
    with pytest.raises(DataLost) as info:
        LogReader(racing).plan(3, 25, manifest=manifest)
    assert (info.value.start, info.value.oldest) == (3, LogReader(store).manifest().oldest_offset)


def test_08_read_table_reads_the_manifest_once():
    store = open_store(f"memory://reader-{next(_names)}")
    LogWriter(store).append(pa.table({"id": [1, 2]}))

    def merge_schema_append():
        LogWriter(store, LogWriterOptions(merge_schema=True)).append(pa.table({"id": [3], "extra": ["x"]}))

    # a mergeSchema append lands right after the reader's first manifest GET
    racing = HookedStore(store, lambda key: key == MANIFEST_KEY, merge_schema_append, after=True)
    table = LogReader(racing).read_table()
    assert racing.fired and racing.gets[MANIFEST_KEY] == 1
    assert table.column_names == ["id", "_offset", "_timestamp"]
    assert table.column("id").to_pylist() == [1, 2]


def test_09_a_read_accepting_data_loss_skips_what_gc_took_after_it_planned(caplog):
    store = open_store(f"memory://reader-{next(_names)}")
    writer = LogWriter(store)
    for i in range(6):
        writer.append([b"%d" % i] * 5)  # [1,6) [6,11) ... [26,31)
    manifest = LogReader(store).manifest()  # planned from here; GC collects [1, 11) then
    _collect(store, 13)()
    lenient = LogReader(store).read(1, manifest=manifest, fail_on_data_loss=False)
    assert pa.Table.from_batches(list(lenient)).column("_offset").to_pylist() == list(range(11, 31))
    assert "offsets [1, 6) were garbage-collected while being read" in caplog.text


def test_10_a_reader_owns_its_snapshot_cache_and_shares_one_it_is_given(long_log):
    """Snapshots are cached by the reader that loaded them (no process-wide cache): a second
    reader loads them again, unless it is given the first one's cache (as a stream's driver
    gives every micro-batch's reader its own)."""
    counting = CountingStore(long_log)
    first = LogReader(counting)
    assert len(list(first.plan())) > 0
    snapshot_gets = counting.counts[("get", SNAPSHOT_PREFIX.rstrip("/"))]
    assert snapshot_gets > 0
    list(first.plan())
    assert counting.counts[("get", SNAPSHOT_PREFIX.rstrip("/"))] == snapshot_gets
    list(LogReader(counting, snapshots=first.snapshots).plan())
    assert counting.counts[("get", SNAPSHOT_PREFIX.rstrip("/"))] == snapshot_gets
    list(LogReader(counting).plan())
    assert counting.counts[("get", SNAPSHOT_PREFIX.rstrip("/"))] == 2 * snapshot_gets


def test_11_a_reader_reuses_the_fragment_pointers_it_parsed_and_its_caches_pickle_empty(long_log):
    reader = LogReader(long_log)
    before, after = reader.manifest(), reader.manifest()
    assert all(a is b for a, b in zip(before.fragments, after.fragments))
    assert not any(a is b for a, b in zip(before.fragments, LogReader(long_log).manifest().fragments))
    list(reader.plan())
    copy = pickle.loads(pickle.dumps(reader))
    assert copy.store.url == long_log.url
    assert copy.snapshots.limit == reader.snapshots.limit and not copy.snapshots._snapshots
    assert not copy.known_refs._refs
