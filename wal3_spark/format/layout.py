"""The small JSON records of docs/format.md and where they live under a log root.

Field names and key order follow Chroma's wal3 serialisation exactly (docs/format.md sections 1, 4
and 8), so that a manifest we read and write back is byte-identical and Chroma can read ours.
Offsets are plain ints here; on storage they are `{"offset": N}`.

Design: docs/design/11-byte-identical-json.md.
"""

from __future__ import annotations

import functools
import json
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeGuard

from wal3_spark.errors import CorruptLog, InvalidCursorName
from wal3_spark.format.incarnation import parse_incarnation
from wal3_spark.format.setsum import Setsum
from wal3_spark.format.stream_filter import StreamFilter, ValueFilter

MANIFEST_KEY = "manifest/MANIFEST"
GARBAGE_KEY = "gc/GARBAGE"
FRAGMENT_PREFIX = "log/"
SNAPSHOT_PREFIX = "snapshot/"
CURSOR_PREFIX = "cursor/"
FIRST_OFFSET = 1
#: offsets and microsecond timestamps are u64 on storage (Chroma's `LogPosition`, `epoch_us`):
#: a reader refuses a larger one as it refuses a negative one
MAX_U64 = 2**64 - 1
MAX_OFFSET = MAX_U64
#: a fragment's Parquet columns besides the payload: each row's offset in the fragment and its
#: write time (ours and Chroma's), and the absolute offset of Chroma's S3 backend. Reserved:
#: no payload column may take these names (`schema.RESERVED`).
RELATIVE_OFFSET = "relative_offset"
TIMESTAMP = "timestamp_us"
ABSOLUTE_OFFSET = "offset"

#: the `item_hash` of structured logs created from now on (docs/format.md section 3; what a chunk
#: item is: `wal3_spark.format.chunk_encoding`)
BLAKE3 = "blake3"
#: every `item_hash` a structured log may have; None: chunk items are inserted as they are
ITEM_HASHES = (None, BLAKE3)

_CURSOR_NAME = re.compile(r"[A-Za-z0-9_]+")
_OUR_PATH = re.compile(r"log/Uuid=([0-9a-fA-F-]{36})\.parquet")
_CHROMA_S3_PATH = re.compile(
    r"log/Bucket=[0-9a-fA-F]{16}/FragmentSeqNo=([0-9a-fA-F]{16})\.parquet"
)


def snapshot_key(setsum: Setsum) -> str:
    return f"{SNAPSHOT_PREFIX}SNAPSHOT.{setsum.hexdigest()}"


def cursor_key(name: str) -> str:
    if not _CURSOR_NAME.fullmatch(name or ""):
        raise InvalidCursorName(
            f"invalid cursor name {name!r}: use letters, digits and underscores only"
        )
    return f"{CURSOR_PREFIX}{name}.json"


def name_of(key: str, prefix: str) -> str | None:
    """The name a key listed under `prefix` holds (`pin/<name>.json`, `tag/<name>.json`; None:
    not one of them)."""
    if not key.startswith(prefix) or not key.endswith(".json"):
        return None
    return key[len(prefix):-len(".json")]


def fragment_path(fragment_uuid: uuid.UUID | str) -> str:
    """`log/Uuid=<uuid>.parquet`, relative to the log root."""
    return f"log/Uuid={uuid.UUID(str(fragment_uuid))}.parquet"


def seq_no_fragment_path(seq_no: int) -> str:
    """Chroma's S3 fragment path for a sequence number (docs/format.md section 1)."""
    bucket = seq_no - seq_no % 4096
    return f"log/Bucket={bucket:016x}/FragmentSeqNo={seq_no:016x}.parquet"


def parse_fragment_path(path: str) -> uuid.UUID | int:
    """The UUID of one of our fragment paths, or the sequence number of a Chroma S3 one."""
    if match := _OUR_PATH.fullmatch(path):
        return uuid.UUID(match.group(1))
    if match := _CHROMA_S3_PATH.fullmatch(path):
        return int(match.group(1), 16)
    raise ValueError(f"{path!r} is not a wal3 fragment path")


