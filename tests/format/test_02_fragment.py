"""Fragments: the setsum vectors, the column-major chunk encoding against a per-row reference,
independence from batching, Parquet round trips, corruption, schema projection and paths
(UUIDv7: format/test_01_uuid7; uploads: log/test_02_fragment_upload)."""

from __future__ import annotations

import decimal
import io
import json
import struct
import uuid

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.fakes import data_file
from wal3_spark.errors import CorruptLog, SchemaMismatch
from wal3_spark.format.chunk_encoding import (
    CHUNK_ROWS,
    encode_column,
    structured_setsum,
)
from wal3_spark.format.fragment import (
    FragmentBuilder,
    decode_fragment,
    encode_raw,
    encode_table,
    recompute_setsum,
)
from wal3_spark.format.layout import fragment_path, parse_fragment_path
from wal3_spark.format.schema import conform
from wal3_spark.format.setsum import Setsum
from wal3_spark.format.uuid7 import new_uuid7

VECTORS = json.loads(data_file("setsum_vectors.json").read_text())
RAW_VECTORS = VECTORS["wal3_fragments"]
STRUCTURED_VECTORS = VECTORS["structured_chunks"]
TS = 1_700_000_000_123_456

# ----------------------------------------------------------------------------- test helpers


def u64_be(value: int) -> bytes:
    return struct.pack(">Q", value)


def chroma_fragment(offsets: list[int], bodies: list[bytes], timestamp_us: int) -> bytes:
    """A fragment as Chroma's S3 backend writes it: absolute `offset`, nullable columns."""
    table = pa.table(
        {
            "offset": pa.array(offsets, pa.uint64()),
            "timestamp_us": pa.array([timestamp_us] * len(offsets), pa.uint64()),
            "body": pa.array(bodies, pa.binary()),
        }
    )
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def column_setsum(array: pa.Array, timestamp_us: int = TS) -> Setsum:
    return structured_setsum([array], len(array), timestamp_us)


def item_setsum(array: pa.Array, timestamp_us: int = TS) -> Setsum:
    """The setsum of one chunk holding `array`, from the per-row reference encoding."""
    if len(array) == 0:
        return Setsum()  # no rows, no chunk
    return Setsum.of(u64_be(0) + u64_be(timestamp_us) + reference_enc(array))


def reference_enc(array: pa.Array, parent_valid: list[bool] | None = None) -> bytes:
    """docs/format.md section 3's `enc`, written row by row from Python values: the test oracle."""
    kind = array.type
    if pa.types.is_dictionary(kind):
        array = array.dictionary_decode()
        kind = array.type
    values = array.to_pylist()
    valid = [v is not None and (parent_valid is None or parent_valid[i]) for i, v in enumerate(values)]
    out = bytes(valid)
    if pa.types.is_struct(kind):
        for index in range(kind.num_fields):
            out += reference_enc(array.field(index), valid)
    elif pa.types.is_map(kind) or pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        out += b"".join(struct.pack("<Q", len(array[i].values) if ok else 0) for i, ok in enumerate(valid))
        kept = [array[i].values for i, ok in enumerate(valid) if ok]
        entries = pa.concat_arrays(kept) if kept else array.values.slice(0, 0)
        if pa.types.is_map(kind):
            out += reference_enc(entries.field(0)) + reference_enc(entries.field(1))
        else:
            out += reference_enc(entries)
    elif pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        data = [(v.encode() if isinstance(v, str) else v) if ok else b"" for v, ok in zip(values, valid)]
        out += b"".join(struct.pack("<Q", len(d)) for d in data) + b"".join(data)
    elif pa.types.is_boolean(kind):
        out += bytes(bool(v) and ok for v, ok in zip(values, valid))
    elif pa.types.is_decimal(kind):
        width = kind.bit_width // 8
        out += b"".join(
            (int(v.scaleb(kind.scale)) if ok else 0).to_bytes(width, "little", signed=True)
            for v, ok in zip(values, valid)
        )
    elif pa.types.is_floating(kind):
        fmt = {16: "<e", 32: "<f", 64: "<d"}[kind.bit_width]
        out += b"".join(struct.pack(fmt, v if ok else 0.0) for v, ok in zip(values, valid))
    elif pa.types.is_integer(kind):
        width = kind.bit_width // 8
        signed = pa.types.is_signed_integer(kind)
        out += b"".join((v if ok else 0).to_bytes(width, "little", signed=signed) for v, ok in zip(values, valid))
    elif pa.types.is_null(kind):
        pass
    else:
        raise AssertionError(f"no reference encoding for {kind}")
    return out


# ------------------------------------------------------------------------------ raw vectors


def test_00_raw_relative_vector():
    bodies = [bytes.fromhex(h) for h in RAW_VECTORS["bodies_hex"]]
    encoded = encode_raw(bodies, RAW_VECTORS["timestamp_us"])
    assert encoded.setsum.hexdigest() == RAW_VECTORS["relative"]["hexdigest"]
    assert encoded.records == 3
    decoded = decode_fragment(encoded.data, path="log/x.parquet", raw=True)
    assert not decoded.absolute
    assert decoded.offsets.tolist() == RAW_VECTORS["relative"]["offsets_stored"]
    assert recompute_setsum(decoded, raw=True) == encoded.setsum
    assert decoded.payload.column("body").to_pylist() == bodies


