"""Setsum items of fragments (docs/format.md section 3), computed with numpy/pyarrow, never per row.

Raw logs hash one item per record, exactly as Chroma's writer does. Structured logs hash one item
per chunk of `CHUNK_ROWS` rows whose payload is laid out column-major (`enc`), so that hashing
costs about as much as writing the Parquet file instead of ~3 µs per row.

`enc` is built in two steps. `encode_column` turns an Arrow array into a tree of numpy views (a
`_Node` per column and nested child) in which null slots are already zeroed and bytes hidden
under nulls are already dropped; `_Node.pieces(start, stop)` then yields, in `enc` order, the
contiguous buffers of rows [start, stop), which are fed to one hash object per chunk. Nothing is
concatenated: a chunk costs a few `update` calls per column.

A log's `item_hash` (docs/format.md section 3) says what a chunk item is: `BLAKE3` (new structured
logs) inserts the BLAKE3-256 digest of the chunk bytes, so the bytes go through BLAKE3 (~8x
faster than SHA3 here) and SHA3 only sees 32 bytes per chunk; `None` (logs created before the
field) inserts the chunk bytes themselves.

Beyond Chroma's types, `enc` hashes the Arrow physical value (docs/format.md section 3):
- every fixed-width type by its own width and unit: date64 as 8-byte ms, timestamp/time/duration
  as the stored integer in the column's unit, float16 as 2 bytes, decimal32/64/128/256 as 4/8/16/32
  bytes, fixed_size_binary(w) as w bytes (zeros for null, no lengths);
- type null: validity bytes only (all 0);
- dictionary, run-end-encoded, extension and view types: as their decoded/storage values, so an
  encoding choice never changes the setsum; unions are refused (Parquet cannot store them).

Design: docs/design/12-setsum-encoding.md, docs/design/14-structured-logs.md,
docs/design/15-blake3-item-hash.md.
"""

from __future__ import annotations

import hashlib
import itertools
import struct
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import blake3
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from wal3_spark.errors import SchemaMismatch
from wal3_spark.format.layout import BLAKE3, ITEM_HASHES
from wal3_spark.format.setsum import Setsum

if sys.byteorder != "little":  # Arrow buffers are hashed as they lie in memory
    raise ImportError("wal3_spark.format.chunk_encoding needs a little-endian host")

CHUNK_ROWS = 8192
"""Rows per structured setsum item; chunk boundaries are row numbers from the fragment start."""


_U64_BE = struct.Struct(">Q")
_HEADER_DTYPE = np.dtype(">u8")
#: the empty separator of `binary_join_element_wise`, built from buffers: `pa.scalar` would import
#: pandas (~0.6 s of CPU) in every process that imports this module, as a streaming source's
#: runner does at each query start
_NO_SEPARATOR = pa.LargeBinaryArray.from_buffers(
    pa.large_binary(), 1, [None, pa.py_buffer(np.zeros(2, np.int64).tobytes()), pa.py_buffer(b"")]
)[0]

# ------------------------------------------------------------------------------- the tree


@dataclass(frozen=True, slots=True)
class _Validity:
    """A column of type null: only its validity bytes (all 0)."""

    validity: np.ndarray

    def pieces(self, start: int, stop: int) -> Iterator[np.ndarray]:
        yield self.validity[start:stop]


@dataclass(frozen=True, slots=True)
class _Fixed:
    """Booleans (one byte each) and fixed-width values, null slots zeroed."""

    validity: np.ndarray
    values: np.ndarray  # shape (n,) or (n, words)

    def pieces(self, start: int, stop: int) -> Iterator[np.ndarray]:
        yield self.validity[start:stop]
        yield self.values[start:stop]


@dataclass(frozen=True, slots=True)
class _Var:
    """Strings and binaries: u64 lengths (0 for null), then the bytes of the rows."""

    validity: np.ndarray
    lengths: np.ndarray  # uint64
    offsets: np.ndarray  # n + 1 positions in `data`; null slots are empty
    data: np.ndarray  # uint8

    def pieces(self, start: int, stop: int) -> Iterator[np.ndarray]:
        yield self.validity[start:stop]
        yield self.lengths[start:stop]
        yield self.data[self.offsets[start] : self.offsets[stop]]


