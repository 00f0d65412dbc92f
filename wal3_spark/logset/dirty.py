"""The dirty log of a log set: which logs changed, in O(logs written) instead of O(logs).

As in Chroma's wal3 design ("Multiple wal3 Instances"), appenders that opt in record, once per
commit, which log they appended to in a *dirty log*, itself a wal3 log under the prefix; readers of
the log set then read the dirty log instead of every manifest. docs/design/40-log-sets-and-the-dirty-log.md has the
reasoning; the contract:

- **Where**: `<prefix>/_dirty`, a structured wal3 log (`DIRTY_SCHEMA`): `log` (the log's name),
  `tail` (its next offset after the commit), `rollup` (null, except in roll-up records: see
  below). Names starting with `_` are reserved (`wal3_spark.logset.logs`), so no log set lists it.
- **Writing** (`DirtyLog`): a record is appended *after* the data commit it describes, with the
  tail that commit produced, in the background. The records of one process share dirty-log
  appends (a `LogWriter` with a 100 ms batch interval; whatever arrives while one append is in
  flight goes into the next). Failing to write a record never fails the append it describes: the data is
  committed, and reporting a failure would invite a retry that duplicates it. It is logged.
- **Losing a record never loses data**, because readers never trust the dirty log alone
  (`changes_since`): they start with a full scan (every manifest, in parallel, after reading
  the dirty log's tail) and scan again every `full_scan_every_s`; a change whose record was
  lost (a crash between the commit and the record, a failed record, a writer that did not opt
  in) is seen at the latest by that next full scan, or as soon as the log is appended to again.
- **Roll-up** (`roll_up`, run by garbage collection of the prefix): the records below an offset
  C are merged into one record per log (its highest tail), appended at the tail with
  `rollup = C`, and only then may the head below C be collected. So from its oldest offset on,
  the dirty log always names every log recorded before, with a tail at least as high: a reader
  whose position fell below the oldest offset skips to it and misses nothing. A reader at
  position P >= C has seen everything a roll-up record with `rollup = C` says, and skips it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from wal3_spark.clock import SYSTEM, Clock, micros
from wal3_spark.errors import DataLost, InvalidOption, LogNotFound, Wal3Error
from wal3_spark.format.layout import FIRST_OFFSET
from wal3_spark.format.manifest import Manifest
from wal3_spark.log.committer import Committer
from wal3_spark.log.fragment_io import write_fragments
from wal3_spark.log.reader import LogReader
from wal3_spark.log.writer import LogWriter, LogWriterOptions
from wal3_spark.logset.logs import DEFAULT_FULL_SCAN_EVERY_S, LogSet, check_log_name
from wal3_spark.storage import StoreLike, resolve_store
from wal3_spark.storage.base import ObjectStore
from wal3_spark.storage.prefixed import PrefixedStore

logger = logging.getLogger(__name__)

DIRTY_LOG_NAME = "_dirty"
DIRTY_SCHEMA = pa.schema(
    [
        pa.field("log", pa.string(), nullable=False),
        pa.field("tail", pa.int64(), nullable=False),
        pa.field("rollup", pa.int64(), nullable=True),
    ]
)
#: how long a record waits for others to share its dirty-log append (records are written in the
#: background, after their commit; docs/benchmarks.md measures the cost of shorter intervals)
BATCH_INTERVAL_S = 0.1
#: the idempotent writer id of roll-ups in the dirty log's `txns` (its version: the offset
#: below which records were rolled up, so the head below it may be collected)
ROLLUP_TXN = "wal3-rollup"
#: the cursor on the dirty log where garbage collection of the prefix stopped reading it
#: (`wal3_spark.logset.prefix_gc`); it also pins the dirty log's records GC has not read yet
GC_CURSOR = "gc"


def dirty_store(prefix: ObjectStore) -> ObjectStore:
    """The store of the dirty log of the log set at `prefix`."""
    return PrefixedStore(prefix, DIRTY_LOG_NAME)


def split_log_url(url: str) -> tuple[str, str]:
    """`(prefix URL, log name)` of a log URL (`s3://b/p/orders` -> `("s3://b/p", "orders")`)."""
    base = url.rstrip("/")
    prefix, sep, name = base.rpartition("/")
    if not sep or prefix.endswith((":/", ":")):
        raise InvalidOption(f"the log at {url} lies under no prefix to hold a dirty log")
    return prefix, name


# ------------------------------------------------------------------------------- writing


class DirtyLog:
    """Records, for appenders that opt in, which logs of the prefix they appended to.

    One instance per process and prefix is enough and batches best: pass it to every
    `LogWriter(..., dirty_log=...)` and `Committer(..., dirty_log=...)` of logs under the
    prefix. Thread-safe; `close()` (or the context manager) waits for the records in flight.
    """

    def __init__(
        self,
        prefix: StoreLike,
        *,
        options: Mapping[str, str] | None = None,
        writer: str = "wal3-spark dirty log",
        batch_interval_s: float = BATCH_INTERVAL_S,
    ) -> None:
        """`batch_interval_s`: how long a record waits for others to share its dirty-log
        append (readers see a change that much later; a process appending many times a second
        writes the dirty log once per interval instead of once per commit)."""
        self.prefix = resolve_store(prefix, options)
        self.store = dirty_store(self.prefix)
        # Records of one process share fragments, and every record that lands while a manifest
        # write is in flight shares the next one (the manifest is the contended object): one
        # manifest write at a time, not pipelined (docs/design/21-pipelined-manifest-writes.md), since every
        # appender of the prefix writes it, and latency matters less here than its writes.
        self._writer = LogWriter(self.store, LogWriterOptions(
            writer=writer, batch_interval_s=batch_interval_s, max_manifest_writes=1))

    @property
    def url(self) -> str:
        return self.store.url

    def __repr__(self) -> str:
        return f"DirtyLog({self.prefix.url!r})"

    def name_of(self, log_url: str) -> str:
        """The name of the log at `log_url` in this dirty log's prefix; InvalidOption when the
        log is not directly under the prefix (its changes would be recorded for a wrong name)."""
        prefix, name = split_log_url(log_url)
        if prefix != self.prefix.url.rstrip("/"):
            raise InvalidOption(
                f"the log at {log_url} is not directly under {self.prefix.url}, the prefix of the "
                f"dirty log {self.url}: use the dirty log of {prefix}"
            )
        return check_log_name(name)

    def record(self, tails: Mapping[str, int]) -> Future:
        """Append that each log in `tails` now has at least that tail (its next offset).

        The future resolves once the record is durable (to the dirty log's `Appended`), or
        raises what failed it; a failure is also logged, since losing a record is tolerated
        (readers' full scans find the change) but worth knowing about."""
        names = [check_log_name(name) for name in tails]
        if not names:
            done: Future = Future()
            done.set_result(None)
            return done
        table = pa.table(
            {"log": names, "tail": [int(tails[n]) for n in names], "rollup": [None] * len(names)},
            schema=DIRTY_SCHEMA,
        )
        future = self._writer.submit(table)
        future.add_done_callback(lambda f: _log_failure(f, self.url, names))
        return future

    def record_commit(self, log_store: ObjectStore, tail: int) -> Future:
        """`record` for the log `log_store` holds (the hook `Committer` calls after a commit)."""
        return self.record({self.name_of(log_store.url): tail})

    def flush(self) -> None:
        """Wait until every record made so far is durable (or failed)."""
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()

    def __enter__(self) -> DirtyLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _log_failure(future: Future, url: str, names: list[str]) -> None:
    error = None if future.cancelled() else future.exception()
    if error is not None:
        logger.warning(
            "%s: could not record that %s changed (%s); the data is committed, and readers of the "
            "log set will see the change at their next full scan", url, ", ".join(names[:5]), error
        )


# ------------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class DirtyPosition:
    """Where a reader of a log set stands: the next dirty-log offset to read, and when its
    last full scan started (µs since the epoch). Serialise with `to_dict`/`from_dict`."""

    offset: int
    full_scan_us: int

    def to_dict(self) -> dict[str, int]:
        return {"dirty": self.offset, "scan_us": self.full_scan_us}

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> DirtyPosition:
        try:
            offset, scan_us = doc["dirty"], doc["scan_us"]
        except (TypeError, KeyError):
            raise InvalidOption(f"not a dirty-log position: {doc!r}") from None
        if not (isinstance(offset, int) and isinstance(scan_us, int) and offset >= 0 and scan_us >= 0):
            raise InvalidOption(f"not a dirty-log position: {doc!r}")
        return cls(offset, scan_us)


@dataclass(frozen=True)
class LogSetChanges:
    """What changed in a log set since a position.

    `tails` maps each changed log (or, after a full scan, every log found) to a tail it has
    reached: its current tail is at least that. `position` is where to continue from.
    `full_scan` says whether every manifest was read; `failed` names logs whose manifest a full
    scan could not read. `requests` counts the dirty-log objects read (manifest, fragments).
    `incarnations`: after a full scan, each log's incarnation (`Manifest.incarnation`), and
    `manifests` the manifests read."""

    tails: dict[str, int]
    position: DirtyPosition
    full_scan: bool
    failed: dict[str, Wal3Error] = field(default_factory=dict)
    incarnations: dict[str, str | None] = field(default_factory=dict)
    manifests: dict[str, Manifest] = field(default_factory=dict, compare=False, repr=False)


def changes_since(
    logs: LogSet,
    position: DirtyPosition | None,
    *,
    full_scan_every_s: float = DEFAULT_FULL_SCAN_EVERY_S,
    clock: Clock = SYSTEM,
) -> LogSetChanges:
    """The logs of `logs` that changed since `position`, with their tails: what a log-set
    stream source does once per trigger, and garbage collection of a prefix once per run.

    Reads the dirty log (one manifest GET, then one GET per dirty-log fragment appended since
    `position`) when there is one and the last full scan is younger than `full_scan_every_s`;
    otherwise (no position yet, no dirty log, a scan due, a dirty log that cannot be read or
    that ends before `position`) does a full scan: the dirty log's tail first, then every selected
    manifest in parallel, so that any commit the scan missed has its record after the position
    returned.
    """
    now_us = micros(clock)
    try:
        manifest: Manifest | None = LogReader(dirty_store(logs.store)).manifest()
    except LogNotFound:
        manifest = None
    except Wal3Error as exc:
        logger.warning("%s: cannot read the dirty log (%s); reading every manifest", logs.url, exc)
        return _full_scan(logs, FIRST_OFFSET, now_us)
    if manifest is None:
        return _full_scan(logs, FIRST_OFFSET, now_us)
    if position is None or now_us - position.full_scan_us >= full_scan_every_s * 1_000_000:
        return _full_scan(logs, manifest.next_offset, now_us)
    if position.offset > manifest.next_offset:
        logger.warning("%s: the dirty log ends at %d, before this reader's position %d (it was "
                    "replaced?); reading every manifest", logs.url, manifest.next_offset, position.offset)
        return _full_scan(logs, manifest.next_offset, now_us)
    try:
        tails, tail = read_dirty(dirty_store(logs.store), position.offset, manifest)
    except Wal3Error as exc:
        logger.warning("%s: cannot read the dirty log (%s); reading every manifest", logs.url, exc)
        return _full_scan(logs, manifest.next_offset, now_us)
    selected = {name: t for name, t in tails.items() if logs.selection.matches(name)}
    return LogSetChanges(selected, DirtyPosition(tail, position.full_scan_us), full_scan=False)


def _full_scan(logs: LogSet, dirty_tail: int, now_us: int) -> LogSetChanges:
    scan = logs.tails()
    tails = {name: t.next_offset for name, t in scan.tails.items()}
    return LogSetChanges(tails, DirtyPosition(dirty_tail, now_us), full_scan=True, failed=scan.failed,
                         incarnations={name: t.incarnation for name, t in scan.tails.items()},
                         manifests=scan.manifests)


def read_dirty(
    store: ObjectStore, start: int, manifest: Manifest | None = None
) -> tuple[dict[str, int], int]:
    """The highest tail recorded per log in the dirty log at `store` from offset `start`, and
    the dirty log's tail they were read up to. Roll-up records summarising offsets below
    `start` are skipped (the reader saw what they say); a `start` below the oldest offset
    (garbage-collected after a roll-up) continues from the oldest offset, which is safe."""
    reader = LogReader(store)
    for _ in range(3):
        manifest = manifest or reader.manifest()
        begin = max(start, manifest.oldest_offset)
        if begin > start:
            logger.info("%s: offsets [%d, %d) were rolled up and collected; reading on from %d",
                     store.url, start, begin, begin)
        try:
            return _merge(reader.read(begin, manifest=manifest), start), manifest.next_offset
        except DataLost:
            manifest = None  # garbage collection ran since the manifest was read: read it again
    raise DataLost(store.url, start, reader.manifest().oldest_offset)


def _merge(batches: Iterable[pa.RecordBatch], start: int) -> dict[str, int]:
    tails: dict[str, int] = {}
    for batch in batches:
        names = batch.column("log").to_pylist()
        values = batch.column("tail").to_pylist()
        rollups = batch.column("rollup").to_pylist()
        for name, tail, rollup in zip(names, values, rollups, strict=True):
            if rollup is not None and rollup <= start:
                continue
            if tail > tails.get(name, 0):
                tails[name] = tail
    return tails


# ------------------------------------------------------------------------------- roll-up


def _only_rollups(batches: Iterable[pa.RecordBatch], rollup: int) -> bool:
    return all(value == rollup for batch in batches for value in batch.column("rollup").to_pylist())


@dataclass(frozen=True)
class RollUp:
    """What `roll_up` did: records below `up_to` merged into `logs` roll-up records (none when
    there was nothing new to roll up, `skipped`)."""

    up_to: int
    logs: int
    skipped: bool


def rolled_up_to(manifest: Manifest) -> int | None:
    """The offset below which the dirty log's records were rolled up (may be collected)."""
    txn = manifest.txns.get(ROLLUP_TXN)
    return None if txn is None else txn.version


def roll_up(
    prefix: StoreLike, up_to: int, *, writer: str = "wal3-spark roll-up",
    options: Mapping[str, str] | None = None,
) -> RollUp:
    """Merge the dirty log's records below `up_to` into one record per log, appended at the
    tail with `rollup = up_to`; the head below `up_to` may be collected afterwards (Chroma's wal3
    design: "re-write dirty log entries at the end of the log so they can be collected from the
    beginning"). Idempotent: the append is a `txns` commit of version `up_to`, so a rerun, or
    a concurrent roll-up to the same offset, appends nothing. `prefix`: the log set's URL
    (opened with `options`) or store."""
    store = dirty_store(resolve_store(prefix, options))
    reader = LogReader(store)
    manifest = reader.manifest()
    up_to = min(up_to, manifest.next_offset)
    done = rolled_up_to(manifest)
    if up_to <= manifest.oldest_offset or (done is not None and up_to <= done):
        return RollUp(up_to, 0, skipped=True)
    if done is not None and _only_rollups(reader.read(max(done, manifest.oldest_offset), up_to,
                                                      manifest=manifest), done):
        return RollUp(up_to, 0, skipped=True)  # nothing new since the last roll-up but itself
    tails = _merge(reader.read(manifest.oldest_offset, up_to, manifest=manifest), 0)
    names = sorted(tails)
    table = pa.table(
        {"log": names, "tail": [tails[n] for n in names], "rollup": [up_to] * len(names)},
        schema=DIRTY_SCHEMA,
    )
    files = write_fragments(store, table.to_batches(), DIRTY_SCHEMA, fragment_bytes=64 << 20,
                            item_hash=manifest.append_item_hash(True))
    result = Committer(store, writer=writer).commit(
        files, schema=DIRTY_SCHEMA, app_id=ROLLUP_TXN, version=up_to, incarnation=manifest.incarnation
    )
    logger.info("%s: rolled up offsets [%d, %d) into %d records%s", store.url, manifest.oldest_offset,
             up_to, len(names), " (already done)" if result.duplicate else "")
    return RollUp(up_to, len(names), skipped=result.duplicate)
