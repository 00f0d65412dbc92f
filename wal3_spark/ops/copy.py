"""Copying a log (or its suffix from an offset) to a new location, for migration.

The story from Chroma's wal3 design ("Sealing the Log"): seal the old log, copy it, point writers at
the copy. The copy keeps offsets, as Chroma's `copy` does: the fragments holding offsets at or after
`from_offset` are copied whole (so the copy may start a little before it) and the new manifest
starts there (`initial_offset`), with `collected` empty and the setsum the sum of what it holds.

Every source fragment's setsum is recomputed from its bytes before it is copied, and the copy
is verified (`wal3_spark.ops.verify`) before `copy_log` returns. Our UUID fragments are copied byte
for byte, so their setsums (and the copy's setsum, when it starts at the oldest offset of a log
never garbage-collected) equal the source's. Fragments of Chroma's S3 backend (absolute offsets,
sequence-number paths) are rewritten as UUID fragments with relative offsets, whose setsums
differ by construction; their records are checked one for one instead. The copy is a log
wal3-spark can append to, never sealed; the schema and the idempotent writers' `txns` go with it
(so exactly-once writers carry on), and so do cursors at or after the copy's start.

The copy keeps the source's `item_hash` (docs/format.md section 3): fragments copied byte for byte
keep their setsums only with the item hash they were written with, so a log created before
BLAKE3 items stays a SHA3-item log when copied (upgrading it would rewrite every fragment).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field

import numpy as np

from wal3_spark.errors import (
    AmbiguousWrite,
    CommitOutcomeUnknown,
    CopyError,
    CorruptLog,
    DataLost,
    ObjectNotFound,
    PreconditionFailed,
)
from wal3_spark.format.fragment import encode_table
from wal3_spark.format.incarnation import new_incarnation
from wal3_spark.format.layout import MANIFEST_KEY, FragmentRef, fragment_path
from wal3_spark.format.manifest import Manifest, SnapshotOptions
from wal3_spark.format.setsum import Setsum
from wal3_spark.format.uuid7 import new_uuid7
from wal3_spark.log.cas import Outcome
from wal3_spark.log.committer import manifest_object
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.fragment_io import ReadRange, check_fragment_data, fetch_fragment
from wal3_spark.log.parents import parent_store
from wal3_spark.log.reader import LogReader, iter_ranges
from wal3_spark.log.snapshots import roll_snapshots
from wal3_spark.ops.verify import verify
from wal3_spark.storage import StoreLike, resolve_store
from wal3_spark.storage.base import ObjectStore

COPY_WRITER = "wal3-spark copy"


@dataclass
class CopyReport:
    source: str
    destination: str
    start: int = 0
    limit: int = 0
    fragments: int = 0
    records: int = 0
    bytes: int = 0
    setsum: str = ""
    source_sealed: bool = False
    rewritten: int = 0
    cursors: dict[str, int] = field(default_factory=dict)
    verified: bool = False

    def to_dict(self) -> dict:
        return asdict(self)


def copy_fragment(
    src: ObjectStore, dst: ObjectStore, ref: FragmentRef, raw: bool, item_hash: str | None,
    rows: tuple[int, int] | None = None,
) -> FragmentRef:
    """Copy one fragment after the checks a verifying read makes (`fragment_io.load_fragment`: record
    count, where its stored offsets start, setsum under the log's `item_hash`), so a corrupt
    source fails the copy instead of being silently "repaired" by a rewrite. `rows`: only the
    offsets [start, limit) of it (a branch point inside a parent's fragment), rewritten as a new
    fragment with the same write time."""
    data = bytes(fetch_fragment(src, ref))  # bytes to write: `get_buffer` may lend reused memory
    try:
        decoded = check_fragment_data(data, ref, raw, records=True, item_hash=item_hash)
    except CorruptLog as exc:
        raise CopyError(
            f"refusing to copy {ref.path}: {exc} (run `wal3 verify {src.url}` for the full report)"
        ) from exc
    whole = rows is None or rows == (ref.start, ref.limit)
    if whole and isinstance(ref.seq_no, str) and not decoded.absolute:
        _put(dst, ref.path, data)
        return ref
    # A Chroma S3 fragment, or part of one: rewrite it with relative offsets at a UUID path.
    start, limit = (ref.start, ref.limit) if rows is None else rows
    timestamps = np.asarray(decoded.timestamp_us).reshape(-1)
    payload = decoded.payload.slice(start - ref.start, limit - start)
    encoded = encode_table(
        payload, None if raw else decoded.payload.schema, int(timestamps[0]), item_hash=item_hash,
    )
    fragment_uuid = new_uuid7(encoded.timestamp_us)
    path = fragment_path(fragment_uuid)
    _put(dst, path, encoded.data)
    return FragmentRef(path, str(fragment_uuid), start, limit, len(encoded.data), encoded.setsum,
                       blake3=encoded.blake3)


def _put(store: ObjectStore, key: str, data: bytes) -> None:
    try:
        store.put_if_absent(key, data)
    except (PreconditionFailed, AmbiguousWrite):
        try:
            existing = store.get(key).data
        except ObjectNotFound:
            raise CopyError(f"could not write {key} to {store.url}") from None
        if existing != data:
            raise CopyError(f"{store.url}/{key} exists with other bytes; copy to an empty location") from None


def copy_log(
    source: StoreLike,
    destination: StoreLike,
    *,
    options: Mapping[str, str] | None = None,
    destination_options: Mapping[str, str] | None = None,
    from_offset: int | None = None,
    copy_cursors: bool = True,
    parallelism: int = 8,
    snapshot_options: SnapshotOptions | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> CopyReport:
    """Copy the log at `source` (from the fragment holding `from_offset`) to `destination`,
    which must not hold a log yet; the copy is verified before this returns. Each is a URL or
    a store; `options` open the source's URL and, unless `destination_options` are given, the
    destination's."""
    if destination_options is None and not isinstance(destination, ObjectStore):
        destination_options = options
    source, destination = resolve_store(source, options), resolve_store(destination, destination_options)
    if destination.exists(MANIFEST_KEY):
        raise CopyError(
            f"{destination.url} already holds a log; copy to a new location (nothing was written)"
        )
    reader = LogReader(source)
    manifest = reader.manifest()
    report = CopyReport(source.url, destination.url, source_sealed=manifest.sealed)
    start = manifest.oldest_offset if from_offset is None else from_offset
    if start < manifest.oldest_offset:
        raise DataLost(source.url, start, manifest.oldest_offset)
    start = min(start, manifest.next_offset)
    # a branch's records below its branch point are its parent's: copied like its own, the
    # fragment the branch point cuts cut there (the copy is a standalone log)
    parts = list(iter_ranges(source, manifest, start, manifest.next_offset))
    refs = [part.ref for part in parts]
    raw = manifest.is_raw

    def copy_one(part: ReadRange) -> FragmentRef:
        if part.root is None:
            return copy_fragment(source, destination, part.ref, raw, manifest.item_hash)
        return copy_fragment(parent_store(source, part.root), destination, part.ref, raw,
                             manifest.item_hash, (part.start, part.limit))

    copied: list[FragmentRef] = []
    with ThreadPoolExecutor(max_workers=max(1, parallelism)) as pool:
        for done, ref in enumerate(pool.map(copy_one, parts), 1):
            copied.append(ref)
            if progress is not None:
                progress(done, len(refs))
    report.rewritten = sum(1 for a, b in zip(refs, copied, strict=True) if a.path != b.path)

    first = copied[0].start if copied else manifest.next_offset
    setsum = Setsum.sum(f.setsum for f in copied)
    new = Manifest(
        setsum=setsum,
        collected=Setsum(),
        acc_bytes=sum(f.num_bytes for f in copied),
        writer=COPY_WRITER,
        snapshots=(),
        fragments=tuple(copied),
        initial_offset=first,
        schema=manifest.schema,
        item_hash=manifest.item_hash,
        txns=dict(manifest.txns),
        # a copy is another log: consumers of the source must not take it for the source
        incarnation=new_incarnation(),
    )
    new = roll_snapshots(destination, new, snapshot_options or SnapshotOptions(), COPY_WRITER)
    # Created through the compare-and-swap primitive: create-if-absent, and a write whose
    # outcome is ambiguous (it may land late) is looked for until it is known to have landed
    # or can no longer land; never a blind put.
    created = manifest_object(destination).apply(lambda current: new if current is None else None)
    if created.outcome is Outcome.UNKNOWN:
        raise CommitOutcomeUnknown(
            f"{destination.url}: could not establish whether the copy's manifest was written (the "
            f"store kept failing until the deadline); run `wal3 verify {destination.url}`: a "
            "verified log there is the copy, else copy again into a new location"
        ) from created.cause
    if created.outcome is Outcome.NOTHING_TO_DO:
        raise CopyError(f"{destination.url}: another process created a log there meanwhile")

    if copy_cursors:
        src_cursors, dst_cursors = CursorStore(source), CursorStore(destination, writer=COPY_WRITER)
        for state in src_cursors.list():
            if state.cursor.offset >= first:
                dst_cursors.create(state.name, state.cursor.offset)
                report.cursors[state.name] = state.cursor.offset

    check = verify(destination)
    if not check.ok:
        raise CopyError(
            f"the copy at {destination.url} does not verify: "
            + "; ".join(str(p) for p in check.problems[:5])
        )
    if report.rewritten == 0 and Setsum.sum(r.setsum for r in refs) != setsum:
        raise CopyError("the copy's setsum differs from the source fragments' (internal error)")
    if check.records != manifest.next_offset - first:
        raise CopyError(f"the copy holds {check.records} records, expected {manifest.next_offset - first}")
    report.start, report.limit = first, new.next_offset
    report.fragments, report.records, report.bytes = len(copied), check.records, check.bytes
    report.setsum = setsum.hexdigest()
    report.verified = True
    return report
