"""The commit protocol (docs/format.md section 6): fragments written anywhere become part of the log
in one compare-and-swap of the manifest.

A `Committer` is what a Spark driver (or `LogWriter`) holds: it creates the log, checks schemas
before any data is written, and places already-written fragments at the tail, atomically. The
compare-and-swap itself (rebasing on lost races, resolving ambiguous writes by looking at what
landed) is `wal3_spark.log.cas`; this module supplies the decisions. Every manifest it writes is
scrubbed first, so a bug here cannot publish a manifest that does not balance or that references
a fragment twice.

Outcomes of `commit` (docs/design/20-committing.md):
- a `CommitResult`: the fragments are in the log, once, at [start, limit);
- `CommitFailed`, `LogSealed`, `SchemaMismatch`: definitely not committed, and no write that may
  still land is outstanding: the caller may delete the fragments;
- `AlreadyCollected`: an earlier commit placed these fragments and garbage collection has since
  collected them: nothing was written; the caller must neither rerun the append nor delete them;
- `CommitOutcomeUnknown`: a manifest write may still land. The caller must delete nothing (the
  fragments may be data; if they are not, garbage collection removes them as orphans) and must
  not blindly retry with new fragments (the records could appear twice).

Design: docs/design/10-manifest-is-a-pure-value.md, docs/design/20-committing.md,
docs/design/22-snapshot-rollover.md, docs/design/31-garbage-and-commit-time.md.
"""

from __future__ import annotations

import functools
import itertools
import logging
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Protocol

import pyarrow as pa

from wal3_spark.clock import SYSTEM, Clock, micros
from wal3_spark.errors import (
    CommitFailed,
    CommitOutcomeUnknown,
    CorruptLog,
    DataLost,
    LogNotFound,
    PartlyCommitted,
    StorageError,
)
from wal3_spark.format.incarnation import UNRECORDED
from wal3_spark.format.layout import MANIFEST_KEY, FragmentRef, KnownRefs
from wal3_spark.format.manifest import (
    Manifest,
    NewFragment,
    SnapshotOptions,
    Txn,
    newest_written_us,
)
from wal3_spark.format.schema import reconcile
from wal3_spark.format.uuid7 import uuid7_timestamp_us
from wal3_spark.log.cas import (
    CasObject,
    CasPolicy,
    CasResult,
    InFlight,
    Outcome,
    StaleVersion,
    Versioned,
)
from wal3_spark.log.invariants import (
    check_appends_supported,
    check_item_hash,
    check_new_fragments,
    check_not_collected,
    check_not_sealed,
    check_orphan_horizon,
    check_same_log,
    check_still_there,
    check_txn,
    may_be_collected,
    maybe_swept,
    pending_or_gone,
    target_schema,
)
from wal3_spark.log.reader import iter_fragments
from wal3_spark.log.replaced import replaced_positions
from wal3_spark.log.snapshots import roll_snapshots
from wal3_spark.storage import StoreLike, resolve_store
from wal3_spark.storage.base import ObjectStore

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CommitResult:
    """Where a commit's records landed: offsets [start, limit)."""

    start: int
    limit: int
    manifest: Manifest
    #: True when an idempotent writer's version was already committed (nothing was written)
    duplicate: bool = False
    attempts: int = 1
    conflicts: int = 0
    #: the dirty-log record of this commit, when the committer has a dirty log: resolves once
    #: the record is durable (a failure is logged; it never undoes or fails the commit)
    dirty: Future | None = None


class DirtyRecorder(Protocol):
    """What a committer needs of a dirty log (`wal3_spark.logset.dirty.DirtyLog` is one)."""

    def name_of(self, log_url: str) -> str:
        """The log's name in the dirty log's prefix; raises when it is not directly under it."""

    def record_commit(self, log_store: ObjectStore, tail: int) -> Future:
        """Record, after a commit, that the log reached `tail`; returns without waiting."""

    def flush(self) -> None:
        """Wait until every record made so far is durable (or failed)."""