@dataclass(frozen=True, slots=True)
class _Struct:
    validity: np.ndarray
    children: tuple[_Node, ...]

    def pieces(self, start: int, stop: int) -> Iterator[np.ndarray]:
        yield self.validity[start:stop]
        for child in self.children:
            yield from child.pieces(start, stop)


@dataclass(frozen=True, slots=True)
class _List:
    """Lists (one child) and maps (keys, values): counts, then the children over the entries."""

    validity: np.ndarray
    counts: np.ndarray  # uint64, 0 for null
    offsets: np.ndarray  # n + 1 positions in the children; null slots are empty
    children: tuple[_Node, ...]

    def pieces(self, start: int, stop: int) -> Iterator[np.ndarray]:
        yield self.validity[start:stop]
        yield self.counts[start:stop]
        lo, hi = int(self.offsets[start]), int(self.offsets[stop])
        for child in self.children:
            yield from child.pieces(lo, hi)


_Node = _Validity | _Fixed | _Var | _Struct | _List

# ---------------------------------------------------------------------------- building it


def encode_column(array: pa.Array, parent_valid: np.ndarray | None = None) -> _Node:
    """The `enc` tree of `array`; `parent_valid` masks rows whose struct parent is null.

    Handles sliced arrays (any offset) and never loops over rows.
    """
    array = _plain(array)
    kind = array.type
    valid = _combine(_own_validity(array), parent_valid)
    if pa.types.is_null(kind):
        return _Validity(np.zeros(len(array), dtype=np.uint8))
    if pa.types.is_struct(kind):
        children = tuple(encode_column(array.field(i), valid) for i in range(kind.num_fields))
        return _Struct(_validity_bytes(valid, len(array)), children)
    if pa.types.is_map(kind):
        offsets = array.offsets.to_numpy()
        return _list_node(array, valid, offsets, lambda e: (e.field(0), e.field(1)))
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return _list_node(array, valid, array.offsets.to_numpy(), lambda e: (e,))
    if pa.types.is_list_view(kind) or pa.types.is_large_list_view(kind):
        return _list_view_node(array, valid)
    if pa.types.is_fixed_size_list(kind):
        size = kind.list_size
        offsets = (array.offset + np.arange(len(array) + 1, dtype=np.int64)) * size
        return _list_node(array, valid, offsets, lambda e: (e,))
    if pa.types.is_string(kind) or pa.types.is_binary(kind):
        return _var_node(array, valid, np.int32)
    if pa.types.is_large_string(kind) or pa.types.is_large_binary(kind):
        return _var_node(array, valid, np.int64)
    if pa.types.is_boolean(kind):
        return _bool_node(array, valid)
    if _is_fixed_width(kind):
        return _fixed_node(array, valid)
    raise SchemaMismatch(f"type {kind} cannot be stored in a wal3 structured log")


def _plain(array: pa.Array) -> pa.Array:
    """`array` in a physical layout `encode_column` knows, with the same logical values."""
    kind = array.type
    if isinstance(kind, pa.ExtensionType):
        return _plain(array.storage)
    if pa.types.is_dictionary(kind):
        return array.dictionary_decode()
    if pa.types.is_run_end_encoded(kind):
        return _plain(pc.run_end_decode(array))
    views = {
        pa.types.is_string_view: pa.large_string(),
        pa.types.is_binary_view: pa.large_binary(),
    }
    for is_view, target in views.items():
        if is_view(kind):
            return array.cast(target)
    return array


def _is_fixed_width(kind: pa.DataType) -> bool:
    try:
        return kind.bit_width % 8 == 0
    except ValueError:  # not a fixed-width type
        return False


def _own_validity(array: pa.Array) -> np.ndarray | None:
    """The array's validity as bools, or None when every slot is valid."""
    if array.null_count == 0:
        return None
    bitmap = array.buffers()[0]
    if bitmap is None:  # type null
        return np.zeros(len(array), dtype=bool)
    return _bits(bitmap, array.offset, len(array)).view(bool)