@pytest.mark.parametrize("name", ["absolute_start_100", "absolute_start_1_first_only"])
def test_01_raw_absolute_vectors_from_chroma_s3_files(name):
    vector = RAW_VECTORS[name]
    bodies = [bytes.fromhex(h) for h in vector.get("bodies_hex", RAW_VECTORS["bodies_hex"])]
    data = chroma_fragment(vector["offsets_stored"], bodies, RAW_VECTORS["timestamp_us"])
    decoded = decode_fragment(data, path="log/Bucket=0000000000000000/FragmentSeqNo=0000000000000001.parquet", raw=True)
    assert decoded.absolute
    assert decoded.offsets.tolist() == vector["offsets_stored"]
    assert recompute_setsum(decoded, raw=True).hexdigest() == vector["hexdigest"]
    assert decoded.metadata_setsum is None and decoded.metadata_records is None


def test_02_raw_item_is_chromas_per_record_item():
    bodies = [b"", b"x", b"y" * 5000]
    expected = Setsum.of(*(u64_be(i) + u64_be(TS) + body for i, body in enumerate(bodies)))
    assert encode_raw(bodies, TS).setsum == expected
    assert encode_raw(pa.array(bodies, pa.large_binary()), TS).setsum == expected


def test_03_raw_accepts_strings_and_rejects_nulls():
    assert encode_raw(pa.array(["a", "b"]), TS).setsum == encode_raw([b"a", b"b"], TS).setsum
    with pytest.raises(SchemaMismatch, match="null"):
        encode_raw(pa.array([b"a", None]), TS)


def test_04_raw_file_layout_is_chromas():
    encoded = encode_raw([b"a", b"b"], TS)
    schema = pq.read_schema(io.BytesIO(encoded.data))
    assert schema.names == ["relative_offset", "timestamp_us", "body"]
    assert [schema.field(n).type for n in schema.names] == [pa.uint64(), pa.uint64(), pa.binary()]
    assert not any(schema.field(n).nullable for n in schema.names)
    table = pq.read_table(io.BytesIO(encoded.data))
    assert table.column("timestamp_us").to_pylist() == [TS, TS]


# ----------------------------------------------------------------------- structured vectors


def small_table() -> pa.Table:
    schema = pa.schema(
        [
            pa.field("id", pa.int64()),
            pa.field("name", pa.large_string()),
            pa.field("tags", pa.list_(pa.string())),
        ]
    )
    rows = STRUCTURED_VECTORS["small"]["rows"]
    return pa.Table.from_pylist(rows, schema=schema)


def three_chunks_table() -> pa.Table:
    n = STRUCTURED_VECTORS["three_chunks"]["rows"]
    i = np.arange(n)
    return pa.table(
        {
            "id": pa.array(i, pa.int64()),
            "name": pa.array([str(x) for x in i], pa.string()),
            "amount": pa.array(i * 0.5, pa.float64(), mask=i % 3 == 0),
        }
    )


def test_05_structured_small_vector():
    table = small_table()
    vector = STRUCTURED_VECTORS["small"]
    encoded = encode_table(table, table.schema, vector["timestamp_us"])
    assert encoded.setsum.hexdigest() == vector["hexdigest"]
    decoded = decode_fragment(encoded.data, path="p", raw=False)
    assert recompute_setsum(decoded, raw=False).hexdigest() == vector["hexdigest"]


def test_06_structured_small_vector_by_hand():
    item = (
        u64_be(0) + u64_be(5)
        + bytes([1, 0, 1]) + struct.pack("<3q", 1, 0, 3)
        + bytes([1, 1, 0]) + struct.pack("<3Q", 1, 2, 0) + b"abb"
        + bytes([1, 1, 0]) + struct.pack("<3Q", 1, 0, 0) + bytes([1]) + struct.pack("<Q", 1) + b"p"
    )  # fmt: skip
    assert Setsum.of(item).hexdigest() == STRUCTURED_VECTORS["small"]["hexdigest"]


def test_07_structured_three_chunks_vector():
    table = three_chunks_table()
    vector = STRUCTURED_VECTORS["three_chunks"]
    encoded = encode_table(table, table.schema, vector["timestamp_us"])
    assert encoded.setsum.hexdigest() == vector["hexdigest"]
    assert encoded.records == vector["rows"]
    decoded = decode_fragment(encoded.data, path="p", raw=False)
    assert recompute_setsum(decoded, raw=False).hexdigest() == vector["hexdigest"]


