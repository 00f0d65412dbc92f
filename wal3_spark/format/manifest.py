"""The manifest and its snapshots as pure values (docs/format.md sections 4 and 5).

Everything here is computation without I/O: placing fragments at the tail, rolling snapshots,
checking invariants. The managers (writer, reader, gc) load a value, decide with these methods,
then compare-and-swap; that split is what makes the protocol testable without storage.

Design: docs/design/10-manifest-is-a-pure-value.md, docs/design/11-byte-identical-json.md,
docs/design/14-structured-logs.md, docs/design/15-blake3-item-hash.md,
docs/design/22-snapshot-rollover.md, docs/design/32-orphan-horizon.md.
"""

from __future__ import annotations

import base64
import functools
import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import pyarrow as pa

from wal3_spark.errors import CorruptLog
from wal3_spark.format.incarnation import new_incarnation, parse_incarnation
from wal3_spark.format.layout import (
    BLAKE3,
    FIRST_OFFSET,
    ITEM_HASHES,
    MANIFEST_KEY,
    FragmentRef,
    KnownRefs,
    SnapshotPointer,
    check_int,
    dumps,
    json_text,
    loads,
    parse_offset,
    parse_setsum,
    position,
    require_field,
    snapshot_key,
)
from wal3_spark.format.lineage import Parent
from wal3_spark.format.retention import RetentionPolicy
from wal3_spark.format.setsum import Setsum
from wal3_spark.format.stream_filter import StreamFilter
from wal3_spark.format.uuid7 import uuid7_timestamp_us

#: Chroma's defaults: (1 << 18) / 142 snapshot pointers and (1 << 19) / 256 fragments.
DEFAULT_SNAPSHOT_ROLLOVER = 1846
DEFAULT_FRAGMENT_ROLLOVER = 2048


@dataclass(frozen=True)
class SnapshotOptions:
    """How many pointers a manifest (or snapshot) holds before the oldest are rolled up."""

    snapshot_rollover_threshold: int = DEFAULT_SNAPSHOT_ROLLOVER
    fragment_rollover_threshold: int = DEFAULT_FRAGMENT_ROLLOVER

    def __post_init__(self) -> None:
        if self.snapshot_rollover_threshold < 2 or self.fragment_rollover_threshold < 2:
            raise ValueError("snapshot rollover thresholds must be at least 2")


class NewFragment(Protocol):
    """What the committer needs of a written fragment (see `wal3_spark.log.fragment_io.FragmentFile`)."""

    # Read-only members (properties), so that a frozen dataclass such as FragmentFile is one.
    @property
    def path(self) -> str: ...
    @property
    def uuid(self) -> str: ...
    @property
    def records(self) -> int: ...
    @property
    def num_bytes(self) -> int: ...
    @property
    def setsum(self) -> Setsum: ...
    @property
    def item_hash(self) -> str | None:
        """How its setsum's chunk items were hashed (`Manifest.append_item_hash`)."""
    @property
    def filter(self) -> StreamFilter | None:
        """Its stream filter (docs/format.md section 4, "Stream filters"), or None."""
    @property
    def blake3(self) -> str | None:
        """The digest of its bytes (docs/format.md section 4, "Fragment digests"), or None."""


@dataclass(frozen=True)
class Txn:
    """The last version an idempotent writer committed (docs/format.md section 4, `txns`)."""

    version: int
    epoch_us: int

    def check(self, app_id: Any, obj: str) -> None:
        """A writer id is a string, its version and time integers (`check_int`)."""
        if not isinstance(app_id, str):
            raise CorruptLog("field type", obj, f"the txn writer id {app_id!r} is not a string")
        check_int(self.version, obj, f"version of txn {app_id!r}")
        check_int(self.epoch_us, obj, f"epoch_us of txn {app_id!r}")


def encode_schema(schema: pa.Schema) -> str:
    return base64.b64encode(schema.serialize().to_pybytes()).decode()


