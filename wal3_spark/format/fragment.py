"""Fragments: the immutable Parquet files that hold a log's records (docs/format.md section 3).

The codec, and only the codec: no paths (`format`), no storage (the writer uploads,
`fragment_io.write_fragment`; the reader fetches, `fragment_io.load_fragment`). Writers stream record
batches into a `FragmentBuilder`, which writes Parquet row groups into an in-memory buffer and
folds each row group into the fragment's setsum as it goes, so memory stays bounded by the
compressed fragment plus one row group of input.

Structured fragments hash their chunk items the way their log's manifest says (`item_hash`,
docs/format.md section 3); the fragment records which in what it hands the committer, which refuses
fragments hashed otherwise than the log.

Readers `decode_fragment` the bytes, `recompute_setsum` to verify them against the manifest, and
conform the payload to the log's current schema (`schema.conform`: fragments written before a
schema evolution lack the newer nullable columns).

Design: docs/design/13-fragment-timestamps.md.
"""

from __future__ import annotations

import base64
import inspect
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import blake3
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from wal3_spark.errors import CorruptLog, SchemaMismatch
from wal3_spark.format.chunk_encoding import (
    CHUNK_ROWS,
    check_item_hash,
    raw_setsum,
    structured_setsum,
)
from wal3_spark.format.layout import ABSOLUTE_OFFSET, RELATIVE_OFFSET, TIMESTAMP, Segment
from wal3_spark.format.schema import RAW_SCHEMA, cast, check_columns, conform
from wal3_spark.format.setsum import Setsum
from wal3_spark.format.stream_filter import StreamFilter, check_filter_column, distinct_keys

logger = logging.getLogger(__name__)

BODY = "body"

SETSUM_KEY = "wal3.setsum"
RECORDS_KEY = "wal3.records"

DEFAULT_ROW_GROUP_ROWS = 8 * CHUNK_ROWS
"""65536 rows: large enough for good Parquet compression and scans, small enough that the input
buffered for one row group stays modest; a multiple of CHUNK_ROWS so that every row group but
the last is a whole number of setsum chunks."""

#: the Parquet compression of a structured fragment: LZ4 (Parquet's LZ4_RAW). Measured on the
#: benchmark's 750,000-row fragment of 6 columns (one a `uuid()` string), 2026-12-03: pyarrow
#: decodes it in 127 ms against 213 ms with SNAPPY (the uuid column alone 50 ms against 158 ms),
#: encodes it no slower (538 ms against 569 ms), for 2.6% more bytes (43.4 MB against 42.3 MB).
#: Decoding is a Python read task's critical path (docs/benchmarks.md, "Batch reads").
STRUCTURED_COMPRESSION = "lz4"
#: the Parquet compression of a raw fragment: SNAPPY, as Chroma's wal3 writes its fragments
#: (a raw log's fragments keep Chroma's layout)
RAW_COMPRESSION = "snappy"

# Parquet writer settings, measured on 64Ki-row groups: a column whose dictionary outgrows this
# falls back to plain encoding early (a full-size dictionary of unique values costs 2x the write
# time and makes the file larger); low-cardinality columns stay dictionary-encoded.
_DICTIONARY_PAGE_BYTES = 64 << 10

#: whether the installed pyarrow writes Parquet bloom filters (`bloom_filter_options`, which
#: pyarrow 26 has and older releases lack): without it fragments carry the stream filter only
PARQUET_BLOOM_FILTERS = "bloom_filter_options" in inspect.signature(pq.ParquetWriter.__init__).parameters
#: the false-positive rate of the Parquet bloom filters a filter column gets
PARQUET_BLOOM_FPP = 0.01

_HEADER_FIELDS = [
    pa.field(RELATIVE_OFFSET, pa.uint64(), nullable=False),
    pa.field(TIMESTAMP, pa.uint64(), nullable=False),
]
# ---------------------------------------------------------------------------------- writing


