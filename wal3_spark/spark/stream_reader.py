"""Streaming source: `spark.readStream.format("wal3").load(url)`.

Offsets are `{"offset": N, "incarnation": I}`: the next log offset to read, and the incarnation of
the log it belongs to (`wal3_spark.spark.recreated`), so a micro-batch (start, end] in Spark's
terms reads log offsets [start, end). A log deleted and created again since fails the query
(`onRecreatedLog=fail`) or is joined again at its oldest offset in a micro-batch of its own,
which reads nothing (`restart`), so that a replay after a restart reads exactly the same. A log
offset is one record, so Spark's exactly-once offsets can never split a record. `latestOffset`
applies admission control (maxRecordsPerTrigger / maxBytesPerTrigger / maxFragmentsPerTrigger, which
Spark sees as ReadMaxRows / ReadMaxBytes / ReadMaxFiles) and, under Trigger.AvailableNow, never
passes the tail recorded by `prepareForTriggerAvailableNow`. With minRecordsPerTrigger (Kafka's
minOffsetsPerTrigger), `latestOffset` holds a micro-batch back until that many new records are
in the log or maxTriggerDelay has passed since the last batch; Spark's ReadMinRows carries no
delay, so the reader keeps that clock itself. `partitions` bin-packs the batch's fragment ranges;
`read` only fetches, verifies and decodes. `commit(end)` moves the optional cursor.

One manifest GET per trigger: `latestOffset` keeps the manifest it read, and the same trigger's
`reportLatestOffset` and `partitions` reuse it (fragments are immutable, so a manifest that
covers a batch's offsets plans it exactly as a newer one would; a fragment collected since is
found missing at read time and reported as DataLost from a fresh manifest).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator, Sequence
from typing import cast

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxFiles,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from wal3_spark.clock import SYSTEM, Clock
from wal3_spark.errors import CursorError, DataLost, LogRecreated
from wal3_spark.format.incarnation import UNRECORDED, same_log
from wal3_spark.format.layout import KnownRefs
from wal3_spark.format.manifest import Manifest
from wal3_spark.format.retention import described, policy_note
from wal3_spark.log.cursor_lag import bytes_from
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.fragment_io import ReadRange
from wal3_spark.log.reader import LogReader, iter_ranges
from wal3_spark.log.snapshots import SnapshotCache
from wal3_spark.spark.fair_share import Limits
from wal3_spark.spark.options import Wal3Options
from wal3_spark.spark.planning import Wal3Partition, partitions_of, resolve, value_filters
from wal3_spark.spark.query_lag import BYTES_BEHIND
from wal3_spark.spark.read_tasks import read_partition
from wal3_spark.spark.recreated import INCARNATION, recorded, recorded_in_this_log, stale_batch
from wal3_spark.spark.schemas import spark_to_arrow
from wal3_spark.storage.base import ObjectStore

logger = logging.getLogger(__name__)


def admit(ranges: Iterable[ReadRange], start: int, tail: int, *, max_records: int | None = None,
          max_bytes: int | None = None, max_fragments: int | None = None) -> int:
    """The end offset of a micro-batch starting at `start` under the given limits.

    Always admits at least one record when any is available, so a stream never stalls on a
    fragment larger than maxBytesPerTrigger.
    """
    end = tail if max_records is None else min(tail, start + max_records)
    if max_bytes is None and max_fragments is None:
        return end
    used_bytes = 0
    for count, r in enumerate(ranges, start=1):
        if r.start >= end:
            break
        over_files = max_fragments is not None and count > max_fragments
        over_bytes = max_bytes is not None and used_bytes + r.ref.num_bytes > max_bytes
        if (over_files or over_bytes) and count > 1:
            return min(end, r.start)
        used_bytes += r.ref.num_bytes
    return end


def limits_for(options: Wal3Options, limit: ReadLimit) -> Limits:
    """The options' limits, tightened by the one Spark passes (ReadMaxRows/Bytes/Files)."""

    def tighter(mine: int | None, theirs: int) -> int:
        return theirs if mine is None else min(mine, theirs)

    records, size, files = options.max_records, options.max_bytes, options.max_fragments
    if isinstance(limit, ReadMaxRows):
        records = tighter(records, limit.max_rows)
    elif isinstance(limit, ReadMaxBytes):
        size = tighter(size, limit.max_bytes)
    elif isinstance(limit, ReadMaxFiles):
        files = tighter(files, limit.max_files)
    return Limits(records, size, files)