def manifest_object(
    store: ObjectStore, policy: CasPolicy | None = None, clock: Clock = SYSTEM
) -> CasObject[Manifest]:
    """The manifest under compare-and-swap: every value written is scrubbed first. Each
    re-read after a lost race reuses the fragment pointers this object parsed before."""
    return CasObject(
        store,
        MANIFEST_KEY,
        parse=functools.partial(Manifest.from_bytes, known=KnownRefs()),
        serialise=Manifest.to_bytes,
        validate=Manifest.scrub,
        policy=policy,
        clock=clock,
    )


class Committer:
    """Reads and compare-and-swaps one log's manifest. Not thread-safe; cheap to create."""

    def __init__(
        self,
        store: StoreLike,
        *,
        options: Mapping[str, str] | None = None,
        writer: str = "wal3-spark",
        snapshot_options: SnapshotOptions | None = None,
        max_attempts: int = 200,
        deadline_s: float = 300.0,
        backoff_base_s: float = 0.002,
        backoff_cap_s: float = 0.1,
        dirty_log: DirtyRecorder | None = None,
        clock: Clock = SYSTEM,
    ) -> None:
        """`dirty_log`: record every commit's new tail there (the log must sit directly under
        the dirty log's prefix: checked here). See `wal3_spark.logset.dirty`. `clock` stamps txns
        and times the compare-and-swap's deadline and backoff.
        `store`: the log's URL (opened with `options`) or its store."""
        self.store = store = resolve_store(store, options)
        self.writer = writer
        self.clock = clock
        self.dirty_log = dirty_log
        if dirty_log is not None:
            dirty_log.name_of(store.url)
        self.snapshot_options = snapshot_options or SnapshotOptions()
        self._manifest = manifest_object(
            store, CasPolicy(max_attempts, deadline_s, backoff_base_s, backoff_cap_s), clock
        )

    @property
    def url(self) -> str:
        return self.store.url

    @property
    def requests(self) -> dict[str, int]:
        """Manifest GETs and PUTs made so far (a warm commit is one PUT)."""
        return self._manifest.requests

    @property
    def last_seen(self) -> Manifest | None:
        """The newest manifest this committer read or wrote (no I/O)."""
        last = self._manifest.last
        return last.value if last is not None else None

    # -- reading ------------------------------------------------------------------------

    def load(self) -> tuple[Manifest, str] | None:
        """The current manifest and its ETag, or None if the log does not exist."""
        loaded = self._manifest.load()
        return None if loaded is None else (loaded.value, loaded.etag)

    def manifest(self) -> Manifest:
        loaded = self.load()
        if loaded is None:
            raise LogNotFound(self.url)
        return loaded[0]

    # -- creating -----------------------------------------------------------------------

    def create(self, schema: pa.Schema | None = None) -> tuple[Manifest, str]:
        """Create the log if absent (safe when many processes race); return its manifest.

        An existing log is returned as is: callers check its schema with `prepare`.
        """
        empty = Manifest.empty(self.writer, schema)
        result = self._manifest.apply(
            lambda current: empty if current is None else None,
            landed=lambda current: current is not None,
        )
        if result.outcome is Outcome.UNKNOWN or result.current is None:
            raise CommitOutcomeUnknown(
                f"could not establish whether the log at {self.url} was created (the store kept "
                "failing): run `wal3 info` on it, or retry"
            ) from result.cause
        if result.outcome is Outcome.WRITTEN:
            logger.info("created log %s", self.url)
        return result.current.value, result.current.etag

    def prepare(
        self, schema: pa.Schema | None, *, merge_schema: bool = False, create: bool = True
    ) -> pa.Schema | None:
        """Check, before any data is written, that `schema` may append; return the schema the
        fragments must be written in (None for a raw log). Creates the log when allowed."""
        raw = schema is None
        loaded = self.load()
        if loaded is None:
            if not create:
                raise LogNotFound(self.url)
            target = None if raw else reconcile(None, schema, merge=merge_schema, raw_log=False)
            loaded = self.create(target)
        manifest = loaded[0]
        check_not_sealed(manifest, self.url)
        return target_schema(manifest, schema, merge_schema, self.url)

    # -- committing ---------------------------------------------------------------------

    def commit(
        self,
        fragments: Sequence[NewFragment],
        *,
        schema: pa.Schema | None = None,
        merge_schema: bool = False,
        app_id: str | None = None,
        version: int | None = None,
        create: bool = True,
        in_flight: InFlight | None = None,
        since: int | None = None,
        incarnation: object = UNRECORDED,
    ) -> CommitResult:
        """Make `fragments` (already written, in this order) the next records of the log.

        `incarnation`: the log's incarnation when the writer decided where the fragments go
        (`UNPINNED`: there was no log). The commit fails (CommitFailed) if the log is not that
        incarnation any more: a log deleted meanwhile took the fragments with it, and committing
        them into the log created again would acknowledge records that are not there
        (`invariants.check_same_log`, `check_still_there`). Leaving it out checks nothing:
        every writer of this package passes it.

        `schema` is the schema the fragments were written in (None: raw). With `app_id` and
        `version` the commit is idempotent: it is skipped when that writer already committed
        `version` or later, and the version is recorded in the same manifest write. See the
        module docstring for what each outcome allows the caller to do with the fragments.

        `since`: the offset a pipelined writer (`wal3_spark.log.chain`) placed these fragments at in
        a manifest write it sent earlier. With `in_flight` (that write, whose outcome is not
        known) this commit resolves it by the compare-and-swap's ambiguity rules instead of
        appending the fragments a second time. Alone (a write answered as not landed): the
        fragments are looked for from `since` on, through the snapshot tree, before they are
        appended, so a write that landed despite its answer (and that a later write may have
        rolled into a snapshot) is reported already committed, not appended twice.
        """
        if (app_id is None) != (version is None):
            raise ValueError("app_id and version go together")
        if app_id is not None:
            check_txn(app_id, version)
        check_new_fragments(fragments)
        if in_flight is not None and since is None:
            raise ValueError("in_flight needs since (where the write in flight placed the fragments)")
        paths = [f.path for f in fragments]
        if len(set(paths)) != len(paths):
            raise ValueError("a commit lists the same fragment twice")
        #: where the fragments were placed: first ("since", the lowest) and last ("start");
        #: "already": where a previous commit of these very fragments put them
        placed: dict[str, int] = {} if since is None else {"since": since, "start": since}

        def decide(current: Manifest | None) -> Manifest | None:
            absent = current is None
            check_same_log(current, incarnation, self.url)
            if current is None:
                if not create:
                    raise LogNotFound(self.url)
                current = Manifest.empty(self.writer, schema)
            check_not_sealed(current, self.url)
            try:
                already, rolled_written_us = _committed_at(self.store, current, fragments, since)
            except DataLost as exc:  # GC removed a snapshot this (stale) manifest points to
                raise StaleVersion(exc) from exc
            if already is not None:
                placed["already"] = already
                return None
            if app_id is not None and version is not None:
                txn = current.txns.get(app_id)
                if txn is not None and txn.version >= version:
                    return None
            check_not_collected(self.store, current, fragments)
            new_schema = self._check_append(current, fragments, schema, merge_schema)
            check_still_there(self.store, None if absent else current, incarnation, fragments, self.url)
            placed.setdefault("since", current.next_offset)
            placed["start"] = current.next_offset
            txn_entry = ((app_id, Txn(version, micros(self.clock)))
                         if app_id is not None and version is not None else None)
            changed = new_schema is not None and new_schema != current.arrow_schema()
            if not fragments and txn_entry is None and not changed and not absent:
                return None  # nothing to record: rewriting the same state could repeat bytes (ABA)
            appended = current.with_fragments(
                fragments, self.writer, txn=txn_entry, schema=new_schema if changed else None
            )
            return replace(appended, rolled_written_us=rolled_written_us)

        def landed(current: Manifest | None) -> bool | None:
            if current is None or "since" not in placed:
                return False
            if not paths:  # nothing to find: an idempotent empty commit recorded its version
                txn = current.txns.get(app_id) if app_id is not None else None
                return txn is not None and version is not None and txn.version >= version
            try:
                start = _locate(self.store, current, set(paths), placed["since"])
            except DataLost as exc:
                if current.own_oldest_offset > placed["since"]:
                    return None  # garbage collection moved past where they would be: cannot tell
                raise StaleVersion(exc) from exc
            if start is None:  # a compaction may have replaced them since they landed
                start = _compacted_start(self.store, current, fragments)
            if start is not None:
                placed["start"] = start
                return True
            if current.own_oldest_offset > placed["since"]:
                return None  # garbage collection moved past where they would be: cannot tell
            return False

        try:
            result = self._manifest.apply(decide, landed=landed, prepare=self._roll_snapshots,
                                          in_flight=in_flight)
        except (StorageError, CorruptLog, DataLost) as exc:
            # raised, not an UNKNOWN outcome: no manifest write of this commit may land. A
            # reader's error or a store's refusal is not an append's outcome
            # (docs/design/20-committing.md): CommitFailed, its cause in the message
            raise CommitFailed.nothing_written(self.url, exc) from exc
        if result.outcome is Outcome.UNKNOWN:
            raise CommitOutcomeUnknown(_unknown_message(self.url, paths, app_id, version)) from result.cause
        assert result.current is not None
        if result.outcome is Outcome.NOTHING_TO_DO and "already" in placed:
            start = placed["already"]
            limit = start + sum(f.records for f in fragments)
            logger.warning("%s: these fragments (%s, ...) were already committed at [%d, %d); "
                        "nothing was written", self.url, paths[0], start, limit)
            return CommitResult(start, limit, result.current.value, duplicate=True,
                                attempts=result.attempts, conflicts=result.conflicts)
        if result.outcome is Outcome.NOTHING_TO_DO and app_id is None:  # an empty commit
            tail = result.current.value.next_offset
            return CommitResult(tail, tail, result.current.value, attempts=0)
        if result.outcome is Outcome.NOTHING_TO_DO:
            logger.info("%s: txn %s version %s already committed; skipped", self.url, app_id, version)
            return CommitResult(0, 0, result.current.value, duplicate=True,
                                attempts=result.attempts, conflicts=result.conflicts)
        start = placed["start"]
        records = sum(f.records for f in fragments)
        return CommitResult(start, start + records, result.current.value,
                            attempts=result.attempts, conflicts=result.conflicts,
                            dirty=self.record_dirty(start + records))

    def _check_append(
        self, current: Manifest, fragments: Sequence[NewFragment], schema: pa.Schema | None, merge_schema: bool
    ) -> pa.Schema | None:
        """What an append of `fragments` to `current` must satisfy; returns the log's schema
        after it (None: raw)."""
        check_appends_supported(current, self.url)
        check_orphan_horizon(current, fragments, self.url)
        new_schema = target_schema(current, schema, merge_schema, self.url)
        check_item_hash(fragments, current.append_item_hash(new_schema is not None), self.url)
        return new_schema

    # -- pipelined commits (wal3_spark.log.chain) -------------------------------------------

    def current(self) -> Versioned[Manifest] | None:
        """The version the next commit starts from: the last one read or written, else a
        fresh read (None: no log)."""
        return self._manifest.last if self._manifest.known else self._manifest.load()

    def known(self) -> Versioned[Manifest] | None:
        """The version the last read or write established (no I/O); None when nothing is known
        (or the log did not exist)."""
        return self._manifest.last if self._manifest.known else None

    def appended(
        self, current: Manifest, fragments: Sequence[NewFragment], *, schema: pa.Schema | None,
        merge_schema: bool = False, incarnation: object = UNRECORDED,
    ) -> tuple[Manifest, bytes]:
        """The manifest (and its bytes) that places `fragments` at `current.next_offset`,
        checked as `commit` checks it (`incarnation` included), its snapshots written. A
        pipelined writer sends it conditioned on `current`'s ETag, possibly before `current`
        itself is known to have landed; `commit(in_flight=...)` resolves it when its answer is
        not a success."""
        check_same_log(current, incarnation, self.url)
        check_not_sealed(current, self.url)
        check_still_there(self.store, current, incarnation, fragments, self.url)
        new_schema = self._check_append(current, fragments, schema, merge_schema)
        changed = new_schema is not None and new_schema != current.arrow_schema()
        new = self._roll_snapshots(
            current.with_fragments(fragments, self.writer, schema=new_schema if changed else None)
        )
        return new, self._manifest.encode(new)

    def find(self, fragments: Sequence[NewFragment], since: int) -> int | None:
        """Where `fragments` sit in the log (read now), at or after offset `since`, through the
        snapshot tree when they may have been rolled into it; None when they are not there. For
        a pipelined write answered with a refusal: a refusal the store gave after writing (or an
        error it could not classify) must not fail appends that are in the log. The read is
        remembered (the next commit is conditioned on it). Raises what reading raises,
        `PartlyCommitted` for a partial list."""
        loaded = self._manifest.load()
        if loaded is None:
            return None
        return _committed_at(self.store, loaded.value, fragments, since)[0]

    def forget(self) -> None:
        """Read the manifest before the next commit (what the store holds is not known)."""
        self._manifest.forget()

    def landed(self, version: Versioned[Manifest]) -> None:
        """A manifest written outside `commit` (a pipelined write) landed: the next commit is
        conditioned on it."""
        self._manifest.remember(version)

    def record_dirty(self, tail: int) -> Future | None:
        """Tell the dirty log, if any, that the log reached `tail`. After the commit, so a
        failure here must not escape: the records are in the log, and an error would invite a
        retry that appends them twice (readers' full scans find changes without a record)."""
        if self.dirty_log is None:
            return None
        try:
            return self.dirty_log.record_commit(self.store, tail)
        except Exception as exc:  # noqa: BLE001 (the commit happened; see the docstring)
            logger.warning("%s: could not record the commit in the dirty log: %s", self.url, exc)
            return None

    def update(self, decide: Callable[[Manifest], Manifest | None]) -> Manifest | None:
        """Apply `decide` to the current manifest with compare-and-swap (seal, GC, txn pruning).

        `decide` returns the new manifest, or None when there is nothing to do; it is called
        again on the fresh manifest after every lost race, so it must be a pure function of it.
        After an ambiguous write, "nothing to do" on a fresh manifest means the change is there.
        Returns the manifest written, or None when there was nothing to do.
        """
        result = self.update_result(decide)
        return result.current.value if result.outcome is Outcome.WRITTEN and result.current else None

    def update_result(self, decide: Callable[[Manifest], Manifest | None]) -> CasResult[Manifest]:
        """`update`, returning the compare-and-swap's result (the manifest decided on included)."""

        def on_log(current: Manifest | None) -> Manifest | None:
            if current is None:
                raise LogNotFound(self.url)
            return decide(current)

        result = self._manifest.apply(
            on_log, landed=lambda current: current is not None and decide(current) is None
        )
        if result.outcome is Outcome.UNKNOWN:
            raise CommitOutcomeUnknown(
                f"a manifest update of {self.url} may or may not have landed (the store kept "
                "failing until the deadline); run `wal3 info` on it to see, then retry"
            ) from result.cause
        return result

    def _roll_snapshots(self, manifest: Manifest) -> Manifest:
        return roll_snapshots(self.store, manifest, self.snapshot_options, self.writer)

    # -- sealing ------------------------------------------------------------------------

    def seal(self) -> Manifest:
        """Seal the log: every later append fails, readers keep working."""
        result = self.update_result(lambda m: None if m.sealed else m.sealed_by(self.writer))
        assert result.current is not None
        return result.current.value