def parse_fragment_uuid(key: str) -> uuid.UUID | None:
    """The UUID of a `log/Uuid=<uuid>.parquet` key, or None for any other key (what garbage
    collection may treat as one of our fragments)."""
    try:
        parsed = parse_fragment_path(key)
    except ValueError:
        return None
    return parsed if isinstance(parsed, uuid.UUID) else None


def dumps(obj: Any) -> bytes:
    """Compact JSON, keys in insertion order: the byte form Chroma writes."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def json_text(value: Any) -> str:
    """`value` as it appears inside `dumps` output."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def loads(data: bytes, obj: str) -> Any:
    try:
        return json.loads(data)
    except ValueError as exc:  # not UTF-8, not JSON, or an integer of more than 4300 digits
        raise CorruptLog("valid JSON", obj, f"not valid JSON ({exc})") from None
    except RecursionError:  # arrays or objects nested deeper than Python's parser goes
        raise CorruptLog("valid JSON", obj, "JSON nested too deeply to be a wal3 object") from None


def position(offset: int) -> dict[str, int]:
    return {"offset": offset}


def parse_offset(value: Any, obj: str, field: str) -> int:
    try:
        offset = value["offset"]
    except (TypeError, KeyError):
        problem = f"{field} is not a log position: {value!r}"
        raise CorruptLog("well-formed log position", obj, problem) from None
    if not is_u64(offset):
        problem = f"{field} offset is not an integer within [0, {MAX_OFFSET}]: {shown(offset)}"
        raise CorruptLog("well-formed log position", obj, problem)
    return offset


