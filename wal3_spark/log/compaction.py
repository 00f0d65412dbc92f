"""Compaction: runs of consecutive small fragments rewritten as one, every record kept.

Three steps, so that a Spark job can spread the work (jobs/compact.py): `plan` reads
the manifest and picks the runs (`Run`: all an executor needs, picklable), `rewrite` turns one
run into one uploaded, verified fragment and its `compacted/` record (`Rewritten`, picklable),
and `commit` replaces every rewritten run of the log with one compare-and-swap. `compact` does
the three in one process.

docs/format.md section 4, "Compacted fragments". A run's fragments are read and verified
(a damaged one refuses the compaction, naming it), their rows written to one new fragment in
segments, each hashed as the fragment it came from was, so the new fragment's setsum, recomputed
from its bytes, equals the sum of the run's: the log's setsum never changes. One compare-and-swap
replaces the run's entries by the new one; appends racing it are rebased (the run lies below the
tail). A racing garbage collection, compaction, re-created log or anything else that changed the
run makes the new fragment an orphan for GC's sweep: nothing is lost, duplicated or re-ordered.

Compaction deletes nothing. Before its compare-and-swap it records the fragments it replaces in
`compacted/<new fragment's UUID>.json`, so that GC's orphan sweep keeps them for the orphan grace
after the compaction (readers that planned on the older manifest finish), not by their own age.

Fragments younger than `CompactOptions.settle_s` are not compacted (0 by default: `SETTLE_S`
says why), fragments a branch's pin covers are never replaced (the branch reads them by their
paths), nor are fragments of a Chroma S3 log (sequence-number fragments); a sealed log is
compacted (its records are kept, nothing is appended). Fragments inside the youngest snapshot
are compacted by lifting it: the commit replaces its pointer by its fragments, runs of them
merged (a snapshot with the same setsum and other children would need its path, which names the
setsum); the lifted snapshot is held like the replaced fragments (docs/format.md section 4,
"Inside snapshots").

A raw log is compacted only when asked with `allow_chroma_incompatible`: Chroma's wal3 reads a
raw log's fragments itself and rejects a fragment whose rows carry different write times, which a
compacted one does (docs/format.md section 4, "Compacted fragments", "Chroma"), so a log Chroma
reads would become unreadable to it. Without the opt-in the compaction refuses and changes
nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING

import pyarrow as pa

from wal3_spark.clock import SYSTEM, Clock, micros
from wal3_spark.errors import CompactionRefused, InvalidOption, LogNotFound
from wal3_spark.format.layout import FragmentRef, SnapshotPointer
from wal3_spark.format.manifest import Manifest
from wal3_spark.format.setsum import Setsum
from wal3_spark.format.uuid7 import uuid7_timestamp_us
from wal3_spark.log import steps
from wal3_spark.log.committer import Committer
from wal3_spark.log.fragment_io import load_fragment, write_fragment
from wal3_spark.log.holds import list_pins
from wal3_spark.log.replaced import record_replaced
from wal3_spark.log.snapshots import load_snapshot
from wal3_spark.storage import StoreLike, resolve_store
from wal3_spark.storage.base import ObjectStore

if TYPE_CHECKING:
    from wal3_spark.format.fragment import DecodedFragment, FragmentBuilder

logger = logging.getLogger(__name__)

DEFAULT_TARGET_BYTES = 64 << 20
DEFAULT_MIN_FRAGMENTS = 2
#: the smallest target: a fragment of one record is about 1 KB (its Parquet or Arrow footer), so
#: a smaller target cannot hold one fragment and would merge nothing on any log
MIN_TARGET_BYTES = 1 << 10
#: by default a fragment is compacted however young it is. A writer whose commit was ambiguous
#: looks for its fragments by their paths until its commit deadline; this package's writers see
#: through a compaction that replaced them meanwhile (its record lists them, with their offsets:
#: `wal3_spark.log.replaced`), so nothing needs them to stay. Writers that do not know compaction
#: records (Chroma's, wal3-spark before them) would append such fragments again: on a log they
#: append to, compact with `settle_s` of three of their commit deadlines (`SETTLE_FOREIGN_S`)
SETTLE_S = 0.0
SETTLE_FOREIGN_S = 900.0
#: how many of a run's fragments `rewrite` fetches at once: each is a GET (on object storage
#: tens of ms, mostly waiting), so a few in flight hide the latency; more gains little on 2 cores
FETCH_THREADS = 8


@dataclass(frozen=True)
class CompactOptions:
    """What a compaction merges: runs of at least `min_fragments` consecutive fragments smaller
    than `target_bytes`, grouped until they reach it; a raw log only with
    `allow_chroma_incompatible` (see the module docstring)."""

    target_bytes: int = DEFAULT_TARGET_BYTES
    min_fragments: int = DEFAULT_MIN_FRAGMENTS
    allow_chroma_incompatible: bool = False
    #: fragments younger than this (seconds, by their UUIDv7) are kept (see `SETTLE_S`)
    settle_s: float = SETTLE_S

    def __post_init__(self) -> None:
        size = self.target_bytes
        if isinstance(size, bool) or not isinstance(size, int) or size < MIN_TARGET_BYTES:
            raise InvalidOption(
                f"target_bytes={size!r}: give a size in bytes of at least {MIN_TARGET_BYTES} "
                "(1KiB: a fragment of one record is about 1 KB, so a smaller target cannot hold "
                "one fragment), e.g. 64MiB")
        count = self.min_fragments
        if isinstance(count, bool) or not isinstance(count, int) or count < 2:
            raise InvalidOption(f"min_fragments={count!r}: give an integer >= 2 (merging one "
                                "fragment changes nothing)")
        settle = self.settle_s
        if isinstance(settle, bool) or not isinstance(settle, (int, float)) or not settle >= 0:
            raise InvalidOption(f"settle_s={settle!r}: give seconds >= 0 (fragments younger than that "
                                f"are kept; {SETTLE_FOREIGN_S:.0f} on a log that writers not knowing "
                                "compaction records append to)")


@dataclass(frozen=True)
class Run:
    """One run of fragments to merge, with everything `rewrite` needs (an executor gets it
    pickled): the fragments, and the log's schema and setsum item hash."""

    #: its place among the plan's runs
    number: int
    fragments: tuple[FragmentRef, ...]
    schema: pa.Schema | None
    item_hash: str | None
    #: the log's incarnation the run was planned in (its `compacted/` record names it)
    incarnation: str | None = None
    #: the snapshots the commit lifts into the manifest (`CompactionPlan.lifted`): the run's
    #: `compacted/` record holds them for the orphan grace as it holds the replaced fragments
    lifted: tuple[str, ...] = ()

    @property
    def start(self) -> int:
        return self.fragments[0].start

    @property
    def limit(self) -> int:
        return self.fragments[-1].limit