def _collected_prefix(
    store: ObjectStore, manifest: Manifest, fragments: Sequence[NewFragment], found: Sequence[FragmentRef]
) -> int | None:
    """Where an earlier commit of `fragments` placed them when garbage collection has since
    collected its first ones and kept the rest (a cursor stopped inside that commit), else None:
    the fragments found are the last ones of the list, in order and contiguous, from the log's
    oldest offset on, and every one before them is collected (at or below the collected bound,
    and listed by the pending garbage, or gone and younger than the orphan horizon). GC collects
    whole fragments from the oldest on, so the missing ones sat right below: their offsets are
    known exactly."""
    head = len(fragments) - len(found)
    paths = [f.path for f in fragments]
    if (
        head <= 0
        or [ref.path for ref in found] != paths[head:]
        or any(a.limit != b.start for a, b in itertools.pairwise(found))
        or found[0].start != manifest.own_oldest_offset
        or len(may_be_collected(manifest, fragments[:head])) != head
    ):
        return None
    listed, missing = pending_or_gone(store, fragments[:head])
    if len(listed) + len(missing) != head or maybe_swept(store, missing):
        return None
    return found[0].start - sum(f.records for f in fragments[:head])


def _may_be_rolled(manifest: Manifest, fragments: Sequence[NewFragment]) -> bool:
    """Whether an earlier commit of `fragments` may sit in `manifest`'s snapshots, so that
    looking among its own fragments would not find it (docs/design/20-committing.md). A fragment
    is committed after it is written and rolled after it is committed, so once rolled the
    newest write time of the snapshots' fragments (`rolled_written_us`) is at least its own:
    fragments written after that bound are in no snapshot, however young or old they are and
    whoever committed them. A fragment whose age is unknown (not a UUIDv7) may be anywhere."""
    if not manifest.snapshots:
        return False
    bound = manifest.rolled_written_us
    return bound is None or any((uuid7_timestamp_us(f.uuid) or 0) <= bound for f in fragments)


