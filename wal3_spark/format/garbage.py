"""The garbage record (`gc/GARBAGE`) and garbage collection's decisions as pure functions.

`compute_garbage` decides, from a manifest value and a cutoff, what garbage collection removes;
`apply_garbage` turns a manifest into the one without that garbage. Neither does I/O except
through the snapshot loader it is given, so both are tested on plain values (docs/format.md section 8;
Chroma's wal3 design, "Garbage Collection Dance"). `wal3_spark.ops.garbage_collector` holds the I/O, except
`load_garbage`, the one reader of the record: it lives here so that the committer, which `garbage_collector`
imports, uses it too.

The JSON is Chroma's `Garbage` (field names, order and meaning), with two wal3-spark extensions
that Chroma's serde ignores: `fragment_paths_to_drop` (the UUID fragments dropped, which phase 3
deletes affirmatively; Chroma keeps that set in memory between its phases) and
`applied_epoch_us`, written once the manifest no longer references the garbage: phase 3 waits a
grace interval counted from that moment.

Decisions (where Chroma's code differs, ours is stricter or collects more, never less safely):
- everything is decided against the requested cutoff: whole snapshots and whole fragments whose
  `limit <= cutoff` are dropped; a fragment holding any offset >= cutoff is kept whole;
- at most one top-level snapshot straddles the cutoff; its kept part is rebuilt (recursively,
  one new snapshot per level of the straddling chain, `snapshots_to_make`) and the rebuilt root
  replaces it at the same place (`snapshot_for_root`), so pointer depths stay ordered;
- `first_to_keep` is the start of the first record kept (the limit of the last dropped fragment),
  which becomes the manifest's `initial_offset`.

Design: docs/design/30-unreferenced-files-are-garbage.md.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from wal3_spark.errors import CorruptLog, GarbageError, GarbageStale, ObjectNotFound
from wal3_spark.format.layout import (
    FIRST_OFFSET,
    GARBAGE_KEY,
    FragmentRef,
    SnapshotPointer,
    dumps,
    loads,
    parse_fragment_uuid,
    parse_offset,
    parse_setsum,
    position,
    seq_no_fragment_path,
    snapshot_key,
)
from wal3_spark.format.manifest import Manifest, Snapshot
from wal3_spark.format.setsum import Setsum
from wal3_spark.format.uuid7 import uuid7_timestamp_us

if TYPE_CHECKING:
    from wal3_spark.storage.base import ObjectStore

GC_WRITER = "garbage collection"

SnapshotLoader = Callable[[SnapshotPointer], Snapshot]


@dataclass(frozen=True)
class Garbage:
    """What one garbage collection removes; Chroma's `Garbage` JSON."""

    snapshots_to_drop: tuple[SnapshotPointer, ...] = ()
    snapshots_to_make: tuple[Snapshot, ...] = ()
    snapshot_for_root: SnapshotPointer | None = None
    fragments_to_drop_start: int = 0
    fragments_to_drop_limit: int = 0
    fragments_to_drop_uuid_limit: str | None = None
    fragments_are_uuids: bool = False
    setsum_to_discard: Setsum = field(default_factory=Setsum)
    first_to_keep: int = FIRST_OFFSET
    #: wal3-spark extension: the paths of the UUID fragments dropped, so that phase 3 deletes
    #: them affirmatively (Chroma keeps this set in memory between its phases)
    fragment_paths_to_drop: tuple[str, ...] = ()
    #: wal3-spark extension: when the manifest was seen without this garbage (µs since epoch)
    applied_epoch_us: int | None = None

    # -- values -------------------------------------------------------------------------

    @classmethod
    def empty(cls) -> Garbage:
        return cls()

    def is_empty(self) -> bool:
        return replace(self, applied_epoch_us=None) == Garbage()

    @property
    def seq_nos(self) -> range:
        return range(self.fragments_to_drop_start, self.fragments_to_drop_limit)

    def fragment_paths(self) -> list[str]:
        """Paths of the fragments to delete: sequence-numbered ones from their range, UUID
        ones as listed (orphans are found by listing, see `wal3_spark.ops.garbage_collector`)."""
        return [seq_no_fragment_path(s) for s in self.seq_nos] + list(self.fragment_paths_to_drop)

    def snapshot_paths(self) -> list[str]:
        return [p.path_to_snapshot for p in self.snapshots_to_drop]

    # -- JSON ---------------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        doc: dict[str, Any] = {
            "snapshots_to_drop": [p.to_dict() for p in self.snapshots_to_drop],
            "snapshots_to_make": [_snapshot_doc(s) for s in self.snapshots_to_make],
            "snapshot_for_root": self.snapshot_for_root.to_dict() if self.snapshot_for_root else None,
            "fragments_to_drop_start": self.fragments_to_drop_start,
            "fragments_to_drop_limit": self.fragments_to_drop_limit,
        }
        if self.fragments_to_drop_uuid_limit is not None:
            doc["fragments_to_drop_uuid_limit"] = self.fragments_to_drop_uuid_limit
        doc["fragments_are_uuids"] = self.fragments_are_uuids
        doc["setsum_to_discard"] = self.setsum_to_discard.hexdigest()
        doc["first_to_keep"] = position(self.first_to_keep)
        if self.fragment_paths_to_drop:
            doc["fragment_paths_to_drop"] = list(self.fragment_paths_to_drop)
        if self.applied_epoch_us is not None:
            doc["applied_epoch_us"] = self.applied_epoch_us
        return dumps(doc)

    @classmethod
    def from_bytes(cls, data: bytes, obj: str = GARBAGE_KEY) -> Garbage:
        if not data.strip():
            return cls.empty()  # a zero-byte file is the empty garbage too
        doc = loads(data, obj)
        if not isinstance(doc, dict):
            raise CorruptLog("garbage is a JSON object", obj, f"not a JSON object: {repr(doc)[:80]}")
        try:
            root = doc.get("snapshot_for_root")
            uuid_limit = doc.get("fragments_to_drop_uuid_limit")
            if uuid_limit is not None:
                uuid_limit = str(uuid.UUID(str(uuid_limit)))
            applied = doc.get("applied_epoch_us")
            if applied is not None and (not isinstance(applied, int) or isinstance(applied, bool)):
                raise CorruptLog("field type", obj, f"'applied_epoch_us' has the wrong type: {applied!r}")
            return cls(
                snapshots_to_drop=tuple(
                    SnapshotPointer.from_dict(p, obj) for p in doc.get("snapshots_to_drop", [])
                ),
                snapshots_to_make=tuple(
                    Snapshot.from_dict(s, obj) for s in doc.get("snapshots_to_make", [])
                ),
                snapshot_for_root=SnapshotPointer.from_dict(root, obj) if root else None,
                fragments_to_drop_start=int(doc.get("fragments_to_drop_start", 0)),
                fragments_to_drop_limit=int(doc.get("fragments_to_drop_limit", 0)),
                fragments_to_drop_uuid_limit=uuid_limit,
                fragments_are_uuids=bool(doc.get("fragments_are_uuids", False)),
                setsum_to_discard=parse_setsum(
                    doc.get("setsum_to_discard", Setsum().hexdigest()), obj, "setsum_to_discard"
                ),
                first_to_keep=parse_offset(doc.get("first_to_keep", position(FIRST_OFFSET)), obj, "first_to_keep"),
                fragment_paths_to_drop=tuple(str(p) for p in doc.get("fragment_paths_to_drop", [])),
                applied_epoch_us=applied,
            )
        except (TypeError, ValueError, AttributeError) as exc:
            raise CorruptLog("well-formed garbage", obj, f"malformed garbage ({exc})") from None

    # -- summary ------------------------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        return {
            "first_to_keep": self.first_to_keep,
            "snapshots_to_drop": len(self.snapshots_to_drop),
            "snapshots_to_make": len(self.snapshots_to_make),
            "fragments_to_drop_seq_nos": len(self.seq_nos),
            "fragments_to_drop_uuid_limit": self.fragments_to_drop_uuid_limit,
            "setsum_to_discard": self.setsum_to_discard.hexdigest(),
            "fragments_to_drop": len(self.seq_nos) + len(self.fragment_paths_to_drop),
            "applied_epoch_us": self.applied_epoch_us,
        }