@dataclass(frozen=True)
class Rewritten:
    """A run rewritten: its new fragment, uploaded, verified and recorded in `compacted/`, not
    yet in the manifest (an orphan until `commit` puts it there)."""

    number: int
    fragment: FragmentRef


@dataclass
class CompactReport:
    """What one compaction did (or, with `dry_run`, would do)."""

    url: str
    dry_run: bool = False
    fragments_before: int = 0
    fragments_after: int = 0
    #: each run compacted: [start, limit) offsets, fragments replaced, the new fragment's path
    runs: list[dict] = field(default_factory=list)
    records_rewritten: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    #: runs another process changed before the commit: their new fragment is an orphan
    conflicts: int = 0
    #: snapshots whose fragments were moved back into the manifest to be compacted
    snapshots_lifted: int = 0
    setsum: str = ""
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class CompactionPlan:
    """The runs of one log to merge, planned on `manifest` (the version `commit` checks them
    against), among `children` (the fragments of the snapshot pointers `lifted`, the youngest
    of the manifest's, which the commit replaces by them) followed by the manifest's own."""

    url: str
    manifest: Manifest
    runs: tuple[Run, ...]
    notes: tuple[str, ...] = ()
    lifted: tuple[SnapshotPointer, ...] = ()
    children: tuple[FragmentRef, ...] = ()

    @property
    def lifts(self) -> bool:
        """Whether a run starts among the lifted snapshot's fragments: only then is it lifted (a
        caller that keeps only runs of the manifest's own fragments lifts nothing)."""
        children = {f.path for f in self.children}
        return any(run.fragments[0].path in children for run in self.runs)

    def report(self, dry_run: bool = False) -> CompactReport:
        """The report of the plan alone: what a dry run says, where `commit` starts from."""
        before, lifts = len(self.manifest.fragments), self.lifts
        after = before + (len(self.children) if lifts else 0) - sum(len(r.fragments) - 1 for r in self.runs)
        report = CompactReport(self.url, dry_run=dry_run, fragments_before=before, fragments_after=after,
                               snapshots_lifted=len(self.lifted) if lifts else 0,
                               setsum=self.manifest.setsum.hexdigest(), notes=list(self.notes))
        for run in self.runs:
            report.runs.append({"start": run.start, "limit": run.limit, "fragments": len(run.fragments)})
            report.records_rewritten += run.limit - run.start
            report.bytes_read += sum(f.num_bytes for f in run.fragments)
        return report


