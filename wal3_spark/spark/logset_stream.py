"""Streaming source over a log set: `spark.readStream.format("wal3").option("logs", "*")`.

Offsets are per log, `{"logs": {"a": 17, "b": 3}, "incarnations": {"a": "0192…", "b": …}}`: for
each log, the next offset to read and the incarnation of the log it belongs to. A micro-batch
reads, for every log, its offsets [start, end). What each decision rests on:

- **Finding what changed** costs O(logs written), not O(logs): each trigger asks
  `wal3_spark.logset.dirty.changes_since`, which reads the prefix's dirty log (or, at the first look,
  every `fullScanInterval`, and when there is no dirty log, every manifest in parallel), and
  only the logs that changed have their manifest read again. A log that disappears, or whose
  manifest cannot be read, keeps its offset, with a warning naming it; the others go on.
- **New logs** (in the set, not yet in the offset) join at their oldest offset
  (`newLogOffsets=latest`: at their tail when found), or at the offset `startingOffsets` names
  for them. A join is recorded in the offset *before* any of the log's records are read: the
  join position is then in the checkpoint, so a replayed batch reads exactly the same records
  (a position derived at planning time would move with garbage collection or appends).
- **Admission control** (`maxRecordsPerTrigger`, `maxBytesPerTrigger`, `maxFragmentsPerTrigger`)
  is shared fairly across logs (`fair_share`), so one hot log cannot starve the rest.
  `minRecordsPerTrigger` counts the records of all logs together.
- **Trigger.AvailableNow** stops at each log's tail as of `prepareForTriggerAvailableNow`; logs
  created afterwards wait for the next run.
- **Data loss is per log**: a log whose offset garbage collection passed fails the query naming
  the log (`failOnDataLoss=true`) or skips that log ahead with a warning naming it.
- **Sealed logs** are read to their end (a warning names each once it is).
- **A log deleted and created again** under a known name (another incarnation than the offset
  records: `wal3_spark.spark.recreated`) fails the query naming it (`onRecreatedLog=fail`), or
  joins again at its oldest offset (`restart`), like a new log: recorded in the offset in a
  micro-batch that reads nothing from it. Every log the last look says changed is checked (a
  re-created log may not have reached the old offset), and those a full scan found with another
  incarnation.
- **`cursor`** moves that cursor on every log whose offset a committed batch advanced.
- **Partitions** pack the fragment ranges of many logs together (`logset_reader`).

Design: docs/design/52-logset-stream-and-routing-sink.md.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import cast

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from wal3_spark.clock import SYSTEM, Clock
from wal3_spark.errors import CursorError, DataLost, LogNotFound, LogRecreated
from wal3_spark.format.incarnation import UNRECORDED, same_log
from wal3_spark.format.layout import FIRST_OFFSET
from wal3_spark.format.manifest import Manifest
from wal3_spark.format.retention import described, policy_note
from wal3_spark.log.cursor_lag import bytes_from
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.reader import LogReader, iter_ranges
from wal3_spark.log.snapshots import SnapshotCache
from wal3_spark.logset.dirty import DirtyPosition, changes_since
from wal3_spark.spark.fair_share import Chunk, Rotation, admit
from wal3_spark.spark.logset_reader import (
    LogSetPartition,
    log_values,
    partitions_for,
    read_log_ranges,
    read_manifests,
)
from wal3_spark.spark.options import Wal3Options
from wal3_spark.spark.planning import resolve
from wal3_spark.spark.query_lag import BYTES_BEHIND
from wal3_spark.spark.recreated import recorded_in_this_log, stale_batch
from wal3_spark.spark.schemas import spark_to_arrow
from wal3_spark.spark.stream_reader import TriggerDelay, default_read_limit, limits_for

logger = logging.getLogger(__name__)


#: a log the last look found changed, without learning its incarnation (a dirty-log record)
UNSEEN = object()


def encode(offsets: Mapping[str, int], incarnations: Mapping[str, object] | None = None) -> dict:
    """A log-set stream offset: logs in name order (Spark stores it as JSON per batch), and the
    incarnation of each log that has one recorded."""
    names = sorted(offsets)
    incarnations = incarnations or {}
    recorded = {name: incarnations[name] for name in names
                if incarnations.get(name, UNRECORDED) is not UNRECORDED}
    return {"logs": {name: offsets[name] for name in names},
            **({"incarnations": recorded} if recorded else {})}


def decode(offset: Mapping) -> dict[str, int]:
    return {str(name): int(value) for name, value in offset["logs"].items()}


def decode_incarnations(offset: Mapping) -> dict[str, object]:
    """Each log's recorded incarnation (`UNRECORDED` for offsets written before them)."""
    recorded = offset.get("incarnations", {})
    return {str(name): recorded.get(name, UNRECORDED) for name in offset["logs"]}


class LogSetStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: Wal3Options, schema: StructType,
                 clock: Clock = SYSTEM) -> None:
        self.options = options
        self.target = spark_to_arrow(schema)
        self.delay = TriggerDelay(options, clock)
        self.rotation = Rotation()
        self.starting_logs = dict(options.starting_logs)
        self.log_set = options.log_set()
        #: snapshots the driver loaded, of every log (keyed by each log's URL)
        self._snapshots = SnapshotCache()
        #: where this reader is in the prefix's dirty log (None: the next look is a full scan)
        self.position: DirtyPosition | None = None
        #: the highest tail known of each log (from the dirty log, full scans, manifests)
        self.tails: dict[str, int] = {}
        #: manifests read (driver); one older than its log's known tail is read again when needed
        self.manifests: dict[str, Manifest] = {}
        #: each log's tail as of prepareForTriggerAvailableNow (None: not an AvailableNow run)
        self.available_now: dict[str, int] | None = None
        #: offsets (and incarnations) the cursor was last moved to (None: not yet in this run)
        self.cursor_at: dict[str, tuple[int, object]] | None = None
        #: (log, what) already warned about, so a warning is given once per log and run
        self.warned: set[tuple[str, str]] = set()
        #: the logs the last look found changed, with the incarnation it saw (`UNSEEN`: none)
        self.changed: dict[str, object] = {}
        #: where the micro-batch the last latestOffset planned ends, per log
        self.ends: dict[str, int] = {}

    # -- driver: what changed -------------------------------------------------------------

    def _look(self, known: Iterable[str] = ()) -> None:
        """Learn which logs changed since the last look (`changes_since`: the dirty log, or
        every manifest at the first look, periodically, and without a dirty log). After a full
        scan, a log of `known` that is still selected but not there any more is warned about (a
        log the selection no longer holds stays in the offset, unread, without a warning)."""
        changes = changes_since(self.log_set, self.position,
                                full_scan_every_s=self.options.full_scan_interval_ms / 1000)
        self.position = changes.position
        self.changed = {name: changes.incarnations.get(name, UNSEEN) for name in changes.tails}
        for name, tail in changes.tails.items():
            self.tails[name] = max(tail, self.tails.get(name, 0))
        if changes.full_scan:
            for name in set(known) - changes.tails.keys() - changes.failed.keys():
                if self.log_set.selection.matches(name):
                    self._warn_missing(name)

    def _manifests(self, names: Iterable[str], *, again: bool = False) -> dict[str, Manifest]:
        """The manifests of `names` that exist: read again when `again` (garbage collection
        changes a manifest without changing its tail), else only where older than the known
        tail. Either way only logs that changed or have records to read cost a request."""
        names = list(names)
        stale = [n for n in names if again or n not in self.manifests
                 or self.manifests[n].next_offset < self.tails.get(n, 0)]
        found = read_manifests(self.log_set, stale, strict=False)
        for name in stale:
            if name in found:
                self.manifests[name] = found[name]
                self.tails[name] = max(found[name].next_offset, self.tails.get(name, 0))
            else:
                self.manifests.pop(name, None)
        return {n: self.manifests[n] for n in names if n in self.manifests}

    def _log_reader(self, name: str) -> LogReader:
        return LogReader(self.log_set.log_store(name), snapshots=self._snapshots)

    def _start(self, name: str, manifest: Manifest, otherwise: tuple[str, int]) -> int:
        """Where log `name` starts: the offset startingOffsets names for it, else `otherwise`
        (startingOffsets for the logs there at the start, newLogOffsets for logs found later)."""
        offset = self.starting_logs.get(name)
        position = otherwise if offset is None else ("offset", offset)
        return resolve(self._log_reader(name), manifest, position,
                       default=manifest.oldest_offset)

    def _starts(self, names: Iterable[str], otherwise: tuple[str, int]) -> dict[str, int]:
        """`_start` of each log (an empty one starts at its first offset without a request,
        unless its incarnation is not known yet)."""
        names = list(names)
        found = self._manifests(n for n in names if self.tails.get(n, FIRST_OFFSET) > FIRST_OFFSET
                                or self.changed.get(n, UNSEEN) is UNSEEN)
        return {n: self._start(n, found[n], otherwise) if n in found else FIRST_OFFSET
                for n in names}

    def _incarnation(self, name: str) -> object:
        """Log `name`'s incarnation as last seen (a manifest read, else a full scan)."""
        if name in self.manifests:
            return self.manifests[name].incarnation
        seen = self.changed.get(name, UNSEEN)
        return UNRECORDED if seen is UNSEEN else seen

    # -- driver: offsets ------------------------------------------------------------------

    def initialOffset(self) -> dict:
        self._look()
        starting = self.options.starting
        starts = self._starts(self.tails, ("earliest", 0) if starting[0] == "logs" else starting)
        return encode(starts, {n: self._incarnation(n) for n in starts})

    def prepareForTriggerAvailableNow(self) -> None:
        self.position = None  # a full scan: every log's tail as of now
        self._look()
        self.available_now = dict(self.tails)

    def getDefaultReadLimit(self) -> ReadLimit:
        return default_read_limit(self.options)

    def reportLatestOffset(self) -> dict:
        if self.position is None:
            self._look()
        latest = encode(self.tails, {n: self._incarnation(n) for n in self.tails})
        latest[BYTES_BEHIND] = self._bytes_behind()
        return latest

    def _bytes_behind(self) -> dict[str, int]:
        """Per log the batch just planned leaves records behind in, the bytes of the fragments
        still to read after it, from the manifests already read (a report only: progress shows
        it, spark/query_lag.py publishes it; a log whose manifest was not read is left out)."""
        found = {}
        for name, end in self.ends.items():
            manifest = self.manifests.get(name)
            if manifest is not None and manifest.next_offset > end:
                found[name] = bytes_from(self.log_set.log_store(name), manifest, end, self._snapshots)
        return found

    def _suspects(self, begins: Mapping[str, int], recorded: Mapping[str, object]) -> list[str]:
        """The logs of the offset the last look found changed that may have been created again
        (a dirty-log record does not say; a full scan does), whose manifest is read although
        they may have nothing to read: a new log under a known name may not have reached the
        offset of the old one."""
        return [n for n, seen in self.changed.items() if n in begins and (
            seen is UNSEEN or not same_log(recorded[n], seen, begins[n], self.tails.get(n, 0)))]

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        end = self._latest(start, limit)
        self.ends = decode(end)
        return end

    def _latest(self, start: dict, limit: ReadLimit) -> dict:
        begins = decode(start)
        recorded = decode_incarnations(start)
        self._look(begins)
        tails = {n: self.tails.get(n, b) for n, b in begins.items()}
        if self.available_now is not None:
            tails = {n: min(t, self.available_now.get(n, begins[n])) for n, t in tails.items()}
        pending = [n for n in begins if tails[n] > begins[n]]
        checked = pending + [n for n in self._suspects(begins, recorded) if n not in pending]
        manifests = self._manifests(checked, again=True)
        rejoins: dict[str, int] = {}
        for name in checked:
            if name not in manifests:
                if name in pending:
                    self._warn_missing(name)
                    tails[name] = begins[name]
                continue
            manifest = manifests[name]
            if not recorded_in_this_log(self.options, self.log_set.log_url(name), begins[name],
                                        recorded[name], manifest, self._log_reader(name).manifest):
                rejoins[name] = manifest.oldest_offset
                self.tails[name] = manifest.next_offset
                tails[name] = begins[name]
                continue
            recorded[name] = manifest.incarnation
            if name in pending:
                begins[name] = self._skip_lost(name, begins[name], manifest)
                tails[name] = min(tails[name], manifest.next_offset)
        joins = self._starts(self._newcomers(begins), (self.options.new_log_offsets, 0))
        available = sum(tails[n] - begins[n] for n in pending)
        if available and not rejoins and self.delay.hold_back(available,
                                                              self.available_now is not None):
            return start
        if isinstance(limit, ReadAllAvailable):
            ends = {n: max(begins[n], tails[n]) for n in begins}
        else:
            ends = admit(begins, tails, self._chunks, limits_for(self.options, limit),
                         self.rotation)
        self._note_sealed(ends)
        self.rotation.forget(ends)
        for name, offset in joins.items():
            logger.info("%s joins the stream at offset %d", self.log_set.log_url(name), offset)
        for name in joins:
            recorded[name] = self._incarnation(name)
        for name in rejoins:
            recorded[name] = manifests[name].incarnation
        return encode({**ends, **joins, **rejoins}, recorded)

    def _newcomers(self, begins: Mapping[str, int]) -> list[str]:
        """Logs found that the stream does not read yet (during AvailableNow, only those that
        existed when it started)."""
        return [n for n in self.tails if n not in begins
                and (self.available_now is None or n in self.available_now)]

    def _note_sealed(self, ends: Mapping[str, int]) -> None:
        for name, end in ends.items():
            manifest = self.manifests.get(name)
            if manifest is not None and manifest.sealed and end == manifest.next_offset:
                self._warn_once(name, "sealed", "%s is sealed and read to its end (offset %d)",
                                self.log_set.log_url(name), end)

    def _skip_lost(self, name: str, begin: int, manifest: Manifest) -> int:
        """`begin`, or the log's oldest offset when GC passed it and failOnDataLoss=false."""
        oldest = manifest.oldest_offset
        if begin >= oldest:
            return begin
        url = self.log_set.log_url(name)
        if self.options.fail_on_data_loss:
            raise DataLost(url, begin, oldest, retention=described(manifest.retention))
        logger.warning("%s: offsets [%d, %d) were garbage-collected%s; this log skips to %d (the other "
                    "logs of the stream are not affected)", url, begin, oldest, policy_note(manifest.retention),
                    oldest)
        return oldest

    def _warn_missing(self, name: str) -> None:
        self._warn_once(name, "missing", "%s has no manifest any more; the stream keeps its "
                        "offset and goes on with the other logs", self.log_set.log_url(name))

    def _warn_once(self, name: str, what: str, message: str, *args: object) -> None:
        if (name, what) not in self.warned:
            self.warned.add((name, what))
            logger.warning(message, *args)

    def _chunks(self, name: str, begin: int, end: int) -> Iterator[Chunk]:
        for part in iter_ranges(self.log_set.log_store(name), self.manifests[name], begin, end,
                                self._snapshots):
            yield Chunk(part.start, part.limit, part.ref.num_bytes)

    def partitions(self, start: dict, end: dict) -> list[LogSetPartition]:
        begins, ends = decode(start), decode(end)
        firsts, lasts = decode_incarnations(start), decode_incarnations(end)
        # a log joining again after it was created again reads nothing in this batch
        wanted = {n: (begins[n], e) for n, e in ends.items() if n in begins and e > begins[n]
                  and same_log(firsts[n], lasts[n], begins[n], e)}
        for name, (_, finish) in wanted.items():  # a restarted query replans an older batch
            self.tails[name] = max(finish, self.tails.get(name, 0))
        manifests = self._manifests(wanted)
        again = [n for n in wanted if n in manifests
                 and lasts[n] not in (UNRECORDED, manifests[n].incarnation)]
        for name in again:  # created again since latestOffset read it: look once more
            del manifests[name]
        manifests.update(self._manifests(again, again=True))
        planned = {}
        for name, (begin, finish) in wanted.items():
            if name not in manifests:
                raise LogNotFound(self.log_set.log_url(name))
            if stale_batch(self.options, self.log_set.log_url(name), finish, lasts[name],
                           manifests[name], self._log_reader(name).manifest):
                continue
            wanted_rows, values = log_values(self.options, manifests[name], self.log_set.log_url(name))
            if not wanted_rows:
                continue  # the log lacks the filter column: none of its rows is wanted
            ranges = self._log_reader(name).plan(
                begin, finish, manifest=manifests[name],
                fail_on_data_loss=self.options.fail_on_data_loss, values=values)
            if ranges:
                planned[name] = (manifests[name], ranges)
        return partitions_for(self.options, planned)

    def commit(self, end: dict) -> None:
        """Move the cursor on every log this run advanced (all logs at a run's first commit)."""
        name = self.options.cursor
        if name is None:
            return
        ends, incarnations = decode(end), decode_incarnations(end)
        moved = {n: (e, incarnations[n]) for n, e in ends.items()
                 if self.cursor_at is None or self.cursor_at.get(n) != (e, incarnations[n])}
        if moved:
            with ThreadPoolExecutor(min(self.log_set.max_workers, len(moved)),
                                    thread_name_prefix="wal3-cursor") as pool:
                list(pool.map(lambda item: self._advance(name, item[0], *item[1]), moved.items()))
        self.cursor_at = {n: (e, incarnations[n]) for n, e in ends.items()}

    def _advance(self, cursor: str, name: str, offset: int, incarnation: object) -> None:
        store = self.log_set.log_store(name)
        try:
            CursorStore(store, writer="wal3-spark stream").advance(cursor, offset,
                                                                   incarnation=incarnation)
        except LogNotFound:
            self._warn_once(name, "missing", "%s has no manifest any more; cursor %s not moved",
                            store.url, cursor)
        except LogRecreated as exc:  # the next trigger decides what to do about the new log
            logger.warning("cursor %s not moved: %s", cursor, exc)
        except CursorError:
            # a batch that ended below what garbage collection (a retention policy) has removed
            # from this log since: the query skips ahead (failOnDataLoss=false), and its next
            # batch moves the cursor; the other logs' cursors move now
            manifest = self._log_reader(name).manifest()
            if offset >= manifest.oldest_offset:
                raise
            logger.warning("%s: cursor %s not moved to %d: the records below %d were garbage-collected%s; "
                           "the next batch moves it", store.url, cursor, offset, manifest.oldest_offset,
                           policy_note(manifest.retention))

    # -- executors ------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        partition = cast(LogSetPartition, partition)  # Spark hands back what partitions() made
        yield from read_log_ranges(self.options, partition, self.target)

    def stop(self) -> None:
        self.log_set.store.close()

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["manifests"] = {}
        return state