@dataclass(frozen=True)
class EncodedFragment:
    """A fragment's bytes, not yet uploaded."""

    data: bytes
    records: int
    setsum: Setsum
    timestamp_us: int
    #: how the setsum's chunk items were hashed (the log's `item_hash`; None for raw logs)
    item_hash: str | None = None
    #: the stream filter of the builder's filter column (None: none asked for)
    filter: StreamFilter | None = None
    #: `digest(data)`, for the manifest pointer (docs/format.md section 4, "Fragment digests")
    blake3: str | None = None
    #: a compacted fragment's segments (`FragmentBuilder.add_segment`); None for an append's
    segments: tuple[Segment, ...] | None = None


def digest(data: bytes | memoryview) -> str:
    """The `blake3` of a fragment pointer: BLAKE3 of the fragment object's bytes, in hex. One
    thread hashes a 42 MB fragment in about 17 ms here (2.4 GB/s), with the GIL released."""
    return blake3.blake3(data).hexdigest()


class FragmentBuilder:
    """Streams record batches into one fragment, hashing them as they arrive.

    Rows are written in row groups of exactly `row_group_rows` (the last may be shorter), so a
    fragment's bytes depend only on its rows, never on how the caller batched them. Because
    `row_group_rows` is a multiple of `CHUNK_ROWS`, every row group is hashed on its own.
    `item_hash` must be the log's (`Manifest.append_item_hash`): the setsum depends on it.
    """

    def __init__(
        self,
        schema: pa.Schema | None,
        timestamp_us: int,
        compression: str | None = None,
        *,
        row_group_rows: int = DEFAULT_ROW_GROUP_ROWS,
        item_hash: str | None = None,
        filter_column: str | None = None,
    ) -> None:
        """`filter_column`: build a stream filter of that column's values (docs/format.md
        section 4, "Stream filters") and ask Parquet for a bloom filter of it in every row
        group, where the installed pyarrow writes them (`PARQUET_BLOOM_FILTERS`). `compression`:
        None picks `RAW_COMPRESSION` or `STRUCTURED_COMPRESSION` by the kind of log."""
        if row_group_rows <= 0 or row_group_rows % CHUNK_ROWS:
            raise ValueError(f"row_group_rows must be a positive multiple of {CHUNK_ROWS}")
        if not 0 <= timestamp_us < 1 << 64:
            raise ValueError(f"timestamp_us {timestamp_us} is not a u64")
        check_item_hash(item_hash)
        if schema is None and item_hash is not None:
            raise ValueError("raw fragments hash Chroma's per-record items: they take no item_hash")
        self.raw = schema is None
        self.item_hash = item_hash
        self.payload_schema = RAW_SCHEMA if schema is None else schema.remove_metadata()
        check_columns(self.payload_schema)
        if filter_column is not None:
            check_filter_column(None if self.raw else self.payload_schema, filter_column)
        self.filter_column = filter_column
        self._filter_keys: set[bytes] = set()
        self._compression = compression or (RAW_COMPRESSION if self.raw else STRUCTURED_COMPRESSION)
        self.timestamp_us = timestamp_us
        self._row_group_rows = row_group_rows
        self._file_schema = pa.schema(_HEADER_FIELDS + list(self.payload_schema))
        self._sink = pa.BufferOutputStream()
        #: opened with the first row group (`_open`): a Parquet bloom filter is sized by the
        #: distinct values, known only then
        self._writer: pq.ParquetWriter | None = None
        self._pending: list[pa.RecordBatch] = []
        #: a compaction's builder (`add_segment`): each row's own timestamp, pending rows' here
        self._segments: list[Segment] | None = None
        self._pending_ts: list[np.ndarray] = []
        self._pending_rows = 0
        self._pending_bytes = 0
        self._records = 0
        self._setsum = Setsum()
        self._finished = False
        # One writer thread per builder, never a module-level pool: a pool inherited through
        # fork (multiprocessing, Spark's Python daemon) has no live threads and would hang.
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="wal3-parquet")

    @property
    def records(self) -> int:
        """Rows added so far."""
        return self._records + self._pending_rows

    @property
    def bytes_buffered(self) -> int:
        """Compressed bytes written so far plus the in-memory size of rows not yet written.

        Callers cut fragments by size by finishing the builder once this passes their target.
        """
        return self._sink.tell() + self._pending_bytes

    def add(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Append rows: the payload columns, in the builder's schema (or castable to it).

        Nothing is added when the rows do not fit the schema (SchemaMismatch). Inputs are cast
        in slices of at most one row group, so that 32-bit binary offsets never overflow.
        """
        if self._finished:
            raise RuntimeError("FragmentBuilder.add after finish")
        step = self._row_group_rows
        conformed = [
            self._conform(part.slice(start, step))
            for part in _record_batches(batch)
            for start in range(0, part.num_rows, step)
        ]
        self._pending.extend(conformed)
        self._pending_rows += sum(payload.num_rows for payload in conformed)
        self._pending_bytes += sum(payload.nbytes for payload in conformed)
        whole = self._pending_rows - self._pending_rows % self._row_group_rows
        if whole:
            self._flush(whole)

    def add_segment(self, payload: pa.Table, timestamps_us: np.ndarray) -> None:
        """Append the rows of one fragment being compacted, with the write time of each
        (docs/format.md section 4, "Compacted fragments"): they form one segment, hashed as the
        fragment they come from was. A builder takes segments or `add`, never both."""
        if self._segments is None:
            if self._records or self._pending_rows:
                raise RuntimeError("FragmentBuilder.add_segment after add")
            self._segments = []
        if payload.num_rows != len(timestamps_us) or not payload.num_rows:
            raise ValueError("a segment has rows, and one timestamp per row")
        self._segments.append(Segment(payload.num_rows, int(timestamps_us[0])))
        self._pending_ts.append(np.asarray(timestamps_us, dtype=np.uint64))
        self.add(payload)

    def finish(self) -> EncodedFragment:
        """Write the last row group and the footer; the builder cannot be used afterwards.

        A compacted fragment's setsum is recomputed from the bytes written, segment by segment
        (`recompute_setsum`): what the fragment holds, not what was meant to go in."""
        if self._finished:
            raise RuntimeError("FragmentBuilder.finish called twice")
        if self._pending_rows:
            self._flush(self._pending_rows)
        self._finished = True
        self._io.shutdown()
        if self._writer is None:
            self._open(1)
        assert self._writer is not None
        self._writer.add_key_value_metadata(
            {SETSUM_KEY: self._setsum.hexdigest(), RECORDS_KEY: str(self._records)}
        )
        self._writer.close()
        # Copied into `bytes` (~1 ms per 14 MB), not handed on as a view of Arrow's buffer: the
        # stream's buffer keeps its grown capacity (16.8 MB for 10 MB written), and a task holds
        # one fragment while it uploads and builds the next, so a view broke the bound of about
        # 2x fragmentBytes per writing task (a view measured 2.8x in tests/spark/test_04_write_tasks.py).
        data = self._sink.getvalue().to_pybytes()
        logger.debug("encoded a fragment of %d records in %d bytes", self._records, len(data))
        stream_filter = None if self.filter_column is None else StreamFilter.build(
            self.filter_column, self._filter_keys)
        segments = None if self._segments is None else tuple(self._segments)
        setsum = self._setsum
        if segments is not None:
            decoded = decode_fragment(data, path="(compacted fragment)", raw=self.raw)
            setsum = recompute_setsum(decoded, self.raw, item_hash=self.item_hash, segments=segments)
        return EncodedFragment(data, self._records, setsum, self.timestamp_us, self.item_hash,
                               stream_filter, digest(data), segments)

    def _open(self, distinct: int) -> None:
        """Open the Parquet writer; a filter column gets Parquet's own bloom filter sized for
        `distinct` values (those of the first row group; Parquet sizes per file, not per row
        group, so later row groups with more values get a higher false-positive rate)."""
        extra: dict = {}
        if self.filter_column is not None and PARQUET_BLOOM_FILTERS:
            extra["bloom_filter_options"] = {
                self.filter_column: {"ndv": max(64, distinct), "fpp": PARQUET_BLOOM_FPP}}
        self._writer = pq.ParquetWriter(
            self._sink,
            self._file_schema,
            compression=self._compression,
            use_dictionary=[TIMESTAMP, *self.payload_schema.names],
            dictionary_pagesize_limit=_DICTIONARY_PAGE_BYTES,
            column_encoding={RELATIVE_OFFSET: "DELTA_BINARY_PACKED"},
            **extra,
        )

    def _conform(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        if self.raw:
            return _raw_payload(batch)
        return conform(batch, self.payload_schema, exact=True)

    def _flush(self, rows: int) -> None:
        """Write the first `rows` pending rows as row groups of `row_group_rows` (the last may be
        shorter) and add them to the setsum.

        The row groups go to the Parquet thread in one `write_table` call, which releases the GIL
        until all are encoded: the encode is an append's critical path, and one call per row
        group left the encoder idle between row groups while this thread, hashing, held the GIL
        (~3 ms each, up to the 5 ms switch interval). Each row group's columns are single arrays,
        as they were when written one call at a time, so the file's bytes are the same.
        """
        table = pa.Table.from_batches(self._pending, schema=self.payload_schema)
        if self.filter_column is not None:
            before = len(self._filter_keys)
            self._filter_keys |= distinct_keys(table.column(self.filter_column).slice(0, rows))
            if self._writer is None:
                self._open(len(self._filter_keys) - before)
        if self._writer is None:
            self._open(1)
        writer = self._writer
        assert writer is not None
        rest = table.slice(rows)
        self._pending = rest.to_batches()
        self._pending_rows = rest.num_rows
        self._pending_bytes = rest.nbytes
        step = self._row_group_rows
        if self._segments is not None:
            pending_ts = np.concatenate(self._pending_ts)
            self._pending_ts = [pending_ts[rows:]]
            timestamps = pa.array(pending_ts[:rows])
        else:
            timestamps = pa.array(np.full(min(rows, step), self.timestamp_us, dtype=np.uint64))
        groups: list[tuple[int, np.ndarray, list[pa.Array]]] = []
        tables = []
        for start in range(0, rows, step):
            size = min(step, rows - start)
            first = self._records + start
            offsets = np.arange(first, first + size, dtype=np.uint64)
            columns = [_single_array(column) for column in table.slice(start, size).columns]
            header = [pa.array(offsets),
                      timestamps.slice(start if self._segments is not None else 0, size)]
            tables.append(pa.Table.from_arrays(header + columns, schema=self._file_schema))
            groups.append((first, offsets, columns))
        # Parquet encoding releases the GIL: it runs on another thread while this one hashes.
        written = self._io.submit(writer.write_table, pa.concat_tables(tables), row_group_size=step)
        try:
            for first, offsets, columns in groups:
                if self._segments is not None:
                    continue  # hashed from the bytes written, by segment (`finish`)
                if self.raw:
                    self._setsum += raw_setsum(offsets, self.timestamp_us, columns[0])
                else:
                    self._setsum += structured_setsum(
                        columns, len(offsets), self.timestamp_us, first, item_hash=self.item_hash
                    )
        finally:
            written.result()
        self._records += rows


def _record_batches(data: pa.RecordBatch | pa.Table) -> list[pa.RecordBatch]:
    return data.to_batches() if isinstance(data, pa.Table) else [data]


def _single_array(column: pa.ChunkedArray) -> pa.Array:
    """One contiguous array, copying only when the column spans several input batches."""
    if column.num_chunks == 1:
        return column.chunk(0)
    return column.combine_chunks()


def _raw_payload(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The `body` column (or the only column) of `batch`, as non-null `binary`."""
    if BODY in batch.schema.names:
        body = batch.column(BODY)
    elif batch.num_columns == 1:
        body = batch.column(0)
    else:
        raise SchemaMismatch(
            f"a raw log takes one `body` column of bytes; got columns {batch.schema.names}"
        )
    kind = body.type
    if not (pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or pa.types.is_string(kind)
            or pa.types.is_large_string(kind)):  # fmt: skip
        raise SchemaMismatch(f"a raw log's body must be bytes or a string, got {kind}")
    if body.null_count:
        raise SchemaMismatch(f"a raw log's records cannot be null ({body.null_count} are)")
    return pa.RecordBatch.from_arrays([body.cast(pa.binary())], schema=RAW_SCHEMA)


def encode_raw(bodies: Sequence[bytes] | pa.Array, timestamp_us: int) -> EncodedFragment:
    """One raw-log fragment holding `bodies` (Chroma's record model)."""
    array = bodies if isinstance(bodies, pa.Array) else pa.array(bodies, pa.binary())
    builder = FragmentBuilder(None, timestamp_us)
    builder.add(pa.RecordBatch.from_arrays([array], names=[BODY]))
    return builder.finish()


def encode_table(
    table: pa.Table | pa.RecordBatch,
    schema: pa.Schema | None,
    timestamp_us: int,
    *,
    item_hash: str | None = None,
) -> EncodedFragment:
    """One fragment holding every row of `table`, in `schema` (None: a raw log), its chunk
    items hashed as `item_hash` says."""
    builder = FragmentBuilder(schema, timestamp_us, item_hash=item_hash)
    builder.add(table)
    return builder.finish()


# ---------------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class DecodedFragment:
    """A fragment's columns as stored."""

    path: str
    #: the offset column as stored (relative, or absolute in Chroma S3 fragments)
    offsets: np.ndarray
    #: True when the offsets are absolute (Chroma's `offset` column)
    absolute: bool
    #: the write time of every row, as stored
    timestamp_us: np.ndarray
    #: the payload columns only
    payload: pa.Table
    metadata_setsum: str | None
    metadata_records: int | None

    @property
    def records(self) -> int:
        return len(self.offsets)


def decode_fragment(data: bytes | memoryview, *, path: str, raw: bool) -> DecodedFragment:
    """Parse a fragment; raise CorruptLog naming `path` if it is not a well-formed fragment."""
    return open_fragment(data, path=path, raw=raw).decode()


class OpenedFragment:
    """A fragment whose footer is parsed and checked, decoded whole or some row groups at a
    time (`decode`): a read task hands each row group to Spark while the next one decodes,
    instead of waiting for the whole fragment (docs/benchmarks.md, "Batch reads")."""

    def __init__(self, parquet: pq.ParquetFile, *, path: str, raw: bool) -> None:
        self.path = path
        self._parquet = parquet
        meta = parquet.metadata
        names = parquet.schema_arrow.names
        self.absolute = RELATIVE_OFFSET not in names and ABSOLUTE_OFFSET in names
        self._offset_name = ABSOLUTE_OFFSET if self.absolute else RELATIVE_OFFSET
        required = [self._offset_name, TIMESTAMP] + ([BODY] if raw else [])
        missing = [name for name in required if name not in names]
        if missing:
            raise CorruptLog("a fragment has its required columns", path,
                             f"columns {missing} are missing (it has {names})")
        self._file_metadata = meta.metadata or {}
        #: parsed once, not per row group decoded (about 1 ms each)
        self._written = _written_schema(self._file_metadata)
        metadata = {key.decode(errors="replace"): value.decode(errors="replace")
                    for key, value in self._file_metadata.items()}
        self.metadata_setsum = metadata.get(SETSUM_KEY)
        self.metadata_records = _metadata_records(metadata.get(RECORDS_KEY), path)
        #: the payload columns' names, as stored
        self.payload_names = [n for n in names if n not in (self._offset_name, TIMESTAMP)]
        #: rows per row group, as the footer says
        self.row_group_rows = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]

    @property
    def records(self) -> int:
        """The rows the footer says the file holds."""
        return sum(self.row_group_rows)

    def decode(self, row_groups: Sequence[int] | None = None, *, threads: bool = True) -> DecodedFragment:
        """The columns of `row_groups` (consecutive, ascending; None: all), as stored; CorruptLog
        naming the fragment if they do not decode. pyarrow releases the GIL while decoding.

        `threads`: decode the columns on pyarrow's CPU pool. A caller that already decodes on
        one thread while another consumes (a read task's row-group pipeline) says False: on
        cores its consumer keeps busy, the pool only added coordination, 20% more CPU for a
        fragment (docs/benchmarks.md, "Fetching into reused memory")."""
        try:
            parquet = self._parquet
            table = (parquet.read(use_threads=threads) if row_groups is None
                     else parquet.read_row_groups(list(row_groups), use_threads=threads))
            table = _restore_arrow_types(table, self._written)
        except (pa.ArrowException, OSError, ValueError) as exc:
            problem = f"not a readable Parquet file ({exc})"
            raise CorruptLog("a fragment is a readable Parquet file", self.path, problem) from None
        return DecodedFragment(
            path=self.path,
            offsets=_u64_column(table, self._offset_name, self.path),
            absolute=self.absolute,
            timestamp_us=_u64_column(table, TIMESTAMP, self.path),
            payload=table.drop_columns([self._offset_name, TIMESTAMP]).replace_schema_metadata(None),
            metadata_setsum=self.metadata_setsum,
            metadata_records=self.metadata_records,
        )


