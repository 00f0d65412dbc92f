"""Compaction: runs of consecutive small fragments rewritten as one, every record kept.

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

Fragments younger than `SETTLE_S` are not compacted (their writers may still be looking for
them by path), and fragments a branch's pin covers are never replaced (the branch reads them by their paths), nor
are fragments inside snapshots or of a Chroma S3 log (sequence-number fragments); a sealed log
is compacted (its records are kept, nothing is appended).

A raw log is compacted only when asked with `allow_chroma_incompatible`: Chroma's wal3 reads a
raw log's fragments itself and rejects a fragment whose rows carry different write times, which a
compacted one does (docs/format.md section 4, "Compacted fragments", "Chroma"), so a log Chroma
reads would become unreadable to it. Without the opt-in the compaction refuses and changes
nothing.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace

from wal3_spark.clock import SYSTEM, Clock, micros
from wal3_spark.errors import CompactionRefused, CorruptLog, InvalidOption, LogNotFound, ObjectNotFound
from wal3_spark.format.deletion import is_log_object
from wal3_spark.format.fragment import FragmentBuilder
from wal3_spark.format.layout import FragmentRef
from wal3_spark.format.manifest import Manifest
from wal3_spark.format.setsum import Setsum
from wal3_spark.format.uuid7 import uuid7_timestamp_us
from wal3_spark.log.committer import Committer
from wal3_spark.log.fragment_io import load_fragment, write_fragment
from wal3_spark.log.holds import list_pins
from wal3_spark.storage import StoreLike, resolve_store
from wal3_spark.storage.base import ObjectStore

logger = logging.getLogger(__name__)

DEFAULT_TARGET_BYTES = 64 << 20
DEFAULT_MIN_FRAGMENTS = 2
#: a fragment is compacted only once it is this old (by its UUIDv7): a writer whose commit was
#: ambiguous looks for its fragments by their paths until its commit deadline (300 s,
#: `CasPolicy.deadline_s`), and would append them again if a compaction had replaced them by
#: then; three deadlines, as garbage collection's shortest orphan grace
SETTLE_S = 900.0
#: where a compaction records the fragments it replaced (see the module docstring)
REPLACED_PREFIX = "compacted/"


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
    setsum: str = ""
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def plan_runs(manifest: Manifest, target_bytes: int, min_fragments: int,
              pinned_below: int, settled_before_us: int) -> list[tuple[int, int]]:
    """Index ranges [i, j) of `Manifest.fragments` to merge: consecutive fragments smaller than
    `target_bytes`, at or after `pinned_below`, written before `settled_before_us`, grouped
    until they reach it, at least `min_fragments` each."""
    runs: list[tuple[int, int]] = []
    i, refs = 0, manifest.fragments

    def fits(ref: FragmentRef) -> bool:
        written = uuid7_timestamp_us(str(ref.seq_no))
        return (ref.num_bytes < target_bytes and ref.start >= pinned_below
                and written is not None and written < settled_before_us)

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


def compact(
    log: StoreLike,
    *,
    target_bytes: int = DEFAULT_TARGET_BYTES,
    min_fragments: int = DEFAULT_MIN_FRAGMENTS,
    dry_run: bool = False,
    allow_chroma_incompatible: bool = False,
    options: dict[str, str] | None = None,
    clock: Clock = SYSTEM,
    before_commit: Callable[[int], None] | None = None,
) -> CompactReport:
    """Rewrite the log's runs of small fragments into fragments of about `target_bytes`.

    A raw log is refused (`CompactionRefused`, nothing changed) unless `allow_chroma_incompatible`
    says that no Chroma process reads it (see the module docstring).
    `before_commit(run)` is called after a run's fragment and record are written, before its
    compare-and-swap (tests race other writers there)."""
    if isinstance(target_bytes, bool) or not isinstance(target_bytes, int) or target_bytes <= 0:
        raise InvalidOption(f"target_bytes={target_bytes!r}: give a size in bytes > 0, e.g. 64MiB")
    if isinstance(min_fragments, bool) or not isinstance(min_fragments, int) or min_fragments < 2:
        raise InvalidOption(f"min_fragments={min_fragments!r}: give an integer >= 2 (merging one "
                            "fragment changes nothing)")
    store = resolve_store(log, options)
    committer = Committer(store, writer="wal3-spark compact")
    loaded = committer.load()
    if loaded is None:
        raise LogNotFound(store.url)
    manifest = loaded[0]
    report = CompactReport(store.url, dry_run=dry_run, fragments_before=len(manifest.fragments),
                           setsum=manifest.setsum.hexdigest())
    if manifest.uses_seq_nos:
        report.notes.append("a Chroma S3 log (sequence-number fragments): not compacted")
        report.fragments_after = report.fragments_before
        return report
    if manifest.is_raw and not allow_chroma_incompatible:
        raise CompactionRefused(
            f"{store.url} is a raw log, and Chroma's wal3 cannot read a compacted raw fragment: "
            "its rows keep their own write times, while Chroma's reader requires one timestamp_us "
            "per fragment, and Chroma's scrub recomputes a fragment's setsum over the file as one "
            "fragment. Nothing was changed. If no Chroma process reads this log, compact it with "
            "--allow-chroma-incompatible (allow_chroma_incompatible=True); see docs/format.md, "
            "\"Compacted fragments\"")
    pins = list_pins(store)
    pinned_below = max((pin.offset for pin, _ in pins.values()), default=0)
    if pins:
        report.notes.append(f"fragments below offset {pinned_below} are kept: branches read them "
                            f"({', '.join(sorted(pins))})")
    settled_before_us = micros(clock) - int(SETTLE_S * 1e6)
    runs = plan_runs(manifest, target_bytes, min_fragments, pinned_below, settled_before_us)
    for i, j in runs:
        run = manifest.fragments[i:j]
        report.runs.append({"start": run[0].start, "limit": run[-1].limit, "fragments": len(run)})
        report.records_rewritten += run[-1].limit - run[0].start
        report.bytes_read += sum(f.num_bytes for f in run)
    if dry_run or not runs:
        report.fragments_after = report.fragments_before - sum(j - i - 1 for i, j in runs)
        return report
    for number, (i, j) in enumerate(runs):
        run = manifest.fragments[i:j]
        new = _rewrite(store, manifest, run, clock)
        report.runs[number]["path"] = new.path
        report.bytes_written += new.num_bytes
        _record_replaced(store, new, run)
        if before_commit is not None:
            before_commit(number)
        result = committer.update(functools.partial(_replace, planned=manifest, run=run, new=new))
        if result is None:
            report.conflicts += 1
            report.runs[number]["conflict"] = True
            logger.warning("%s: offsets [%d, %d) changed while being compacted; %s is an orphan "
                           "for garbage collection", store.url, run[0].start, run[-1].limit, new.path)
    final = committer.manifest()
    report.fragments_after = len(final.fragments)
    report.setsum = final.setsum.hexdigest()
    return report


def _rewrite(store: ObjectStore, manifest: Manifest, run: tuple[FragmentRef, ...],
             clock: Clock) -> FragmentRef:
    """The run's rows as one uploaded fragment, checked: its setsum (recomputed from its bytes)
    is the run's, else nothing is committed."""
    raw = manifest.is_raw
    columns = {f.filter.column for f in run if f.filter is not None}
    builder = FragmentBuilder(manifest.arrow_schema(), micros(clock), item_hash=manifest.item_hash,
                              filter_column=columns.pop() if len(columns) == 1 else None)
    for ref in run:
        decoded = load_fragment(store, ref, raw, item_hash=manifest.item_hash)  # CorruptLog names it
        segments = ref.segments or ()
        payload, first = decoded.payload, 0
        for segment in segments or [None]:
            rows = decoded.records if segment is None else segment.records
            builder.add_segment(payload.slice(first, rows), decoded.timestamp_us[first:first + rows])
            first += rows
    encoded = builder.finish()
    expected = Setsum.sum(f.setsum for f in run)
    if encoded.setsum != expected:  # never commits what does not hold exactly the run's records
        raise AssertionError(f"compacted fragment setsum {encoded.setsum.hexdigest()} is not the "
                             f"run's {expected.hexdigest()}")
    file = write_fragment(store, encoded, clock=clock)
    return FragmentRef(file.path, file.uuid, run[0].start, run[-1].limit, file.num_bytes,
                       file.setsum, filter=file.filter, blake3=file.blake3,
                       segments=encoded.segments)