def load_garbage(store: ObjectStore) -> tuple[Garbage, str | None]:
    """The current garbage and its ETag (None when `gc/GARBAGE` does not exist)."""
    try:
        blob = store.get(GARBAGE_KEY)
    except ObjectNotFound:
        return Garbage.empty(), None
    return Garbage.from_bytes(blob.data), blob.etag


def _snapshot_doc(snapshot: Snapshot) -> dict[str, Any]:
    return loads(snapshot.to_bytes(), snapshot.path)


# ------------------------------------------------------------------------------ computing


@dataclass
class _Acc:
    load: SnapshotLoader
    cutoff: int
    snapshots_to_drop: list[SnapshotPointer] = field(default_factory=list)
    snapshots_to_make: list[Snapshot] = field(default_factory=list)
    fragments: list[FragmentRef] = field(default_factory=list)

    def drop_fragment(self, frag: FragmentRef) -> Setsum:
        self.fragments.append(frag)
        return frag.setsum

    def drop_snapshot(self, pointer: SnapshotPointer) -> Setsum:
        """Drop a whole snapshot (and, recursively, everything under it)."""
        snapshot = self.load(pointer)
        acc = Setsum()
        for child in snapshot.snapshots:
            acc += self.drop_snapshot(child)
        for frag in snapshot.fragments:
            acc += self.drop_fragment(frag)
        if acc != snapshot.setsum or snapshot.setsum != pointer.setsum:
            raise CorruptLog(
                "a dropped snapshot's setsum equals the sum of what it holds",
                pointer.path_to_snapshot,
                f"its setsum does not equal the sum of what it holds (pointer "
                f"{pointer.setsum.hexdigest()}, children {acc.hexdigest()})",
            )
        self.snapshots_to_drop.append(pointer)
        return acc

    def straddle(self, pointer: SnapshotPointer) -> tuple[Setsum, list[SnapshotPointer], list[FragmentRef]]:
        """Walk a snapshot straddling the cutoff: drop what lies wholly below it and return
        (dropped setsum, whole pointers kept, fragments kept from the deepest straddled level),
        in offset order. The snapshot itself and the straddled ones under it become garbage."""
        snapshot = self.load(pointer)
        dropped = Setsum()
        kept_pointers: list[SnapshotPointer] = []
        kept_fragments: list[FragmentRef] = []
        remainder: list[FragmentRef] = []
        for child in snapshot.snapshots:
            if child.limit <= self.cutoff:
                dropped += self.drop_snapshot(child)
            elif child.start < self.cutoff and not remainder and self._drops_inside(child):
                delta, pointers, remainder = self.straddle(child)
                dropped += delta
                kept_pointers.extend(pointers)
            else:
                kept_pointers.append(child)
        for frag in snapshot.fragments:
            if frag.limit <= self.cutoff:
                dropped += self.drop_fragment(frag)
            else:
                kept_fragments.append(frag)
        self.snapshots_to_drop.append(pointer)
        return dropped, kept_pointers, remainder + kept_fragments

    def _drops_inside(self, pointer: SnapshotPointer) -> bool:
        """Whether anything under a straddling snapshot lies wholly below the cutoff."""
        snapshot = self.load(pointer)
        if snapshot.fragments:
            return snapshot.fragments[0].limit <= self.cutoff
        first = snapshot.snapshots[0]
        return first.limit <= self.cutoff or self._drops_inside(first)

    def replace_snapshot(self, pointer: SnapshotPointer) -> tuple[Setsum, SnapshotPointer] | None:
        """Rebuild a top-level snapshot straddling the cutoff without what lies wholly below it,
        as one new snapshot of the same depth (so the manifest's pointers stay in depth order);
        None when that is impossible (the kept part is a single fragment or a single whole
        snapshot under a deeper tree: see below) or when nothing under it lies below the
        cutoff: then it is kept whole."""
        if not self._drops_inside(pointer):
            return None
        mark = (len(self.snapshots_to_drop), len(self.fragments))
        dropped, pointers, fragments = self.straddle(pointer)
        made: list[Snapshot] = []
        if pointer.depth == 1:
            root = Snapshot.of_fragments(fragments, GC_WRITER)
        else:
            # Paths are content-addressed by setsum alone, and the rebuilt snapshot's setsum is
            # that of the kept part: when the kept part is one whole snapshot (however it is
            # split up) or one fragment under a deeper tree, the rebuilt snapshot would take the
            # path of what it holds. Keep the straddling snapshot whole then (Chroma does too);
            # lone fragments of their own are split in two.
            if len(pointers) + len(fragments) < 2:
                del self.snapshots_to_drop[mark[0]:]
                del self.fragments[mark[1]:]
                return None
            half = len(fragments) // 2
            parts = [fragments] if pointers else [fragments[:half], fragments[half:]]
            made = [Snapshot.of_fragments(p, GC_WRITER) for p in parts if p]
            children = sorted([s.pointer() for s in made] + pointers, key=lambda c: c.start)
            setsum = Setsum.sum(c.setsum for c in children)
            root = Snapshot(
                snapshot_key(setsum), pointer.depth, setsum, GC_WRITER, tuple(children), ()
            )
        root.scrub()
        if root.setsum + dropped != pointer.setsum:
            raise CorruptLog(
                "a rebuilt snapshot plus what it drops equals the original",
                pointer.path_to_snapshot,
                "the rebuilt snapshot plus what it drops does not equal the original's setsum",
            )
        self.snapshots_to_make.extend(made + [root])
        return dropped, root.pointer()


