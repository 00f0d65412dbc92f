"""Sealing a log (every append path fails, readers keep working) and copying it (migration)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from tests.support.fakes import chroma_fragment
from wal3_spark.errors import CopyError, DataLost, LogSealed
from wal3_spark.format.fragment import encode_raw
from wal3_spark.format.layout import MANIFEST_KEY, FragmentRef
from wal3_spark.format.manifest import Manifest, SnapshotOptions
from wal3_spark.format.setsum import Setsum
from wal3_spark.log.committer import Committer
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.fragment_io import write_fragment
from wal3_spark.log.reader import LogReader
from wal3_spark.log.writer import LogWriter, LogWriterOptions
from wal3_spark.ops.copy import copy_log
from wal3_spark.ops.garbage_collector import GarbageCollector, GCOptions
from wal3_spark.ops.verify import verify
from wal3_spark.storage import open_store


@pytest.fixture
def store(store_url, store_options):
    return open_store(store_url, store_options)


def rows(store, start=None):
    t = LogReader(store).read_table(start)
    return list(zip(t.column("_offset").to_pylist(), t.column("body").to_pylist()))


def test_00_sealed_log_rejects_every_core_append_path_and_stays_readable(store):
    writer = LogWriter(store)
    writer.append([b"a", b"b"])
    committer = Committer(store, writer="sealer")
    # a fragment written before the seal, committed after it: the commit must fail too
    early = write_fragment(store, encode_raw([b"late"], 1))
    sealed = committer.seal()
    assert sealed.sealed and committer.seal().sealed  # sealing twice is fine
    with pytest.raises(LogSealed, match="sealed"):
        writer.append([b"c"])  # the writer's cached manifest predates the seal
    with pytest.raises(LogSealed, match="sealed"):
        LogWriter(store).append([b"c"])
    with pytest.raises(LogSealed, match="sealed"):
        Committer(store).commit([early])
    with pytest.raises(LogSealed, match="sealed"):
        LogWriter(store).submit([b"d"]).result(timeout=60)
    with pytest.raises(LogSealed, match="sealed"):
        LogWriter(store).append(pa.table({"x": [1]}))
    assert rows(store) == [(1, b"a"), (2, b"b")]
    assert LogReader(store).manifest().next_offset == 3
    assert verify(store).ok


def test_01_gc_still_works_on_a_sealed_log(store):
    writer = LogWriter(store)
    for i in range(4):
        writer.append([b"%d" % i] * 2)
    CursorStore(store).create("c", 5)
    Committer(store).seal()
    GarbageCollector(store, GCOptions(grace_s=0)).run()
    m = LogReader(store).manifest()
    assert m.sealed and m.oldest_offset == 5
    assert verify(store).ok


def test_02_seal_then_copy_verifies_clean_and_the_copy_accepts_appends(store, tmp_path):
    writer = LogWriter(store)
    for i in range(6):
        writer.append([b"r%d-%d" % (i, j) for j in range(3)])
    CursorStore(store).create("consumer", 7)
    src_manifest = Committer(store).seal()
    dst = open_store(str(tmp_path / "copy"))
    report = copy_log(store, dst)
    assert report.verified and report.source_sealed and report.rewritten == 0
    assert (report.start, report.limit, report.records) == (1, 19, 18)
    copy_manifest = LogReader(dst).manifest()
    # fragments are copied byte for byte: same setsums, same total
    assert copy_manifest.setsum == src_manifest.setsum
    assert not copy_manifest.sealed
    assert verify(dst).ok and verify(dst).problems == []
    assert rows(dst) == rows(store)
    assert CursorStore(dst).get("consumer").cursor.offset == 7
    LogWriter(dst).append([b"after-migration"])
    assert rows(dst, 19) == [(19, b"after-migration")]
    with pytest.raises(CopyError, match="already holds a log"):
        copy_log(store, dst)


def test_03_copy_a_suffix_keeps_offsets(store, tmp_path):
    writer = LogWriter(store, LogWriterOptions(snapshot_options=SnapshotOptions(2, 2)))
    for i in range(8):
        writer.append([b"%d-%d" % (i, j) for j in range(4)])  # [1,5) [5,9) ... [29,33)
    dst = open_store(f"memory://copy-suffix-{tmp_path.name}")
    report = copy_log(store, dst, from_offset=11, snapshot_options=SnapshotOptions(2, 2))
    assert report.start == 9  # the fragment holding 11 is copied whole
    assert rows(dst) == rows(store, 9)
    assert LogReader(dst).manifest().oldest_offset == 9
    assert verify(dst).ok
    with pytest.raises(DataLost):
        LogReader(dst).read_table(3)


def test_04_copy_refuses_a_corrupt_source_fragment(tmp_path):
    src = open_store(str(tmp_path / "src"))
    LogWriter(src).append([b"x", b"y"])
    ref = LogReader(src).manifest().fragments[0]
    (tmp_path / "src" / ref.path).write_bytes(
        encode_raw([b"x", b"z"], 5).data
    )
    with pytest.raises(Exception, match="corrupt|setsum"):
        copy_log(src, open_store(str(tmp_path / "dst")))
    assert not open_store(str(tmp_path / "dst")).exists("manifest/MANIFEST")


def test_05_empty_log_copies_to_an_empty_log_at_the_same_tail(tmp_path):
    src = open_store(str(tmp_path / "src"))
    LogWriter(src).append([b"x"] * 3)
    CursorStore(src).create("c", 4)
    GarbageCollector(src, GCOptions(grace_s=0, force=True)).run()
    dst = open_store(str(tmp_path / "dst"))
    report = copy_log(src, dst)
    assert report.fragments == 0 and LogReader(dst).manifest().next_offset == 4
    LogWriter(dst).append([b"y"])
    assert rows(dst) == [(4, b"y")]


def test_06_copy_refuses_a_chroma_fragment_placed_where_its_offsets_do_not_start(tmp_path):
    # a Chroma S3 fragment whose stored offsets start at 7 while the manifest places it at 1;
    # its setsum and record count match the file, so only the offsets tell: the copy, which
    # rewrites such fragments with relative offsets, must not silently "repair" it
    src = open_store(str(tmp_path / "src"))
    data, setsum = chroma_fragment(7, [b"a", b"b"], 1_700_000_000_000_000)
    path = "log/Bucket=0000000000000000/FragmentSeqNo=0000000000000001.parquet"
    src.put_if_absent(path, data)
    ref = FragmentRef(path, 1, 1, 3, len(data), setsum)
    src.put_if_absent(MANIFEST_KEY, Manifest(setsum, Setsum(), len(data), "chroma", (), (ref,)).to_bytes())
    dst = open_store(str(tmp_path / "dst"))
    with pytest.raises(CopyError, match="stored offsets do not start where the manifest places it") as info:
        copy_log(src, dst)
    assert path in str(info.value) and "wal3 verify" in str(info.value)
    assert not dst.exists(MANIFEST_KEY)


def test_07_a_copy_whose_manifest_write_lands_late_is_created_once(tmp_path):
    """The destination manifest goes through the compare-and-swap primitive: its create times
    out and lands right after the copy's next read of it (which still shows no log), and the
    copy finds its own write instead of failing or writing blindly."""
    from wal3_spark.testing import LateLandingStore

    src = open_store(str(tmp_path / "src"))
    LogWriter(src).append([b"x", b"y"])
    dst = open_store(str(tmp_path / "dst"))
    late = LateLandingStore(dst, keys=[MANIFEST_KEY], writes=[1], methods=("put_if_absent",))
    report = copy_log(src, late)
    assert late.counts["landed"] == 1, late.counts
    assert report.verified and LogReader(dst).read_table().column("body").to_pylist() == [b"x", b"y"]