def open_fragment(data: bytes | memoryview, *, path: str, raw: bool) -> OpenedFragment:
    """Parse a fragment's footer (nothing is decoded yet); CorruptLog naming `path` if it is not
    a Parquet file with a fragment's required columns."""
    try:
        parquet = pq.ParquetFile(pa.BufferReader(data))
    except (pa.ArrowException, OSError, ValueError) as exc:
        problem = f"not a readable Parquet file ({exc})"
        raise CorruptLog("a fragment is a readable Parquet file", path, problem) from None
    return OpenedFragment(parquet, path=path, raw=raw)


def _written_schema(metadata: dict[bytes, bytes]) -> pa.Schema | None:
    """The Arrow schema a fragment was written with (its `ARROW:schema`), if it records one.
    pyarrow parsed it when it opened the file: one that does not parse failed `open_fragment`."""
    stored = metadata.get(b"ARROW:schema")
    return None if stored is None else pa.ipc.read_schema(pa.py_buffer(base64.b64decode(stored)))


def _restore_arrow_types(table: pa.Table, written: pa.Schema | None) -> pa.Table:
    """`table` in the Arrow types it was `written` with (`_written_schema`).

    Parquet has no date64, time32[s] or timestamp[s]: they read back as date32, time32[ms] and
    timestamp[ms]. The setsum was computed on the written types, so they are cast back (exactly)
    before anything is hashed.
    """
    if written is None:
        return table
    for index, field in enumerate(table.schema):
        if field.name not in written.names:
            continue
        original = written.field(field.name).type
        if original != field.type:
            column = cast(table.column(index), original)
            table = table.set_column(index, field.with_type(original), column)
    return table