def _committed_at(
    store: ObjectStore, manifest: Manifest, fragments: Sequence[NewFragment], since: int | None = None
) -> tuple[int | None, int | None]:
    """Where an earlier commit of these very fragments placed them (its first offset), or None
    when none of them is in the log; a commit that is in the log only in part is refused
    (`PartlyCommitted`: such a list was never committed as one), unless garbage collection
    collected its first fragments and kept the others (`_collected_prefix`). Looks among the
    manifest's own fragments, and through the snapshot tree when they may have been rolled into
    it (`_may_be_rolled`): all of it, or from `since` on (where a pipelined write placed them).

    Also returns the manifest's `rolled_written_us`, computed from that walk when the manifest
    does not know it (a log compacted before the field): the manifest this commit writes
    records it, so later commits no longer walk the tree."""
    rolled_written_us = manifest.rolled_written_us
    if not fragments:
        return None, rolled_written_us
    refs: Sequence[FragmentRef] = manifest.fragments
    if _may_be_rolled(manifest, fragments):
        start = manifest.own_oldest_offset if since is None else max(since, manifest.own_oldest_offset)
        refs = list(iter_fragments(store, manifest, start))
        if rolled_written_us is None and start == manifest.own_oldest_offset:
            rolled_written_us = _newest_written(refs, manifest)
    paths = [f.path for f in fragments]
    wanted = set(paths)
    found = [ref for ref in refs if ref.path in wanted]
    if len(found) < len(paths):
        seen = {ref.path for ref in found}
        moved = replaced_positions(store, manifest, [f for f in fragments if f.path not in seen])
        if moved:
            return _moved_start(store, manifest, paths, found, moved), rolled_written_us
    if not found:
        return None, rolled_written_us
    if [ref.path for ref in found] != paths or any(
        a.limit != b.start for a, b in itertools.pairwise(found)
    ):
        collected_from = _collected_prefix(store, manifest, fragments, found)
        if collected_from is not None:
            return collected_from, rolled_written_us
        raise PartlyCommitted(
            f"{len(found)} of this commit's {len(paths)} fragments (e.g. {found[0].path} at offset "
            f"{found[0].start}) are already in the log at {store.url}, not as this commit; "
            "nothing was committed and nothing is deleted: commit only the others"
        )
    return found[0].start, rolled_written_us