@functools.lru_cache(maxsize=64)
def decode_schema(text: str) -> pa.Schema:
    try:
        schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))
        _field_names(schema)  # pyarrow decodes a name when it is asked for: bytes not UTF-8 raise
        return schema
    except (ValueError, OSError, pa.ArrowException) as exc:  # pyarrow: OSError for bad flatbuffers
        problem = f"the schema is not base64 Arrow IPC ({exc})"
        raise CorruptLog("schema is base64 Arrow IPC", MANIFEST_KEY, problem) from None


def _field_names(fields: Iterable[pa.Field]) -> None:
    """Ask for every field name, nested ones included (UnicodeDecodeError, a ValueError, for a
    name that is not UTF-8)."""
    for f in fields:
        _ = f.name
        if pa.types.is_struct(f.type):
            _field_names(f.type)
        elif pa.types.is_list(f.type) or pa.types.is_large_list(f.type) or pa.types.is_fixed_size_list(f.type):
            _field_names([f.type.value_field])
        elif pa.types.is_map(f.type):
            _field_names([f.type.key_field, f.type.item_field])


def newest_written_us(refs: Iterable[FragmentRef]) -> int | None:
    """The newest write time (UUIDv7, µs) of `refs`; 0 for none, None when one of them has no
    UUIDv7 time (what `rolled_written_us` records)."""
    written = [uuid7_timestamp_us(str(ref.seq_no)) for ref in refs]
    known = [w for w in written if w is not None]
    return None if len(known) < len(written) else max(known, default=0)


def _check_item_hash(item_hash: Any, raw: bool, obj: str) -> None:
    if item_hash not in ITEM_HASHES:
        raise CorruptLog(
            "item_hash names a setsum item hash this wal3-spark knows",
            obj,
            f"'item_hash' {item_hash!r} is not one this wal3-spark knows "
            f"({[h for h in ITEM_HASHES if h]}); a newer "
            "wal3-spark may have written it: upgrade to read this log",
        )
    if raw and item_hash is not None:
        raise CorruptLog("raw logs carry no item_hash", obj, f"a raw log with an 'item_hash' ({item_hash!r})")


def _sum_parts(snapshots: Iterable[SnapshotPointer], fragments: Iterable[FragmentRef]) -> Setsum:
    return Setsum.sum([s.setsum for s in snapshots] + [f.setsum for f in fragments])


def _check_contiguous(obj: str, entries: Sequence[Any], what: str) -> None:
    for lhs, rhs in itertools.pairwise(entries):
        if lhs.limit != rhs.start:
            raise CorruptLog(
                f"{what} are contiguous",
                obj,
                f"{what} are not contiguous (a gap or overlap between limit {lhs.limit} and next "
                f"start {rhs.start})",
            )


def _check_unique(obj: str, paths: Iterable[str], what: str) -> None:
    """A path referenced twice is a record appended twice (the setsum balances all the same:
    the fragment's setsum was added twice), or a snapshot counted twice."""
    seen: set[str] = set()
    for path in paths:
        if path in seen:
            raise CorruptLog(f"{what} paths are unique", obj, f"{what} {path} is referenced twice")
        seen.add(path)


def _check_fragments(obj: str, fragments: Sequence[FragmentRef]) -> None:
    """start < limit, contiguous, one kind of identifier, each path once: in one pass, since
    every read checks a manifest of up to a few thousand fragments."""
    if not fragments:
        return
    kind = type(fragments[0].seq_no)
    previous = None
    for frag in fragments:
        if not frag.start < frag.limit:
            problem = f"fragment {frag.path} has start >= limit"
            raise CorruptLog("start < limit for every fragment", obj, problem)
        if previous is not None and previous.limit != frag.start:
            raise CorruptLog(
                "fragments are contiguous", obj,
                f"fragments are not contiguous (a gap or overlap between limit {previous.limit} "
                f"and next start {frag.start})",
            )
        if type(frag.seq_no) is not kind:
            raise CorruptLog(
                "fragment identifiers are all sequence numbers or all UUIDs",
                obj,
                "sequence-number and UUID fragments are mixed",
            )
        previous = frag
    if len({f.path for f in fragments}) != len(fragments):
        _check_unique(obj, (f.path for f in fragments), "fragment")