def test_08_chunks_are_items_with_relative_offsets():
    table = three_chunks_table()
    whole = encode_table(table, table.schema, TS).setsum
    parts = [
        structured_setsum([c.combine_chunks() for c in table.slice(a, CHUNK_ROWS).columns], min(CHUNK_ROWS, len(table) - a), TS, a)
        for a in range(0, len(table), CHUNK_ROWS)
    ]
    assert Setsum.sum(parts) == whole
    with pytest.raises(ValueError):
        structured_setsum([pa.array([1])], 1, TS, first_offset=1)


# --------------------------------------------------------------------- batching independence


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(min_value=0, max_value=20000), max_size=8))
def test_09_batching_never_changes_the_fragment(cuts):
    table = three_chunks_table()
    reference = encode_table(table, table.schema, TS)
    bounds = sorted({0, len(table), *cuts})
    builder = FragmentBuilder(table.schema, TS, row_group_rows=CHUNK_ROWS)
    smaller = FragmentBuilder(table.schema, TS, row_group_rows=CHUNK_ROWS)
    for a, b in zip(bounds, bounds[1:]):
        for batch in table.slice(a, b - a).to_batches(max_chunksize=7000):
            builder.add(batch)
    for batch in table.to_batches(max_chunksize=1000):
        smaller.add(batch)
    first, second = builder.finish(), smaller.finish()
    assert first.setsum == second.setsum == reference.setsum
    assert first.data == second.data
    assert first.records == len(table)


def test_10_batching_gives_identical_bytes_with_default_row_groups():
    table = three_chunks_table()
    one = encode_table(table, table.schema, TS)
    builder = FragmentBuilder(table.schema, TS)
    for batch in table.to_batches(max_chunksize=333):
        builder.add(batch)
    assert builder.finish().data == one.data


def test_11_row_groups_are_cut_at_row_group_rows():
    table = three_chunks_table()
    builder = FragmentBuilder(table.schema, TS, row_group_rows=CHUNK_ROWS)
    builder.add(table)
    metadata = pq.ParquetFile(io.BytesIO(builder.finish().data)).metadata
    assert [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)] == [8192, 8192, 3616]
    with pytest.raises(ValueError):
        FragmentBuilder(table.schema, TS, row_group_rows=1000)


def test_12_bytes_buffered_grows_and_builder_is_single_use():
    table = three_chunks_table()
    builder = FragmentBuilder(table.schema, TS, row_group_rows=CHUNK_ROWS)
    assert builder.bytes_buffered < 1000
    builder.add(table.slice(0, 100))
    pending = builder.bytes_buffered
    assert pending > 1000 and builder.records == 100
    builder.add(table.slice(100))
    assert builder.bytes_buffered > pending
    encoded = builder.finish()
    with pytest.raises(RuntimeError):
        builder.add(table)
    with pytest.raises(RuntimeError):
        builder.finish()
    assert encoded.timestamp_us == TS


def test_13_empty_fragment():
    encoded = FragmentBuilder(None, TS).finish()
    assert encoded.records == 0 and encoded.setsum == Setsum()
    decoded = decode_fragment(encoded.data, path="p", raw=True)
    assert decoded.records == 0 and recompute_setsum(decoded, raw=True) == Setsum()


# -------------------------------------------------------------------- the column encoding


def garbage_int64(values: list[int], nulls: list[bool]) -> pa.Array:
    """An int64 array whose null slots hold the values too (Arrow leaves them undefined)."""
    bitmap = np.packbits(~np.array(nulls), bitorder="little")
    return pa.Array.from_buffers(
        pa.int64(), len(values), [pa.py_buffer(bitmap), pa.py_buffer(np.array(values, np.int64))], sum(nulls)
    )


def test_14_null_slots_with_garbage_hash_like_clean_nulls():
    garbage = garbage_int64([1, 99, 3, 77], [False, True, False, True])
    clean = pa.array([1, None, 3, None], pa.int64())
    assert column_setsum(garbage) == column_setsum(clean) == item_setsum(clean)


def test_15_string_null_slots_with_bytes_hash_like_clean_nulls():
    offsets = np.array([0, 1, 4, 5], np.int32)  # the null slot 1 spans "xyz"
    bitmap = np.packbits(np.array([1, 0, 1], bool), bitorder="little")
    garbage = pa.Array.from_buffers(
        pa.string(), 3, [pa.py_buffer(bitmap), pa.py_buffer(offsets), pa.py_buffer(b"axyzb")], 1
    )
    clean = pa.array(["a", None, "b"])
    assert garbage.to_pylist() == clean.to_pylist()
    assert column_setsum(garbage) == column_setsum(clean) == item_setsum(clean)


def test_16_null_lists_spanning_elements_hash_like_empty_nulls():
    values = pa.array([1, 2, 3, 4, 5], pa.int32())
    bitmap = np.packbits(np.array([1, 0, 1], bool), bitorder="little")
    garbage = pa.Array.from_buffers(
        pa.list_(pa.int32()), 3, [pa.py_buffer(bitmap), pa.py_buffer(np.array([0, 1, 3, 5], np.int32))], 1, children=[values]
    )
    clean = pa.array([[1], None, [4, 5]], pa.list_(pa.int32()))
    assert garbage.to_pylist() == clean.to_pylist()
    assert column_setsum(garbage) == column_setsum(clean) == item_setsum(clean)