def _record_replaced(store: ObjectStore, new: FragmentRef, run: tuple[FragmentRef, ...]) -> None:
    body = json.dumps({"fragment": new.path, "replaced": [f.path for f in run]}).encode()
    store.create(f"{REPLACED_PREFIX}{new.seq_no}.json", body)


def _replace(current: Manifest, planned: Manifest, run: tuple[FragmentRef, ...],
             new: FragmentRef) -> Manifest | None:
    """`current` with `run` replaced by `new`; None (an orphan) when the run is not there as it
    was, or the log is another incarnation, or GC fenced the new fragment."""
    if current.incarnation != planned.incarnation:
        return None
    if current.orphan_horizon_us is not None and (uuid7_timestamp_us(str(new.seq_no)) or 0) < current.orphan_horizon_us:
        return None
    paths = [f.path for f in current.fragments]
    try:
        i = paths.index(run[0].path)
    except ValueError:
        return None
    if current.fragments[i:i + len(run)] != run:
        return None
    fragments = current.fragments[:i] + (new,) + current.fragments[i + len(run):]
    return replace(current, fragments=fragments, writer="wal3-spark compact")


def replaced_held(store: ObjectStore, before_us: int) -> tuple[frozenset[str], list[str]]:
    """For GC's orphan sweep: the fragments compactions replaced less than the orphan grace ago
    (compacted after `before_us`), kept like referenced ones, and the records of older
    compactions, which the sweep may delete (their fragments are ordinary orphans by then)."""
    held: set[str] = set()
    old: list[str] = []
    for meta in store.list(REPLACED_PREFIX):
        if not is_log_object(meta.key):  # not a record of ours: neither kept nor deleted
            continue
        when = uuid7_timestamp_us(meta.key[len(REPLACED_PREFIX):].removesuffix(".json"))
        if when is not None and when < before_us:
            old.append(meta.key)
            continue
        try:
            doc = json.loads(store.get(meta.key).data)
        except ObjectNotFound:  # deleted meanwhile by a sweep: its grace is over
            continue
        except ValueError as exc:
            raise CorruptLog("a compaction record is JSON", meta.key, f"not valid JSON ({exc})") from None
        held.update(p for p in doc.get("replaced", []) if isinstance(p, str))
    return frozenset(held), old
