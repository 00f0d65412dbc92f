"""Stream filters: a small Bloom filter of one column's values per fragment (docs/format.md
section 4, "Stream filters", docs/design/16-stream-filters.md).

A log that multiplexes many streams (tenants, keys) is read one stream at a time by readers
that would otherwise fetch every fragment. A fragment written with a filter column carries, in
its manifest entry, a Bloom filter of that column's distinct values: a reader of a few keys
skips every fragment whose filter says "not here" without a GET. A Bloom filter has false
positives only, so a skipped fragment never held a wanted key; rows of the fragments read are
still filtered exactly.

The bit layout is specified here and in the format document, not borrowed from a library's
serialisation, so another implementation can read it: a value's canonical bytes (`key_bytes`)
are hashed with BLAKE3 (a dependency already: structured setsums use it), the first 16 bytes of
the digest give two u64 (`h1`, `h2 | 1`), and hash i sets bit `(h1 + i*h2) mod 2^64 mod m`
(Kirsch and Mitzenmacher's double hashing), bit j being bit `j % 8` (least significant first)
of byte `j // 8`. Python's `hash` is never used: it differs between processes.

Pure values, no I/O.
"""

from __future__ import annotations

import base64
import functools
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import blake3
import numpy as np
import pyarrow as pa

from wal3_spark.errors import CorruptLog, FilterError

#: the target false-positive rate a filter is sized for (1%: ~9.6 bits per distinct value)
TARGET_FPR = 0.01
#: the most bytes a filter takes in a manifest entry (base64: 4/3 of it): a fragment with more
#: distinct values than fit at TARGET_FPR (about 213) gets a filter of this size with a higher
#: false-positive rate. Each manifest write rewrites every entry it holds, so entries stay small
DEFAULT_MAX_FILTER_BYTES = 256
#: the smallest filter: 8 bytes (a fragment of one key has a 64-bit filter, FPR ~ 3e-6)
MIN_FILTER_BYTES = 8
#: the kind of filter this wal3-spark writes and reads (a newer one may add others)
BLOOM = "bloom-blake3"

_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def filterable(kind: pa.DataType) -> bool:
    """Whether a column of this Arrow type can carry a stream filter: strings, binaries and
    integers (exact equality in Spark and in Arrow; floats and nested types have none worth
    filtering on)."""
    return (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_binary(kind)
            or pa.types.is_large_binary(kind) or pa.types.is_integer(kind))  # fmt: skip


def check_filter_column(schema: pa.Schema | None, column: str, url: str = "") -> None:
    """Raise FilterError unless `column` is a filterable column of `schema` (None: a raw log)."""
    where = f" of {url}" if url else ""
    if schema is None:
        raise FilterError(
            f"filter column {column!r}: the log{where} is raw (one `body` column of bytes), it has "
            "no columns to filter on; write structured records (a table) to use filterColumn"
        )
    if column not in schema.names:
        raise FilterError(
            f"filter column {column!r} is not a column of the log{where} (its columns: "
            f"{', '.join(schema.names)}); name one of them, spelled exactly"
        )
    kind = schema.field(column).type
    if not filterable(kind):
        raise FilterError(
            f"filter column {column!r} is {kind}: a stream filter takes a string, binary or "
            "integer column (exact equality); filter on a key column of one of those types"
        )


def key_bytes(value: Any) -> bytes:
    """A value's canonical bytes: UTF-8 for a string, the bytes themselves for binary, and for
    an integer its value mod 2^64 as 8 bytes little-endian (so 5 of an int32 column and 5 given
    by a reader as a Python int hash alike)."""
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return (int(value) % (1 << 64)).to_bytes(8, "little")
    raise FilterError(
        f"stream filter value {value!r} ({type(value).__name__}) is not a string, bytes or an "
        "integer; give the filter column's values in its own type"
    )


