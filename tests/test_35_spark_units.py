"""The connector's plain functions, without Spark: options, packing, admission, task memory."""

from __future__ import annotations

import pyarrow as pa
import pytest

from wal3_spark.errors import InvalidOption
from wal3_spark.format import FragmentRef
from wal3_spark.reader import ReadRange
from wal3_spark.setsum import Setsum
from wal3_spark.spark import options as opts
from wal3_spark.spark.stream_reader import admit
from wal3_spark.spark.tasks import pack, write_partition
from wal3_spark.storage import open_store


def test_options_parse_case_insensitively_into_a_frozen_object():
    o = opts.parse({"path": "/tmp/x", "FRAGMENTBYTES": "8m", "mergeschema": "TRUE"}, opts.WRITE)
    assert (o.fragment_bytes, o.merge_schema) == (8 << 20, True)
    with pytest.raises(Exception):
        o.fragment_bytes = 1  # frozen
    r = opts.parse({"path": "/tmp/x", "startingOffsets": '{"offset": 42}', "endingoffsets": "50",
                    "verifyOnRead": "false", "failOnDataLoss": "false"}, opts.READ)
    assert r.starting == ("offset", 42) and r.ending == ("offset", 50)
    assert not r.verify_on_read and not r.fail_on_data_loss
    t = opts.parse({"path": "/tmp/x", "startingTimestamp": "1970-01-01T00:00:01Z"}, opts.STREAM_READ)
    assert t.starting == ("timestamp", 1_000_000)
    assert opts.parse({"path": "/x", "startingTimestamp": "1500"}, opts.READ).starting == ("timestamp", 1_500_000)


@pytest.mark.parametrize("options, match", [
    ({"nope": "1"}, "unknown option"),
    ({"maxPartitionBytes": "big"}, "expected a size"),
    ({"maxRecordsPerTrigger": "0"}, "does not apply"),
    ({"startingOffsets": "middle"}, "earliest or latest or an offset"),
    ({"startingOffsets": "0"}, "offsets start at 1"),
    ({"verifyOnRead": "maybe"}, "expected true or false"),
    ({"startingOffsets": "1", "startingTimestamp": "5"}, "not both"),
])
def test_bad_options_fail_with_the_valid_list(options, match):
    with pytest.raises(InvalidOption, match=match) as info:
        opts.parse({"path": "/tmp/x", **options}, opts.READ)
    assert "Valid options for batch reads" in str(info.value)
    assert "startingOffsets" in str(info.value) and "endpoint" in str(info.value)


def test_stream_read_cursor_name_is_checked():
    with pytest.raises(InvalidOption, match="letters, digits and underscores"):
        opts.parse({"path": "/tmp/x", "cursor": "bad name"}, opts.STREAM_READ)


def test_credentials_are_masked():
    o = opts.parse({"path": "s3://b/l", "secretAccessKey": "S3CR3T", "accessKeyId": "AKIA1",
                    "endpoint": "http://h:1"}, opts.READ)
    assert dict(o.store_options)["secretAccessKey"] == "S3CR3T"
    assert "S3CR3T" not in repr(o) and "AKIA1" not in repr(o) and "http://h:1" in repr(o)
    with pytest.raises(InvalidOption) as info:
        opts.parse({"path": "s3://b/l", "secretAccessKey": "S3CR3T", "x": "1"}, opts.READ)
    assert "S3CR3T" not in str(info.value)
    with pytest.raises(InvalidOption) as info:
        opts.parse({"path": "s3://b/l", "secretAccessKey": "S3CR3T", "writerId": "w"}, opts.WRITE)
    assert "S3CR3T" not in str(info.value)


def _ranges(sizes, records=10):
    out, start = [], 1
    for i, size in enumerate(sizes):
        ref = FragmentRef(f"log/{i}", f"u{i}", start, start + records, size, Setsum())
        out.append(ReadRange(ref, start, start + records))
        start += records
    return out


def test_pack_is_contiguous_balanced_and_bounded():
    mb = 1 << 20
    ranges = _ranges([20 * mb] * 8)
    parts = pack(ranges, 128 * mb, min_partitions=4)
    assert [len(p.ranges) for p in parts] == [2, 2, 2, 2]
    assert [r for p in parts for r in p.ranges] == ranges
    parts = pack(ranges, 30 * mb, min_partitions=1)
    assert len(parts) == 6 and all(sum(r.ref.num_bytes for r in p.ranges) <= 40 * mb for p in parts)
    tiny = _ranges([1000] * 50)
    assert len(pack(tiny, 128 * mb, min_partitions=8)) == 1  # below the open cost: one task
    assert pack([], 1, 1) == []