def test_17_boolean_null_slots_hash_as_zero():
    bitmap = np.packbits(np.array([1, 0, 1], bool), bitorder="little")
    values = np.packbits(np.array([1, 1, 0], bool), bitorder="little")
    garbage = pa.Array.from_buffers(pa.bool_(), 3, [pa.py_buffer(bitmap), pa.py_buffer(values)], 1)
    clean = pa.array([True, None, False])
    assert column_setsum(garbage) == column_setsum(clean) == item_setsum(clean)


def test_18_children_under_null_struct_parents_are_null():
    child = pa.array([1, 2, 3], pa.int64())
    names = pa.array(["a", "bb", "c"])
    mask = pa.array([False, True, False])
    garbage = pa.StructArray.from_arrays([child, names], names=["x", "y"], mask=mask)
    clean = pa.array([{"x": 1, "y": "a"}, None, {"x": 3, "y": "c"}], garbage.type)
    assert column_setsum(garbage) == column_setsum(clean) == item_setsum(clean)
    # and a null parent is not the same as a valid parent with null children
    nulls_inside = pa.array([{"x": 1, "y": "a"}, {"x": None, "y": None}, {"x": 3, "y": "c"}], garbage.type)
    assert column_setsum(nulls_inside) != column_setsum(clean)


def test_19_lists_under_null_struct_parents_drop_their_elements():
    inner = pa.array([[1, 2], [3], [4, 5, 6]], pa.list_(pa.int64()))
    garbage = pa.StructArray.from_arrays([inner], names=["l"], mask=pa.array([False, True, False]))
    clean = pa.array([{"l": [1, 2]}, None, {"l": [4, 5, 6]}], garbage.type)
    assert column_setsum(garbage) == column_setsum(clean) == item_setsum(clean)


ALL_TYPES = pa.schema(
    [
        pa.field("i8", pa.int8()),
        pa.field("i16", pa.int16()),
        pa.field("i32", pa.int32(), nullable=False),
        pa.field("i64", pa.int64()),
        pa.field("u8", pa.uint8()),
        pa.field("u16", pa.uint16()),
        pa.field("u32", pa.uint32()),
        pa.field("u64", pa.uint64()),
        pa.field("f16", pa.float16()),
        pa.field("f32", pa.float32()),
        pa.field("f64", pa.float64()),
        pa.field("flag", pa.bool_()),
        pa.field("d32", pa.date32()),
        pa.field("d64", pa.date64()),
        pa.field("ts_us", pa.timestamp("us")),
        pa.field("ts_ms_tz", pa.timestamp("ms", tz="UTC")),
        pa.field("t32", pa.time32("ms")),
        pa.field("t32s", pa.time32("s")),
        pa.field("ts_s", pa.timestamp("s")),
        pa.field("t64", pa.time64("us")),
        pa.field("dur", pa.duration("us")),
        pa.field("dec", pa.decimal128(12, 3)),
        pa.field("dec256", pa.decimal256(40, 2)),
        pa.field("nothing", pa.null()),
        pa.field("s", pa.string()),
        pa.field("ls", pa.large_string()),
        pa.field("bin", pa.binary()),
        pa.field("lbin", pa.large_binary()),
        pa.field("fbin", pa.binary(3)),
        pa.field("st", pa.struct([pa.field("a", pa.int32()), pa.field("b", pa.list_(pa.string()))])),
        pa.field("li", pa.list_(pa.int64())),
        pa.field("lli", pa.large_list(pa.string())),
        pa.field("fsl", pa.list_(pa.int16(), 2)),
        pa.field("m", pa.map_(pa.string(), pa.float64())),
        pa.field("dict", pa.dictionary(pa.int32(), pa.string())),
    ]
)