def _u64_column(table: pa.Table, name: str, path: str) -> np.ndarray:
    column = table.column(name)
    if column.null_count or not pa.types.is_integer(column.type):
        problem = f"{name} is not a non-null integer column ({column.type} with {column.null_count} nulls)"
        raise CorruptLog(f"a fragment's {name} is a non-null integer", path, problem)
    chunks = [_integer_view(chunk) for chunk in column.chunks]
    values = chunks[0] if len(chunks) == 1 else np.concatenate(chunks) if chunks else np.empty(0)
    return values.astype(np.uint64, copy=False)


def _integer_view(chunk: pa.Array) -> np.ndarray:
    """A null-free integer array's values, viewed without a copy. Not `to_numpy`: pyarrow's
    imports pandas on first use, over a second of CPU that a fresh Spark worker paid on its
    first fragment's critical path (and a read needs no pandas)."""
    kind = chunk.type
    dtype = np.dtype(f"{'i' if pa.types.is_signed_integer(kind) else 'u'}{kind.bit_width // 8}")
    return np.frombuffer(chunk.buffers()[1], dtype=dtype, count=len(chunk), offset=chunk.offset * dtype.itemsize)


def _metadata_records(value: str | None, path: str) -> int | None:
    if value is None:
        return None
    if not value.isdigit():
        raise CorruptLog(f"{RECORDS_KEY} metadata is a decimal count", path,
                         f"its {RECORDS_KEY} metadata is not a decimal count ({value!r})")
    return int(value)