def _moved_start(store: ObjectStore, manifest: Manifest, paths: Sequence[str],
                 found: Sequence[FragmentRef], moved: Mapping[str, tuple[int, int]]) -> int:
    """Where an earlier commit placed fragments some of which a compaction has since
    replaced (`moved`, from its records) and the others `found` in the manifest: all of them,
    in order and contiguous, or the list was never committed as one (`PartlyCommitted`)."""
    spans = {ref.path: (ref.start, ref.limit) for ref in found} | dict(moved)
    placed = [spans.get(path) for path in paths]
    if all(span is not None for span in placed):
        ordered = [span for span in placed if span is not None]
        if all(a[1] == b[0] for a, b in itertools.pairwise(ordered)):
            return ordered[0][0]
    first = next(path for path in paths if path in spans)
    raise PartlyCommitted(
        f"{len(spans)} of this commit's {len(paths)} fragments (e.g. {first} at offset "
        f"{spans[first][0]}, since compacted) were already committed to {store.url}, not as "
        "this commit; nothing was committed and nothing is deleted: commit only the others"
    )


def _compacted_start(store: ObjectStore, manifest: Manifest, fragments: Sequence[NewFragment]) -> int | None:
    """The first offset of those of `fragments` that a compaction replaced after they were
    committed (`wal3_spark.log.replaced`), or None when none was."""
    moved = replaced_positions(store, manifest, fragments)
    return min(start for start, _ in moved.values()) if moved else None