def is_u64(value: Any) -> TypeGuard[int]:
    """Whether `value` is a plain JSON integer a u64 holds (`true` is not 1, `1.0` not 1)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_U64


def shown(value: Any) -> str:
    """A value read from JSON as an error message shows it: as JSON (`true`, not `True`), and
    abbreviated."""
    try:
        return abbreviated(json_text(value))
    except (TypeError, ValueError):  # not JSON's (a caller's own value)
        return abbreviated(repr(value))


def abbreviated(text: str, quote: Callable[[str], str] = str, width: int = 40) -> str:
    """`quote(text)` for an error message, cut short when long (a 400-digit number would bury
    the message)."""
    return quote(text) if len(text) <= width else f"{quote(text[:width])}... ({len(text)} characters)"


def parse_setsum(value: Any, obj: str, field: str) -> Setsum:
    try:
        return Setsum.from_hexdigest(value)
    except (TypeError, ValueError) as exc:
        raise CorruptLog("well-formed setsum", obj, f"{field} is not a setsum ({exc})") from None


_DIGEST = re.compile(r"[0-9a-f]{64}")


def parse_digest(value: Any, obj: str, path: str) -> str | None:
    """A fragment pointer's `blake3` field: absent (None), or 64 lowercase hex digits; anything
    else is a damaged pointer (CorruptLog), never a reason to skip the check."""
    if value is None:
        return None
    if not isinstance(value, str) or not _DIGEST.fullmatch(value):
        raise CorruptLog("a fragment's blake3 is 64 lowercase hex digits", obj,
                         f"the blake3 of fragment {path} is not a digest: {shown(value)}")
    return value


def check_int(value: Any, obj: str, name: str) -> int:
    """The rule for every integer a log stores (offsets, counts, sizes, depths, txn versions, µs
    times): `is_u64`, else CorruptLog naming `name` in `obj`. Readers apply it to what they
    parse and writers to what they are about to write, so a value a reader would refuse never
    reaches storage."""
    if not is_u64(value):
        raise CorruptLog("field type", obj, f"{name!r} is not an integer within [0, {MAX_U64}]: "
                                            f"{shown(value)}")
    return value


def require_field(data: dict, name: str, obj: str, kind: type | tuple[type, ...]) -> Any:
    """`data[name]`, of type `kind`; an int field also follows `check_int`."""
    if not isinstance(data, dict) or name not in data:
        raise CorruptLog("required field present", obj, f"the required field {name!r} is missing")
    value = data[name]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise CorruptLog("field type", obj, f"{name!r} has the wrong type: {value!r}")
    if kind is int:
        check_int(value, obj, name)
    return value


@dataclass(frozen=True)
class Segment:
    """One run of a compacted fragment's rows as they were first written: `records` rows, all
    hashed as one fragment of their own would be (relative offsets from 0 within the segment),
    written at `timestamp_us` (its first row's, for raw logs). docs/format.md section 4,
    "Compacted fragments"."""

    records: int
    timestamp_us: int

    def to_list(self) -> list[int]:
        return [self.records, self.timestamp_us]

    @classmethod
    def from_list(cls, value: Any, obj: str, path: str) -> Segment:
        if not (isinstance(value, list) and len(value) == 2 and all(is_u64(v) for v in value)
                and value[0] > 0):
            raise CorruptLog("field type", obj, f"a segment of fragment {path} is not "
                             f"[records > 0, timestamp_us]: {shown(value)}")
        return cls(value[0], value[1])


@dataclass(frozen=True)
class FragmentRef:
    """A manifest's pointer to one fragment file: where its records sit in the log."""

    path: str
    #: the fragment UUID (ours) or an integer sequence number (Chroma's S3 backend)
    seq_no: str | int
    start: int
    limit: int
    num_bytes: int
    setsum: Setsum
    #: wal3-spark extension (docs/format.md section 4, "Stream filters"): a Bloom filter of one
    #: column's values in the fragment, so a reader of a few keys skips it without a GET; None:
    #: no filter (the fragment is always read)
    filter: StreamFilter | None = None
    #: wal3-spark extension (docs/format.md section 4, "Fragment digests"): the BLAKE3 digest
    #: (64 lowercase hex digits) of the fragment object's bytes as its writer uploaded them, which
    #: a verifying read checks instead of recomputing every record's setsum item; None: not
    #: recorded (a fragment written before the field, or by Chroma), verified by its setsum
    blake3: str | None = None
    #: wal3-spark extension (docs/format.md section 4, "Compacted fragments"): the fragments a
    #: compaction merged into this one, oldest first; None: written by an append
    segments: tuple[Segment, ...] | None = None

    @property
    def records(self) -> int:
        return self.limit - self.start

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "path": self.path,
            "seq_no": self.seq_no,
            "start": position(self.start),
            "limit": position(self.limit),
            "num_bytes": self.num_bytes,
            "setsum": self.setsum.hexdigest(),
        }
        if self.blake3 is not None:
            doc["blake3"] = self.blake3
        if self.filter is not None:
            doc["filter"] = self.filter.to_dict(self.setsum.hexdigest())
        if self.segments is not None:
            doc["segments"] = [segment.to_list() for segment in self.segments]
        return doc

    @functools.cached_property
    def json_text(self) -> str:
        """Serialised once per pointer: a manifest rewrites thousands of them per commit."""
        return json_text(self.to_dict())

    def skipped_by(self, values: ValueFilter | None) -> bool:
        """Whether a read of `values` may skip this fragment without fetching it (its stream
        filter rules every value out); CorruptLog when that filter fails its check."""
        return values is not None and values.skips(self.filter, self.setsum.hexdigest(), self.path)

    @classmethod
    def from_dict(cls, data: dict[str, Any], obj: str, known: KnownRefs | None = None) -> FragmentRef:
        """Parse one pointer; with `known`, reuse the identical one parsed before if there is
        one (and remember this one)."""
        if known is not None:
            return known.parse(data, obj)
        path = require_field(data, "path", obj, str)
        setsum = parse_setsum(data.get("setsum"), obj, "setsum")
        stored = data.get("filter")
        segments = data.get("segments")
        if segments is not None and not isinstance(segments, list):
            raise CorruptLog("field type", obj, f"'segments' of fragment {path} is not a list")
        ref = cls(
            path=path,
            seq_no=require_field(data, "seq_no", obj, (int, str)),
            start=parse_offset(data.get("start"), obj, "start"),
            limit=parse_offset(data.get("limit"), obj, "limit"),
            num_bytes=require_field(data, "num_bytes", obj, int),
            setsum=setsum,
            filter=None if stored is None else StreamFilter.from_dict(stored, obj, path),
            blake3=parse_digest(data.get("blake3"), obj, path),
            segments=None if segments is None else tuple(
                Segment.from_list(v, obj, path) for v in segments),
        )
        ref.check_identity(obj)
        ref.check_segments(obj)
        return ref

    def check(self, obj: str) -> None:
        """The rules of a pointer, for one built in memory before it is written: what
        `from_dict` checks of a stored one (CorruptLog naming `obj` otherwise)."""
        if type(self.path) is not str or type(self.seq_no) not in (int, str):
            raise CorruptLog("field type", obj, f"fragment {self.path!r} (seq_no {self.seq_no!r}) "
                             "has a path or seq_no of the wrong type")
        for name in ("start", "limit", "num_bytes"):
            check_int(getattr(self, name), obj, f"{name} of fragment {self.path}")
        if not isinstance(self.setsum, Setsum):
            raise CorruptLog("field type", obj, f"the setsum of fragment {self.path} is not a setsum: "
                             f"{self.setsum!r}")
        if self.filter is not None and not isinstance(self.filter, StreamFilter):
            raise CorruptLog("field type", obj, f"the stream filter of fragment {self.path} is not "
                             f"one: {self.filter!r}")
        parse_digest(self.blake3, obj, self.path)
        self.check_identity(obj)
        self.check_segments(obj)

    def check_segments(self, obj: str) -> None:
        """A compacted fragment's segments hold its records exactly."""
        if self.segments is not None and sum(s.records for s in self.segments) != self.records:
            raise CorruptLog("a compacted fragment's segments hold its records", obj,
                             f"the segments of fragment {self.path} hold "
                             f"{sum(s.records for s in self.segments)} records, not {self.records}")

    def check_identity(self, obj: str) -> None:
        """A sequence number is an integer in range, and a path of one of the two known shapes
        names the fragment its identifier says: a digit changed in either (a damaged manifest)
        would read another file, or take the write time of another UUID. Paths of other shapes
        are not judged."""
        seq_no, path = self.seq_no, self.path
        if type(seq_no) is int:
            check_int(seq_no, obj, "seq_no")
            # Chroma's bucket directory is not derived the same way by every version: not judged
            named = f"/FragmentSeqNo={seq_no:016x}.parquet"
            agrees = not path.startswith("log/Bucket=") or path.endswith(named)
        else:
            named = f"log/Uuid={seq_no}.parquet"
            agrees = not path.startswith("log/Uuid=") or path == named or path.lower() == named.lower()
        if not agrees:
            raise CorruptLog(
                "a fragment's path names its identifier", obj,
                f"fragment {path} has the identifier {seq_no!r}, which names {named.lstrip('/')}",
            )