def all_types_table(n: int = 50) -> pa.Table:
    rng = np.random.default_rng(7)
    null = rng.random(n) < 0.2
    ints = rng.integers(0, 100, n)

    def nullable(values, kind):
        return pa.array([None if z else v for v, z in zip(values, null)], kind)

    columns = {
        "i8": nullable(ints.tolist(), pa.int8()),
        "i16": nullable((ints * 300 - 5000).tolist(), pa.int16()),
        "i32": pa.array((ints * -70000).tolist(), pa.int32()),
        "i64": nullable((ints * -(10**12)).tolist(), pa.int64()),
        "u8": nullable(ints.tolist(), pa.uint8()),
        "u16": nullable((ints * 600).tolist(), pa.uint16()),
        "u32": nullable((ints * 40_000_000).tolist(), pa.uint32()),
        "u64": nullable((ints.astype(np.uint64) * np.uint64(180_000_000_000_000_000)).tolist(), pa.uint64()),
        "f16": pa.array(np.where(null, np.float16(0), ints.astype(np.float16) / 3), pa.float16(), mask=null),
        "f32": nullable((ints / 7).tolist(), pa.float32()),
        "f64": nullable([float("nan") if v == 3 else -0.0 if v == 4 else v / 3 for v in ints], pa.float64()),
        "flag": nullable((ints % 2 == 0).tolist(), pa.bool_()),
        "d32": nullable(ints.tolist(), pa.int32()).cast(pa.date32()),
        "d64": nullable((ints * 86_400_000).tolist(), pa.int64()).cast(pa.date64()),
        "ts_us": nullable((ints * 10**12).tolist(), pa.int64()).cast(pa.timestamp("us")),
        "ts_ms_tz": nullable((ints * 10**9).tolist(), pa.int64()).cast(pa.timestamp("ms", tz="UTC")),
        "t32": nullable((ints * 1000).tolist(), pa.int32()).cast(pa.time32("ms")),
        "t32s": nullable(ints.tolist(), pa.int32()).cast(pa.time32("s")),
        "ts_s": nullable((ints * 10**7).tolist(), pa.int64()).cast(pa.timestamp("s")),
        "t64": nullable((ints * 10**6).tolist(), pa.int64()).cast(pa.time64("us")),
        "dur": nullable((ints * -5).tolist(), pa.int64()).cast(pa.duration("us")),
        "dec": nullable([decimal.Decimal(int(v) * 1001 - 50000).scaleb(-3) for v in ints], pa.decimal128(12, 3)),
        "dec256": nullable([decimal.Decimal(int(v) * 10**30 + 7).scaleb(-2) for v in ints], pa.decimal256(40, 2)),
        "nothing": pa.nulls(n),
        "s": nullable([f"s{v}" * (v % 4) for v in ints], pa.string()),
        "ls": nullable([f"é{v}" for v in ints], pa.large_string()),
        "bin": nullable([bytes([v]) * (v % 3) for v in ints], pa.binary()),
        "lbin": nullable([bytes([v, v]) for v in ints], pa.large_binary()),
        "fbin": nullable([bytes([v, v, 1]) for v in ints], pa.binary(3)),
        "st": nullable(
            [{"a": None if v % 5 == 0 else int(v), "b": None if v % 7 == 0 else [str(v)] * (v % 3)} for v in ints],
            ALL_TYPES.field("st").type,
        ),
        "li": nullable([list(range(v % 4)) for v in ints], pa.list_(pa.int64())),
        "lli": nullable([[str(v), None][: v % 3] for v in ints], pa.large_list(pa.string())),
        "fsl": nullable([[int(v), None if v % 2 else -int(v)] for v in ints], pa.list_(pa.int16(), 2)),
        "m": nullable([[(f"k{j}", None if j == 1 else v / 2) for j in range(v % 3)] for v in ints], pa.map_(pa.string(), pa.float64())),
        "dict": nullable([f"d{v % 3}" for v in ints], pa.string()).dictionary_encode(),
    }
    return pa.table(columns, schema=ALL_TYPES)


def test_20_every_type_matches_the_reference_encoding():
    table = all_types_table()
    for field in ALL_TYPES:
        column = table.column(field.name).combine_chunks()
        if pa.types.is_temporal(field.type):
            storage = column.cast(pa.int32() if field.type.bit_width == 32 else pa.int64())
            assert column_setsum(column) == item_setsum(storage), field.name
        elif pa.types.is_fixed_size_binary(field.type):
            expected = Setsum.of(
                u64_be(0) + u64_be(TS) + bytes(column.is_valid().to_pylist())
                + b"".join(v or b"\0\0\0" for v in column.to_pylist())
            )  # fmt: skip
            assert column_setsum(column) == expected, field.name
        else:
            assert column_setsum(column) == item_setsum(column), field.name


def test_21_every_type_round_trips():
    table = all_types_table()
    encoded = encode_table(table, ALL_TYPES, TS)
    decoded = decode_fragment(encoded.data, path="log/t.parquet", raw=False)
    assert decoded.payload.schema.equals(ALL_TYPES)
    assert decoded.payload.equals(table)
    assert recompute_setsum(decoded, raw=False) == encoded.setsum
    assert decoded.metadata_setsum == encoded.setsum.hexdigest()
    assert decoded.metadata_records == len(table)
    assert decoded.offsets.tolist() == list(range(len(table)))
    assert decoded.timestamp_us.tolist() == [TS] * len(table)
    assert not decoded.absolute


@pytest.mark.parametrize("start,length", [(0, 50), (1, 20), (13, 29), (49, 1), (7, 0)])
def test_22_sliced_arrays_hash_like_fresh_copies(start, length):
    table = all_types_table()
    for field in ALL_TYPES:
        sliced = table.column(field.name).combine_chunks().slice(start, length)
        fresh = pa.array(sliced.to_pylist(), sliced.type) if not pa.types.is_dictionary(field.type) else sliced.dictionary_decode()
        assert column_setsum(sliced) == column_setsum(fresh), field.name


def test_23_view_types_hash_like_their_plain_types():
    strings = pa.array(["a", None, "ccc"])
    lists = pa.array([[1], None, [2, 3]], pa.list_(pa.int8()))
    assert column_setsum(strings.cast(pa.string_view())) == column_setsum(strings)
    assert column_setsum(pa.array(lists.to_pylist(), pa.list_view(pa.int8()))) == column_setsum(lists)