def _hashes(keys: Iterable[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """(h1, h2 | 1) of every key, as u64 arrays."""
    digests = b"".join(blake3.blake3(key).digest(length=16) for key in keys)
    words = np.frombuffer(digests, dtype="<u8").reshape(-1, 2)
    return words[:, 0].copy(), words[:, 1] | np.uint64(1)


def _bit_indices(h1: np.ndarray, h2: np.ndarray, hashes: int, bits: int) -> np.ndarray:
    """Bit i of every key as rows: (h1 + i*h2) mod 2^64 mod bits (u64 arithmetic wraps)."""
    i = np.arange(hashes, dtype=np.uint64)
    with np.errstate(over="ignore"):
        return (h1[:, None] + i[None, :] * h2[:, None]) % np.uint64(bits)


def distinct_keys(column: pa.Array | pa.ChunkedArray) -> set[bytes]:
    """The canonical bytes of a column's distinct non-null values."""
    import pyarrow.compute as pc  # on first use: a reader's driver never builds a filter

    unique = pc.unique(column.drop_null() if isinstance(column, pa.Array) else pa.chunked_array(
        [c.drop_null() for c in column.chunks], column.type))
    if pa.types.is_integer(unique.type):
        values = unique.cast(pa.int64() if pa.types.is_signed_integer(unique.type) else pa.uint64())
        return {key_bytes(v) for v in values.to_numpy(zero_copy_only=False).tolist()}
    return {key_bytes(v) for v in unique.to_pylist()}


@dataclass(frozen=True)
class StreamFilter:
    """A Bloom filter of one column's values in one fragment, as its manifest entry holds it.

    Parsing checks only the field's shape: the check digest (which binds the filter to its
    fragment's setsum) and the bits are checked when a reader first uses the filter
    (`checked`), so that a manifest of thousands of filtered entries parses about as fast as
    one without (every reader and every commit parses one; few use the filters)."""

    column: str
    hashes: int
    #: the bits, base64 (as stored)
    encoded: str
    kind: str = BLOOM
    #: the check digest read from storage; None for a filter built here (computed when written)
    stored_check: str | None = field(default=None, compare=False)

    @classmethod
    def build(cls, column: str, keys: Iterable[bytes], *,
              max_bytes: int = DEFAULT_MAX_FILTER_BYTES) -> StreamFilter:
        """A filter of `keys` (canonical bytes), sized for TARGET_FPR within `max_bytes`."""
        keys = list(set(keys))
        n = max(1, len(keys))
        wanted = math.ceil(-n * math.log(TARGET_FPR) / (math.log(2) ** 2) / 8)
        size = min(max(MIN_FILTER_BYTES, max_bytes), max(MIN_FILTER_BYTES, wanted))
        m = size * 8
        hashes = max(1, min(16, round(m / n * math.log(2))))
        bitmap = np.zeros(m, dtype=bool)
        if keys:
            h1, h2 = _hashes(keys)
            bitmap[_bit_indices(h1, h2, hashes, m).ravel()] = True
        return cls(column, hashes, base64.b64encode(np.packbits(bitmap, bitorder="little").data).decode())

    @functools.cached_property
    def bits(self) -> bytes:
        """The decoded bits (ValueError when `encoded` is not base64: `checked` reports it)."""
        return base64.b64decode(self.encoded, validate=True)

    def _present(self, keys: Iterable[bytes]) -> np.ndarray:
        """For each key, whether all its bits are set (it may be in the fragment)."""
        keys = list(keys)
        if not keys:
            return np.zeros(0, dtype=bool)
        m = len(self.bits) * 8
        bitmap = np.unpackbits(np.frombuffer(self.bits, dtype=np.uint8), bitorder="little")
        h1, h2 = _hashes(keys)
        return bitmap[_bit_indices(h1, h2, self.hashes, m)].all(axis=1)

    def might_contain_any(self, keys: Iterable[bytes]) -> bool:
        """False only when no key is in the fragment (a Bloom filter has no false negatives)."""
        return bool(self._present(keys).any())

    def holds_all(self, keys: Iterable[bytes]) -> bool:
        """Whether every key is in the filter (what a filter of a fragment's values must say of
        each of them: `wal3 verify` checks it against the fragment's column)."""
        return bool(self._present(keys).all())

    def check_against(self, column: pa.ChunkedArray | None, setsum_hex: str, path: str) -> None:
        """CorruptLog naming fragment `path` unless this filter passes its check and holds every
        value of the fragment's column (a false negative would skip wanted rows)."""
        self.checked(setsum_hex, path)
        if column is None:
            raise CorruptLog("a stream filter's column is in its fragment", path,
                             f"has a stream filter of column {self.column!r}, which it lacks")
        if not self.holds_all(distinct_keys(column)):
            raise CorruptLog("a stream filter holds every value of its column", path,
                             f"its stream filter of column {self.column!r} misses values the "
                             "fragment holds: a reader filtering on them would skip it")

    def expected_fpr(self, distinct: int) -> float:
        """The false-positive rate for a filter of `distinct` keys (the textbook estimate)."""
        m = len(self.bits) * 8
        return (1 - math.exp(-self.hashes * max(1, distinct) / m)) ** self.hashes

    # -- the manifest entry's `filter` field (docs/format.md section 4, "Stream filters") ----

    def check_digest(self, setsum_hex: str) -> str:
        """16 hex digits binding the filter to its fragment (by the fragment's setsum): a filter
        damaged, or moved to another fragment's entry, is refused instead of skipping a
        fragment that holds wanted rows. The setsum does not cover the filter, so this does."""
        digest = blake3.blake3(b"\0".join([self.column.encode(), self.kind.encode(),
                                           str(self.hashes).encode(), self.encoded.encode(),
                                           setsum_hex.encode()]))
        return digest.hexdigest(length=8)

    def checked(self, setsum_hex: str, path: str) -> StreamFilter:
        """This filter, once its check digest matches the fragment's setsum and its bits decode;
        CorruptLog naming fragment `path` otherwise. Checked once per filter."""
        if self.__dict__.get("_checked_for") == setsum_hex:
            return self
        expected = self.check_digest(setsum_hex)
        problem = None
        if self.stored_check is not None and self.stored_check != expected:
            problem = "does not match its check digest (damaged, or not this fragment's)"
        else:
            try:
                if not self.bits:
                    problem = "has no bits"
            except ValueError:
                problem = "has bits that are not base64"
        if problem is not None:
            raise CorruptLog("a stream filter matches its check digest", path,
                             f"the stream filter in its manifest entry {problem}; the entry is "
                             "damaged: run `wal3 verify` on the log")
        self.__dict__["_checked_for"] = setsum_hex  # frozen: a cache, not a field
        return self

    def to_dict(self, setsum_hex: str) -> dict[str, Any]:
        check = self.stored_check if self.stored_check is not None else self.check_digest(setsum_hex)
        return {"column": self.column, "kind": self.kind, "hashes": self.hashes,
                "bits": self.encoded, "check": check}

    @classmethod
    def from_dict(cls, data: Any, obj: str, path: str) -> StreamFilter | None:
        """The filter of fragment `path`'s entry in `obj`; None for a kind this wal3-spark does
        not know (a newer writer's): that fragment is read as if it had no filter, which is
        always correct. A filter of a known kind that is malformed is CorruptLog (and one whose
        check digest or bits are wrong, when `checked`): trusting it could skip a fragment that
        holds wanted rows."""
        def broken(problem: str) -> CorruptLog:
            return CorruptLog("a stream filter is well formed", obj,
                              f"the stream filter of fragment {path} {problem}")

        if not isinstance(data, dict):
            raise broken(f"is not an object: {data!r}")
        if data.get("kind") != BLOOM:
            return None
        column, hashes, bits, check = (data.get("column"), data.get("hashes"), data.get("bits"),
                                       data.get("check"))
        if not isinstance(column, str) or not column:
            raise broken(f"has no column name: {column!r}")
        if isinstance(hashes, bool) or not isinstance(hashes, int) or not 1 <= hashes <= 64:
            raise broken(f"has a hash count that is not an integer in [1, 64]: {hashes!r}")
        if not isinstance(bits, str) or not bits:
            raise broken("has no bits")
        if not isinstance(check, str):
            raise broken(f"has no check digest: {check!r}")
        return cls(column, hashes, bits, BLOOM, check)


@dataclass(frozen=True)
class ValueFilter:
    """What a reader asked for: the rows whose `column` is one of `values` (in the column's
    type, `coerce`d). Skips the fragments whose stream filter of that column says none is there
    (`skips`), and keeps exactly the matching rows of the others (`rows`). Picklable: it
    travels to the executors in the input partitions."""

    column: str
    values: tuple[Any, ...]

    @classmethod
    def of(cls, schema: pa.Schema | None, column: str, values: Iterable[Any], url: str = "") -> ValueFilter:
        """The filter for a log of `schema`: FilterError for a column it lacks or cannot filter."""
        check_filter_column(schema, column, url)
        assert schema is not None
        return cls(column, tuple(coerce(schema.field(column).type, values, column)))

    @functools.cached_property
    def keys(self) -> frozenset[bytes]:
        return frozenset(key_bytes(v) for v in self.values)

    def skips(self, stream_filter: StreamFilter | None, setsum_hex: str, path: str) -> bool:
        """Whether the fragment at `path` (of setsum `setsum_hex`) with this stream filter
        certainly holds no wanted row: only a filter of this same column can say so (a fragment
        without one, or with a filter of another column, is read), and only once it passes its
        check (CorruptLog otherwise)."""
        if stream_filter is None or stream_filter.column != self.column:
            return False
        return not stream_filter.checked(setsum_hex, path).might_contain_any(self.keys)

    def rows(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """The rows of `batch` (which holds `column`) whose value is wanted, exactly."""
        return batch.filter(exact_mask(batch.column(self.column), list(self.values)))


def coerce(kind: pa.DataType, values: Iterable[Any], column: str = "") -> list[Any]:
    """A reader's filter values in the filter column's type: integers from their decimal text
    (an option's values are strings), strings as they are, binary from a string's UTF-8 bytes.
    An integer value outside the column's range matches nothing and is dropped; one that is not
    an integer at all is a FilterError (it would never match: a mistake, not a filter)."""
    out: list[Any] = []
    for value in values:
        if pa.types.is_integer(kind):
            if isinstance(value, str) and re.fullmatch(r"\s*[-+]?[0-9]+\s*", value):
                value = int(value)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise FilterError(
                    f"filter value {value!r} for the {kind} column {column!r} is not an integer: "
                    "give integers for an integer filter column")
            lo, hi = _int_range(kind)
            if lo <= int(value) <= hi:
                out.append(int(value))
        elif pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
            if isinstance(value, str):
                out.append(_binary_value(value, column))
            elif isinstance(value, (bytes, bytearray, memoryview)):
                out.append(bytes(value))
            else:  # bytes(5) is five zero bytes: an integer must not become a value silently
                raise FilterError(
                    f"filter value {value!r} for the binary column {column!r} is not bytes or a "
                    "string: give bytes (or strings, meaning their UTF-8) for a binary filter column")
        elif isinstance(value, str):
            _check_text(value, column)
            out.append(value)
        else:
            raise FilterError(
                f"filter value {value!r} for the string column {column!r} is not a string: give "
                "strings for a string filter column")
    return out


def _binary_value(value: str, column: str) -> bytes:
    """A string's bytes for a binary column: its UTF-8, with the bytes a command line gave that
    are not UTF-8 restored (Python decodes argv with surrogateescape: `$'\\xff'` is '\\udcff',
    which gives back b'\\xff'). Another lone surrogate has no bytes: a FilterError."""
    try:
        return value.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError as exc:
        raise FilterError(f"filter value {value!r} for the binary column {column!r} is not text: it holds "
                          f"the lone surrogate {exc.object[exc.start]!r}, which has no bytes; give bytes") from None


def _check_text(value: str, column: str) -> None:
    """Refuse a string that is not text (a lone surrogate, or a byte a command line gave that is
    not UTF-8): a string column holds UTF-8 text only, so no value of it can equal this one,
    and a filter that can match nothing is a mistake, as a non-integer for an integer column is."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        char = exc.object[exc.start]
        what = (f"the byte 0x{ord(char) - 0xDC00:02x}, which is not UTF-8 (on a command line: check "
                "its encoding)" if 0xDC80 <= ord(char) <= 0xDCFF else f"the lone surrogate {char!r}")
        raise FilterError(f"filter value {value!r} is not text: it holds {what}; no value of the string "
                          f"column {column!r} can equal it (its values are UTF-8 text)") from None


def exact_mask(column: pa.Array | pa.ChunkedArray, values: list[Any]) -> pa.Array:
    """Which rows of `column` equal one of `values` (already `coerce`d; nulls never match): the
    exact filter applied to the rows of fragments the Bloom filters let through."""
    import pyarrow.compute as pc  # on first use (executors)

    mask = pc.is_in(column, value_set=pa.array(values, type=column.type))
    return pc.fill_null(mask, False)


def _int_range(kind: pa.DataType) -> tuple[int, int]:
    info = np.iinfo(kind.to_pandas_dtype())
    return int(info.min), int(info.max)