def plan_runs(refs: Sequence[FragmentRef], target_bytes: int, min_fragments: int,
              pinned_below: int, settled_before_us: int) -> list[tuple[int, int]]:
    """Index ranges [i, j) of `refs` to merge: consecutive fragments smaller than
    `target_bytes`, at or after `pinned_below`, written before `settled_before_us`, grouped
    until they reach it, at least `min_fragments` each."""
    runs: list[tuple[int, int]] = []
    i = 0

    def fits(ref: FragmentRef) -> bool:
        written = uuid7_timestamp_us(str(ref.seq_no))
        return (ref.num_bytes < target_bytes and ref.start >= pinned_below
                and written is not None and written <= settled_before_us)

    while i < len(refs):
        if not fits(refs[i]):
            i += 1
            continue
        j, size = i, 0
        while j < len(refs) and fits(refs[j]) and size < target_bytes:
            size += refs[j].num_bytes
            j += 1
        if j - i >= min_fragments:
            runs.append((i, j))
        i = j
    return runs


def plan(store: ObjectStore, options: CompactOptions | None = None, clock: Clock = SYSTEM) -> CompactionPlan:
    """The runs of the log to merge now (none: nothing to do, the notes say why when it is not
    obvious). Raises LogNotFound when there is no log, CompactionRefused for a raw log without
    the opt-in."""
    options = options or CompactOptions()
    loaded = Committer(store).load()
    if loaded is None:
        raise LogNotFound(store.url)
    manifest = loaded[0]
    if manifest.uses_seq_nos:
        return CompactionPlan(store.url, manifest, (),
                              ("a Chroma S3 log (sequence-number fragments): not compacted",))
    if manifest.is_raw and not options.allow_chroma_incompatible:
        raise CompactionRefused(
            f"{store.url} is a raw log, and Chroma's wal3 cannot read a compacted raw fragment: "
            "its rows keep their own write times, while Chroma's reader requires one timestamp_us "
            "per fragment, and Chroma's scrub recomputes a fragment's setsum over the file as one "
            "fragment. Nothing was changed. If no Chroma process reads this log, compact it with "
            "--allow-chroma-incompatible (allow_chroma_incompatible=True); see docs/format.md, "
            "\"Compacted fragments\"")
    notes = []
    pins = list_pins(store)
    pinned_below = max((pin.offset for pin, _ in pins.values()), default=0)
    if pins:
        notes.append(f"fragments below offset {pinned_below} are kept: branches read them "
                     f"({', '.join(sorted(pins))})")
    if len(manifest.fragments) >= options.min_fragments and all(
            f.num_bytes >= options.target_bytes for f in manifest.fragments):
        notes.append(f"every fragment holds at least the target ({options.target_bytes} bytes; the "
                     f"smallest {min(f.num_bytes for f in manifest.fragments)}): nothing to merge, "
                     "give a larger --target-bytes to merge them")
    settled_before_us = micros(clock) - int(options.settle_s * 1e6)

    def runs_of(refs: tuple[FragmentRef, ...]) -> list[tuple[int, int]]:
        return plan_runs(refs, options.target_bytes, options.min_fragments, pinned_below, settled_before_us)

    lifted, children = _liftable(store, manifest, pinned_below)
    ranges = runs_of(children + manifest.fragments)
    if lifted and not any(i < len(children) for i, _ in ranges):  # nothing to merge in it: stays
        lifted, children = (), ()
        ranges = runs_of(manifest.fragments)
    refs = children + manifest.fragments
    schema, item_hash = manifest.arrow_schema(), manifest.item_hash
    held = tuple(p.path_to_snapshot for p in lifted)
    runs = tuple(Run(number, refs[i:j], schema, item_hash, manifest.incarnation, held)
                 for number, (i, j) in enumerate(ranges))
    return CompactionPlan(store.url, manifest, runs, tuple(notes), lifted, children)