def default_read_limit(o: Wal3Options) -> ReadLimit:
    """The read limit Spark passes to latestOffset: the first limit option set."""
    if o.max_records is not None:
        return ReadMaxRows(o.max_records)
    if o.max_bytes is not None:
        return ReadMaxBytes(o.max_bytes)
    if o.max_fragments is not None:
        return ReadMaxFiles(o.max_fragments)
    if o.min_records is not None:
        return ReadMinRows(o.min_records)
    return ReadAllAvailable()


class TriggerDelay:
    """minRecordsPerTrigger's clock: Spark's ReadMinRows carries no delay, so the reader keeps
    the time of the last micro-batch it let through."""

    def __init__(self, options: Wal3Options, clock: Clock) -> None:
        self.min_records = options.min_records
        self.max_delay_ms = options.max_trigger_delay_ms
        self.clock = clock
        #: when a micro-batch was last let through (None: not yet, so the first batch of a run
        #: is not delayed, as in Kafka)
        self.last_trigger: float | None = None

    def hold_back(self, available: int, available_now: bool) -> bool:
        """Whether to wait for more records before the next micro-batch.

        Never under Trigger.AvailableNow, which reads everything there is; otherwise a batch
        waits while it would have fewer than the minimum and maxTriggerDelay has not passed
        since the last batch.
        """
        if self.min_records is None or available_now:
            return False
        now = self.clock.monotonic()
        waited_ms = None if self.last_trigger is None else (now - self.last_trigger) * 1000
        if available < self.min_records and waited_ms is not None and waited_ms < self.max_delay_ms:
            return True
        self.last_trigger = now
        return False


def at(offset: int, manifest: Manifest) -> dict:
    """A stream offset: `offset` in the log `manifest` heads."""
    return {"offset": offset, INCARNATION: manifest.incarnation}


def unchanged_or(start: dict, offset: int, manifest: Manifest) -> dict:
    """`start` itself when the stream stays at its offset (an offset from before incarnations
    gets one with its next batch, not with an empty one), else `at(offset, manifest)`."""
    return start if offset == int(start["offset"]) else at(offset, manifest)


