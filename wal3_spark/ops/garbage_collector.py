"""Garbage collection of one log: the I/O around `wal3_spark.format.garbage`'s pure decisions.

docs/format.md section 8 and Chroma's wal3 design ("Garbage Collection Dance"); a run does what is due:

1. *compute*: when `gc/GARBAGE` is empty, the cutoff is the lowest cursor, raised to what the
   log's retention policy keeps (`wal3_spark.ops.retention`), lowered to the lowest pin or held
   tag (an explicit `keep_from` may only lower it); the snapshots rebuilt for a straddling snapshot are written,
   then the garbage is written to `gc/GARBAGE` (create, or CAS from the empty value), which is
   what makes one GC at a time;
2. *apply*: the manifest is compare-and-swapped without the garbage (`collected` grows by the
   discarded setsum, `initial_offset` moves; appends racing with it are rebased, never blocked);
   then the moment is recorded in the garbage (`applied_epoch_us`);
3. *delete*: once the grace interval has passed since then (readers that loaded an older
   manifest are done), the dropped snapshots and fragments are deleted and `gc/GARBAGE` is reset
   to empty.

Every run also deletes orphans: UUID fragments and snapshots the manifest does not reference
that are older than the orphan grace interval (failed or aborted appends, snapshots rolled by
commit attempts that lost their race or never landed), which is never shorter than
`MIN_ORPHAN_GRACE_S` whatever `grace_s` says. What the pending garbage lists is never an
orphan, and before deleting any orphan GC raises the manifest's orphan horizon past it, which a
commit that would reference it then refuses.

Each step is idempotent and recognisable from storage, so a run that crashes after any step is
finished by the next one. Nothing the current manifest references is ever deleted.

Design: docs/design/30-unreferenced-files-are-garbage.md, docs/design/31-garbage-and-commit-time.md,
docs/design/32-orphan-horizon.md, docs/design/33-retention.md.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace

from wal3_spark.clock import SYSTEM, Clock, micros, utc_text
from wal3_spark.errors import (
    CommitOutcomeUnknown,
    GarbageStale,
    GCRefused,
    InvalidOption,
    LogNotFound,
    ObjectNotFound,
)
from wal3_spark.format.deletion import is_log_object
from wal3_spark.format.garbage import (
    Garbage,
    apply_garbage,
    compute_garbage,
    garbage_applied,
)
from wal3_spark.format.layout import (
    FRAGMENT_PREFIX,
    GARBAGE_KEY,
    SNAPSHOT_PREFIX,
    SnapshotPointer,
    parse_fragment_uuid,
)
from wal3_spark.format.manifest import Manifest
from wal3_spark.format.retention import RetentionPolicy
from wal3_spark.format.uuid7 import uuid7_timestamp_us
from wal3_spark.log.cas import CasObject, Outcome
from wal3_spark.log.committer import Committer
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.holds import holds, lowest_hold
from wal3_spark.log.reader import iter_fragments
from wal3_spark.log.replaced import replaced_held
from wal3_spark.log.snapshots import SnapshotCache, load_snapshot, write_snapshot
from wal3_spark.ops.retention import policy_cutoff
from wal3_spark.storage import StoreLike, resolve_store
from wal3_spark.storage.base import ObjectMeta, ObjectStore

logger = logging.getLogger(__name__)

DEFAULT_GRACE_S = 3600.0
#: the shortest orphan grace: three times the commit deadline (`CasPolicy.deadline_s`, 300 s),
#: so that an append's fragments are not taken for orphans while it is still committing
MIN_ORPHAN_GRACE_S = 900.0
#: refuse (without force) to drop more than this share of the records in the log
DEFAULT_MAX_DROP_SHARE = 0.9
PHASES = ("compute", "apply", "mark", "delete", "reset")


@dataclass
class GCReport:
    url: str
    dry_run: bool = False
    cursors: dict[str, int] = field(default_factory=dict)
    #: the pins of branches and the held tags (their object keys) and the first offset each
    #: keeps: they lower the cutoff the cursors give, as a cursor would
    holds: dict[str, int] = field(default_factory=dict)
    #: pins dropped by this run: older than the orphan grace, and their branch does not read
    #: through them (never published, deleted or checkpointed)
    pins_dropped: list[str] = field(default_factory=list)
    cutoff: int | None = None
    oldest_offset: int = 0
    next_offset: int = 0
    #: the steps this run performed, in order ("compute", "apply", "mark", "delete", "reset")
    steps: list[str] = field(default_factory=list)
    first_to_keep: int | None = None
    records_dropped: int = 0
    fragments_dropped: int = 0
    snapshots_dropped: int = 0
    deleted: list[str] = field(default_factory=list)
    orphans_deleted: list[str] = field(default_factory=list)
    #: the orphan horizon (µs) this run raised the manifest's to before deleting orphans; None if
    #: it found none (appends whose fragments are older than it are refused from then on)
    orphan_horizon_us: int | None = None
    #: the garbage still pending at the end of the run (empty when none)
    pending: dict | None = None
    #: seconds since the epoch after which the pending garbage may be deleted
    delete_after: float | None = None
    notes: list[str] = field(default_factory=list)
    #: the log's retention policy (`{"max_age_ms", "max_bytes"}`), None: it has none
    retention: dict[str, int] | None = None
    #: the first offset the retention policy keeps now (it overtakes cursors); None: it removes
    #: nothing (or there is none)
    retention_cutoff: int | None = None
    #: the cursors this run's garbage passes (their position below its first kept offset):
    #: their consumers lost the records between (`retention_removed`)
    cursors_overtaken: dict[str, int] = field(default_factory=dict)
    #: the records the retention policy removes that a consumer had not read, `{"start",
    #: "limit", "records"}` (from the lowest cursor, or the oldest offset without cursors)
    retention_removed: dict[str, int] | None = None
    #: the holds (pins, held tags) below what the policy keeps: each one's records the policy
    #: would remove and the hold keeps
    retention_held_back: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def report_policy(report: GCReport) -> str:
    """The report's retention policy as `wal3 retention` takes it."""
    return RetentionPolicy(**report.retention).describe() if report.retention else "none"


