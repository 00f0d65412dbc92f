"""Checkpointing a branch (docs/design/26-branches-and-tags.md): copy the parent's records it reads into
it, so that it no longer needs its parent, then release its pin. Afterwards it is an ordinary log.

Steps, each safe to crash after:
1. *copy*: the parent's fragments holding the branch's [start, branch point) are copied into the
   branch (byte for byte; the one the branch point cuts is rewritten holding only the records
   below it), each checked as a verifying read checks it. Until step 2 they are referenced by
   nothing; the branch's garbage collection sweeps no fragment while its manifest names a
   parent, so none is taken for an orphan, and a checkpoint run again reuses them;
2. *publish*: one compare-and-swap of the branch's manifest puts them in front of its own
   records (under one new snapshot when it has snapshots: the manifest's pointers keep their
   order), adds their setsums to its setsum, and drops `parent`. Appends racing with it are
   kept (the swap is decided again on the current manifest);
3. *release*: the pin in the parent is deleted. A crash before leaves a pin its branch no longer
   reads through, which the parent's garbage collection drops once older than the orphan grace.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace

from wal3_spark.errors import BranchError, CorruptLog
from wal3_spark.format.layout import FragmentRef
from wal3_spark.format.manifest import (
    Manifest,
    Snapshot,
    SnapshotOptions,
    newest_written_us,
)
from wal3_spark.format.setsum import Setsum
from wal3_spark.log import steps
from wal3_spark.log.branches import release_pin
from wal3_spark.log.committer import Committer
from wal3_spark.log.fragment_io import ReadRange
from wal3_spark.log.parents import parent_store
from wal3_spark.log.reader import iter_ranges
from wal3_spark.log.snapshots import roll_snapshots, write_snapshot
from wal3_spark.ops.copy import copy_fragment
from wal3_spark.storage import StoreLike, resolve_store
from wal3_spark.storage.base import ObjectStore

logger = logging.getLogger(__name__)

CHECKPOINT_WRITER = "wal3-spark checkpoint"
CHECKPOINT_STEPS = ("copy", "publish", "release")


@dataclass
class CheckpointReport:
    log: str
    parent: str | None = None
    offset: int | None = None
    fragments_copied: int = 0
    records_copied: int = 0
    bytes_copied: int = 0
    #: False: the log was not a branch (nothing to do)
    checkpointed: bool = False

    def to_dict(self) -> dict:
        return asdict(self)


def checkpoint(
    log: StoreLike,
    *,
    options: Mapping[str, str] | None = None,
    parallelism: int = 8,
    snapshot_options: SnapshotOptions | None = None,
) -> CheckpointReport:
    """Make the branch at `log` standalone (see the module docstring); a log that is not a
    branch is left as it is."""
    store = resolve_store(log, options)
    committer = Committer(store, writer=CHECKPOINT_WRITER)
    manifest = committer.manifest()
    report = CheckpointReport(store.url)
    parent = manifest.parent
    if parent is None:
        return report
    report.parent, report.offset = parent.log, parent.offset
    copied: list[FragmentRef] = []
    if manifest.reads_parent:
        parts = list(iter_ranges(store, manifest, manifest.oldest_offset, parent.offset))

        def copy_one(part: ReadRange) -> FragmentRef:
            assert part.root is not None
            return copy_fragment(parent_store(store, part.root), store, part.ref, manifest.is_raw,
                                 manifest.item_hash, (part.start, part.limit))

        with ThreadPoolExecutor(max_workers=max(1, parallelism)) as pool:
            copied = list(pool.map(copy_one, parts))
    steps.done("copy")
    options_ = snapshot_options or SnapshotOptions()

    def decide(current: Manifest) -> Manifest | None:
        if current.parent is None:
            return None  # another checkpoint finished it
        if current.parent != parent:
            raise BranchError(f"{store.url}'s parent changed while it was checkpointed; run it again")
        if not current.reads_parent:  # its own GC moved past the branch point: nothing to copy
            return replace(current, parent=None, writer=CHECKPOINT_WRITER)
        return _standalone(store, current, copied, options_)

    committer.update(decide)
    steps.done("publish")
    release_pin(store, parent)
    steps.done("release")
    report.fragments_copied = len(copied)
    report.records_copied = sum(f.records for f in copied)
    report.bytes_copied = sum(f.num_bytes for f in copied)
    report.checkpointed = True
    logger.info("%s: checkpointed: %d records of %s copied in, pin released", store.url,
             report.records_copied, parent.log)
    return report


def _standalone(store: ObjectStore, current: Manifest, copied: list[FragmentRef],
                options: SnapshotOptions) -> Manifest:
    """`current` with `copied` (the parent's records it read) in front of its own, and no parent."""
    setsum = current.setsum + Setsum.sum(f.setsum for f in copied)
    acc_bytes = current.acc_bytes + sum(f.num_bytes for f in copied)
    snapshots, fragments, rolled = current.snapshots, tuple(copied) + current.fragments, current.rolled_written_us
    if copied and current.snapshots:
        # the copied fragments go under one new top snapshot with the branch's own snapshots,
        # so the manifest's pointers stay in non-increasing depth order
        step = max(1, options.fragment_rollover_threshold)
        leaves = [Snapshot.of_fragments(copied[i:i + step], CHECKPOINT_WRITER)
                  for i in range(0, len(copied), step)]
        top = Snapshot.of_snapshots([s.pointer() for s in leaves] + list(current.snapshots),
                                    CHECKPOINT_WRITER)
        for snapshot in [*leaves, top]:
            if not write_snapshot(store, snapshot, horizon_us=current.orphan_horizon_us):
                raise CorruptLog("a snapshot path holds its content", snapshot.path,
                                 "holds another snapshot with the same setsum; checkpoint again")
        snapshots, fragments = (top.pointer(),), current.fragments
        written = newest_written_us(copied)
        rolled = None if rolled is None or written is None else max(rolled, written)
    new = replace(
        current, setsum=setsum, acc_bytes=acc_bytes, snapshots=snapshots, fragments=fragments,
        initial_offset=copied[0].start if copied else current.initial_offset,
        rolled_written_us=rolled, parent=None, writer=CHECKPOINT_WRITER,
    )
    return roll_snapshots(store, new, options, CHECKPOINT_WRITER)