def test_24_run_end_encoded_and_extension_arrays_hash_like_their_values():
    import pyarrow.compute as pc

    plain = pa.array(["a", "a", None, "b", "b", "b"])
    assert column_setsum(pc.run_end_encode(plain)) == column_setsum(plain)
    assert column_setsum(pc.run_end_encode(plain).slice(1, 4)) == column_setsum(plain.slice(1, 4))
    ids = pa.array([uuid.UUID(int=i).bytes for i in range(3)], pa.binary(16))
    assert column_setsum(pa.ExtensionArray.from_storage(pa.uuid(), ids)) == column_setsum(ids)


def test_25_list_views_with_shared_and_out_of_order_entries():
    values = pa.array([10, 20, 30, 40], pa.int32())
    bitmap = np.packbits(np.array([1, 0, 1, 1, 1], bool), bitorder="little")
    offsets, sizes = np.array([2, 0, 0, 1, 3], np.int32), np.array([2, 4, 1, 3, 0], np.int32)
    view = pa.Array.from_buffers(
        pa.list_view(pa.int32()), 5, [pa.py_buffer(bitmap), pa.py_buffer(offsets), pa.py_buffer(sizes)], 1,
        children=[values],
    )  # fmt: skip
    for sliced in (view, view.slice(1), view.slice(2, 2)):
        plain = pa.array(sliced.to_pylist(), pa.list_(pa.int32()))
        assert column_setsum(sliced) == column_setsum(plain) == item_setsum(plain)


def test_26_parquet_lossy_types_verify_after_a_round_trip():
    """date64, time32[s] and timestamp[s] read back from Parquet as other types; the decoder
    restores the written types so that the recomputed setsum matches."""
    schema = pa.schema([pa.field("d", pa.date64()), pa.field("t", pa.time32("s")), pa.field("ts", pa.timestamp("s"))])
    table = pa.table(
        [pa.array([86_400_000, None], pa.date64()), pa.array([5, 6], pa.time32("s")), pa.array([7, None], pa.timestamp("s"))],
        schema=schema,
    )
    encoded = encode_table(table, schema, TS)
    decoded = decode_fragment(encoded.data, path="p", raw=False)
    assert decoded.payload.equals(table)
    assert recompute_setsum(decoded, raw=False) == encoded.setsum


def test_27_dictionary_and_chunked_inputs_hash_like_plain_ones():
    table = all_types_table(200)
    plain = table.cast(ALL_TYPES.set(ALL_TYPES.get_field_index("dict"), pa.field("dict", pa.string())))
    chunked = pa.Table.from_batches(table.to_batches(max_chunksize=17))
    assert encode_table(chunked, ALL_TYPES, TS).setsum == encode_table(table, ALL_TYPES, TS).setsum
    assert encode_table(plain, plain.schema, TS).setsum == encode_table(table, ALL_TYPES, TS).setsum


nested_type = pa.struct(
    [
        pa.field("a", pa.int32()),
        pa.field("tags", pa.list_(pa.string())),
        pa.field("attrs", pa.map_(pa.string(), pa.decimal128(9, 2))),
        pa.field("pts", pa.large_list(pa.struct([pa.field("x", pa.bool_()), pa.field("y", pa.float64())]))),
    ]
)
nested_values = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {
            "a": st.none() | st.integers(-(2**31), 2**31 - 1),
            "tags": st.none() | st.lists(st.none() | st.text(max_size=5), max_size=4),
            "attrs": st.none()
            | st.lists(
                st.tuples(
                    st.text(max_size=3),
                    st.none() | st.decimals(min_value=-9999999, max_value=9999999, places=2),
                ),
                max_size=3,
            ),
            "pts": st.none()
            | st.lists(
                st.none()
                | st.fixed_dictionaries(
                    {"x": st.none() | st.booleans(), "y": st.none() | st.floats(allow_nan=False)}
                ),
                max_size=3,
            ),
        }
    ),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(nested_values, max_size=30), st.integers(0, 5), st.integers(0, 5))
def test_28_nested_columns_match_the_reference(values, head, tail):
    array = pa.array(values, nested_type)
    sliced = array.slice(min(head, len(array)), max(0, len(array) - head - tail))
    assert column_setsum(sliced) == item_setsum(sliced)


def test_29_null_type_column_is_validity_only():
    column = pa.nulls(3)
    assert column_setsum(column) == Setsum.of(u64_be(0) + u64_be(TS) + b"\0\0\0")


def test_30_unsupported_type_is_a_schema_mismatch():
    union = pa.UnionArray.from_sparse(pa.array([0, 1], pa.int8()), [pa.array([1, 2]), pa.array(["a", "b"])])
    with pytest.raises(SchemaMismatch):
        encode_column(union)


# ------------------------------------------------------------------------------ schema checks