def _newest_written(refs: Sequence[FragmentRef], manifest: Manifest) -> int | None:
    """The newest write time of the fragments among `refs` (a walk of `manifest` from its oldest
    offset) that its snapshots hold; None when one of them has no UUIDv7 time."""
    rolled_limit = manifest.fragments[0].start if manifest.fragments else manifest.next_offset
    return newest_written_us(ref for ref in refs if ref.start < rolled_limit)


def _unknown_message(url: str, paths: Sequence[str], app_id: str | None, version: int | None) -> str:
    rerun = (
        f"rerunning with the same writer id and version ({app_id!r}, {version}) is safe: it is "
        "skipped if the first attempt landed"
        if app_id is not None
        else "an idempotent rerun needs a writer id and version (Spark's writerId option, or "
        "Committer.commit(app_id=..., version=...))"
    )
    return (
        f"the append to {url} may or may not be in the log: a manifest write timed out and the "
        "store kept failing until the deadline, so it could not be established whether it landed "
        f"(or whether it may still land). Nothing was deleted. To find out, run `wal3 verify {url}`"
        f" (or look for {paths[0] if paths else 'the writer version'} in the manifest); {rerun}"
    )


def _locate(store: ObjectStore, manifest: Manifest, paths: set[str], since: int) -> int | None:
    """Where the first of `paths` sits in the manifest at or after offset `since` (fragments
    rolled into a snapshot in the meantime are found through the snapshot tree), or None."""
    for ref in iter_fragments(store, manifest, since):
        if ref.path in paths:
            return ref.start
    return None