def recompute_setsum(
    decoded: DecodedFragment,
    raw: bool,
    *,
    item_hash: str | None = None,
    segments: Sequence[Segment] | None = None,
) -> Setsum:
    """The fragment's setsum from its content alone (never from its metadata).

    Raw: one item per record with the offset and timestamp as stored. Structured: one item per
    chunk, hashed as the log's `item_hash` says; the chunk header holds only the first row's
    offset and the timestamp, so the other rows' values are checked here instead (0..n-1, one
    timestamp), else they would go unverified. A compacted fragment (`segments`, docs/format.md
    section 4) sums its segments, each hashed as the fragment it was first written in: offsets
    relative to the segment's first row, one timestamp per structured segment.
    """
    if segments is None:
        return _recompute(decoded, raw, item_hash, 0, decoded.records)
    if sum(segment.records for segment in segments) != decoded.records:
        raise CorruptLog("a compacted fragment's segments hold its records", decoded.path,
                         f"its segments hold {sum(s.records for s in segments)} records, "
                         f"the file {decoded.records}")
    total, first = Setsum(), 0
    for segment in segments:
        total += _recompute(decoded, raw, item_hash, first, first + segment.records)
        first += segment.records
    return total


def _recompute(decoded: DecodedFragment, raw: bool, item_hash: str | None, lo: int, hi: int) -> Setsum:
    """`recompute_setsum` of rows [lo, hi), hashed as a fragment of their own."""
    n = hi - lo
    offsets = decoded.offsets[lo:hi]
    timestamps = decoded.timestamp_us[lo:hi]
    relative = offsets - np.uint64(lo) if lo and not decoded.absolute else offsets
    if raw:
        body = decoded.payload.column(BODY).slice(lo, n)
        if body.null_count:
            problem = f"a raw fragment with {body.null_count} null bodies"
            raise CorruptLog("a raw fragment has no null body", decoded.path, problem)
        return Setsum.sum(
            raw_setsum(relative[a:b], timestamps[a:b], _single_array(body.slice(a, b - a)))
            for a, b in _blocks(n)
        )
    if decoded.absolute or not np.array_equal(relative, np.arange(n, dtype=np.uint64)):
        invariant = "a structured fragment's relative_offset is 0..n-1"
        raise CorruptLog(invariant, decoded.path, "its relative_offset column is not 0..n-1")
    if n and (timestamps != timestamps[0]).any():
        raise CorruptLog("a fragment has one timestamp_us", decoded.path,
                         "its rows' timestamp_us differ" if decoded.records == n else
                         f"the timestamp_us of its rows [{lo}, {hi}) (one segment) differ")
    timestamp_us = int(timestamps[0]) if n else 0
    payload = decoded.payload.slice(lo, n)
    return Setsum.sum(
        structured_setsum(
            [_single_array(c) for c in payload.slice(a, b - a).columns],
            b - a,
            timestamp_us,
            first_offset=a,
            item_hash=item_hash,
        )
        for a, b in _blocks(n)
    )


def _blocks(n: int) -> list[tuple[int, int]]:
    """Row ranges of at most one default row group, aligned on chunks: bounds the copies."""
    step = DEFAULT_ROW_GROUP_ROWS
    return [(a, min(a + step, n)) for a in range(0, n, step)]