def _forget(report: GCReport) -> None:
    """Clear what `report` says the run drops: the garbage it described was discarded (a hold
    appeared, it went stale, another run's won), and a report says what happened."""
    report.first_to_keep = None
    report.records_dropped = report.fragments_dropped = report.snapshots_dropped = 0
    report.cursors_overtaken, report.retention_removed = {}, None


@dataclass(frozen=True)
class _Referenced:
    fragments: frozenset[str]
    snapshots: frozenset[str]


def garbage_object(store: ObjectStore, clock: Clock = SYSTEM) -> CasObject[Garbage]:
    """`gc/GARBAGE` under compare-and-swap (absent and zero bytes are the empty garbage)."""
    return CasObject(store, GARBAGE_KEY, parse=Garbage.from_bytes, serialise=Garbage.to_bytes, clock=clock)


def referenced(
    store: ObjectStore, manifest: Manifest, cache: SnapshotCache | None = None
) -> _Referenced:
    """Every fragment and snapshot path the manifest's tree references (snapshots loaded
    through `cache` when given)."""
    fragments = {f.path for f in manifest.fragments}
    snapshots: set[str] = set()

    def walk(pointer: SnapshotPointer) -> None:
        snapshots.add(pointer.path_to_snapshot)
        snapshot = load_snapshot(store, pointer, cache)
        for child in snapshot.snapshots:
            walk(child)
        fragments.update(f.path for f in snapshot.fragments)

    for pointer in manifest.snapshots:
        walk(pointer)
    return _Referenced(frozenset(fragments), frozenset(snapshots))


def fragment_created_us(meta: ObjectMeta) -> int:
    """When a fragment object was created (µs since the epoch): exactly, from its UUIDv7 path;
    else its last_modified (a fragment the committer counts as older than any horizon)."""
    parsed = parse_fragment_uuid(meta.key)
    ts = uuid7_timestamp_us(parsed) if parsed is not None else None
    return ts if ts is not None else int(meta.last_modified * 1e6)