def compute_garbage(
    manifest: Manifest, cutoff: int, load: SnapshotLoader, *, rebuild: bool = True
) -> Garbage | None:
    """The garbage below `cutoff` (the first offset that must stay readable), or None.

    `load` returns the snapshot a pointer names (e.g. `wal3_spark.log.snapshots.load_snapshot`
    bound to a store). Fragments are never split: one holding any offset >= cutoff is kept.
    With `rebuild=False` a snapshot straddling the cutoff is kept whole (used when a rebuilt
    snapshot's path holds another snapshot with the same setsum).
    """
    if cutoff <= manifest.own_oldest_offset:
        return None
    acc = _Acc(load, cutoff)
    discard = Setsum()
    root: SnapshotPointer | None = None
    straddled = False
    for pointer in manifest.snapshots:
        if pointer.limit <= cutoff:
            discard += acc.drop_snapshot(pointer)
        elif pointer.start < cutoff:
            replaced = acc.replace_snapshot(pointer) if rebuild else None
            if replaced is not None:
                discard += replaced[0]
                root = replaced[1]
            straddled = True
            break
        else:
            straddled = True
            break
    if not straddled:
        for frag in manifest.fragments:
            if frag.limit > cutoff:
                break
            discard += acc.drop_fragment(frag)
    if not acc.fragments:
        return None
    if Setsum.sum(f.setsum for f in acc.fragments) != discard:
        raise GarbageError("garbage setsums do not balance (internal error)")
    first_to_keep = max(f.limit for f in acc.fragments)
    seq_nos = [f.seq_no for f in acc.fragments if isinstance(f.seq_no, int)]
    uuids = [uuid.UUID(f.seq_no) for f in acc.fragments if isinstance(f.seq_no, str)]
    are_uuids = not seq_nos and not manifest.uses_seq_nos
    start = limit = 0
    if seq_nos:
        if uuids:
            raise CorruptLog(
                "fragment identifiers are all sequence numbers or all UUIDs",
                GARBAGE_KEY,
                "sequence-number and UUID fragments are mixed below the cutoff",
            )
        for lhs, rhs in itertools.pairwise(seq_nos):
            if rhs != lhs + 1:
                raise CorruptLog(
                    "dropped sequence numbers are contiguous", GARBAGE_KEY,
                    f"the dropped sequence numbers have a gap ({lhs} then {rhs})"
                )
        start, limit = seq_nos[0], seq_nos[-1] + 1
    uuid_limit = None
    if are_uuids and uuids:
        remaining = [
            uuid.UUID(f.seq_no)
            for f in manifest.fragments
            if f.limit > first_to_keep and isinstance(f.seq_no, str)
        ]
        uuid_limit = (str(min(remaining)) if remaining
                      else str(uuid.UUID(int=min(max(uuids).int + 1, (1 << 128) - 1))))
    return Garbage(
        snapshots_to_drop=tuple(acc.snapshots_to_drop),
        snapshots_to_make=tuple(acc.snapshots_to_make),
        snapshot_for_root=root,
        fragments_to_drop_start=start,
        fragments_to_drop_limit=limit,
        fragments_to_drop_uuid_limit=uuid_limit,
        fragments_are_uuids=are_uuids,
        setsum_to_discard=discard,
        first_to_keep=first_to_keep,
        fragment_paths_to_drop=tuple(f.path for f in acc.fragments if isinstance(f.seq_no, str)),
    )