@dataclass(frozen=True)
class Snapshot:
    """An immutable interior node: fragments (depth 1) or snapshot pointers (depth > 1)."""

    path: str
    depth: int
    setsum: Setsum
    writer: str
    snapshots: tuple[SnapshotPointer, ...]
    fragments: tuple[FragmentRef, ...]

    @classmethod
    def of_fragments(cls, fragments: Sequence[FragmentRef], writer: str) -> Snapshot:
        setsum = _sum_parts((), fragments)
        return cls(snapshot_key(setsum), 1, setsum, writer, (), tuple(fragments))

    @classmethod
    def of_snapshots(cls, pointers: Sequence[SnapshotPointer], writer: str) -> Snapshot:
        setsum = _sum_parts(pointers, ())
        depth = max(p.depth for p in pointers) + 1
        return cls(snapshot_key(setsum), depth, setsum, writer, tuple(pointers), ())

    @property
    def start(self) -> int:
        return (self.snapshots or self.fragments)[0].start

    @property
    def limit(self) -> int:
        return (self.snapshots or self.fragments)[-1].limit

    @property
    def num_bytes(self) -> int:
        return sum(s.num_bytes for s in self.snapshots) + sum(f.num_bytes for f in self.fragments)

    def pointer(self) -> SnapshotPointer:
        return SnapshotPointer(self.setsum, self.path, self.depth, self.start, self.limit, self.num_bytes)

    def same_content(self, other: Snapshot) -> bool:
        """Whoever wrote them, whether both hold the same children at the same offsets. Equal
        setsums (hence paths) do not imply it: a fragment's setsum does not depend on where it
        sits, so the same fragments rolled at other offsets (by a commit attempt that lost its
        race and was placed again) sum to the same setsum."""
        return replace(other, writer=self.writer) == self

    def scrub(self) -> None:
        """Raise CorruptLog naming the broken invariant; Chroma's `Snapshot::scrub` rules."""
        obj = self.path
        if self.snapshots and self.fragments:
            raise CorruptLog("a snapshot holds fragments or snapshots, never both", obj,
                             "holds both fragments and snapshots")
        if not self.snapshots and not self.fragments:
            raise CorruptLog("a snapshot is not empty", obj, "an empty snapshot (no children)")
        if self.snapshots and max(s.depth for s in self.snapshots) >= self.depth:
            raise CorruptLog("snapshot depth exceeds its children's", obj,
                             f"its depth {self.depth} does not exceed its children's")
        if self.fragments and self.depth != 1:
            raise CorruptLog("a snapshot of fragments has depth 1", obj,
                             f"a snapshot of fragments with depth {self.depth}, not 1")
        calculated = _sum_parts(self.snapshots, self.fragments)
        if calculated != self.setsum:
            raise CorruptLog(
                "snapshot setsum equals the sum of its children",
                obj,
                f"its setsum does not equal the sum of its children (recorded {self.setsum.hexdigest()}, "
                f"children {calculated.hexdigest()})",
            )
        if not self.path.endswith(self.setsum.hexdigest()):
            raise CorruptLog("snapshot path ends in its setsum", obj,
                             f"its path does not end in its setsum {self.setsum.hexdigest()}")
        _check_contiguous(obj, self.snapshots, "snapshot pointers")
        _check_unique(obj, (s.path_to_snapshot for s in self.snapshots), "snapshot")
        _check_fragments(obj, self.fragments)

    def to_bytes(self) -> bytes:
        return dumps(
            {
                "path": self.path,
                "depth": self.depth,
                "setsum": self.setsum.hexdigest(),
                "writer": self.writer,
                "snapshots": [s.to_dict() for s in self.snapshots],
                "fragments": [f.to_dict() for f in self.fragments],
            }
        )

    @classmethod
    def from_bytes(cls, data: bytes, obj: str) -> Snapshot:
        return cls.from_dict(loads(data, obj), obj)

    @classmethod
    def from_dict(cls, doc: Any, obj: str) -> Snapshot:
        """A snapshot from its parsed JSON (garbage records embed snapshots as objects)."""
        return cls(
            path=require_field(doc, "path", obj, str),
            depth=require_field(doc, "depth", obj, int),
            setsum=parse_setsum(doc.get("setsum"), obj, "setsum"),
            writer=require_field(doc, "writer", obj, str),
            snapshots=tuple(
                SnapshotPointer.from_dict(s, obj) for s in require_field(doc, "snapshots", obj, list)
            ),
            fragments=tuple(
                FragmentRef.from_dict(f, obj) for f in require_field(doc, "fragments", obj, list)
            ),
        )