def test_31_input_is_cast_to_the_log_schema():
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("name", pa.large_string())])
    narrow = pa.table({"id": pa.array([1, 2], pa.int32()), "name": pa.array(["a", "b"])})
    wide = pa.table({"id": pa.array([1, 2], pa.int64()), "name": pa.array(["a", "b"], pa.large_string())})
    assert encode_table(narrow, schema, TS).data == encode_table(wide, schema, TS).data


@pytest.mark.parametrize(
    "table",
    [
        pa.table({"name": ["a"], "id": [1]}),
        pa.table({"id": [1]}),
        pa.table({"id": ["not a number"], "name": ["a"]}),
        pa.table({"id": pa.array([None], pa.int64()), "name": ["a"]}),
    ],
    ids=["order", "missing", "uncastable", "null-in-non-nullable"],
)
def test_32_mismatched_input_names_both_schemas(table):
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])
    with pytest.raises(SchemaMismatch) as caught:
        encode_table(table, schema, TS)
    assert "data:" in str(caught.value) and "log:" in str(caught.value)


@pytest.mark.parametrize("name", ["relative_offset", "offset", "timestamp_us"])
def test_33_reserved_column_names_are_rejected(name):
    with pytest.raises(SchemaMismatch, match="reserved"):
        FragmentBuilder(pa.schema([pa.field(name, pa.int64())]), TS)


# -------------------------------------------------------------------------------- corruption


@pytest.mark.parametrize(
    "data",
    [b"", b"not parquet at all", b"PAR1" + b"\0" * 100 + b"PAR1"],
    ids=["empty", "garbage", "bad-footer"],
)
def test_34_unreadable_bytes_are_corrupt_naming_the_path(data):
    with pytest.raises(CorruptLog, match="log/Uuid=bad.parquet"):
        decode_fragment(data, path="log/Uuid=bad.parquet", raw=True)


def test_35_truncated_fragment_is_corrupt():
    data = encode_raw([b"a" * 100] * 100, TS).data
    with pytest.raises(CorruptLog, match="log/t.parquet"):
        decode_fragment(data[: len(data) // 2], path="log/t.parquet", raw=True)


@pytest.mark.parametrize("drop", ["relative_offset", "timestamp_us", "body"])
def test_36_missing_columns_are_corrupt(drop):
    table = pq.read_table(io.BytesIO(encode_raw([b"a"], TS).data)).drop_columns([drop])
    sink = io.BytesIO()
    pq.write_table(table, sink)
    with pytest.raises(CorruptLog, match="missing"):
        decode_fragment(sink.getvalue(), path="log/t.parquet", raw=True)


def test_36b_an_unparsable_arrow_schema_is_corrupt_naming_the_path():
    """A written Arrow schema (read once per opened fragment, not per row group) that does not
    parse fails the read as CorruptLog, as an unreadable footer does."""
    table = pq.read_table(io.BytesIO(encode_raw([b"a"], TS).data))
    sink = io.BytesIO()
    pq.write_table(table.replace_schema_metadata({b"ARROW:schema": b"not base64 at all!"}), sink)
    with pytest.raises(CorruptLog, match="log/t.parquet"):
        decode_fragment(sink.getvalue(), path="log/t.parquet", raw=True)


def rewrite(data: bytes, column: str, values: pa.Array) -> bytes:
    table = pq.read_table(io.BytesIO(data))
    table = table.set_column(table.schema.get_field_index(column), table.schema.field(column), values)
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def test_37_tampered_content_changes_the_recomputed_setsum():
    table = three_chunks_table()
    encoded = encode_table(table, table.schema, TS)
    amounts = table.column("amount").combine_chunks().to_pylist()
    amounts[12345] = 1.25
    data = rewrite(encoded.data, "amount", pa.array(amounts, pa.float64()))
    assert recompute_setsum(decode_fragment(data, path="p", raw=False), raw=False) != encoded.setsum
    raw = encode_raw([b"a", b"b"], TS)
    data = rewrite(raw.data, "body", pa.array([b"a", b"c"]))
    assert recompute_setsum(decode_fragment(data, path="p", raw=True), raw=True) != raw.setsum


@pytest.mark.parametrize("column", ["relative_offset", "timestamp_us"])
def test_38_structured_fragments_need_relative_offsets_and_one_timestamp(column):
    table = three_chunks_table()
    encoded = encode_table(table, table.schema, TS)
    values = np.arange(len(table), dtype=np.uint64) if column == "relative_offset" else np.full(len(table), TS, np.uint64)
    values[100] += 1
    decoded = decode_fragment(rewrite(encoded.data, column, pa.array(values)), path="log/t.parquet", raw=False)
    with pytest.raises(CorruptLog, match="log/t.parquet"):
        recompute_setsum(decoded, raw=False)


# ------------------------------------------------------------------------- conform on read


def test_39_conform_adds_missing_nullable_columns_and_reorders():
    old = pa.table({"b": pa.array([1, 2], pa.int32()), "a": pa.array(["x", "y"])})
    target = pa.schema(
        [
            pa.field("a", pa.string(), nullable=False),
            pa.field("b", pa.int64()),
            pa.field("c", pa.list_(pa.string())),
        ]
    )
    projected = conform(old, target)
    assert projected.schema.equals(target)
    assert projected.to_pylist() == [{"a": "x", "b": 1, "c": None}, {"a": "y", "b": 2, "c": None}]


def test_40_conform_after_a_schema_evolution():
    old_schema = pa.schema([pa.field("id", pa.int64(), nullable=False)])
    old = encode_table(pa.table({"id": [1, 2]}, schema=old_schema), old_schema, TS)
    new_schema = pa.schema([pa.field("id", pa.int64()), pa.field("note", pa.string())])
    payload = decode_fragment(old.data, path="p", raw=False).payload
    projected = conform(payload, new_schema)
    assert projected.schema.equals(new_schema)
    assert projected.column("note").null_count == 2


def test_41_conform_rejects_what_it_cannot_fill():
    payload = pa.table({"a": pa.array([1, None])})
    with pytest.raises(SchemaMismatch, match="missing"):
        conform(payload, pa.schema([pa.field("z", pa.int64(), nullable=False)]))
    with pytest.raises(SchemaMismatch, match="nulls"):
        conform(payload, pa.schema([pa.field("a", pa.int64(), nullable=False)]))
    with pytest.raises(SchemaMismatch, match="cannot be cast"):
        conform(payload, pa.schema([pa.field("a", pa.list_(pa.int64()))]))


# ------------------------------------------------------------------------------ paths


def test_42_fragment_paths():
    u = new_uuid7(TS)
    path = fragment_path(u)
    assert path == f"log/Uuid={u}.parquet"
    assert parse_fragment_path(path) == u
    assert fragment_path(str(u)) == path
    assert parse_fragment_path("log/Bucket=0000000000000000/FragmentSeqNo=00000000000000ff.parquet") == 255
    for bad in ["log/Uuid=nope.parquet", "manifest/MANIFEST", f"x/Uuid={u}.parquet", path + "\n",
                "log/Bucket=0000000000000000/FragmentSeqNo=00000000000000ff.parquet\n"]:
        with pytest.raises(ValueError):
            parse_fragment_path(bad)


def test_43_a_rejected_batch_adds_nothing():
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False)])
    builder = FragmentBuilder(schema, TS, row_group_rows=CHUNK_ROWS)
    good = pa.table({"id": pa.array(range(CHUNK_ROWS + 5), pa.int64())})
    bad = pa.table({"id": pa.array([*range(CHUNK_ROWS), None], pa.int64())})
    with pytest.raises(SchemaMismatch):
        builder.add(bad)
    assert builder.records == 0
    builder.add(good)
    assert builder.finish().setsum == encode_table(good, schema, TS).setsum