def _liftable(store: ObjectStore, manifest: Manifest,
              pinned_below: int) -> tuple[tuple[SnapshotPointer, ...], tuple[FragmentRef, ...]]:
    """The snapshot whose fragments a compaction may merge, and its fragments: the manifest's
    youngest snapshot pointer when it holds fragments (depth 1) and no branch's pin reaches into
    it (docs/format.md section 4, "Compacted fragments", "Inside snapshots")."""
    if not manifest.snapshots:
        return (), ()
    pointer = manifest.snapshots[-1]
    if pointer.depth != 1 or pointer.start < pinned_below:
        return (), ()
    return (pointer,), load_snapshot(store, pointer).fragments


def _add_fragment(builder: FragmentBuilder, ref: FragmentRef, decoded: DecodedFragment) -> None:
    """Add one fragment of the run to `builder`, segment by segment (each keeps its write time)."""
    payload, first = decoded.payload, 0
    for segment in ref.segments or [None]:
        rows = decoded.records if segment is None else segment.records
        builder.add_segment(payload.slice(first, rows), decoded.timestamp_us[first:first + rows])
        first += rows


def rewrite(store: ObjectStore, run: Run, clock: Clock = SYSTEM) -> Rewritten:
    """The run's rows as one uploaded fragment, checked (its setsum, recomputed from its bytes,
    is the run's, else nothing is uploaded), and its `compacted/` record written. Reading a
    damaged fragment raises CorruptLog naming it. Safe to retry or to die in: what it leaves
    behind is an orphan until `commit`."""
    from wal3_spark.format.fragment import FragmentBuilder  # fragment_io's docstring says why

    columns = {f.filter.column for f in run.fragments if f.filter is not None}
    builder = FragmentBuilder(run.schema, micros(clock), item_hash=run.item_hash,
                              filter_column=columns.pop() if len(columns) == 1 else None)
    with ThreadPoolExecutor(min(FETCH_THREADS, len(run.fragments)), thread_name_prefix="wal3-compact") as pool:
        # fetched and checked a few at a time (a GET each: on object storage tens of ms), used
        # in the run's order; what is fetched ahead is part of the run, which is about the target
        # size, so memory stays about what the builder holds anyway
        loaded = pool.map(lambda ref: load_fragment(store, ref, run.schema is None, item_hash=run.item_hash),
                          run.fragments)
        for ref, decoded in zip(run.fragments, loaded, strict=True):  # CorruptLog names the fragment
            _add_fragment(builder, ref, decoded)
    encoded = builder.finish()
    expected = Setsum.sum(f.setsum for f in run.fragments)
    if encoded.setsum != expected:  # never commits what does not hold exactly the run's records
        raise AssertionError(f"compacted fragment setsum {encoded.setsum.hexdigest()} is not the "
                             f"run's {expected.hexdigest()}")
    file = write_fragment(store, encoded, clock=clock)
    steps.done("upload")  # the new fragment stored, no record of it yet: an orphan
    new = FragmentRef(file.path, file.uuid, run.start, run.limit, file.num_bytes, file.setsum,
                      filter=file.filter, blake3=file.blake3, segments=encoded.segments)
    record_replaced(store, new, run.fragments, run.incarnation, run.lifted)
    return Rewritten(run.number, new)


