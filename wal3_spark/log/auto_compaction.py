"""Automatic compaction: a writer that appends keeps its log's fragment count bounded.

After a commit, the writer looks at the manifest it just wrote (no request): when some run of
consecutive small fragments of similar size holds `AutoCompactOptions.fragments` of them, a
compaction of the log starts in a background thread of this process (`wal3_spark.log.compaction`'s
plan, rewrite and commit steps), unless one is already running for that log here. The commit
itself never waits for it, and nothing it raises reaches the writer: it is logged, and the
records stay as they were (a compaction that fails or dies leaves at most an orphan for GC).
Compactions racing appends, other writers' compactions or GC are safe by construction
(docs/format.md section 4, "Compacted fragments").

Runs are merged by size tiers, so that each record is rewritten a few times, not once per
compaction: the newest small fragments are grouped while each older one is at most `SIMILAR`
times the largest in the group; a group of at least `fragments` is merged, and its output, about
`fragments` times larger than its members, starts the next tier. A log fed at a steady rate
then holds fewer than `fragments` fragments per tier below `target_bytes` (log base `fragments`
of target over fragment size tiers: four from 1 KB to 64 MiB at 16), and each record is
rewritten once per tier.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace

from wal3_spark.clock import SYSTEM, Clock
from wal3_spark.errors import InvalidOption
from wal3_spark.format.layout import FragmentRef
from wal3_spark.format.manifest import Manifest
from wal3_spark.log.compaction import (
    DEFAULT_TARGET_BYTES,
    CompactOptions,
    CompactReport,
    Run,
    commit,
    plan,
    rewrite,
)
from wal3_spark.storage.base import ObjectStore

logger = logging.getLogger(__name__)

DEFAULT_FRAGMENTS = 16
#: an older fragment joins a group while it is at most this many times the group's largest
SIMILAR = 4


@dataclass(frozen=True)
class AutoCompactOptions:
    """When a writer compacts its log in the background: once `fragments` consecutive fragments
    of similar size under `target_bytes` are in the manifest; a raw log only with
    `allow_chroma_incompatible` (Chroma's wal3 cannot read a compacted raw fragment)."""

    fragments: int = DEFAULT_FRAGMENTS
    target_bytes: int = DEFAULT_TARGET_BYTES
    allow_chroma_incompatible: bool = False

    def __post_init__(self) -> None:
        count = self.fragments
        if isinstance(count, bool) or not isinstance(count, int) or count < 2:
            raise InvalidOption(f"autoCompact fragments={count!r}: give an integer >= 2 (the number "
                                f"of small fragments that starts a compaction; default {DEFAULT_FRAGMENTS})")
        self.compact_options()  # checks target_bytes

    def compact_options(self) -> CompactOptions:
        return CompactOptions(self.target_bytes, 2, self.allow_chroma_incompatible)


def tiers(fragments: Sequence[FragmentRef], options: AutoCompactOptions) -> list[tuple[int, int]]:
    """Index ranges [i, j) of `fragments` to merge: groups of at least `AutoCompactOptions.fragments`
    consecutive fragments under the target, of similar size (see the module docstring), each
    cut where it would reach the target."""
    out: list[tuple[int, int]] = []
    j = len(fragments)
    while j > 0:
        if fragments[j - 1].num_bytes >= options.target_bytes:
            j -= 1
            continue
        i, largest, size = j - 1, fragments[j - 1].num_bytes, fragments[j - 1].num_bytes
        while (i > 0 and fragments[i - 1].num_bytes < options.target_bytes
               and fragments[i - 1].num_bytes <= SIMILAR * largest
               and size + fragments[i - 1].num_bytes <= options.target_bytes):
            i -= 1
            largest = max(largest, fragments[i].num_bytes)
            size += fragments[i].num_bytes
        if j - i >= options.fragments:
            out.append((i, j))
        j = i
    return sorted(out)


def due(manifest: Manifest, options: AutoCompactOptions) -> bool:
    """Whether the manifest has a group to merge (no request). Never for a Chroma S3 log, nor a
    raw log without `allow_chroma_incompatible` (compaction would refuse it)."""
    if manifest.uses_seq_nos or (manifest.is_raw and not options.allow_chroma_incompatible):
        return False
    return bool(tiers(manifest.fragments, options))


def compact_tiers(store: ObjectStore, options: AutoCompactOptions, clock: Clock = SYSTEM) -> CompactReport:
    """One automatic compaction: the groups `tiers` picks among the runs `plan` allows (settled,
    not pinned, not in snapshots), rewritten and committed in one compare-and-swap."""
    planned = plan(store, options.compact_options(), clock)
    fragments = planned.manifest.fragments
    allowed = {f.path for run in planned.runs for f in run.fragments}
    runs: list[Run] = []
    for i, j in tiers(fragments, options):
        group = fragments[i:j]
        if all(f.path in allowed for f in group):
            runs.append(Run(len(runs), group, planned.manifest.arrow_schema(), planned.manifest.item_hash,
                            planned.manifest.incarnation))
    tiered = replace(planned, runs=tuple(runs))
    if not runs:
        return tiered.report()
    return commit(store, tiered, [rewrite(store, run, clock) for run in runs])


class _Running:
    """The background compactions of this process, at most one per log (by URL)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.threads: dict[str, threading.Thread] = {}

    def start(self, store: ObjectStore, options: AutoCompactOptions, clock: Clock) -> threading.Thread | None:
        with self.lock:
            if store.url in self.threads:
                return None
            thread = threading.Thread(target=self._run, args=(store, options, clock), daemon=True,
                                      name=f"wal3 auto-compaction of {store.url}")
            self.threads[store.url] = thread
        thread.start()
        return thread

    def _run(self, store: ObjectStore, options: AutoCompactOptions, clock: Clock) -> None:
        try:
            report = compact_tiers(store, options, clock)
            if report.runs:
                logger.info("%s: auto-compaction merged %d run(s): %d -> %d fragments", store.url,
                            len(report.runs), report.fragments_before, report.fragments_after)
        except Exception as exc:  # noqa: BLE001 (never the writer's failure: see the module docstring)
            logger.warning("%s: auto-compaction failed (the log is as it was; the next commit "
                           "tries again): %s", store.url, exc)
        finally:
            with self.lock:
                self.threads.pop(store.url, None)

    def wait(self, url: str) -> None:
        with self.lock:
            thread = self.threads.get(url)
        if thread is not None:
            thread.join()


_RUNNING = _Running()


def after_commit(store: ObjectStore, manifest: Manifest | None, options: AutoCompactOptions | None,
                 clock: Clock = SYSTEM) -> threading.Thread | None:
    """What a writer calls after each commit, with the manifest it wrote: starts a background
    compaction when one is due and none is running for the log in this process (its thread;
    None otherwise). Never raises."""
    if options is None or manifest is None:
        return None
    try:
        if not due(manifest, options):
            return None
        return _RUNNING.start(store, options, clock)
    except Exception as exc:  # noqa: BLE001 (the commit happened: see the module docstring)
        logger.warning("%s: could not start an auto-compaction: %s", store.url, exc)
        return None


def wait(url: str) -> None:
    """Wait for the background compaction of the log at `url` in this process, if one runs."""
    _RUNNING.wait(url)