@dataclass(frozen=True)
class GCOptions:
    """How garbage collection of a log decides what it may delete: one value, checked when it
    is made, that `wal3 gc`, the jobs and the log sets' collection pass on whole."""

    #: how long a fragment or snapshot stays after it left the manifest (readers that planned
    #: with an older manifest still read it)
    grace_s: float = DEFAULT_GRACE_S
    #: how old an unreferenced fragment must be to be an orphan (None: the grace, at least
    #: `MIN_ORPHAN_GRACE_S`: appends still committing have younger ones)
    orphan_grace_s: float | None = None
    #: the largest share of the log's records one run may drop unless `force`
    max_drop_share: float = DEFAULT_MAX_DROP_SHARE
    force: bool = False
    #: the manifest's and the cursors' `writer` field for what the collector writes
    writer: str = "wal3-spark gc"
    #: where there is no manifest, sweep fragments and snapshots older than the orphan grace
    #: anyway (a failed job's leftovers for a log it never created: prefix GC), after fencing
    #: them with an empty log; else such a name is LogNotFound
    orphans_without_log: bool = False

    def __post_init__(self) -> None:
        if not (math.isfinite(self.grace_s) and self.grace_s >= 0):
            raise InvalidOption(f"grace_s must be a number of seconds >= 0, got {self.grace_s}")
        if self.orphan_grace_s is not None and not self.orphan_grace_s >= MIN_ORPHAN_GRACE_S:
            raise InvalidOption(
                f"orphan_grace_s must be at least {MIN_ORPHAN_GRACE_S:.0f} s, got {self.orphan_grace_s}: "
                "younger unreferenced fragments may belong to appends still committing"
            )
        if not 0.0 <= self.max_drop_share <= 1.0:
            raise InvalidOption(f"max_drop_share must be within [0, 1], got {self.max_drop_share}")


