"""A concurrent append workload and its exactly-once check, shared by the contention and
fault-injection tests (and usable from benchmarks).

Each writer appends records whose bodies name the writer, the commit and the record, so that the
final read can prove that every acknowledged record is present exactly once.
"""

from __future__ import annotations

import multiprocessing
import time
from collections import Counter
from dataclasses import dataclass

from wal3_spark.format.manifest import SnapshotOptions
from wal3_spark.log.committer import Committer
from wal3_spark.log.fragment_io import write_fragments
from wal3_spark.log.reader import LogReader
from wal3_spark.log.writer import to_batches
from wal3_spark.ops.verify import verify
from wal3_spark.storage import open_store
from wal3_spark.storage.base import ObjectStore


@dataclass(frozen=True)
class WriterStats:
    writer: int
    commits: int
    records: int
    conflicts: int
    ranges: tuple[tuple[int, int], ...]
    #: wall-clock seconds (time.time()) around the commit loop, for throughput
    started: float
    finished: float


def bodies_for(writer: int, commit: int, fragment: int, n: int) -> list[bytes]:
    return [f"w{writer}/c{commit}/f{fragment}/r{r}".encode() for r in range(n)]


def fragments_in_commit(writer: int, commit: int) -> int:
    """1, 2 or 3 fragments: every third commit or so is multi-fragment."""
    return 1 + (writer + commit) % 3


def run_writer(
    store: ObjectStore,
    writer: int,
    commits: int,
    *,
    snapshot_options: SnapshotOptions | None = None,
) -> WriterStats:
    committer = Committer(store, writer=f"test-writer-{writer}", snapshot_options=snapshot_options)
    conflicts = records = 0
    ranges = []
    started = time.time()
    for c in range(commits):
        files = []
        for f in range(fragments_in_commit(writer, c)):
            batches, _ = to_batches(bodies_for(writer, c, f, 1 + (c + f) % 4))
            files.extend(write_fragments(store, batches, None, fragment_bytes=1 << 20))
        result = committer.commit(files)
        conflicts += result.conflicts
        records += result.limit - result.start
        ranges.append((result.start, result.limit))
    return WriterStats(writer, commits, records, conflicts, tuple(ranges), started, time.time())


def _process_main(args: tuple) -> tuple[WriterStats, dict[str, int]]:
    url, options, writer, commits, thresholds, faults = args
    snapshot_options = SnapshotOptions(*thresholds) if thresholds else None
    store = open_store(url, options)
    if faults:
        from wal3_spark.testing import FaultyStore

        store = FaultyStore(store, seed=writer, **faults)
    stats = run_writer(store, writer, commits, snapshot_options=snapshot_options)
    return stats, store.counts if faults else {}


def run_processes(
    url: str,
    options: dict | None,
    writers: int,
    commits: int,
    thresholds: tuple[int, int] | None = None,
    faults: dict[str, float] | None = None,
) -> tuple[list[WriterStats], Counter]:
    """Run `writers` processes; returns their stats and the faults injected (by kind)."""
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(writers) as pool:
        results = pool.map(
            _process_main, [(url, options, w, commits, thresholds, faults) for w in range(writers)]
        )
    injected: Counter = Counter()
    for _, counts in results:
        injected.update(counts)
    return [stats for stats, _ in results], injected


def expected_bodies(writers: int, commits: int) -> Counter:
    expected: Counter = Counter()
    for w in range(writers):
        for c in range(commits):
            for f in range(fragments_in_commit(w, c)):
                expected.update(bodies_for(w, c, f, 1 + (c + f) % 4))
    return expected


def assert_exactly_once(store: ObjectStore, expected: Counter) -> None:
    """Every expected record once, offsets contiguous from 1, and a clean verify."""
    table = LogReader(store).read_table()
    offsets = table.column("_offset").to_pylist()
    assert offsets == list(range(1, len(offsets) + 1)), "offsets are not contiguous from 1"
    got = Counter(table.column("body").to_pylist())
    missing = expected - got
    duplicated = {k: v for k, v in got.items() if v > expected.get(k, 0)}
    assert not missing, f"{sum(missing.values())} records lost, e.g. {list(missing)[:3]}"
    assert not duplicated, f"records duplicated: {list(duplicated.items())[:3]}"
    report = verify(store)
    failing = [p for p in report.problems if p.kind != "extra"]
    assert report.ok, failing
