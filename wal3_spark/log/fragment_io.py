"""Fragment I/O, the part of a log an executor runs: upload a fragment, fetch one, check it
against the manifest's pointer, and read a range of its records.

Spark tasks import this module alone (`spark/write_tasks`, `spark/read_tasks`; the driver commits
with `spark/commit`), never the driver's `LogWriter` or `LogReader`. Decoding
(`wal3_spark.format.fragment`: pyarrow.parquet, the setsum's chunk encoding and pyarrow.compute) is
imported on first decode: the driver side of a read needs none of it, and a streaming query's source
runs in a fresh Python process per query that only plans (`wal3_spark.spark.source`).

Design: docs/design/13-fragment-timestamps.md, docs/design/15-blake3-item-hash.md,
docs/design/23-readers-and-garbage-collection.md.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from wal3_spark.clock import SYSTEM, Clock, micros
from wal3_spark.errors import (
    AmbiguousWrite,
    CorruptLog,
    DataLost,
    LogNotFound,
    ObjectNotFound,
    PreconditionFailed,
    StorageError,
    TransientError,
)
from wal3_spark.format.layout import MANIFEST_KEY, FragmentRef, fragment_path
from wal3_spark.format.retention import described
from wal3_spark.format.schema import (
    OFFSET_COLUMN,
    RAW_SCHEMA,
    TIMESTAMP_COLUMN,
    conform,
)
from wal3_spark.format.setsum import Setsum
from wal3_spark.format.stream_filter import StreamFilter, ValueFilter
from wal3_spark.format.uuid7 import new_uuid7, uuid7_timestamp_us
from wal3_spark.log.manifest_reader import read_manifest
from wal3_spark.log.parents import parent_store
from wal3_spark.storage.base import ObjectStore
from wal3_spark.storage.retry import backoff_delays

if TYPE_CHECKING:
    import pyarrow.parquet as pq

    from wal3_spark.format.fragment import DecodedFragment, EncodedFragment

logger = logging.getLogger(__name__)

_BACKOFF_BASE_S = 0.1
_BACKOFF_CAP_S = 2.0

OFFSET_FIELD = pa.field(OFFSET_COLUMN, pa.int64(), nullable=False)
TIMESTAMP_FIELD = pa.field(TIMESTAMP_COLUMN, pa.timestamp("us", tz="UTC"), nullable=False)

#: the invariants a fragment or snapshot the manifest references but the store lacks breaks
MISSING_FRAGMENT = "every referenced fragment exists"
MISSING_SNAPSHOT = "every referenced snapshot exists"

def missing_error(store: ObjectStore, invariant: str, path: str, start: int) -> Exception:
    """What a referenced object (holding offsets from `start`) that the store lacks means, by
    the current manifest: DataLost when GC moved the oldest offset past it since the caller
    read its manifest, LogNotFound when the log itself is gone, else CorruptLog."""
    try:
        manifest = read_manifest(store)
    except LogNotFound as exc:
        return exc
    oldest = manifest.own_oldest_offset
    if start < oldest:
        return DataLost(store.url, start, oldest, retention=described(manifest.retention))
    return CorruptLog(invariant, path, "is missing, and the manifest still references it")


def output_schema(payload: pa.Schema | None) -> pa.Schema:
    """What reads return: the payload columns, then `_offset` and `_timestamp`."""
    payload = RAW_SCHEMA if payload is None else payload
    return pa.schema(list(payload) + [OFFSET_FIELD, TIMESTAMP_FIELD])


@dataclass(frozen=True)
class ReadRange:
    """One fragment and the part of it [start, limit) a read wants. `root`: the URL of the log
    the fragment belongs to when it is not the log read (a branch reading its parent's records,
    docs/design/26-branches-and-tags.md); None: the log read."""

    ref: FragmentRef
    start: int
    limit: int
    root: str | None = None

    @property
    def records(self) -> int:
        return self.limit - self.start



def write_fragments(
    store: ObjectStore,
    batches: Iterable[pa.RecordBatch],
    schema: pa.Schema | None,
    *,
    fragment_bytes: int,
    timestamp_us: int | None = None,
    item_hash: str | None = None,
    clock: Clock = SYSTEM,
    filter_column: str | None = None,
) -> list[FragmentFile]:
    """Write `batches` (already in `schema`) as fragments of about `fragment_bytes` each."""
    return list(iter_write_fragments(store, batches, schema, fragment_bytes=fragment_bytes,
                                     timestamp_us=timestamp_us, item_hash=item_hash, clock=clock,
                                     filter_column=filter_column))


def iter_write_fragments(
    store: ObjectStore,
    batches: Iterable[pa.RecordBatch],
    schema: pa.Schema | None,
    *,
    fragment_bytes: int,
    timestamp_us: int | None = None,
    item_hash: str | None = None,
    clock: Clock = SYSTEM,
    filter_column: str | None = None,
) -> Iterator[FragmentFile]:
    """Each fragment as soon as it is uploaded, so that a caller holds at most one fragment in
    memory and knows what to clean up if a later one fails. `item_hash` is the log's
    (`Manifest.append_item_hash`); `clock` stamps the fragments (unless `timestamp_us` is given)
    and times the backoff of their uploads; `filter_column` gives each a stream filter of that
    column (docs/format.md section 4, "Stream filters")."""
    from wal3_spark.format.fragment import FragmentBuilder  # see the module docstring

    builder: FragmentBuilder | None = None
    for batch in batches:
        if batch.num_rows == 0:
            continue
        if builder is None:
            builder = FragmentBuilder(schema, timestamp_us or micros(clock), item_hash=item_hash,
                                      filter_column=filter_column)
        builder.add(batch)
        if builder.bytes_buffered >= fragment_bytes:
            encoded, builder = builder.finish(), None
            yield write_fragment(store, encoded, clock=clock)
    if builder is not None:
        yield write_fragment(store, builder.finish(), clock=clock)



# ------------------------------------------------------------------------------ uploading


@dataclass(frozen=True)
class FragmentFile:
    """An uploaded fragment: what the committer places in the manifest."""

    path: str
    uuid: str
    records: int
    num_bytes: int
    setsum: Setsum
    timestamp_us: int
    item_hash: str | None = None
    #: its stream filter (docs/format.md section 4, "Stream filters"), placed in its manifest entry
    filter: StreamFilter | None = None
    #: the digest of its bytes (docs/format.md section 4, "Fragment digests"), placed in its
    #: manifest entry; None: not known (nothing is checked on read but its setsum)
    blake3: str | None = None

    def __reduce__(self) -> tuple[type[FragmentFile], tuple[Any, ...]]:
        # positional: no field names in every Spark commit message
        return (
            FragmentFile,
            (self.path, self.uuid, self.records, self.num_bytes, self.setsum, self.timestamp_us,
             self.item_hash, self.filter, self.blake3),
        )  # fmt: skip


def write_fragment(
    store: ObjectStore, encoded: EncodedFragment, *, attempts: int = 6, clock: Clock = SYSTEM
) -> FragmentFile:
    """Upload `encoded` with create-if-absent (`create`: its ETag is never read) at a fresh
    UUIDv7 path made from its timestamp.

    The path is unique to this call, so every failure is safe to retry: a transient error
    changed nothing, and an ambiguous write is resolved by reading the object back (the same
    bytes mean our write landed). Gives up after `attempts` tries with the last error.
    """
    fragment_uuid = new_uuid7(encoded.timestamp_us)
    path = fragment_path(fragment_uuid)
    delays = backoff_delays(attempts, _BACKOFF_BASE_S, _BACKOFF_CAP_S)
    for attempt in range(1, attempts + 1):
        try:
            store.create(path, encoded.data)
            break
        except PreconditionFailed:
            # Only an earlier ambiguous attempt of ours can have created this fresh path.
            if attempt > 1 and _landed(store, path, encoded.data):
                break
            raise
        except (AmbiguousWrite, TransientError) as exc:
            logger.warning("fragment upload %s failed (attempt %d): %s", path, attempt, exc)
            if isinstance(exc, AmbiguousWrite) and _landed(store, path, encoded.data):
                break
            delay = next(delays, None)
            if delay is None:
                raise
            clock.sleep(delay)
    return FragmentFile(
        path=path,
        uuid=str(fragment_uuid),
        records=encoded.records,
        num_bytes=len(encoded.data),
        setsum=encoded.setsum,
        timestamp_us=encoded.timestamp_us,
        item_hash=encoded.item_hash,
        filter=encoded.filter,
        blake3=encoded.blake3,
    )


def _landed(store: ObjectStore, path: str, data: bytes) -> bool:
    try:
        stored = store.get(path).data
    except ObjectNotFound:
        return False
    if stored != data:
        raise StorageError(f"{path} holds bytes this writer did not write; refusing to use it")
    return True


def fragment_timestamp_us(store: ObjectStore, ref: FragmentRef) -> int:
    """A fragment's write time: its first segment's for a compacted one (its path holds the
    compaction's time), from its UUIDv7 path when it has one, else from its data."""
    if ref.segments is not None:
        return ref.segments[0].timestamp_us
    if isinstance(ref.seq_no, str):
        ts = uuid7_timestamp_us(ref.seq_no)
        if ts is not None:
            return ts
    from wal3_spark.format.fragment import decode_fragment  # see the module docstring

    decoded = decode_fragment(fetch_fragment(store, ref), path=ref.path, raw=True)
    return int(np.asarray(decoded.timestamp_us).reshape(-1)[0])


def exact_path_timestamp_us(ref: FragmentRef, structured: bool) -> int | None:
    """A fragment's `timestamp_us` from its path alone, when the path provably carries it; else
    None (the file's column is the truth, as `format("wal3")` reads it).

    Only wal3-spark writes structured logs, and every structured fragment's UUIDv7 encodes its
    `timestamp_us` to the microsecond (docs/design/13-fragment-timestamps.md). Raw logs may hold fragments
    written by Chroma at UUID paths whose `rand_a` is not a microsecond count, or whose UUID was
    made at another moment than the rows' `timestamp_us`: nothing in the path tells them from
    ours, so their time is in the file only (the native scan reads its column; `_timestamp`
    filter pushdown keeps such fragments for Spark's filter to decide).
    """
    if not structured or not isinstance(ref.seq_no, str) or ref.segments is not None:
        return None  # a compacted fragment's rows keep their own times (docs/format.md section 4)
    return uuid7_timestamp_us(ref.seq_no, exact=True)


#: what `fragment_footer` fetches first from a fragment's end: the footer of a fragment of
#: a few columns fits (the native scan's checks read one or two fragments per query)
_FOOTER_READ = 1 << 16


def fragment_footer(store: ObjectStore, ref: FragmentRef) -> pq.FileMetaData:
    """A referenced fragment's Parquet footer (its record count, its columns), without its data:
    one range GET (two for a footer larger than 64 KiB). A missing one raises `missing_error`'s
    verdict, a file that is not Parquet CorruptLog."""
    import pyarrow.parquet as pq  # see the module docstring

    try:
        tail = store.get_range(ref.path, -_FOOTER_READ, _FOOTER_READ)
        size = int.from_bytes(tail[-8:-4], "little") + 8 if len(tail) >= 12 else 0
        if len(tail) < size:
            tail = store.get_range(ref.path, -size, size)
    except ObjectNotFound:
        raise missing_error(store, MISSING_FRAGMENT, ref.path, ref.start) from None
    if len(tail) < 12 or tail[-4:] != b"PAR1" or len(tail) < size:
        raise CorruptLog("a fragment is a Parquet file", ref.path, "does not end in a Parquet footer")
    try:
        return pq.read_metadata(pa.BufferReader(b"PAR1" + tail[-size:]))
    except (OSError, pa.ArrowException) as exc:
        raise CorruptLog("a fragment is a Parquet file", ref.path,
                         f"its Parquet footer does not parse ({exc})") from None


def fetch_fragment(store: ObjectStore, ref: FragmentRef) -> bytes | memoryview:
    """A referenced fragment's bytes, read-only (`ObjectStore.get_buffer`: a store may reuse
    memory); a missing one raises `missing_error`'s verdict."""
    try:
        return store.get_buffer(ref.path)
    except ObjectNotFound:
        raise missing_error(store, MISSING_FRAGMENT, ref.path, ref.start) from None


def load_fragment(
    store: ObjectStore,
    ref: FragmentRef,
    raw: bool,
    *,
    verify: bool = True,
    records: bool = False,
    item_hash: str | None = None,
) -> DecodedFragment:
    """A referenced fragment, fetched and checked (`check_fragment_data`)."""
    return check_fragment_data(
        fetch_fragment(store, ref), ref, raw, verify=verify, records=records, item_hash=item_hash
    )


def check_fragment_data(
    data: bytes | memoryview,
    ref: FragmentRef,
    raw: bool,
    *,
    verify: bool = True,
    records: bool = False,
    item_hash: str | None = None,
) -> DecodedFragment:
    """A fragment's bytes, decoded and checked against the manifest's pointer: its record
    count, where its stored offsets start and, with `verify`, its content, as a Kafka consumer
    checks CRCs. Any mismatch raises CorruptLog naming the fragment, never skips.

    The content check is the digest of the bytes where the pointer records one (the writer's
    `blake3`: these are the bytes it encoded and summed, about 17 ms per 42 MB), else the setsum
    recomputed from every record under the log's `item_hash` (the manifest's); `records`
    recomputes the setsum even where the digest matched, the record-level proof `wal3 verify`
    and a copy make (docs/format.md section 7)."""
    from wal3_spark.format.fragment import decode_fragment, recompute_setsum  # see the module docstring

    if verify and ref.blake3 is not None:
        _check_digest(data, ref)
    decoded = decode_fragment(data, path=ref.path, raw=raw)
    n = len(decoded.offsets)
    if n != ref.records:
        raise CorruptLog(
            "a fragment holds limit - start records", ref.path,
            f"holds {n} records, the manifest says {ref.records}"
        )
    first = int(decoded.offsets[0]) if n else 0
    if first != (ref.start if decoded.absolute else 0):
        raise CorruptLog(
            "a fragment's stored offsets start where the manifest places it",
            ref.path,
            f"its stored offsets do not start where the manifest places it (first stored offset "
            f"{first}, manifest start {ref.start})",
        )
    if verify and (records or ref.blake3 is None):
        actual = recompute_setsum(decoded, raw=raw, item_hash=item_hash, segments=ref.segments)
        if actual != ref.setsum:
            raise CorruptLog(
                "a fragment's content matches its setsum in the manifest",
                ref.path,
                f"content does not match its setsum in the manifest (recomputed "
                f"{actual.hexdigest()}, manifest {ref.setsum.hexdigest()}); the file is corrupt: "
                "restore it from a copy or run `wal3 verify` for the full report",
            )
    if verify:
        _check_path_time(decoded, ref, raw)
    return decoded


def _check_path_time(decoded: DecodedFragment, ref: FragmentRef, raw: bool) -> None:
    """A structured fragment's rows carry the time its path encodes (`exact_path_timestamp_us`):
    the native scan and `_timestamp` pushdown take it from the path, so a fragment that breaks
    the rule would read differently there. The setsum covers the column, not the path."""
    path_us = exact_path_timestamp_us(ref, structured=not raw)
    if path_us is None or not len(decoded.timestamp_us):
        return
    wrong = decoded.timestamp_us != path_us
    if wrong.any():
        raise CorruptLog(
            "a structured fragment's rows carry its path's write time",
            ref.path,
            f"{int(wrong.sum())} of its rows have a timestamp_us other than its path's "
            f"({int(decoded.timestamp_us[wrong.argmax()])} vs {path_us}); wal3-spark never "
            "writes such a fragment: it was rewritten or renamed by something else",
        )


def _int64s(values: np.ndarray, kind: pa.DataType) -> pa.Array:
    """`values` as a non-null Arrow array of the 64-bit `kind`, from their buffer (unsigned
    values are viewed as signed, not converted: a cast is a copy). Not `pa.array`: it imports
    pandas on first use, over a second of CPU that a fresh Spark worker paid on its first
    fragment's critical path (and a read needs no pandas)."""
    if values.dtype == np.uint64:  # wal3 stores offsets and times as uint64, far below 2**63
        values = values.view(np.int64)
    data = np.ascontiguousarray(values, dtype=np.int64)
    return pa.Array.from_buffers(kind, len(data), [None, pa.py_buffer(data)])


#: 0, 1, 2, ... for `_offsets`, one row group's worth
_COUNTING = np.arange(1 << 16, dtype=np.int64)


def _offsets(first: int, n: int) -> pa.Array:
    """The offsets first, first + 1, ... (n of them) as a non-null int64 Arrow array, in memory
    from Arrow's pool: a new numpy array per row group was mapped afresh, page faults included,
    every time (docs/benchmarks.md, "Fetching into reused memory")."""
    buffer = pa.allocate_buffer(8 * n)
    out = np.frombuffer(buffer, dtype=np.int64)
    step = len(_COUNTING)
    for lo in range(0, n, step):
        m = min(step, n - lo)
        np.add(_COUNTING[:m], first + lo, out=out[lo:lo + m])
    return pa.Array.from_buffers(pa.int64(), n, [None, buffer])


def check_columns_known(path: str, columns: Iterable[str], payload: pa.Schema | None) -> None:
    """A fragment's payload `columns` are all in the schema of the manifest that references it
    (`CorruptLog` naming the manifest otherwise): a log's schema only gains columns, in the same
    manifest write as the first fragment that has them. A column the read schema lacks means a
    damaged schema, which would otherwise read that column as nulls under another name."""
    names = set((RAW_SCHEMA if payload is None else payload).names)
    unknown = [name for name in columns if name not in names]
    if unknown:
        raise CorruptLog(
            "every fragment column is in the log's schema", MANIFEST_KEY,
            f"{path} has column(s) {unknown} that the manifest's schema ({sorted(names)}) "
            "lacks: the schema in the manifest is damaged (or the fragment is another log's)",
        )


#: one piece of a range (`open_range`): decodes, checks and returns some of its rows
Piece = Callable[[], pa.RecordBatch]


def read_range(
    store: ObjectStore,
    part: ReadRange,
    payload: pa.Schema | None,
    *,
    verify: bool = True,
    records: bool = False,
    item_hash: str | None = None,
    fail_on_data_loss: bool = True,
    values: ValueFilter | None = None,
) -> pa.RecordBatch:
    """The records of one fragment in [part.start, part.limit), as the read schema says, in one
    batch: `open_range`'s checks, the range decoded at once."""
    pieces = open_range(store, part, payload, verify=verify, records=records, item_hash=item_hash,
                        fail_on_data_loss=fail_on_data_loss, values=values, whole=True)
    if not pieces:  # skipped (failOnDataLoss=false), or no rows in the range
        return pa.RecordBatch.from_pylist([], schema=output_schema(payload))
    (piece,) = pieces
    return piece()


def open_range(
    store: ObjectStore,
    part: ReadRange,
    payload: pa.Schema | None,
    *,
    verify: bool = True,
    records: bool = False,
    item_hash: str | None = None,
    fail_on_data_loss: bool = True,
    values: ValueFilter | None = None,
    whole: bool = False,
) -> list[Piece]:
    """Fetch one fragment and check what can be checked before decoding it; return the pieces
    that decode the records in [part.start, part.limit), in order, as the read schema says (with
    `values`, only the rows it wants, exactly: the stream filter that let the fragment through
    may have been a false positive). One piece per Parquet row group, or one for the whole
    range (`whole`).

    Verified means no row reaches the caller before the whole fragment is proven: where the
    pointer records a digest, it is checked here on the fetched bytes, before any piece exists,
    and each piece checks its rows' stored offsets and path time as it decodes them. Where the
    setsum must be recomputed (`records`, or no digest), that needs every row, so the whole
    fragment is decoded and proven here (`check_fragment_data`) and the one piece only slices it.

    A fragment garbage collection deleted after the read was planned raises DataLost with the
    collected range; with `fail_on_data_loss=False` it is skipped with a warning (no pieces), as
    a planned start below the oldest offset is: a task that loses the race with GC behaves as
    the plan would have, had it been made a moment later.
    """
    from wal3_spark.format.fragment import open_fragment  # see the module docstring

    ref = part.ref
    raw = payload is None
    if part.root is not None:
        store = parent_store(store, part.root)
    try:
        data = fetch_fragment(store, ref)
    except DataLost:
        if fail_on_data_loss:
            raise
        logger.warning("%s: offsets [%d, %d) were garbage-collected while being read; skipping them",
                       store.url, part.start, part.limit)
        return []
    lo, hi = part.start - ref.start, part.limit - ref.start
    if verify and (records or ref.blake3 is None):
        decoded = check_fragment_data(data, ref, raw, verify=verify, records=records,
                                      item_hash=item_hash)
        check_columns_known(ref.path, decoded.payload.schema.names, payload)
        batch = _range_batch(decoded, 0, lo, hi, ref.start, payload, values)
        return [lambda: batch]
    if verify:
        _check_digest(data, ref)
    fragment = open_fragment(data, path=ref.path, raw=raw)
    check_columns_known(ref.path, fragment.payload_names, payload)
    if fragment.records != ref.records:
        raise CorruptLog(
            "a fragment holds limit - start records", ref.path,
            f"holds {fragment.records} records, the manifest says {ref.records}"
        )
    groups: list[tuple[list[int], int]] = []  # (row groups, the fragment row of their first)
    first = 0
    for index, rows in enumerate(fragment.row_group_rows):
        if first < hi and first + rows > lo and rows:
            if whole and groups:
                groups[0][0].append(index)
            else:
                groups.append(([index], first))
        first += rows

    def piece(row_groups: list[int], row: int) -> pa.RecordBatch:
        # row-group pieces decode one step ahead of their consumer (`read_tasks.pipelined`)
        decoded = fragment.decode(row_groups, threads=whole)
        stored = int(decoded.offsets[0])
        expected = row + (ref.start if decoded.absolute else 0)
        if stored != expected:
            raise CorruptLog(
                "a fragment's stored offsets start where the manifest places it",
                ref.path,
                f"its stored offsets do not start where the manifest places it (first stored "
                f"offset {stored} at row {row}, expected {expected}: manifest start {ref.start})",
            )
        if verify:
            _check_path_time(decoded, ref, raw)
        return _range_batch(decoded, row, lo, hi, ref.start + row, payload, values)

    return [partial(piece, g, r) for g, r in groups]


def _check_digest(data: bytes | memoryview, ref: FragmentRef) -> None:
    """The fragment's bytes hash to the `blake3` of its pointer, else CorruptLog naming it."""
    from wal3_spark.format.fragment import digest  # see the module docstring

    actual_digest = digest(data)
    if actual_digest != ref.blake3:
        raise CorruptLog(
            "a fragment's bytes match their blake3 in the manifest",
            ref.path,
            f"its bytes do not match their blake3 in the manifest (hashed {actual_digest}, "
            f"manifest {ref.blake3}); the file is corrupt: restore it from a copy or run "
            "`wal3 verify` for the full report",
        )


def _range_batch(
    decoded: DecodedFragment,
    row: int,
    lo: int,
    hi: int,
    offset: int,
    payload: pa.Schema | None,
    values: ValueFilter | None,
) -> pa.RecordBatch:
    """The rows of `decoded` (fragment rows from `row`; the first has log offset `offset`) that
    fall in the fragment rows [lo, hi), with `_offset` and `_timestamp`, as the read schema says."""
    raw = payload is None
    n = len(decoded.offsets)
    table = conform(decoded.payload, RAW_SCHEMA if raw else payload)
    a, b = max(lo - row, 0), min(hi - row, n)
    table = table.slice(a, b - a)
    offsets = _offsets(offset + a, b - a)
    ts = np.broadcast_to(np.asarray(decoded.timestamp_us).reshape(-1), (n,))[a:b]
    timestamps = _int64s(ts, TIMESTAMP_FIELD.type)
    # a decode yields one chunk per column: take it (a slice, no copy); combine_chunks would
    # copy every byte once more
    columns = [c.chunk(0) if c.num_chunks == 1 else c.combine_chunks() for c in table.columns]
    batch = pa.RecordBatch.from_arrays(
        columns + [offsets, timestamps], schema=output_schema(None if raw else payload)
    )
    return batch if values is None else values.rows(batch)