class KnownRefs:
    """Fragment pointers already parsed, by path, for whoever re-reads one log's manifest.

    Re-reading a manifest (the committer on every lost commit race, a stream on every trigger)
    parses thousands of pointers seen before; reusing them also reuses their serialised text
    (`json_text`). Pointers are immutable values, so sharing them is safe. Owned by its reader
    or committer, not the process: each decides how long what it parsed is worth keeping.
    """

    def __init__(self, limit: int = 1 << 17) -> None:
        self.limit = limit
        self._refs: dict[str, FragmentRef] = {}

    def __reduce__(self) -> tuple:  # travels empty (to Spark executors): a cache, not state
        return KnownRefs, (self.limit,)

    def parse(self, data: dict[str, Any], obj: str) -> FragmentRef:
        """`FragmentRef.from_dict(data, obj)`, or the identical pointer parsed before."""
        path = data.get("path") if isinstance(data, dict) else None
        known = self._refs.get(path) if isinstance(path, str) else None
        if known is not None and known.to_dict() == data:
            return known
        ref = FragmentRef.from_dict(data, obj)
        if len(self._refs) >= self.limit:
            self._refs.clear()
        self._refs[ref.path] = ref
        return ref


@dataclass(frozen=True)
class SnapshotPointer:
    """A manifest's (or snapshot's) pointer to an immutable snapshot file."""

    setsum: Setsum
    path_to_snapshot: str
    depth: int
    start: int
    limit: int
    num_bytes: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "setsum": self.setsum.hexdigest(),
            "path_to_snapshot": self.path_to_snapshot,
            "depth": self.depth,
            "start": position(self.start),
            "limit": position(self.limit),
            "num_bytes": self.num_bytes,
        }

    @functools.cached_property
    def json_text(self) -> str:
        return json_text(self.to_dict())

    @classmethod
    def from_dict(cls, data: dict[str, Any], obj: str) -> SnapshotPointer:
        pointer = cls(
            setsum=parse_setsum(data.get("setsum"), obj, "setsum"),
            path_to_snapshot=require_field(data, "path_to_snapshot", obj, str),
            depth=require_field(data, "depth", obj, int),
            start=parse_offset(data.get("start"), obj, "start"),
            limit=parse_offset(data.get("limit"), obj, "limit"),
            num_bytes=require_field(data, "num_bytes", obj, int),
        )
        pointer.check_identity(obj)
        return pointer

    def check_identity(self, obj: str) -> None:
        """A snapshot's path ends in its setsum (it is content-addressed), and it has children
        of depth >= 1: a digit changed in either would load another snapshot, or none."""
        if not self.path_to_snapshot.endswith(self.setsum.hexdigest()):
            raise CorruptLog("a snapshot's path ends in its setsum", obj,
                             f"snapshot {self.path_to_snapshot} does not end in its setsum "
                             f"{self.setsum.hexdigest()}")
        if self.depth < 1:
            raise CorruptLog("field type", obj, f"snapshot {self.path_to_snapshot} has depth {self.depth}")