# ------------------------------------------------------------------------------- applying


def garbage_applied(manifest: Manifest, garbage: Garbage) -> bool:
    """True when the manifest no longer references anything the garbage drops."""
    return manifest.own_oldest_offset >= garbage.first_to_keep


def collected_bound(manifest: Manifest, garbage: Garbage, now_us: int | None = None) -> int:
    """The manifest's `collected_written_us` once `garbage` is applied: no fragment collected so
    far, these included, was written after it (docs/design/20-committing.md). A fragment of unknown
    age counts as written at 0, so the bound exists (a committer looks for such fragments
    whenever it does). A log collected before the field (`collected` non-empty, no bound) does
    not know when the fragments collected then were written: they were written before now, so
    `now_us` bounds them, up to the skew between GC's clock and their writers'."""
    uuids = [parse_fragment_uuid(path) for path in garbage.fragment_paths_to_drop]
    written = [(uuid7_timestamp_us(u) if u is not None else None) or 0 for u in uuids]
    bound = manifest.collected_written_us
    if bound is None and manifest.collected != Setsum():
        bound = now_us
    return max([bound or 0, *written])


def apply_garbage(
    manifest: Manifest, garbage: Garbage, writer: str = GC_WRITER, *, now_us: int | None = None
) -> Manifest | None:
    """The manifest without the garbage (phase 2), or None when it is already applied.

    The setsum is unchanged and `collected` grows by exactly `setsum_to_discard`; the manifest's
    `collected_written_us` is raised to the newest write time of the fragments dropped
    (`collected_bound`; `now_us` is GC's clock, used only for a log collected before the field).
    Raises GarbageStale when the manifest changed so that the garbage no longer applies exactly.
    """
    if garbage.is_empty():
        raise GarbageError("cannot apply empty garbage")
    if garbage_applied(manifest, garbage):
        return None
    removed = Setsum()
    snapshots = []
    for pointer in manifest.snapshots:
        if pointer in garbage.snapshots_to_drop:
            removed += pointer.setsum
        else:
            snapshots.append(pointer)
    fragments = []
    seq_nos = garbage.seq_nos
    for frag in manifest.fragments:
        if isinstance(frag.seq_no, int):
            drop = frag.seq_no in seq_nos
        else:
            drop = garbage.fragments_are_uuids and frag.limit <= garbage.first_to_keep
        if drop:
            removed += frag.setsum
        else:
            fragments.append(frag)
    root = garbage.snapshot_for_root
    if root is not None and root not in snapshots:
        snapshots.insert(0, root)
        removed -= root.setsum
    if removed != garbage.setsum_to_discard:
        raise GarbageStale(
            f"the garbage no longer applies: the manifest would discard {removed.hexdigest()}, "
            f"the garbage says {garbage.setsum_to_discard.hexdigest()}"
        )
    new = replace(
        manifest,
        writer=writer,
        snapshots=tuple(snapshots),
        fragments=tuple(fragments),
        collected=manifest.collected + garbage.setsum_to_discard,
        initial_offset=garbage.first_to_keep,
        initial_seq_no=(
            garbage.fragments_to_drop_limit if seq_nos else manifest.initial_seq_no
        ),
        collected_written_us=collected_bound(manifest, garbage, now_us),
    )
    try:
        new.scrub()
    except CorruptLog as exc:
        raise GarbageStale(f"the garbage no longer applies: {exc}") from None
    if new.own_oldest_offset != garbage.first_to_keep:
        raise GarbageStale(
            f"the garbage no longer applies: oldest offset would be {new.own_oldest_offset}, "
            f"not {garbage.first_to_keep}"
        )
    return new
