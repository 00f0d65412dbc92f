"""What an executor's read task returns, called without Spark: batches in the query's schema
whatever the log's schema became, and collected fragments reported or skipped."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from wal3_spark.spark.planning import pack
from wal3_spark.storage import open_store


def test_00_a_read_keeps_the_query_schema_when_the_log_gained_a_column():
    """A stream fixes its schema when it starts; a later mergeSchema append adds a column.
    Batches must still come out in the query's schema, columns taken by name."""
    from wal3_spark.log.fragment_io import output_schema
    from wal3_spark.log.reader import LogReader
    from wal3_spark.log.writer import LogWriter, LogWriterOptions
    from wal3_spark.spark.planning import Part
    from wal3_spark.spark.read_tasks import read_partition

    store = open_store("memory://units-evolving-schema")
    LogWriter(store).append(pa.table({"id": pa.array([1, 2], pa.int64()), "name": ["a", "b"]}))
    query_schema = output_schema(LogReader(store).manifest().arrow_schema())
    LogWriter(store, LogWriterOptions(merge_schema=True)).append(
        pa.table({"id": pa.array([3], pa.int64()), "score": [0.5], "name": ["c"]}))
    reader = LogReader(store)
    manifest = reader.manifest()
    batches = list(read_partition(store, Part(tuple(reader.plan())), manifest.arrow_schema(),
                                  query_schema, verify=True, item_hash=manifest.item_hash))
    table = pa.Table.from_batches(batches)
    assert table.schema == query_schema
    assert table.column("id").to_pylist() == [1, 2, 3]
    assert table.column("name").to_pylist() == ["a", "b", "c"]
    assert table.column("_offset").to_pylist() == [1, 2, 3]


def test_01_a_query_column_the_log_lacks_reads_as_nulls_unless_not_null():
    """Reads conform each batch to the query's schema with `schema.conform`, as appends and
    the codec do: a nullable column the log lacks reads as nulls (as in a fragment written
    before a mergeSchema append); a NOT NULL one fails naming both schemas."""
    from wal3_spark.errors import SchemaMismatch
    from wal3_spark.log.fragment_io import output_schema
    from wal3_spark.log.reader import LogReader
    from wal3_spark.log.writer import LogWriter
    from wal3_spark.spark.planning import Part
    from wal3_spark.spark.read_tasks import read_partition

    store = open_store("memory://units-query-column-missing")
    LogWriter(store).append(pa.table({"id": pa.array([1, 2], pa.int64())}))
    reader = LogReader(store)
    manifest = reader.manifest()
    part = Part(tuple(reader.plan()))
    base = output_schema(manifest.arrow_schema())

    def read(query: pa.Schema) -> pa.Table:
        batches = read_partition(store, part, manifest.arrow_schema(), query, verify=True,
                                 item_hash=manifest.item_hash)
        return pa.Table.from_batches(list(batches), schema=query)

    nullable = base.insert(1, pa.field("note", pa.string()))
    assert read(nullable).column("note").to_pylist() == [None, None]
    with pytest.raises(SchemaMismatch, match="'note' is missing and NOT NULL") as info:
        read(base.insert(1, pa.field("note", pa.string(), nullable=False)))
    assert "data:" in str(info.value) and "query:" in str(info.value)


def test_02_an_executor_reading_fragments_gc_deleted_after_planning_gets_the_collected_range(tmp_path):
    """The driver plans partitions from one manifest; GC collects before the tasks run."""
    from wal3_spark.errors import DataLost
    from wal3_spark.log.cursors import CursorStore
    from wal3_spark.log.fragment_io import output_schema
    from wal3_spark.log.reader import LogReader
    from wal3_spark.log.writer import LogWriter
    from wal3_spark.ops.garbage_collector import GarbageCollector, GCOptions
    from wal3_spark.spark.read_tasks import read_partition

    store = open_store(str(tmp_path / "log"))
    writer = LogWriter(store)
    for i in range(4):
        writer.append([b"%d" % i] * 5)  # [1,6) [6,11) [11,16) [16,21)
    reader = LogReader(store)
    manifest = reader.manifest()
    parts = pack(reader.plan(manifest=manifest), 1 << 30, 1)
    CursorStore(store).create("c", 12)
    GarbageCollector(store, GCOptions(grace_s=0, force=True)).run()
    with pytest.raises(DataLost) as info:
        list(read_partition(store, parts[0], None, output_schema(None), verify=True))
    assert (info.value.start, info.value.oldest) == (1, 11)
    # failOnDataLoss=false holds on executors too: the collected fragments are skipped
    batches = read_partition(store, parts[0], None, output_schema(None), verify=True,
                             fail_on_data_loss=False)
    assert pa.Table.from_batches(list(batches)).column("_offset").to_pylist() == list(range(11, 21))