class Wal3StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: Wal3Options, schema: StructType,
                 clock: Clock = SYSTEM) -> None:
        self.options = options
        self.target = spark_to_arrow(schema)
        self.available_now_limit: int | None = None
        #: the incarnation the AvailableNow limit is a tail of
        self.available_now_incarnation: str | None = None
        self.delay = TriggerDelay(options, clock)
        self._store: ObjectStore | None = None
        #: what the driver loaded and parsed in earlier micro-batches (each re-reads the manifest)
        self._snapshots = SnapshotCache()
        self._known_refs = KnownRefs()
        #: the manifest the last latestOffset read (see the module docstring)
        self._manifest: Manifest | None = None
        #: where the micro-batch the last latestOffset planned ends
        self._end: int | None = None

    @property
    def store(self) -> ObjectStore:
        if self._store is None:
            self._store = self.options.open_store()
        return self._store

    def _reader(self) -> LogReader:
        return LogReader(self.store, snapshots=self._snapshots, known_refs=self._known_refs)

    # -- driver ---------------------------------------------------------------------------

    def initialOffset(self) -> dict:
        reader = self._reader()
        manifest = reader.manifest()
        start = resolve(reader, manifest, self.options.starting, default=manifest.oldest_offset)
        return at(start, manifest)

    def prepareForTriggerAvailableNow(self) -> None:
        manifest = self._reader().manifest()
        self.available_now_limit = manifest.next_offset
        self.available_now_incarnation = manifest.incarnation

    def getDefaultReadLimit(self) -> ReadLimit:
        return default_read_limit(self.options)

    def reportLatestOffset(self) -> dict:
        # Spark calls this right after latestOffset, in the same trigger. The bytes behind are
        # a report only (progress shows it; nothing reads it back): spark/query_lag.py publishes them
        manifest = self._manifest or self._reader().manifest()
        latest = at(manifest.next_offset, manifest)
        if self._end is not None:
            latest[BYTES_BEHIND] = bytes_from(self.store, manifest, self._end, self._snapshots)
        return latest

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        end = self._latest(start, limit)
        self._end = int(end["offset"])
        return end

    def _latest(self, start: dict, limit: ReadLimit) -> dict:
        reader = self._reader()
        manifest = self._manifest = reader.manifest()
        begin = int(start["offset"])
        if not recorded_in_this_log(self.options, self.options.url, begin, recorded(start), manifest,
                                    reader.manifest):
            # joins the new log at its oldest offset in a micro-batch that reads nothing
            return at(manifest.oldest_offset, manifest)
        tail = manifest.next_offset
        if self.available_now_limit is not None:
            same = self.available_now_incarnation == manifest.incarnation
            tail = min(tail, self.available_now_limit) if same else begin
        oldest = manifest.oldest_offset
        if begin < oldest:
            reader.confirm_oldest(manifest)
            if self.options.fail_on_data_loss:
                raise DataLost(self.options.url, begin, oldest, retention=described(manifest.retention))
            logger.warning("%s: offsets [%d, %d) were garbage-collected%s; skipping to %d",
                        self.options.url, begin, oldest, policy_note(manifest.retention), oldest)
            begin = oldest
        if begin >= tail:
            return unchanged_or(start, max(int(start["offset"]), min(begin, tail)), manifest)
        if isinstance(limit, ReadAllAvailable):
            return at(tail, manifest)
        if self.delay.hold_back(tail - begin, self.available_now_limit is not None):
            return start
        limits = limits_for(self.options, limit)
        max_records, max_bytes, max_fragments = (
            limits.max_records, limits.max_bytes, limits.max_fragments)
        if max_bytes is None and max_fragments is None:
            return at(tail if max_records is None else min(tail, begin + max_records), manifest)
        ranges = iter_ranges(self.store, manifest, begin, tail, self._snapshots)
        end = admit(ranges, begin, tail, max_records=max_records, max_bytes=max_bytes,
                    max_fragments=max_fragments)
        return at(end, manifest)

    def partitions(self, start: dict, end: dict) -> Sequence[Wal3Partition]:
        begin, finish = int(start["offset"]), int(end["offset"])
        incarnation = recorded(end)
        # a micro-batch that joins a re-created log reads nothing (its end is the new log's
        # oldest offset, its start an offset of the earlier log)
        if begin >= finish or not same_log(recorded(start), incarnation, begin, finish):
            return []
        reader = self._reader()
        manifest = self._manifest
        if (manifest is None or not manifest.oldest_offset <= begin < finish <= manifest.next_offset
                or incarnation not in (UNRECORDED, manifest.incarnation)):
            manifest = reader.manifest()  # a batch planned before a restart, or GC moved on
        if stale_batch(self.options, self.options.url, finish, incarnation, manifest, reader.manifest):
            return []
        o = self.options
        values, _ = value_filters(manifest, (o.filter_column, o.filter_values), url=o.url)
        ranges = reader.plan(begin, finish, manifest=manifest,
                             fail_on_data_loss=o.fail_on_data_loss, values=values)
        return partitions_of(manifest, ranges, o.max_partition_bytes, o.min_partitions, values)

    def commit(self, end: dict) -> None:
        if self.options.cursor is None:
            return
        offset = int(end["offset"])
        try:
            CursorStore(self.store, writer="wal3-spark stream").advance(
                self.options.cursor, offset, incarnation=recorded(end))
        except LogRecreated as exc:  # the next trigger decides what to do about the new log
            logger.warning("cursor %s not moved: %s", self.options.cursor, exc)
        except CursorError:
            # a batch that ended below what garbage collection (a retention policy) has removed
            # since: the query skips ahead (failOnDataLoss=false), and its next batch moves the cursor
            manifest = self._reader().manifest()
            if offset >= manifest.oldest_offset:
                raise
            logger.warning("cursor %s not moved to %d: the records below %d were garbage-collected%s; "
                           "the next batch moves it", self.options.cursor, offset, manifest.oldest_offset,
                           policy_note(manifest.retention))

    def stop(self) -> None:
        if self._store is not None:
            with contextlib.suppress(Exception):
                self._store.close()
            self._store = None

    # -- executors ------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        partition = cast(Wal3Partition, partition)  # Spark hands back what partitions() made
        yield from read_partition(
            self.options.open_store(), partition.part, partition.payload, self.target,
            verify=self.options.verify_on_read, records=self.options.verify_records,
            item_hash=partition.item_hash,
            fail_on_data_loss=self.options.fail_on_data_loss, values=partition.values,
        )

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_store"] = None
        state["_manifest"] = None
        return state
