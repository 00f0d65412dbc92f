"""Reading a log (docs/format.md section 7): the tail in one GET, plans that load only the snapshots
covering the range asked for, and records as Arrow batches with `_offset` and `_timestamp`.

Snapshots are immutable and content-addressed, so a reader caches them (`SnapshotCache`, owned by
its `LogReader` or given to share, as Chroma's wal3 injects its snapshot cache); only the
manifest is ever re-read, its fragment pointers reused from the reader's `KnownRefs`.

A reader may lose a race with garbage collection: it read a manifest, GC then dropped (and,
after its grace interval, deleted) the oldest fragments and snapshots, and the reader finds
an object its manifest references missing. Each such miss re-reads the manifest: when the log's
oldest offset has moved past the object, the reader gets `DataLost` with the range GC removed,
as it would have with the newer manifest; only an object the current log still needs is a
`CorruptLog`. Walks through snapshots carry on in the current manifest when GC rebuilt the
snapshot that straddled its cutoff (the offsets asked for are all still there).

Fetching, checking and decoding fragments is `wal3_spark.log.fragment_io`'s: the driver side of a
read (the manifest, plans, offsets) never decodes.

Design: docs/design/16-stream-filters.md, docs/design/23-readers-and-garbage-collection.md,
docs/design/24-reading-without-spark.md.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import pyarrow as pa

from wal3_spark.errors import (
    BranchError,
    DataLost,
    FilterError,
    InvalidOption,
    LogNotFound,
)
from wal3_spark.format.layout import (
    FIRST_OFFSET,
    FragmentRef,
    KnownRefs,
)
from wal3_spark.format.manifest import Manifest, Snapshot
from wal3_spark.format.retention import described, policy_note
from wal3_spark.format.stream_filter import ValueFilter
from wal3_spark.log.fragment_io import (
    ReadRange,
    fragment_timestamp_us,
    load_fragment,
    output_schema,
    read_range,
)
from wal3_spark.log.manifest_reader import read_manifest
from wal3_spark.log.parents import parent_store
from wal3_spark.log.scan import LogScan, timestamp_us
from wal3_spark.log.snapshots import SnapshotCache, load_snapshot
from wal3_spark.storage import StoreLike, resolve_store
from wal3_spark.storage.base import ObjectStore

logger = logging.getLogger(__name__)


def _fragments_within(
    store: ObjectStore, node: Manifest | Snapshot, start: int, limit: int | None,
    cache: SnapshotCache | None,
) -> Iterator[FragmentRef]:
    """A manifest or snapshot's fragments overlapping [start, limit), loading only the
    snapshots that overlap too (both node kinds hold `snapshots` then `fragments`)."""
    for pointer in node.snapshots:
        if _overlaps(pointer.start, pointer.limit, start, limit):
            snapshot = load_snapshot(store, pointer, cache)
            yield from _fragments_within(store, snapshot, start, limit, cache)
    for frag in node.fragments:
        if _overlaps(frag.start, frag.limit, start, limit):
            yield frag


def _overlaps(a_start: int, a_limit: int, start: int, limit: int | None) -> bool:
    return a_limit > start and (limit is None or a_start < limit)


def iter_fragments(
    store: ObjectStore, manifest: Manifest, start: int = 0, limit: int | None = None,
    cache: SnapshotCache | None = None,
) -> Iterator[FragmentRef]:
    """Fragments overlapping [start, limit), in offset order, loading only the snapshots needed
    (through `cache` when given: a caller walking the same log again passes its reader's).

    A snapshot GC removed after `manifest` was read sends the walk on in the current manifest
    (up to the same limit: the caller's view of the tail), or raises DataLost when offsets
    still to be yielded were collected.
    """
    limit = manifest.next_offset if limit is None else limit
    position = max(start, manifest.own_oldest_offset)
    while True:
        try:
            for ref in _fragments_within(store, manifest, position, limit, cache):
                position = max(position, ref.limit)
                yield ref
            return
        except DataLost as lost:
            if position < lost.oldest:
                raise DataLost(store.url, position, lost.oldest, retention=lost.retention) from None
            logger.info("%s: a snapshot was garbage-collected during the walk; continuing from %d "
                     "in the current manifest", store.url, position)
            manifest = LogReader(store).manifest()


def iter_ranges(
    store: ObjectStore, manifest: Manifest, start: int, limit: int,
    cache: SnapshotCache | None = None, *, root: str | None = None,
) -> Iterator[ReadRange]:
    """The fragment ranges holding [start, limit), in offset order: a branch's records below
    its branch point come from its parent's fragments (`ReadRange.root` names the parent), read
    through the parent's current manifest, and from the grandparent's below its own, and so on.
    `root` is what this log's own ranges carry (None for the log read)."""
    parent = manifest.parent if manifest.reads_parent else None
    if parent is not None and start < min(limit, parent.offset):
        up = parent_store(store, parent.log)
        upper = parent_manifest(store, manifest)
        if start < upper.oldest_offset:  # its pin was removed by hand or forced away
            lost = min(upper.oldest_offset, parent.offset)
            raise DataLost(store.url, start, lost, fix=(
                f"They were its parent {up.url}'s (it is a branch of it at {parent.offset}), whose "
                f"garbage collection removed them: the branch's pin there is gone. Read the "
                f"branch from {lost} on; a checkpoint of a branch keeps them"))
        yield from iter_ranges(up, upper, start, min(limit, parent.offset), cache, root=up.url)
    start = max(start, parent.offset) if parent is not None else start
    if start >= limit:
        return
    for ref in iter_fragments(store, manifest, start, limit, cache=cache):
        yield ReadRange(ref, max(ref.start, start), min(ref.limit, limit), root)


def parent_manifest(store: ObjectStore, manifest: Manifest) -> Manifest:
    """The current manifest of `manifest`'s parent (a branch's), checked to be the log the
    branch was taken from: BranchError when it is gone or was created again since."""
    parent = manifest.parent
    assert parent is not None
    up = parent_store(store, parent.log)
    try:
        upper = read_manifest(up)
    except LogNotFound:
        raise BranchError(
            f"{store.url} is a branch of {parent.log} at offset {parent.offset}, and that log is "
            f"gone: its records below {parent.offset} cannot be read. Restore the parent, or read "
            f"the branch from {parent.offset} on (a checkpoint of the branch would have kept them)"
        ) from None
    if upper.incarnation != parent.incarnation:
        raise BranchError(
            f"{store.url} is a branch of {parent.log}, which was deleted and created again since "
            f"the branch was taken (incarnation then {parent.incarnation}, now {upper.incarnation}): "
            f"its records below {parent.offset} are gone. Read the branch from {parent.offset} on"
        )
    return upper


class LogReader:
    """Reads one log. Cheap to create, and picklable (its caches travel empty).

    It owns the snapshots it loaded (`snapshots`) and the fragment pointers it parsed
    (`known_refs`) unless given them: a caller that creates readers of one log again and again
    passes the same ones, so nothing already loaded is loaded twice.
    """

    def __init__(
        self, log: StoreLike, *, options: Mapping[str, str] | None = None,
        snapshots: SnapshotCache | None = None, known_refs: KnownRefs | None = None,
    ) -> None:
        self.store = resolve_store(log, options)
        self.snapshots = snapshots if snapshots is not None else SnapshotCache()
        self.known_refs = known_refs if known_refs is not None else KnownRefs()


    @property
    def url(self) -> str:
        return self.store.url

    def manifest(self) -> Manifest:
        return read_manifest(self.store, self.known_refs)

    def bounds(self, manifest: Manifest | None = None) -> tuple[int, int]:
        """(oldest readable offset, next offset to be written), from one manifest GET."""
        manifest = manifest or self.manifest()
        return manifest.oldest_offset, manifest.next_offset

    def plan(
        self,
        start: int | None = None,
        limit: int | None = None,
        *,
        manifest: Manifest | None = None,
        fail_on_data_loss: bool = True,
        values: ValueFilter | None = None,
    ) -> list[ReadRange]:
        """The fragment ranges holding offsets [start, limit), in order; with `values`, less
        the fragments whose stream filter says they hold none of its values.

        Asking for offsets garbage collection removed raises DataLost, or with
        `fail_on_data_loss=False` starts at the oldest offset with a warning.
        """
        manifest = manifest or self.manifest()
        start, limit = self._resolve(manifest, start, limit, fail_on_data_loss)
        return list(self._ranges(manifest, start, limit, values))

    def value_filter(self, manifest: Manifest, filter_column: str | None,
                     filter_values: Iterable[Any] | None) -> ValueFilter | None:
        """The `ValueFilter` of a read's `filter_column` and `filter_values` (both or neither)
        against the log's schema: FilterError for a column it lacks or cannot filter."""
        if filter_column is None and filter_values is None:
            return None
        if filter_column is None or filter_values is None:
            raise FilterError("give filter_column and filter_values together (the column the "
                              "values are of, and the values to read)")
        if isinstance(filter_values, (str, bytes)) or not isinstance(filter_values, Iterable):
            filter_values = [filter_values]  # one value (an int of an integer column too)
        return ValueFilter.of(manifest.arrow_schema(), filter_column, filter_values, self.url)

    def _resolve(
        self, manifest: Manifest, start: int | None, limit: int | None, fail_on_data_loss: bool
    ) -> tuple[int, int]:
        """[start, limit) within the log: the oldest offset and the tail by default, the limit
        cut at the tail, and a start below the oldest offset refused (or skipped ahead). An empty
        range below the oldest offset (a tag of no records) lost nothing: it reads nothing."""
        oldest, tail = manifest.oldest_offset, manifest.next_offset
        start = oldest if start is None else start
        limit = tail if limit is None else min(limit, tail)
        if start < oldest and limit <= start:
            return oldest, oldest
        if start < oldest:
            self.confirm_oldest(manifest)
            if fail_on_data_loss:
                raise DataLost(self.url, start, oldest, retention=described(manifest.retention))
            logger.warning("%s: offsets [%d, %d) were garbage-collected%s; skipping", self.url, start, oldest,
                           policy_note(manifest.retention))
            start = oldest
        return start, limit

    def confirm_oldest(self, manifest: Manifest) -> None:
        """Check the pointer the oldest offset comes from before records below it are reported
        collected (or skipped): the manifest's checks cannot tell a first pointer whose start
        was damaged upwards from one garbage collection moved, so the first snapshot is loaded
        and checked against its pointer, or the first fragment's record count against its
        range. Only on that path, which is rare: one GET (a cached snapshot: none). A branch's
        oldest offset is its parent start, recorded when it was branched."""
        if manifest.reads_parent:
            return
        if manifest.snapshots:
            load_snapshot(self.store, manifest.snapshots[0], self.snapshots)
        elif manifest.fragments:
            load_fragment(self.store, manifest.fragments[0], manifest.is_raw, verify=False,
                          item_hash=manifest.item_hash)

    def _ranges(self, manifest: Manifest, start: int, limit: int,
                values: ValueFilter | None = None) -> Iterator[ReadRange]:
        """The fragment ranges of [start, limit), loading snapshots only as the walk needs them,
        without the fragments `values` skips (no GET for them)."""
        if start >= limit:
            return
        for part in iter_ranges(self.store, manifest, start, limit, self.snapshots):
            if not part.ref.skipped_by(values):
                yield part

    def read(
        self,
        start: int | None = None,
        limit: int | None = None,
        *,
        manifest: Manifest | None = None,
        verify: bool = True,
        fail_on_data_loss: bool = True,
        filter_column: str | None = None,
        filter_values: Iterable[Any] | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """Records in [start, limit) in offset order, each exactly once, in the schema of
        `manifest` (read now if not given).

        With `filter_column` and `filter_values`: only the records whose column holds one of
        the values, exactly; fragments whose stream filter rules them out are not fetched
        (docs/design/16-stream-filters.md). `_offset` stays each record's offset in the log."""
        manifest = manifest or self.manifest()
        payload = manifest.arrow_schema()
        values = self.value_filter(manifest, filter_column, filter_values)
        for part in self.plan(start, limit, manifest=manifest, fail_on_data_loss=fail_on_data_loss,
                              values=values):
            yield read_range(self.store, part, payload, verify=verify, item_hash=manifest.item_hash,
                             fail_on_data_loss=fail_on_data_loss, values=values)

    def read_table(
        self,
        start: int | None = None,
        limit: int | None = None,
        *,
        verify: bool = True,
        fail_on_data_loss: bool = True,
        filter_column: str | None = None,
        filter_values: Iterable[Any] | None = None,
    ) -> pa.Table:
        """`read` as one table; one manifest read fixes both its schema and its fragments."""
        manifest = self.manifest()
        batches = self.read(
            start, limit, manifest=manifest, verify=verify, fail_on_data_loss=fail_on_data_loss,
            filter_column=filter_column, filter_values=filter_values,
        )
        return pa.Table.from_batches(list(batches), schema=output_schema(manifest.arrow_schema()))

    def scan(
        self,
        start: int | None = None,
        limit: int | None = None,
        *,
        start_time: dt.datetime | None = None,
        end_time: dt.datetime | None = None,
        max_records: int | None = None,
        manifest: Manifest | None = None,
        verify: bool = True,
        fail_on_data_loss: bool = True,
        filter_column: str | None = None,
        filter_values: Iterable[Any] | None = None,
    ) -> LogScan:
        """Offsets [start, limit) (by default the whole log) as a `LogScan`, whose `reader` is a
        `pyarrow.RecordBatchReader` that fetches, verifies and decodes one fragment at a time.

        `start_time`/`end_time` (datetimes; naive means UTC) replace `start`/`limit` with the
        first offset written at or after them (by fragment write time, as Spark's
        `startingTimestamp`); `max_records` caps the range. The range is fixed now, against one
        manifest read (or `manifest`, when the caller has one). A start below the oldest offset
        raises DataLost (or, with `fail_on_data_loss=False`, skips ahead with a warning); with
        `verify` (the default) a fragment whose recomputed setsum differs from the manifest's fails
        the read.
        """
        manifest = manifest or self.manifest()
        start = self._offset_or_time(manifest, "start", start, start_time)
        limit = self._offset_or_time(manifest, "limit", limit, end_time)
        tail = manifest.next_offset
        if start is not None and start > tail:
            raise InvalidOption(
                f"start {start} is past the tail of {self.url}: it holds offsets "
                f"[{manifest.oldest_offset}, {tail}); give a start within [{manifest.oldest_offset}, {tail}]"
            )
        if start is not None and limit is not None and limit < start:
            raise InvalidOption(f"limit {limit} is below start {start}: give limit >= start")
        start, limit = self._resolve(manifest, start, limit, fail_on_data_loss)
        if max_records is not None:
            limit = min(limit, start + _checked(max_records, "max_records", 0))
        payload = manifest.arrow_schema()
        values = self.value_filter(manifest, filter_column, filter_values)
        batches = (
            read_range(self.store, part, payload, verify=verify, item_hash=manifest.item_hash,
                       values=values)
            for part in self._ranges(manifest, start, limit, values)
        )
        return LogScan(self.url, output_schema(payload), start, max(start, limit), batches)

    def _offset_or_time(
        self, manifest: Manifest, name: str, offset: int | None, when: dt.datetime | None
    ) -> int | None:
        """One end of a scan, given as an offset or a time (not both)."""
        if when is None:
            return None if offset is None else _checked(offset, name, FIRST_OFFSET)
        if offset is not None:
            time_name = "start_time" if name == "start" else "end_time"
            raise InvalidOption(f"give {name} or {time_name}, not both")
        return self.offset_for_timestamp(timestamp_us(when), manifest)

    def offset_for_timestamp(self, timestamp_us: int, manifest: Manifest | None = None) -> int:
        """The first offset whose record was written at or after `timestamp_us` (the tail if
        none was), as Kafka's `startingTimestamp` does."""
        manifest = manifest or self.manifest()
        for part in iter_ranges(self.store, manifest, manifest.oldest_offset, manifest.next_offset,
                                self.snapshots):
            if part.ref.segments is not None:  # a compacted fragment: cut where its segment starts
                first = part.ref.start
                for segment in part.ref.segments:
                    if segment.timestamp_us >= timestamp_us and first + segment.records > part.start:
                        return max(first, part.start)
                    first += segment.records
                continue
            store = self.store if part.root is None else parent_store(self.store, part.root)
            if fragment_timestamp_us(store, part.ref) >= timestamp_us:
                return part.start
        return manifest.next_offset


def _checked(value: int, name: str, low: int) -> int:
    """`value` if it is an integer >= `low`, else InvalidOption naming `name`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise InvalidOption(f"{name}={value!r}: give an integer >= {low}")
    return value