def test_03_a_task_hands_out_a_fragment_row_group_by_row_group_and_only_once_it_is_verified():
    """Each Parquet row group reaches Spark as soon as it is decoded (not the whole fragment
    first, then slices of it), the range's edges cut inside row groups; and a fragment whose
    bytes do not match their digest yields no row at all, even though its damage is in a later
    row group than the first one read."""
    from wal3_spark.errors import CorruptLog
    from wal3_spark.log.fragment_io import ReadRange, output_schema, read_range
    from wal3_spark.log.reader import LogReader
    from wal3_spark.log.writer import LogWriter
    from wal3_spark.spark.planning import Part
    from wal3_spark.spark.read_tasks import read_partition

    store = open_store("memory://units-row-groups")
    LogWriter(store).append(pa.table({"id": pa.array(range(150_000), pa.int64())}))
    reader = LogReader(store)
    manifest = reader.manifest()
    (whole,) = reader.plan()
    payload, target = manifest.arrow_schema(), output_schema(manifest.arrow_schema())
    part = ReadRange(whole.ref, whole.ref.start + 70_000, whole.ref.start + 140_000)

    def read(verify: bool) -> list[pa.RecordBatch]:
        return list(read_partition(store, Part((part,)), payload, target, verify=verify,
                                   item_hash=manifest.item_hash))

    batches = read(verify=True)
    assert [b.num_rows for b in batches] == [131_072 - 70_000, 140_000 - 131_072]  # row groups of 65,536
    table = pa.Table.from_batches(batches)
    assert table.column("id").to_pylist() == list(range(70_000, 140_000))
    assert table.equals(pa.Table.from_batches([read_range(store, part, payload, verify=True)]))

    data = bytearray(store.get(whole.ref.path).data)
    last = pq.ParquetFile(pa.BufferReader(bytes(data))).metadata.row_group(2)
    data[last.column(last.num_columns - 1).data_page_offset + 8] ^= 1  # in the last row group's `id`
    store.delete(whole.ref.path)
    store.put_if_absent(whole.ref.path, bytes(data))
    rows = read_partition(store, Part((part,)), payload, target, verify=True,
                          item_hash=manifest.item_hash)
    with pytest.raises(CorruptLog, match="do not match their blake3"):
        next(rows)


@pytest.mark.parametrize("verify, records", [(True, False), (True, True), (False, False)])
def test_04_a_range_inside_a_fragment_reads_its_own_offsets_in_every_verify_mode(verify, records):
    """A range that starts and ends inside a fragment (a read from `startingOffsets`, a
    partition boundary) gives each row its own offset, whether the digest, the record-level
    setsum or nothing checks it: the whole-fragment proof slices the same rows as the pieces."""
    from wal3_spark.log.fragment_io import ReadRange, read_range
    from wal3_spark.log.reader import LogReader
    from wal3_spark.log.writer import LogWriter

    store = open_store(f"memory://units-range-inside-{verify}-{records}")
    writer = LogWriter(store)
    writer.append([b"first"])  # offset 1: the fragment below starts at 2
    writer.append([f"r{i}".encode() for i in range(2, 12)])
    ref = LogReader(store).manifest().fragments[1]
    assert (ref.start, ref.limit) == (2, 12)
    batch = read_range(store, ReadRange(ref, 5, 9), None, verify=verify, records=records)
    assert batch.column("_offset").to_pylist() == [5, 6, 7, 8]
    assert batch.column("body").to_pylist() == [b"r5", b"r6", b"r7", b"r8"]


@pytest.mark.parametrize("verify, records", [(True, False), (True, True), (False, False)])
def test_05_a_fragment_column_the_read_schema_lacks_is_a_damaged_schema_in_every_verify_mode(verify, records):
    """A column the manifest's schema lacks would otherwise read as nulls under another name:
    every path through `open_range` refuses it, the whole-fragment proof as the row-group one."""
    from wal3_spark.errors import CorruptLog
    from wal3_spark.log.fragment_io import ReadRange, read_range
    from wal3_spark.log.reader import LogReader
    from wal3_spark.log.writer import LogWriter

    store = open_store(f"memory://units-unknown-column-{verify}-{records}")
    LogWriter(store).append(pa.table({"id": pa.array([1, 2], pa.int64())}))
    manifest = LogReader(store).manifest()
    ref = manifest.fragments[0]
    damaged = pa.schema([pa.field("renamed", pa.int64())])
    with pytest.raises(CorruptLog, match="that the manifest's schema"):
        read_range(store, ReadRange(ref, ref.start, ref.limit), damaged, verify=verify, records=records,
                   item_hash=manifest.item_hash)