@dataclass(frozen=True)
class Cursor:
    """A named position that pins the log against garbage collection (docs/format.md section 8)."""

    offset: int
    epoch_us: int
    writer: str
    #: wal3-spark extension: the incarnation of the log the offset was set in (its manifest's
    #: `incarnation`); None: not recorded (a cursor set before incarnations, or on a log without
    #: one). docs/design/17-incarnations.md
    incarnation: str | None = None

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"position": position(self.offset), "epoch_us": self.epoch_us,
                               "writer": self.writer}
        if self.incarnation is not None:
            doc["incarnation"] = self.incarnation
        return doc

    @classmethod
    def from_dict(cls, data: Any, obj: str) -> Cursor:
        """Every reader's rule for a cursor object: its offset and `epoch_us` are u64 integers
        (not `true`, `1.0`, `"5"` or a 400-digit number), or the cursor is broken."""
        offset = parse_offset(data.get("position") if isinstance(data, dict) else None, obj, "position")
        epoch_us = require_field(data, "epoch_us", obj, int)
        if not is_u64(epoch_us):
            problem = f"'epoch_us' is not an integer within [0, {MAX_U64}]: {shown(epoch_us)}"
            raise CorruptLog("field type", obj, problem)
        return cls(
            offset=offset,
            epoch_us=epoch_us,
            writer=require_field(data, "writer", obj, str),
            incarnation=parse_incarnation(data.get("incarnation"), obj),
        )
