"""Reading: the tail in one GET, plans that load only the snapshots they need (cached), and
logs written by Chroma's S3 backend (absolute `offset` column, sequence-numbered paths)."""

from __future__ import annotations

import hashlib
import io
import itertools
import struct
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from wal3_spark.errors import CorruptLog, Wal3Error
from wal3_spark.format import MANIFEST_KEY, FragmentRef
from wal3_spark.manifest import Manifest, SnapshotOptions
from wal3_spark.reader import LogReader
from wal3_spark.setsum import Setsum
from wal3_spark.storage import open_store
from wal3_spark.verify import verify
from wal3_spark.writer import LogWriter

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
    store = open_store(f"memory://reader-{next(_names)}")
    writer = LogWriter(store, snapshot_options=SnapshotOptions(3, 8))
    for i in range(1200):
        writer.append(f"r{i}".encode())
    return store


def test_00_compaction_leaves_reads_offsets_and_setsums_unchanged(long_log):
    manifest = LogReader(long_log).manifest()
    assert len(manifest.fragments) <= 8 and max(p.depth for p in manifest.snapshots) >= 4
    table = LogReader(long_log).read_table()
    assert table.column("body").to_pylist() == [f"r{i}".encode() for i in range(1200)]
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


def _chroma_fragment(start: int, bodies: list[bytes], ts: int) -> tuple[bytes, Setsum]:
    """A fragment as Chroma's S3 backend writes it: absolute `offset`, uint64, binary body."""
    offsets = list(range(start, start + len(bodies)))
    table = pa.table(
        {
            "offset": pa.array(offsets, pa.uint64()),
            "timestamp_us": pa.array([ts] * len(bodies), pa.uint64()),
            "body": pa.array(bodies, pa.binary()),
        },
        schema=pa.schema([pa.field("offset", pa.uint64(), False), pa.field("timestamp_us", pa.uint64(), False),
                          pa.field("body", pa.binary(), False)]),
    )
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="snappy")
    setsum = Setsum.from_digests(
        hashlib.sha3_256(struct.pack(">QQ", o, ts) + b).digest() for o, b in zip(offsets, bodies)
    )
    return buf.getvalue(), setsum


@pytest.fixture
def chroma_log():
    store = open_store(f"memory://chroma-{next(_names)}")
    refs, start = [], 1
    for seq in range(1, 4):
        bodies = [f"chroma {seq}.{i}".encode() for i in range(seq + 1)]
        data, setsum = _chroma_fragment(start, bodies, 1_700_000_000_000_000 + seq)
        path = f"log/Bucket=0000000000000000/FragmentSeqNo={seq:016x}.parquet"
        store.put_if_absent(path, data)
        refs.append(FragmentRef(path, seq, start, start + len(bodies), len(data), setsum))
        start += len(bodies)
    manifest = Manifest(Setsum.sum(r.setsum for r in refs), Setsum(), sum(r.num_bytes for r in refs),
                        "chroma", (), tuple(refs))
    store.put_if_absent(MANIFEST_KEY, manifest.to_json())
    return store


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
    data, _ = _chroma_fragment(7, [b"chroma 1.0", b"chroma 1.1"], 1_700_000_000_000_001)
    chroma_log.delete(first.path)
    chroma_log.put_if_absent(first.path, data)
    with pytest.raises(CorruptLog, match="stored offsets|setsum"):
        LogReader(chroma_log).read_table()
    assert not verify(chroma_log).ok