def commit(store: ObjectStore, plan: CompactionPlan, rewritten: Sequence[Rewritten]) -> CompactReport:
    """Replace each rewritten run by its new fragment with one compare-and-swap of the manifest
    (appends that raced it are rebased: the runs lie below the tail). A run another process
    changed since `plan` (a garbage collection, compaction, re-creation) is a conflict: its new
    fragment stays an orphan for GC's sweep, the others are committed. Whether a run was
    committed is read from the manifest the compare-and-swap left, so a write that timed out
    but landed counts as committed."""
    report = plan.report()
    runs = {run.number: run for run in plan.runs}
    pairs = [(runs[r.number].fragments, r.fragment) for r in rewritten]
    final = plan.manifest
    if pairs:
        committer = Committer(store, writer="wal3-spark compact")
        result = committer.update_result(lambda current: _replace(current, plan, pairs))
        steps.done("commit")
        final = result.current.value if result.current is not None else committer.manifest()
    present = {f.path for f in final.fragments}
    for r in rewritten:
        entry = report.runs[r.number]
        entry["path"] = r.fragment.path
        report.bytes_written += r.fragment.num_bytes
        if r.fragment.path not in present:
            report.conflicts += 1
            entry["conflict"] = True
            logger.warning("%s: offsets [%d, %d) changed while being compacted; %s is an orphan "
                           "for garbage collection", store.url, entry["start"], entry["limit"],
                           r.fragment.path)
    report.fragments_after = len(final.fragments)
    children = {f.path for f in plan.children}  # a run among them committed: the lift did too
    lifted = any(runs[r.number].fragments[0].path in children and r.fragment.path in present for r in rewritten)
    report.snapshots_lifted = len(plan.lifted) if lifted else 0
    report.setsum = final.setsum.hexdigest()
    return report


def compact(
    log: StoreLike,
    *,
    target_bytes: int = DEFAULT_TARGET_BYTES,
    min_fragments: int = DEFAULT_MIN_FRAGMENTS,
    dry_run: bool = False,
    allow_chroma_incompatible: bool = False,
    options: dict[str, str] | None = None,
    clock: Clock = SYSTEM,
    settle_s: float = SETTLE_S,
) -> CompactReport:
    """Rewrite the log's runs of small fragments into fragments of about `target_bytes`: `plan`,
    `rewrite` each run, `commit` them. Its steps (`wal3_spark.log.steps`): "upload" (a run's new
    fragment stored), "rewrite" (its `compacted/` record written too), "commit" (the manifest's
    compare-and-swap answered); a kill after any of them leaves the log reading as before.

    A raw log is refused (`CompactionRefused`, nothing changed) unless `allow_chroma_incompatible`
    says that no Chroma process reads it (see the module docstring)."""
    settings = CompactOptions(target_bytes, min_fragments, allow_chroma_incompatible, settle_s)
    store = resolve_store(log, options)
    planned = plan(store, settings, clock)
    if dry_run or not planned.runs:
        return planned.report(dry_run)
    rewritten = []
    for run in planned.runs:
        rewritten.append(rewrite(store, run, clock))
        steps.done("rewrite")
    return commit(store, planned, rewritten)


def _replace(current: Manifest, plan: CompactionPlan,
             pairs: Sequence[tuple[tuple[FragmentRef, ...], FragmentRef]]) -> Manifest | None:
    """`current` with each run replaced by its new fragment, where the run is there as it was;
    None (nothing to do) when no run is, or the log is another incarnation. A new fragment GC
    fenced (older than the orphan horizon) is not committed either. The plan's lifted snapshot
    is replaced by its fragments while it is still the youngest pointer; otherwise (a rollover
    or a collection changed the snapshots) the runs among its fragments are not there."""
    if current.incarnation != plan.manifest.incarnation:
        return None
    snapshots, fragments, horizon = current.snapshots, current.fragments, current.orphan_horizon_us
    n = len(plan.lifted)
    if n and plan.lifts and snapshots[-n:] == plan.lifted:
        snapshots, fragments = snapshots[:-n], plan.children + fragments
    unchanged = fragments
    for run, new in pairs:
        if horizon is not None and (uuid7_timestamp_us(str(new.seq_no)) or 0) < horizon:
            continue
        paths = [f.path for f in fragments]
        try:
            i = paths.index(run[0].path)
        except ValueError:
            continue
        if fragments[i:i + len(run)] == run:
            fragments = fragments[:i] + (new,) + fragments[i + len(run):]
    if fragments == unchanged:
        return None
    replaced = [f for run, _ in pairs for f in run if f not in fragments]
    newest = max((uuid7_timestamp_us(str(f.seq_no)) or 0 for f in replaced), default=0)
    return replace(current, snapshots=snapshots, fragments=fragments, writer="wal3-spark compact",
                   compacted_written_us=max(current.compacted_written_us or 0, newest))