def _encode_in_child(bodies: list[bytes]) -> str:
    return encode_raw(bodies, TS).setsum.hexdigest()


def test_44_builders_work_in_forked_children_after_the_parent_used_them():
    """Spark's Python daemon and multiprocessing fork: no state inherited from the parent may
    leave a child's builder waiting on a thread that does not exist there."""
    import multiprocessing

    expected = encode_raw([b"a", b"b"], TS).setsum.hexdigest()
    with multiprocessing.get_context("fork").Pool(1) as pool:
        assert pool.apply_async(_encode_in_child, ([b"a", b"b"],)).get(timeout=60) == expected


def test_45_more_values_than_a_dictionary_index_holds_is_a_schema_mismatch():
    """300 distinct strings cannot be a dictionary<int8, string>: the append is refused naming
    the column, as any other cast pyarrow refuses (not pyarrow's own IndexError)."""
    target = pa.schema([pa.field("d", pa.dictionary(pa.int8(), pa.string()))])
    batch = pa.record_batch([pa.array([str(i) for i in range(300)])], names=["d"])
    with pytest.raises(SchemaMismatch, match="column 'd' of type string cannot be cast"):
        conform(batch, target)
    fits = pa.record_batch([pa.array([str(i % 100) for i in range(300)])], names=["d"])
    assert conform(fits, target).column(0).to_pylist() == fits.column(0).to_pylist()


def test_46_structured_fragments_are_lz4_raw_ones_keep_chromas_snappy():
    """Structured fragments are compressed with LZ4 (pyarrow decodes them faster, the read
    task's critical path); raw fragments keep the SNAPPY of the fragments Chroma writes. Both
    decode to what was written."""
    schema = pa.schema([pa.field("tag", pa.string())])
    rows = pa.table({"tag": [str(uuid.UUID(int=i)) for i in range(100)]}, schema=schema)
    structured = encode_table(rows, schema, TS)
    raw = encode_raw([b"a", b"b"], TS)

    def codecs(data: bytes) -> set[str]:
        meta = pq.ParquetFile(pa.BufferReader(data)).metadata
        return {meta.row_group(0).column(i).compression for i in range(meta.num_columns)}

    assert codecs(structured.data) == {"LZ4"}
    assert codecs(raw.data) == {"SNAPPY"}
    assert decode_fragment(structured.data, path="s", raw=False).payload.equals(rows)