def test_admit_never_stalls_and_respects_limits():
    ranges = _ranges([100, 100, 100, 100])  # offsets 1..41, 10 records each
    assert admit(ranges, 1, 41, max_records=15) == 16
    assert admit(ranges, 1, 41, max_fragments=2) == 21
    assert admit(ranges, 1, 41, max_bytes=250) == 21
    assert admit(ranges, 1, 41, max_bytes=1) == 11  # at least one fragment
    assert admit(ranges, 1, 41, max_bytes=1000, max_records=5) == 6


def test_write_task_memory_is_bounded_by_fragment_bytes(tmp_path):
    """A task streaming 48 MB through write_partition never holds much more than 2x
    fragmentBytes in Arrow memory, whatever the partition size."""
    store = open_store((tmp_path / "log").as_uri())
    schema = pa.schema([pa.field("id", pa.int64(), False), pa.field("s", pa.string(), False)])
    fragment_bytes = 4 << 20
    peak = 0

    def batches():
        nonlocal peak
        for i in range(48):
            ids = pa.array(range(i * 20_000, (i + 1) * 20_000), pa.int64())
            s = pa.array([f"{j:040d}" for j in range(20_000)], pa.string())  # ~1 MB per batch
            yield pa.RecordBatch.from_arrays([ids, s], schema=schema)
            peak = max(peak, pa.total_allocated_bytes())

    base = pa.total_allocated_bytes()
    files = write_partition(store, batches(), schema, fragment_bytes)
    assert sum(f.records for f in files) == 48 * 20_000
    assert len(files) >= 3
    assert peak - base < 2.5 * fragment_bytes, (peak - base) / fragment_bytes


def test_a_read_keeps_the_query_schema_when_the_log_gained_a_column():
    """A stream fixes its schema when it starts; a later mergeSchema append adds a column.
    Batches must still come out in the query's schema, columns taken by name."""
    from wal3_spark.reader import LogReader, output_schema
    from wal3_spark.spark.tasks import Part, read_partition
    from wal3_spark.writer import LogWriter

    store = open_store("memory://units-evolving-schema")
    LogWriter(store).append(pa.table({"id": pa.array([1, 2], pa.int64()), "name": ["a", "b"]}))
    query_schema = output_schema(LogReader(store).manifest().arrow_schema())
    LogWriter(store, merge_schema=True).append(
        pa.table({"id": pa.array([3], pa.int64()), "score": [0.5], "name": ["c"]}))
    reader = LogReader(store)
    manifest = reader.manifest()
    batches = list(read_partition(store, Part(tuple(reader.plan())), manifest.arrow_schema(),
                                  query_schema, verify=True))
    table = pa.Table.from_batches(batches)
    assert table.schema == query_schema
    assert table.column("id").to_pylist() == [1, 2, 3]
    assert table.column("name").to_pylist() == ["a", "b", "c"]
    assert table.column("_offset").to_pylist() == [1, 2, 3]


def test_an_executor_reading_fragments_gc_deleted_after_planning_gets_the_collected_range(tmp_path):
    """The driver plans partitions from one manifest; GC collects before the tasks run."""
    from wal3_spark.cursors import CursorStore
    from wal3_spark.errors import DataLost
    from wal3_spark.gc import GarbageCollector
    from wal3_spark.reader import LogReader, output_schema
    from wal3_spark.spark.tasks import Part, read_partition
    from wal3_spark.writer import LogWriter

    store = open_store(str(tmp_path / "log"))
    writer = LogWriter(store)
    for i in range(4):
        writer.append([b"%d" % i] * 5)  # [1,6) [6,11) [11,16) [16,21)
    reader = LogReader(store)
    manifest = reader.manifest()
    parts = pack(reader.plan(manifest=manifest), 1 << 30, 1)
    CursorStore(store).create("c", 12)
    GarbageCollector(store, grace_s=0, force=True).run()
    with pytest.raises(DataLost) as info:
        list(read_partition(store, parts[0], None, output_schema(None), verify=True))
    assert (info.value.start, info.value.oldest) == (1, 11)
