"""How the driver cuts a read into work, without Spark: a batch read's fragment ranges packed
into partitions, and the end of a streaming trigger admitted under the per-trigger limits."""

from __future__ import annotations

from wal3_spark.format.layout import FragmentRef
from wal3_spark.format.setsum import Setsum
from wal3_spark.log.fragment_io import ReadRange
from wal3_spark.spark.planning import pack
from wal3_spark.spark.stream_reader import admit


def _ranges(sizes, records=10):
    out, start = [], 1
    for i, size in enumerate(sizes):
        ref = FragmentRef(f"log/{i}", f"u{i}", start, start + records, size, Setsum())
        out.append(ReadRange(ref, start, start + records))
        start += records
    return out


def test_00_pack_is_contiguous_balanced_and_bounded():
    mb = 1 << 20
    ranges = _ranges([20 * mb] * 8)
    parts = pack(ranges, 128 * mb, min_partitions=4)
    assert [len(p.ranges) for p in parts] == [2, 2, 2, 2]
    assert [r for p in parts for r in p.ranges] == ranges
    parts = pack(ranges, 30 * mb, min_partitions=1)
    assert len(parts) == 6 and all(sum(r.ref.num_bytes for r in p.ranges) <= 40 * mb for p in parts)
    # more partitions than cores: a multiple of the cores, so that no task runs alone at the end
    parts = pack(_ranges([42 * mb] * 8), 128 * mb, min_partitions=2)
    assert [len(p.ranges) for p in parts] == [2, 2, 2, 2]
    assert len(pack(_ranges([42 * mb] * 5), 128 * mb, min_partitions=2)) == 2
    assert len(pack(_ranges([42 * mb] * 3), 40 * mb, min_partitions=2)) == 3  # one per fragment
    tiny = _ranges([1000] * 50)
    assert len(pack(tiny, 128 * mb, min_partitions=8)) == 1  # below the open cost: one task
    assert pack([], 1, 1) == []


def test_01_admit_never_stalls_and_respects_limits():
    ranges = _ranges([100, 100, 100, 100])  # offsets 1..41, 10 records each
    assert admit(ranges, 1, 41, max_records=15) == 16
    assert admit(ranges, 1, 41, max_fragments=2) == 21
    assert admit(ranges, 1, 41, max_bytes=250) == 21
    assert admit(ranges, 1, 41, max_bytes=1) == 11  # at least one fragment
    assert admit(ranges, 1, 41, max_bytes=1000, max_records=5) == 6