def _bits(bitmap: pa.Buffer | None, first: int, n: int) -> np.ndarray:
    """Bits [first, first + n) of an Arrow bitmap, one uint8 0/1 each."""
    raw = np.frombuffer(bitmap or b"", dtype=np.uint8)[first // 8 : (first + n + 7) // 8]
    return np.unpackbits(raw, bitorder="little")[first % 8 : first % 8 + n]


def _combine(own: np.ndarray | None, parent: np.ndarray | None) -> np.ndarray | None:
    if own is None:
        return parent
    if parent is None:
        return own
    return own & parent


def _validity_bytes(valid: np.ndarray | None, n: int) -> np.ndarray:
    return np.ones(n, dtype=np.uint8) if valid is None else valid.view(np.uint8)


def _bool_node(array: pa.Array, valid: np.ndarray | None) -> _Fixed:
    n = len(array)
    values = _bits(array.buffers()[1], array.offset, n)
    if valid is not None:
        values = values & valid.view(np.uint8)
    return _Fixed(_validity_bytes(valid, n), values)


def _fixed_node(array: pa.Array, valid: np.ndarray | None) -> _Fixed:
    """Fixed-width values as little-endian words of the Arrow physical type, nulls zeroed.

    Decimals (16 or 32 bytes) are viewed as rows of u64 words and fixed-size binaries of odd
    widths as rows of bytes, so that one `np.where` zeroes a whole null slot.
    """
    width = array.type.bit_width // 8
    unit = width if width in (1, 2, 4, 8) else (8 if width % 8 == 0 else 1)
    words = width // unit
    n = len(array)
    values = np.frombuffer(
        array.buffers()[1] or b"", dtype=f"<u{unit}", count=n * words, offset=array.offset * width
    )
    if words > 1:
        values = values.reshape(n, words)
    if valid is not None:
        values = np.where(valid if words == 1 else valid[:, None], values, 0)
    return _Fixed(_validity_bytes(valid, n), values)


def _var_node(array: pa.Array, valid: np.ndarray | None, offset_type: type) -> _Var:
    n = len(array)
    offsets, data = _var_buffers(array, offset_type)
    lengths = np.diff(offsets)
    if valid is not None:
        lengths = np.where(valid, lengths, 0)
        if int(lengths.sum()) != int(offsets[-1] - offsets[0]):
            # Null slots hold bytes: rebuild the array with those slots empty.
            clean = pc.if_else(pa.array(valid), array, pa.scalar("", array.type))
            offsets, data = _var_buffers(clean, offset_type)
    return _Var(_validity_bytes(valid, n), lengths.astype("<u8"), offsets, data)


def _var_buffers(array: pa.Array, offset_type: type) -> tuple[np.ndarray, np.ndarray]:
    _, offsets_buf, data_buf = array.buffers()
    offsets: np.ndarray = np.frombuffer(
        offsets_buf, dtype=offset_type, count=len(array) + 1,
        offset=array.offset * np.dtype(offset_type).itemsize,
    )  # fmt: skip
    data = np.frombuffer(data_buf or b"", dtype=np.uint8)
    return offsets, data


def _list_node(
    array: pa.Array,
    valid: np.ndarray | None,
    offsets: np.ndarray,
    split: Callable[[pa.Array], tuple[pa.Array, ...]],
) -> _List:
    """A list-like node over `array.values[offsets[0]:offsets[-1]]`, minus null lists' entries.

    `split` maps the entries array to the child arrays that are encoded (one for lists, keys
    and values for maps).
    """
    n = len(array)
    first, last = int(offsets[0]), int(offsets[-1])
    entries = array.values.slice(first, last - first)
    counts = np.diff(offsets)
    offsets = offsets - first
    if valid is not None:
        kept = np.where(valid, counts, 0)
        if int(kept.sum()) != last - first:
            # Null lists span entries: drop them so that only non-null lists' entries are hashed.
            entries = entries.filter(pa.array(np.repeat(valid, counts)))
            offsets = np.concatenate(([0], np.cumsum(kept)))
        counts = kept
    children = tuple(encode_column(child) for child in split(entries))
    return _List(_validity_bytes(valid, n), counts.astype("<u8"), offsets, children)


def _list_view_node(array: pa.Array, valid: np.ndarray | None) -> _List:
    """List views as lists: their entries gathered in row order (pyarrow 26 casts list views
    to lists incorrectly, so the gather is done here)."""
    starts = array.offsets.to_numpy().astype(np.int64)
    counts = array.sizes.to_numpy().astype(np.int64)
    if valid is not None:
        counts = np.where(valid, counts, 0)
    offsets = np.concatenate(([0], np.cumsum(counts)))
    # entry j of row i sits at starts[i] + j, and lands at offsets[i] + j
    gather = np.arange(offsets[-1]) + np.repeat(starts - offsets[:-1], counts)
    entries = array.values.take(pa.array(gather))
    validity = _validity_bytes(valid, len(array))
    return _List(validity, counts.astype("<u8"), offsets, (encode_column(entries),))


# -------------------------------------------------------------------------------- hashing


def structured_setsum(
    columns: Sequence[pa.Array],
    num_rows: int,
    timestamp_us: int,
    first_offset: int = 0,
    *,
    item_hash: str | None = None,
) -> Setsum:
    """The setsum of rows that start at relative offset `first_offset` (a chunk boundary).

    `columns` are the payload columns in schema order; the last chunk may be short.
    `item_hash` is the log's (`BLAKE3` or None, see the module docstring).
    """
    if first_offset % CHUNK_ROWS:
        raise ValueError(f"first_offset {first_offset} is not a multiple of {CHUNK_ROWS}")
    check_item_hash(item_hash)
    nodes = [encode_column(column) for column in columns]
    timestamp = _U64_BE.pack(timestamp_us)
    # Chunks are hashed on this thread: the builder already overlaps hashing with the Parquet
    # write, and a pool of hashing threads measured no faster on top of that (Spark also runs
    # one Python worker per core).
    prehash = item_hash == BLAKE3
    digests = []
    for start in range(0, num_rows, CHUNK_ROWS):
        stop = min(start + CHUNK_ROWS, num_rows)
        header = _U64_BE.pack(first_offset + start) + timestamp
        item = blake3.blake3(header) if prehash else hashlib.sha3_256(header)
        for node in nodes:
            for piece in node.pieces(start, stop):
                item.update(piece.reshape(-1).view(np.uint8).data)  # blake3 takes bytes only
        digests.append(hashlib.sha3_256(item.digest()).digest() if prehash else item.digest())
    return Setsum.from_digests(digests)


def check_item_hash(item_hash: str | None) -> None:
    """Refuse an `item_hash` this version does not know: its fragments cannot be checked."""
    if item_hash not in ITEM_HASHES:
        raise ValueError(
            f"unknown setsum item hash {item_hash!r} (this wal3-spark knows {ITEM_HASHES}); "
            "upgrade wal3-spark to read this log"
        )


def raw_setsum(offsets: np.ndarray, timestamps_us: np.ndarray | int, bodies: pa.Array) -> Setsum:
    """Σ sha3(u64_be(offset) || u64_be(timestamp_us) || body) over records, as Chroma hashes.

    The items are assembled into one buffer by Arrow; only the hash call runs per record.
    """
    n = len(bodies)
    if n == 0:
        return Setsum()
    header = np.empty((n, 2), dtype=_HEADER_DTYPE)
    header[:, 0] = offsets
    header[:, 1] = timestamps_us
    headers = pa.FixedSizeBinaryArray.from_buffers(pa.binary(16), n, [None, pa.py_buffer(header)])
    items = pc.binary_join_element_wise(
        headers.cast(pa.large_binary()), bodies.cast(pa.large_binary()), _NO_SEPARATOR
    )
    bounds, data = _var_buffers(items, np.int64)
    bounds = bounds.tolist()
    view = data.data
    sha3 = hashlib.sha3_256
    return Setsum.from_digests([sha3(view[a:b]).digest() for a, b in itertools.pairwise(bounds)])