class GarbageCollector:
    """Collects garbage of one log. `clock` (`wal3_spark.clock`) and `GCOptions.grace_s` are
    injectable so that tests never wait for time to pass."""

    def __init__(
        self,
        log: StoreLike,
        gc_options: GCOptions | None = None,
        *,
        options: Mapping[str, str] | None = None,
        clock: Clock = SYSTEM,
        progress: Callable[[int, int], None] | None = None,
    ) -> None:
        settings = gc_options or GCOptions()
        writer = settings.writer
        self.gc_options = settings
        self.store = store = resolve_store(log, options)
        self.grace_s = settings.grace_s
        #: how old an unreferenced fragment must be to be an orphan (appends still committing
        #: have younger ones; the orphan horizon makes even a too-short grace safe)
        self.orphan_grace_s = (
            max(settings.grace_s, MIN_ORPHAN_GRACE_S) if settings.orphan_grace_s is None
            else settings.orphan_grace_s
        )
        self.max_drop_share = settings.max_drop_share
        self.force = settings.force
        self.clock = clock
        #: the clock the orphan sweep ages fragments by (default `clock`). `wal3 stress` runs it
        #: more than the orphan grace ahead, so that the sweep races appends still committing as
        #: it would after a writer stalled between upload and commit; the orphan horizon makes
        #: that safe (those appends fail cleanly). A test seam (`wal3_spark.testing.hooks`): no
        #: public parameter or CLI option sets it
        self._orphan_clock = clock
        self.orphans_without_log = settings.orphans_without_log
        self.writer = writer
        #: called with each step's name (`PHASES`) once it is done; what it raises ends the run
        #: there, as a crash would (how the tests crash a collector between two steps; set
        #: through `wal3_spark.testing.hooks`)
        self._after_step: Callable[[str], None] | None = None
        self.progress = progress
        self.committer = Committer(store, writer=writer, clock=clock)
        self.cursors = CursorStore(store, writer=writer, clock=clock)
        self.garbage = garbage_object(store, clock)
        #: every step walks the same snapshot tree (compute, count, the orphan sweep)
        self.snapshots = SnapshotCache()
        #: whether the cursors release records (False when one is broken: only the retention
        #: policy does then)
        self._trust_cursors = True

    @property
    def url(self) -> str:
        return self.store.url

    # -- the run ------------------------------------------------------------------------

    def run(self, *, keep_from: int | None = None, dry_run: bool = False) -> GCReport:
        """Do every step that is due; see the module docstring."""
        report = GCReport(self.url, dry_run=dry_run)
        try:
            manifest = self.committer.manifest()
        except LogNotFound:
            if not self.orphans_without_log or not self._fence_orphans(report, dry_run):
                raise
            if dry_run:
                return report
            manifest = self.committer.manifest()
        states, broken = self.cursors.list_all()
        stale = [b for b in broken if b.stale]
        broken = [b for b in broken if not b.stale]
        if broken and manifest.retention is None:
            raise GCRefused(
                f"{self.url}: {len(broken)} cursor(s) are broken (unreadable, or beyond the tail), "
                "and each may be pinning data or would release records no consumer read, so "
                "nothing is collected: "
                + "; ".join(f"{b.key}: {b.problem} (fix: {b.fix(self.url)})" for b in broken)
            )
        report.cursors = {c.name: c.cursor.offset for c in states}
        for cursor in stale:  # its consumer has read none of this incarnation: it pins it whole
            report.cursors[cursor.name] = manifest.oldest_offset
            report.notes.append(f"cursor {cursor.name} is stale ({cursor.problem}); it keeps "
                                f"every record until its consumer resets it (fix: {cursor.fix(self.url)})")
        self._holds(report, dry_run)
        self._retention(report, manifest)
        self._held_back(report, manifest.own_oldest_offset)
        if broken:  # only the retention policy releases records: the cursors cannot be judged
            report.notes.append(
                f"{len(broken)} cursor(s) are broken, so only the retention policy releases records: "
                + "; ".join(f"{b.key}: {b.problem} (fix: {b.fix(self.url)})" for b in broken))
        self._trust_cursors = not broken
        report.cutoff = self._cutoff(report.cursors, keep_from, report.holds, report.retention_cutoff)
        computed = False
        for _ in range(8):
            loaded = self.garbage.load()
            garbage = Garbage.empty() if loaded is None else loaded.value
            if garbage.is_empty():
                if computed or report.cutoff is None:
                    break
                computed = True
                if not self._compute(report, dry_run):
                    break
                continue
            manifest = self.committer.manifest()
            if not garbage_applied(manifest, garbage):
                if dry_run:
                    report.notes.append("pending garbage is not yet applied to the manifest")
                    break
                held = lowest_hold(self.store)
                if held is not None and held < garbage.first_to_keep:
                    # a branch or tag was created since the garbage was computed: it wins
                    report.notes.append(f"a hold at {held} appeared since the garbage was "
                                        "computed; computing it again")
                    self._replace_garbage(garbage, Garbage.empty())
                    _forget(report)
                    report.holds = {h.key: h.start for h in holds(self.store)}
                    self._held_back(report, manifest.own_oldest_offset)
                    report.cutoff = self._cutoff(report.cursors, keep_from, report.holds, report.retention_cutoff)
                    computed = False
                    continue
                if report.first_to_keep != garbage.first_to_keep:
                    self._measure(report, manifest, garbage)  # another run's (or a crashed one's)
                try:
                    self.committer.update(functools.partial(self._apply, garbage=garbage))
                except GarbageStale as exc:
                    logger.warning("%s: %s; computing it again", self.url, exc)
                    report.notes.append(f"stale garbage reset: {exc}")
                    self._replace_garbage(garbage, Garbage.empty())
                    _forget(report)
                    computed = False
                    continue
                self._step(report, "apply")
            if garbage.applied_epoch_us is None:
                if dry_run:
                    break
                marked = replace(garbage, applied_epoch_us=micros(self.clock))
                if not self._replace_garbage(garbage, marked):
                    continue  # another collector moved it on: look again
                garbage = marked
                self._step(report, "mark")
            assert garbage.applied_epoch_us is not None  # marked above, or by an earlier run
            delete_after = garbage.applied_epoch_us / 1e6 + self.grace_s
            if self.clock.now() < delete_after:
                report.pending, report.delete_after = garbage.summary(), delete_after
                report.notes.append(
                    f"garbage below offset {garbage.first_to_keep} is applied; its files are "
                    f"deleted by a run after {utc_text(delete_after)}"
                )
                break
            if dry_run:
                report.pending = garbage.summary()
                report.deleted.extend(self._deletable(garbage))
                break
            self._delete(garbage, report)
            self._step(report, "delete")
            self._replace_garbage(garbage, Garbage.empty())  # unless another collector reset it
            self._step(report, "reset")
        self._sweep_orphans(report, dry_run=dry_run)
        final = self.committer.manifest()
        report.oldest_offset, report.next_offset = final.oldest_offset, final.next_offset
        return report

    def _apply(self, manifest: Manifest, garbage: Garbage) -> Manifest | None:
        """`apply_garbage`, refusing (GarbageStale: computed again) when a snapshot the garbage
        publishes may be swept: written before the orphan horizon of the manifest swapped
        against (a collector reused an orphan a concurrent run's sweep is deleting), or gone."""
        horizon = manifest.orphan_horizon_us
        if horizon is not None and not garbage_applied(manifest, garbage):
            for snapshot in garbage.snapshots_to_make:
                try:
                    fresh = self.store.head(snapshot.path).last_modified * 1e6 >= horizon
                except ObjectNotFound:
                    fresh = False
                if not fresh:
                    raise GarbageStale(f"its rebuilt snapshot {snapshot.path} predates the orphan horizon")
        return apply_garbage(manifest, garbage, self.writer, now_us=micros(self.clock))

    def _step(self, report: GCReport, name: str) -> None:
        report.steps.append(name)
        logger.info("%s: gc %s done", self.url, name)
        if self._after_step is not None:
            self._after_step(name)

    def _holds(self, report: GCReport, dry_run: bool) -> None:
        """Read the pins and held tags into `report.holds`, dropping (unless `dry_run`) the
        pins older than the orphan grace whose branch does not read through them."""
        orphan_before_us = int((self._orphan_clock.now() - self.orphan_grace_s) * 1e6)
        for hold in holds(self.store, orphan_before_us=orphan_before_us):
            if hold.orphan:
                report.pins_dropped.append(hold.key)
                if not dry_run:
                    logger.info("%s: dropping %s: its branch does not read through it", self.url, hold.key)
                    with contextlib.suppress(ObjectNotFound):
                        self.store.delete(hold.key)
                continue
            report.holds[hold.key] = hold.start

    def _retention(self, report: GCReport, manifest: Manifest) -> None:
        """Read the log's retention policy and the first offset it keeps now into `report`."""
        if manifest.retention is None:
            return
        report.retention = manifest.retention.to_dict()
        report.retention_cutoff = policy_cutoff(self.store, manifest, micros(self.clock), self.snapshots)

    def _cutoff(self, cursors: dict[str, int], keep_from: int | None,
                holds: dict[str, int] | None = None, retention_cutoff: int | None = None) -> int | None:
        """The lowest cursor, raised to what the retention policy keeps (it overtakes cursors),
        then lowered to the lowest hold and `keep_from` (pins and held tags hold it back); None
        when neither cursors nor the policy release anything (nothing is known to be consumed)."""
        release = min(cursors.values()) if cursors and self._trust_cursors else None
        if retention_cutoff is not None:
            release = retention_cutoff if release is None else max(release, retention_cutoff)
        if release is None:
            return None
        cutoff = min([release, *(holds or {}).values()])
        if keep_from is not None:
            cutoff = min(cutoff, keep_from)
        return cutoff

    # -- phase 1 ------------------------------------------------------------------------

    def _compute(self, report: GCReport, dry_run: bool) -> bool:
        manifest = self.committer.manifest()
        cutoff = report.cutoff
        assert cutoff is not None
        load = lambda p: load_snapshot(self.store, p, self.snapshots)  # noqa: E731
        garbage = compute_garbage(manifest, cutoff, load)
        if garbage is None:
            return False
        self._describe(report, manifest, garbage)
        if dry_run:
            report.pending = garbage.summary()
            return False
        horizon = manifest.orphan_horizon_us
        if not all(write_snapshot(self.store, s, horizon_us=horizon) for s in garbage.snapshots_to_make):
            # A rebuilt snapshot's path holds another snapshot with its setsum (or an orphan
            # older than the horizon, which a sweep may be deleting): keep the straddling
            # snapshot whole instead (collecting less is always safe).
            report.notes.append("a rebuilt snapshot's path was taken: the straddling snapshot is kept whole")
            garbage = compute_garbage(manifest, cutoff, load, rebuild=False)
            if garbage is None:
                return False
            self._describe(report, manifest, garbage)
        if not self._replace_garbage(Garbage.empty(), garbage):
            report.notes.append("another garbage collection started at the same time")
            _forget(report)
            return True  # look again: finish whatever the other one wrote
        self._step(report, "compute")
        return True

    def _describe(self, report: GCReport, manifest: Manifest, garbage: Garbage) -> None:
        """Fill in what the garbage drops; refuse (unless forced) when it is too much. What the
        retention policy removes is the policy's statement, not a cursor's mistake: only what
        the cursors drop beyond it counts against the share."""
        self._measure(report, manifest, garbage)
        self._overtaken(report, manifest, garbage)
        total = manifest.next_offset - manifest.own_oldest_offset
        dropped = report.records_dropped
        if report.retention_cutoff is not None:
            dropped = max(0, garbage.first_to_keep - max(manifest.own_oldest_offset, report.retention_cutoff))
        share = dropped / total if total else 0.0
        if share > self.max_drop_share and not self.force:
            raise GCRefused(
                f"{self.url}: collecting below offset {garbage.first_to_keep} would drop "
                f"{dropped} of the {total} records in the log ({share:.0%} > the "
                f"{self.max_drop_share:.0%} allowed); check the cursors ({report.cursors}), "
                "then pass --force (force=True) or raise --max-drop-share"
            )

    def _overtaken(self, report: GCReport, manifest: Manifest, garbage: Garbage) -> None:
        """What the retention policy removes that a consumer had not read: the records from the
        lowest cursor (the oldest offset without cursors) up to the garbage's first kept offset,
        and the cursors below that offset."""
        report.retention_removed, report.cursors_overtaken = None, {}
        if report.retention_cutoff is None:
            return
        oldest, first = manifest.own_oldest_offset, garbage.first_to_keep
        cursors = report.cursors if self._trust_cursors else {}
        report.cursors_overtaken = {name: at for name, at in sorted(cursors.items()) if at < first}
        start = min([first, *cursors.values()]) if cursors else oldest
        start = max(start, oldest)
        if start < first:
            report.retention_removed = {"start": start, "limit": first, "records": first - start}

    def _held_back(self, report: GCReport, oldest: int) -> None:
        """What the holds keep of what the retention policy would remove, into `report`."""
        cutoff = report.retention_cutoff
        report.retention_held_back = {} if cutoff is None else {
            key: cutoff - max(held, oldest) for key, held in sorted(report.holds.items()) if held < cutoff}
        if report.retention_held_back:
            report.notes.append(
                f"the retention policy ({report_policy(report)}) would remove the records below "
                f"{cutoff}; held back by "
                + ", ".join(f"{key} ({n} records kept)" for key, n in report.retention_held_back.items()))

    def _measure(self, report: GCReport, manifest: Manifest, garbage: Garbage) -> None:
        """Fill in what `garbage` drops from `manifest` (which does not hold it applied yet)."""
        report.first_to_keep = garbage.first_to_keep
        report.records_dropped = garbage.first_to_keep - manifest.own_oldest_offset
        report.snapshots_dropped = len(garbage.snapshots_to_drop)
        report.fragments_dropped = sum(
            1 for f in iter_fragments(self.store, manifest, 0, garbage.first_to_keep,
                                      cache=self.snapshots)
            if f.limit <= garbage.first_to_keep
        )

    # -- the garbage file ---------------------------------------------------------------

    def _replace_garbage(self, expected: Garbage, new: Garbage) -> bool:
        """Compare-and-swap `gc/GARBAGE` from `expected` (the empty garbage also matches an
        absent file) to `new`; False when another collector changed it first."""

        def decide(current: Garbage | None) -> Garbage | None:
            current = Garbage.empty() if current is None else current
            return new if current == expected else None

        result = self.garbage.apply(decide)
        if result.outcome is Outcome.UNKNOWN:
            raise CommitOutcomeUnknown(
                f"{self.url}: could not establish whether {GARBAGE_KEY} was written (the store "
                "kept failing until the deadline); run gc again: it finishes whatever landed"
            )
        return result.outcome is Outcome.WRITTEN

    # -- phase 3 ------------------------------------------------------------------------

    def _deletable(self, garbage: Garbage) -> list[str]:
        refs = referenced(self.store, self.committer.manifest(), self.snapshots)
        paths = [p for p in garbage.snapshot_paths() if p not in refs.snapshots]
        paths += [p for p in garbage.fragment_paths() if p not in refs.fragments]
        return paths

    def _delete(self, garbage: Garbage, report: GCReport) -> None:
        manifest = self.committer.manifest()
        if not garbage_applied(manifest, garbage):
            raise GCRefused(f"{self.url}: refusing to delete garbage the manifest still holds")
        refs = referenced(self.store, manifest, self.snapshots)
        candidates = garbage.snapshot_paths() + garbage.fragment_paths()
        unsafe = [p for p in candidates if p in refs.snapshots or p in refs.fragments]
        # A rebuilt snapshot made by this garbage can share a path with nothing it drops, but
        # the safety rule is absolute: never delete what the current manifest references.
        if unsafe:
            logger.error("%s: garbage lists referenced objects %s; keeping them", self.url, unsafe)
            report.notes.append(f"kept {len(unsafe)} referenced object(s) the garbage listed")
        # Only what can be proved one of this log's objects: a damaged or hand-written garbage
        # naming another key (a log nested below this one) must not delete it
        strays = [p for p in candidates if p not in unsafe and not is_log_object(p)]
        if strays:
            logger.error("%s: garbage lists keys that are not this log's objects %s; keeping them",
                         self.url, strays)
            report.notes.append(f"kept {len(strays)} key(s) the garbage listed that are not one of "
                                "this log's objects")
        paths = [p for p in candidates if p not in unsafe and p not in strays]
        for done, path in enumerate(paths, 1):
            self.store.delete(path)
            report.deleted.append(path)
            if self.progress:
                self.progress(done, len(paths))

    def _sweep_orphans(self, report: GCReport, *, dry_run: bool) -> None:
        """Delete what nobody references and is older than the orphan grace: UUID fragments
        (by their UUIDv7 time) and snapshots (by their last-modified time: those written by
        commit attempts that lost their race or never landed), except what the pending garbage
        lists (`_held`).

        The orphan horizon is raised (by compare-and-swap) past every candidate before any is
        deleted, and the references are taken from the manifest that carries it: a commit that
        landed before the horizon is seen there, a commit after it is refused by the committer
        (fragments) or rolls another snapshot (`snapshots.write_snapshot`).
        """
        old = self._aged()
        orphan_before_us = int((self._orphan_clock.now() - self.orphan_grace_s) * 1e6)
        _, records = replaced_held(self.store, orphan_before_us)
        kept = self._held(self.committer.manifest()) if old else frozenset()
        candidates = sorted(key for key in old if key not in kept)
        if dry_run:
            report.orphans_deleted = candidates
            return
        if not candidates:
            self._delete_records(records)
            return
        horizon_us = max(old[key] for key in candidates) + 1
        result = self.committer.update_result(lambda m: m.with_orphan_horizon(horizon_us, self.writer))
        assert result.current is not None
        report.orphan_horizon_us = horizon_us
        fenced = result.current.value
        kept = self._held(fenced)
        for key in candidates:
            if fenced.parent is not None and key.startswith(FRAGMENT_PREFIX):
                # a branch's checkpoint copies its parent's (old) fragments in before its
                # manifest references them: none is an orphan until the branch is standalone
                continue
            if key not in kept:
                self.store.delete(key)
                report.orphans_deleted.append(key)
        self._delete_records(records)

    def _delete_records(self, records: list[str]) -> None:
        """Delete compaction records past the grace they kept fragments for, last: every
        fragment one lists is then gone or an orphan older than the orphan horizon, which the
        committer refuses, so no commit that resolves by the records needs them any more
        (`wal3_spark.log.replaced`)."""
        for key in records:
            self.store.delete(key)

    def _aged(self) -> dict[str, int]:
        """The UUID fragments and the snapshots older than the orphan grace, with their age
        (UUIDv7 time; last-modified time for snapshots), µs."""
        cutoff_us = int((self._orphan_clock.now() - self.orphan_grace_s) * 1e6)
        old = {
            m.key: fragment_created_us(m)
            for m in self.store.list(FRAGMENT_PREFIX)
            if parse_fragment_uuid(m.key) is not None and fragment_created_us(m) < cutoff_us
        }
        old.update(
            (m.key, int(m.last_modified * 1e6))
            for m in self.store.list(SNAPSHOT_PREFIX)
            # only keys of this log's layout: a log nested below it and named `snapshot`
            # lists its own objects under this prefix, and they are never this log's orphans
            if is_log_object(m.key) and m.last_modified * 1e6 < cutoff_us
        )
        return old

    def _fence_orphans(self, report: GCReport, dry_run: bool) -> bool:
        """A name without a manifest that holds fragments or snapshots older than the orphan
        grace (a failed or killed job's, for a log it never created): create an empty log there
        (create-if-absent), so that the orphan sweep can raise its horizon before it deletes
        them. That horizon is what keeps a first commit still in flight (its fragments uploaded,
        the manifest not yet created) from publishing deleted fragments: its create loses to
        this one, and its decision on the new manifest refuses fragments older than the horizon
        (`PastOrphanHorizon`: nothing committed, rerun). Deleting the empty log again could
        never be made safe (a commit may be turning it into a log at that moment, and stores
        have no conditional delete), so it stays: `wal3 ls` shows an empty log. False (nothing
        done) when nothing is old enough: younger objects may be a first commit in flight."""
        old = self._aged()
        if not old:
            return False
        report.notes.append(f"no log here, but {len(old)} object(s) older than the orphan grace "
                            "(left by a job that never created the log): "
                            + ("they would be deleted" if dry_run else
                               "created an empty log to fence them, and swept them"))
        if dry_run:
            report.orphans_deleted = sorted(old)
            return True
        logger.warning("%s: no manifest, but %d object(s) older than the orphan grace; creating an "
                    "empty log to fence them before deleting them", self.url, len(old))
        self.committer.create()
        return True

    def _held(self, manifest: Manifest) -> frozenset[str]:
        """The fragments and snapshots the orphan sweep must keep: those `manifest` references,
        and those the pending garbage lists: what it drops waits for the delete step and its
        grace interval, which readers of a manifest from before the apply rely on; what it
        makes is published by its apply step.

        The garbage is read after the manifest: garbage is written before its apply and reset
        only after its delete step, so garbage applied before `manifest` was read is either
        still in `gc/GARBAGE` now, or was deleted by a delete step once its grace had passed.
        """
        refs = referenced(self.store, manifest, self.snapshots)
        loaded = self.garbage.load()
        pending: set[str] = set()
        if loaded is not None:
            garbage = loaded.value
            pending.update(garbage.fragment_paths_to_drop, garbage.snapshot_paths())
            pending.update(s.path for s in garbage.snapshots_to_make)
            if garbage.snapshot_for_root is not None:
                pending.add(garbage.snapshot_for_root.path_to_snapshot)
        orphan_before_us = int((self._orphan_clock.now() - self.orphan_grace_s) * 1e6)
        replaced, _ = replaced_held(self.store, orphan_before_us)
        return refs.fragments | refs.snapshots | frozenset(pending) | replaced


def collect_garbage(
    log: StoreLike,
    gc_options: GCOptions | None = None,
    *,
    options: Mapping[str, str] | None = None,
    keep_from: int | None = None,
    dry_run: bool = False,
    clock: Clock = SYSTEM,
    progress: Callable[[int, int], None] | None = None,
) -> GCReport:
    """Run garbage collection on the log at `log` (a URL or an ObjectStore) once, as
    `gc_options` say; `keep_from` may only lower the cursors' cutoff, `dry_run` deletes
    nothing and reports what a run would delete."""
    return GarbageCollector(log, gc_options, options=options, clock=clock, progress=progress).run(
        keep_from=keep_from, dry_run=dry_run)


__all__ = [
    "DEFAULT_GRACE_S",
    "DEFAULT_MAX_DROP_SHARE",
    "MIN_ORPHAN_GRACE_S",
    "GCOptions",
    "GCReport",
    "GarbageCollector",
    "collect_garbage",
    "referenced",
]