@dataclass(frozen=True)
class Manifest:
    """The root of a log: every snapshot and fragment still in it, and its running setsum."""

    setsum: Setsum
    collected: Setsum
    acc_bytes: int
    writer: str
    snapshots: tuple[SnapshotPointer, ...]
    fragments: tuple[FragmentRef, ...]
    initial_offset: int | None = None
    initial_seq_no: int | str | None = None
    #: base64 Arrow IPC schema; None for a raw (Chroma-style `body`) log
    schema: str | None = None
    sealed: bool = False
    #: how a structured log's setsum chunk items are hashed (docs/format.md section 3): "blake3",
    #: or None for logs created before the field (and always for raw logs). Fixed at creation.
    item_hash: str | None = None
    txns: Mapping[str, Txn] = field(default_factory=dict)
    #: wal3-spark extension (docs/design/32-orphan-horizon.md): garbage collection may have deleted
    #: unreferenced fragments created before this time (µs since the epoch), so no commit may
    #: reference them any more
    orphan_horizon_us: int | None = None
    #: wal3-spark extension (docs/design/20-committing.md): no fragment the snapshots hold (at or
    #: after the oldest offset) was written (its UUIDv7 time, µs) after this; None with snapshots
    #: present: not known (a log compacted before the field, or by another writer). A commit of
    #: fragments written after it finds any earlier commit of them among `fragments` alone
    rolled_written_us: int | None = None
    #: wal3-spark extension (docs/design/20-committing.md): garbage collection never collected a
    #: fragment written (its UUIDv7 time, µs; 0 for one of unknown age) after this; None: it
    #: collected none (or, with `collected` non-empty, not known: a log collected before the
    #: field). A commit of fragments written after it cannot be a re-commit of collected ones
    collected_written_us: int | None = None
    #: wal3-spark extension (docs/format.md section 4, "Compacted fragments"): no fragment a
    #: compaction replaced was written (its UUIDv7 time, µs; 0 for one of unknown age) after
    #: this; None: no compaction replaced any (or one did and a writer that does not know the
    #: field rewrote the manifest). A commit of fragments written after it cannot be a
    #: re-commit of compacted ones (`wal3_spark.log.replaced`)
    compacted_written_us: int | None = None
    #: wal3-spark extension (docs/design/17-incarnations.md): the log's identity, a UUIDv7 recorded
    #: when the log is created and kept by every later manifest, so that consumers tell a log
    #: deleted and created again under the same name from the one they read; None: a log
    #: created before the field (its identity is unknown; it never gets one)
    incarnation: str | None = None
    #: wal3-spark extension (docs/design/26-branches-and-tags.md): a branch's parent, whose records
    #: [parent.start, parent.offset) are this log's first ones; None: not a branch (or one
    #: checkpointed since)
    parent: Parent | None = None
    #: wal3-spark extension (docs/design/33-retention.md): how long and how much of the log
    #: garbage collection keeps, whoever has not read it; None: only cursors release records
    retention: RetentionPolicy | None = None

    # -- construction -------------------------------------------------------------------

    @classmethod
    def empty(cls, writer: str, schema: pa.Schema | None = None, *,
              incarnation: str | None = None) -> Manifest:
        """A new log's first manifest, with a fresh incarnation unless one is given."""
        return cls(
            setsum=Setsum(),
            collected=Setsum(),
            acc_bytes=0,
            writer=writer,
            snapshots=(),
            fragments=(),
            schema=encode_schema(schema) if schema is not None else None,
            item_hash=BLAKE3 if schema is not None else None,
            incarnation=incarnation or new_incarnation(),
        )

    @classmethod
    def from_bytes(
        cls, data: bytes, obj: str = MANIFEST_KEY, known: KnownRefs | None = None, *, check: bool = True
    ) -> Manifest:
        """Parse a manifest and check it (`scrub`): a reader acts only on a manifest that
        follows every rule, so a damaged one fails the read with CorruptLog naming `obj` instead
        of reading a shorter or different log. `known` reuses the fragment pointers its owner
        parsed before. `check=False` only parses, for `wal3 verify`, which reports every
        broken rule rather than the first."""
        doc = loads(data, obj)
        if not isinstance(doc, dict):
            raise CorruptLog("field type", obj, f"not a JSON object: {type(doc).__name__}")
        collected = doc.get("collected")
        initial = doc.get("initial_offset")
        txns = doc.get("txns", {})
        if not isinstance(txns, dict) or not all(isinstance(t, dict) for t in txns.values()):
            raise CorruptLog("field type", obj, f"'txns' has the wrong type: {txns!r}")
        manifest = cls(
            setsum=parse_setsum(require_field(doc, "setsum", obj, str), obj, "setsum"),
            collected=parse_setsum(collected, obj, "collected") if collected is not None else Setsum(),
            acc_bytes=require_field(doc, "acc_bytes", obj, int),
            writer=require_field(doc, "writer", obj, str),
            snapshots=tuple(
                SnapshotPointer.from_dict(s, obj) for s in require_field(doc, "snapshots", obj, list)
            ),
            fragments=tuple(
                FragmentRef.from_dict(f, obj, known) for f in require_field(doc, "fragments", obj, list)
            ),
            initial_offset=parse_offset(initial, obj, "initial_offset") if initial is not None else None,
            initial_seq_no=doc.get("initial_seq_no"),
            schema=doc.get("schema"),
            sealed=doc.get("sealed", False),
            item_hash=doc.get("item_hash"),
            txns={  # their values are checked by `scrub`, as a writer's are
                app: Txn(t["version"] if "version" in t else require_field(t, "version", obj, int),
                         t["epoch_us"] if "epoch_us" in t else require_field(t, "epoch_us", obj, int))
                for app, t in txns.items()
            },
            orphan_horizon_us=doc.get("orphan_horizon_us"),
            rolled_written_us=doc.get("rolled_written_us"),
            collected_written_us=doc.get("collected_written_us"),
            compacted_written_us=doc.get("compacted_written_us"),
            incarnation=doc.get("incarnation"),
            parent=Parent.from_dict(doc["parent"], obj) if doc.get("parent") is not None else None,
            retention=(RetentionPolicy.from_dict(doc["retention"], obj)
                       if doc.get("retention") is not None else None),
        )
        if check:
            manifest.scrub(obj)
        return manifest

    def to_bytes(self) -> bytes:
        """Compact JSON in Chroma's key order; pointers reuse their cached text, so a commit
        serialises only what it added."""
        parts = [
            '{"setsum":"', self.setsum.hexdigest(),
            '","collected":"', self.collected.hexdigest(),
            '","acc_bytes":', str(self.acc_bytes),
            ',"writer":', json_text(self.writer),
            ',"snapshots":[', ",".join(s.json_text for s in self.snapshots),
            '],"fragments":[', ",".join(f.json_text for f in self.fragments), "]",
        ]  # fmt: skip
        extras: dict[str, Any] = {}
        if self.initial_offset is not None:
            extras["initial_offset"] = position(self.initial_offset)
        if self.initial_seq_no is not None:
            extras["initial_seq_no"] = self.initial_seq_no
        if self.schema is not None:
            extras["schema"] = self.schema
        if self.sealed:
            extras["sealed"] = True
        if self.item_hash is not None:
            extras["item_hash"] = self.item_hash
        if self.txns:
            extras["txns"] = {
                app: {"version": t.version, "epoch_us": t.epoch_us} for app, t in self.txns.items()
            }
        if self.orphan_horizon_us is not None:
            extras["orphan_horizon_us"] = self.orphan_horizon_us
        if self.rolled_written_us is not None:
            extras["rolled_written_us"] = self.rolled_written_us
        if self.collected_written_us is not None:
            extras["collected_written_us"] = self.collected_written_us
        if self.compacted_written_us is not None:
            extras["compacted_written_us"] = self.compacted_written_us
        if self.incarnation is not None:
            extras["incarnation"] = self.incarnation
        if self.parent is not None:
            extras["parent"] = self.parent.to_dict()
        if self.retention is not None:
            extras["retention"] = self.retention.to_dict()
        parts.extend(f",{json_text(key)}:{json_text(value)}" for key, value in extras.items())
        parts.append("}")
        return "".join(parts).encode()

    # -- queries ------------------------------------------------------------------------

    @property
    def is_raw(self) -> bool:
        return self.schema is None

    def arrow_schema(self) -> pa.Schema | None:
        return decode_schema(self.schema) if self.schema is not None else None

    def append_item_hash(self, structured: bool) -> str | None:
        """The `item_hash` an append's fragments must be hashed with: the log's own, except
        that an empty log created without a schema becomes a new structured log (BLAKE3) when
        its first structured append sets the schema (`with_fragments`)."""
        if not structured:
            return None
        return self.item_hash if self.schema is not None else BLAKE3

    @property
    def next_offset(self) -> int:
        """The offset the next appended record gets (the log's exclusive tail)."""
        if self.fragments:
            return self.fragments[-1].limit
        if self.snapshots:
            return self.snapshots[-1].limit
        return self.initial_offset if self.initial_offset is not None else FIRST_OFFSET

    @property
    def oldest_offset(self) -> int:
        """The oldest offset still readable (garbage collection moves it forward): a branch's
        parent start while it reads its parent (`reads_parent`)."""
        if self.reads_parent:
            assert self.parent is not None
            return self.parent.start
        return self.own_oldest_offset

    @property
    def reads_parent(self) -> bool:
        """Whether this log's oldest records are its parent's: a branch whose own garbage
        collection has not moved past the branch point."""
        return self.parent is not None and self.own_oldest_offset <= self.parent.offset

    @property
    def own_oldest_offset(self) -> int:
        """The oldest offset this log's own fragments and snapshots hold (what garbage
        collection and the manifest's invariants work on); `oldest_offset` except on a branch."""
        if self.snapshots:
            return self.snapshots[0].start
        if self.fragments:
            return self.fragments[0].start
        return self.initial_offset if self.initial_offset is not None else FIRST_OFFSET

    @property
    def uses_seq_nos(self) -> bool:
        """True for logs written by Chroma's S3 backend (integer fragment sequence numbers)."""
        return bool(self.fragments) and isinstance(self.fragments[0].seq_no, int)

    def scrub(self, obj: str = MANIFEST_KEY) -> None:
        """Raise CorruptLog naming the first broken rule (docs/format.md section 4). The one set of
        rules for a manifest: every reader applies it to what it parsed (`from_bytes`), every
        writer to what it is about to write, so nothing a reader would refuse is written.

        The values (types and ranges, the schema decodes, a known item hash, txns), then the
        structure: snapshots, then fragments, each with start < limit, contiguous, referenced
        once, and the setsum balance, the one check that covers a pointer changed or dropped
        anywhere (a record's setsum is in exactly one pointer)."""
        self.check_values(obj)
        self.check_structure(obj)

    def check_structure(self, obj: str = MANIFEST_KEY) -> None:
        """`scrub`'s structural rules: ranges, order, uniqueness and the setsum balance."""
        for snap in self.snapshots:
            if not snap.start < snap.limit:
                problem = f"snapshot {snap.path_to_snapshot} has start >= limit"
                raise CorruptLog("start < limit for every snapshot", obj, problem)
        _check_contiguous(obj, self.snapshots, "snapshots")
        _check_unique(obj, (s.path_to_snapshot for s in self.snapshots), "snapshot")
        _check_fragments(obj, self.fragments)
        if self.snapshots and self.fragments and self.snapshots[-1].limit != self.fragments[0].start:
            raise CorruptLog(
                "snapshots are followed contiguously by fragments",
                obj,
                f"the fragments do not follow the snapshots contiguously (snapshot limit "
                f"{self.snapshots[-1].limit}, fragment start {self.fragments[0].start})",
            )
        if self.initial_offset is not None and self.initial_offset != self.own_oldest_offset:
            raise CorruptLog(
                "initial_offset equals the oldest offset",
                obj,
                f"initial_offset {self.initial_offset} is not the oldest offset {self.own_oldest_offset}",
            )
        if self.parent is not None and self.own_oldest_offset < self.parent.offset:
            raise CorruptLog(
                "a branch's own records start at or after its branch point",
                obj,
                f"its own records start at {self.own_oldest_offset}, below its branch point "
                f"{self.parent.offset}",
            )
        calculated = _sum_parts(self.snapshots, self.fragments) + self.collected
        if calculated != self.setsum:
            raise CorruptLog(
                "setsum == snapshots + fragments + collected",
                obj,
                f"its setsum does not equal snapshots + fragments + collected (recorded "
                f"{self.setsum.hexdigest()}, computed {calculated.hexdigest()})",
            )

    def check_values(self, obj: str = MANIFEST_KEY) -> None:
        """`scrub`'s rules for the manifest's own fields (pointers check theirs when parsed or
        built): types and ranges, a schema that decodes, a known item hash."""
        check_int(self.acc_bytes, obj, "acc_bytes")
        if not isinstance(self.writer, str):
            raise CorruptLog("field type", obj, f"'writer' has the wrong type: {self.writer!r}")
        if not isinstance(self.setsum, Setsum) or not isinstance(self.collected, Setsum):
            raise CorruptLog("field type", obj, "'setsum' or 'collected' is not a setsum")
        if self.initial_offset is not None:
            check_int(self.initial_offset, obj, "initial_offset")
        if self.initial_seq_no is not None and type(self.initial_seq_no) not in (int, str):
            raise CorruptLog("field type", obj, f"'initial_seq_no' has the wrong type: {self.initial_seq_no!r}")
        if not isinstance(self.sealed, bool):
            raise CorruptLog("field type", obj, f"'sealed' has the wrong type: {self.sealed!r}")
        if self.schema is not None:
            if not isinstance(self.schema, str):
                raise CorruptLog("field type", obj, f"'schema' has the wrong type: {self.schema!r}")
            decode_schema(self.schema)  # cached by its text: decoded once per process
        _check_item_hash(self.item_hash, self.schema is None, obj)
        if not isinstance(self.txns, Mapping):
            raise CorruptLog("field type", obj, f"'txns' has the wrong type: {self.txns!r}")
        for app_id, txn in self.txns.items():
            if not isinstance(txn, Txn):
                raise CorruptLog("field type", obj, f"txn {app_id!r} has the wrong type: {txn!r}")
            txn.check(app_id, obj)
        for name in ("orphan_horizon_us", "rolled_written_us", "collected_written_us",
                     "compacted_written_us"):
            value = getattr(self, name)
            if value is not None:
                check_int(value, obj, name)
        parse_incarnation(self.incarnation, obj)
        if self.parent is not None:
            if not isinstance(self.parent, Parent):
                raise CorruptLog("field type", obj, f"'parent' has the wrong type: {self.parent!r}")
            self.parent.check(obj)
        if self.retention is not None:
            if not isinstance(self.retention, RetentionPolicy):
                raise CorruptLog("field type", obj, f"'retention' has the wrong type: {self.retention!r}")
            self.retention.check(obj)

    # -- transitions --------------------------------------------------------------------

    def with_fragments(
        self,
        fragments: Sequence[NewFragment],
        writer: str,
        *,
        txn: tuple[str, Txn] | None = None,
        schema: pa.Schema | None = None,
    ) -> Manifest:
        """Place `fragments` in the given order at the tail (appends commute, so a commit that
        lost a race is placed again at the new tail unchanged)."""
        refs = []
        start = self.next_offset
        for frag in fragments:
            ref = FragmentRef(frag.path, frag.uuid, start, start + frag.records, frag.num_bytes,
                              frag.setsum, getattr(frag, "filter", None), getattr(frag, "blake3", None))
            ref.check(MANIFEST_KEY)  # what a reader will check of it
            refs.append(ref)
            start = ref.limit
        txns = dict(self.txns)
        if txn is not None:
            txns[txn[0]] = txn[1]
        return replace(
            self,
            setsum=self.setsum + Setsum.sum(f.setsum for f in fragments),
            acc_bytes=self.acc_bytes + sum(f.num_bytes for f in fragments),
            writer=writer,
            fragments=self.fragments + tuple(refs),
            schema=encode_schema(schema) if schema is not None else self.schema,
            item_hash=self.append_item_hash(structured=True) if schema is not None else self.item_hash,
            txns=txns,
        )

    def generate_snapshot(self, options: SnapshotOptions, writer: str, *, fewer: int = 0) -> Snapshot | None:
        """The next snapshot to roll up, if any, oldest pointers first.

        Snapshot pointers are kept in non-increasing depth order (like a binary counter), so the
        pointers of one depth are contiguous and rolling the oldest `threshold` of them keeps the
        manifest contiguous. One fragment always stays in the manifest, as in Chroma.

        `fewer` rolls that many children fewer than the threshold: a variant with another setsum,
        hence another path, for when the path of the usual one holds a different snapshot with
        the same setsum (docs/design/22-snapshot-rollover.md). None once no variant is left (a snapshot of
        pointers needs two children: one child would share its setsum and path).
        """
        for depth in sorted({s.depth for s in self.snapshots}, reverse=True):
            same = [s for s in self.snapshots if s.depth == depth]
            if len(same) >= options.snapshot_rollover_threshold:
                count = options.snapshot_rollover_threshold - fewer
                return Snapshot.of_snapshots(same[:count], writer) if count >= 2 else None
        if len(self.fragments) > options.fragment_rollover_threshold:
            count = options.fragment_rollover_threshold - fewer
            return Snapshot.of_fragments(self.fragments[:count], writer) if count >= 1 else None
        return None

    def apply_snapshot(self, snapshot: Snapshot) -> Manifest:
        """Replace the snapshot's children with one pointer to it; the setsum is conserved."""
        pointer = snapshot.pointer()
        if snapshot.fragments:
            n = len(snapshot.fragments)
            if self.fragments[:n] != snapshot.fragments:
                raise CorruptLog(
                    "a snapshot covers a prefix of the manifest's fragments", snapshot.path,
                    "does not cover a prefix of the manifest's fragments"
                )
            snapshots, fragments = self.snapshots + (pointer,), self.fragments[n:]
            rolled = self.rolled_written_us if self.snapshots else 0
            written = newest_written_us(snapshot.fragments)
            # a fragment of unknown age: not known any more
            rolled = None if rolled is None or written is None else max(rolled, written)
        else:
            children = snapshot.snapshots
            idx = next(
                (i for i in range(len(self.snapshots)) if self.snapshots[i : i + len(children)] == children),
                None,
            )
            if idx is None:
                raise CorruptLog(
                    "a snapshot covers contiguous manifest snapshot pointers", snapshot.path,
                    "does not cover contiguous snapshot pointers of the manifest"
                )
            snapshots = self.snapshots[:idx] + (pointer,) + self.snapshots[idx + len(children) :]
            fragments, rolled = self.fragments, self.rolled_written_us
        return replace(self, snapshots=snapshots, fragments=fragments, rolled_written_us=rolled)

    def with_txns(self, txns: Mapping[str, Txn]) -> Manifest:
        return replace(self, txns=dict(txns))

    def sealed_by(self, writer: str) -> Manifest:
        return replace(self, sealed=True, writer=writer)

    def with_retention(self, policy: RetentionPolicy | None, writer: str) -> Manifest | None:
        """The manifest with `policy` as its retention policy (None clears it), or None when it
        has that one already (a compare-and-swap that lost its race, or landed, changes nothing)."""
        if self.retention == policy:
            return None
        return replace(self, retention=policy, writer=writer)

    def with_orphan_horizon(self, horizon_us: int, writer: str) -> Manifest | None:
        """The manifest with its orphan horizon raised to `horizon_us`, or None if it is there
        already (the horizon never moves back)."""
        if self.orphan_horizon_us is not None and self.orphan_horizon_us >= horizon_us:
            return None
        return replace(self, orphan_horizon_us=horizon_us, writer=writer)
