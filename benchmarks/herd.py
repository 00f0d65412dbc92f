"""A herd of logs on SeaweedFS: what finding the changed logs costs per trigger, with and without
the dirty log. Prints a table; docs/benchmarks.md records its output.

    ./dev python benchmarks/herd.py                        # starts its own SeaweedFS
    ./dev python benchmarks/herd.py --endpoint http://127.0.0.1:8333 --prefix s3://bucket/herd

1. set-up: `--logs` logs (default 10,000) under one prefix, each a minimal manifest written by
   one conditional PUT, 64 at a time; a prefix that already holds them is reused (`--prefix`
   with `--endpoint` keeps them between runs);
2. per trigger, `--changed` logs (default 10), picked at random, get one append each from
   concurrent writers (kept open) that record in one `DirtyLog`; once the records are durable, the reader does what the log-set
   stream source does per trigger, `dirty.changes_since(logs, position)` (find the changed logs
   and their tails), and reads the changed logs' manifests (what it plans the batch with). Its
   requests are counted and timed; every changed log must be reported with its new tail, or the
   benchmark fails;
3. without the dirty log: the same call when a full scan is due (every manifest, in parallel,
   with 16/32/64 threads);
4. contention: `--writers` processes append to random logs of a 100-log prefix, with and
   without a dirty log (one `DirtyLog` per process; records written in the background and
   waited for at the end), appends/s (until every record is durable) and append latency.
Times are medians over the repetitions, with min-max.
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.fakes import CountingStore  # noqa: E402
from tests.support.seaweed import running_seaweed  # noqa: E402
from wal3_spark.errors import PreconditionFailed  # noqa: E402
from wal3_spark.format.layout import MANIFEST_KEY  # noqa: E402
from wal3_spark.format.manifest import Manifest  # noqa: E402
from wal3_spark.log.reader import LogReader  # noqa: E402
from wal3_spark.log.writer import LogWriter  # noqa: E402
from wal3_spark.logset.dirty import DirtyLog, changes_since, dirty_store  # noqa: E402
from wal3_spark.logset.logs import LogSet  # noqa: E402
from wal3_spark.storage import open_store  # noqa: E402
from wal3_spark.storage.base import ObjectStore  # noqa: E402


def row(name: str, value: str, note: str = "") -> None:
    print(f"{name:<62} {value:>18}  {note}", flush=True)


def spread(times: list[float]) -> str:
    return f"min {min(times) * 1e3:.0f} ms, max {max(times) * 1e3:.0f} ms, n={len(times)}"


def log_names(n: int) -> list[str]:
    return [f"tenant-{i:05d}" for i in range(n)]


def set_up(prefix: ObjectStore, n: int) -> float:
    """`n` logs, each one empty manifest (one PUT); existing ones are kept. Seconds taken."""
    start = time.perf_counter()
    have = set(LogSet(prefix).names())
    todo = [name for name in log_names(n) if name not in have]
    body = Manifest.empty("wal3 herd benchmark").to_bytes()

    def create(name: str) -> None:
        try:
            prefix.put_if_absent(f"{name}/{MANIFEST_KEY}", body)
        except PreconditionFailed:
            pass

    with ThreadPoolExecutor(64) as pool:
        list(pool.map(create, todo))
    return time.perf_counter() - start


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def bench_triggers(prefix: ObjectStore, n: int, changed: int, triggers: int) -> None:
    names = log_names(n)
    rng = random.Random(11)
    counting = CountingStore(prefix)
    logs = LogSet(counting)
    every = 1e9  # no periodic full scan inside the measured triggers
    elapsed, first = timed(lambda: changes_since(logs, None, full_scan_every_s=every))
    assert first.full_scan and len(first.tails) >= n
    row("initial full scan (position None)", f"{elapsed:.2f} s", f"{counting.requests()} requests")
    position = first.position
    find_times, plan_times, find_requests, plan_requests, dirty_fragments = [], [], [], [], []
    open_writers: dict[str, LogWriter] = {}
    with DirtyLog(prefix) as dirty, ThreadPoolExecutor(changed) as pool:

        def append(name: str) -> int:
            # Writers stay open, as in a service that writes many logs; the records of all
            # of them share the dirty log's appends.
            if name not in open_writers:  # the names of one trigger are distinct
                open_writers[name] = LogWriter(LogSet(prefix).log_store(name), dirty_log=dirty)
            return open_writers[name].append([b"record of " + name.encode()]).limit

        for _ in range(triggers):
            picked = rng.sample(names, changed)
            expected = dict(zip(picked, pool.map(append, picked)))
            dirty.flush()  # the records are durable before the trigger is measured
            dirty_fragments.append(len(LogReader(dirty_store(prefix)).plan(position.offset)))
            counting.counts.clear()
            elapsed, result = timed(lambda: changes_since(logs, position, full_scan_every_s=every))
            if result.full_scan or result.tails != expected:
                raise SystemExit(f"wrong changes: {result.tails} != {expected}")
            find_times.append(elapsed)
            find_requests.append(counting.requests())
            counting.counts.clear()
            elapsed, scan = timed(lambda: logs.tails(sorted(result.tails)))
            assert {k: v.next_offset for k, v in scan.tails.items()} == expected
            plan_times.append(elapsed)
            plan_requests.append(counting.requests())
            position = result.position
        for writer in open_writers.values():
            writer.close()
    med = statistics.median
    row(f"trigger with dirty log: find {changed} changed of {n} logs", f"{med(find_times) * 1e3:.1f} ms",
        spread(find_times))
    row("  requests (dirty manifest + dirty fragments)", f"{med(find_requests):.0f}",
        f"min {min(find_requests)}, max {max(find_requests)}; dirty fragments per trigger "
        f"{min(dirty_fragments)}-{max(dirty_fragments)}")
    row(f"  + read the {changed} changed manifests", f"{med(plan_times) * 1e3:.1f} ms", spread(plan_times))
    total = [a + b for a, b in zip(find_requests, plan_requests)]
    row("  requests in all per changed log", f"{med(total) / changed:.2f}",
        f"{med(total):.0f} requests; target <= 3 per changed log + a constant")
    row("  trigger in all (find + manifests)", f"{med([a + b for a, b in zip(find_times, plan_times)]) * 1e3:.1f} ms",
        "target < 1 s")

    for workers in (16, 32, 64):
        wide = LogSet(counting, max_workers=workers)
        times, requests = [], []
        for _ in range(3):
            counting.counts.clear()
            elapsed, result = timed(lambda: changes_since(wide, position, full_scan_every_s=0))
            assert result.full_scan and len(result.tails) >= n
            times.append(elapsed)
            requests.append(counting.requests())
        row(f"trigger without dirty log: full scan, {workers} threads", f"{med(times):.2f} s",
            f"{spread(times)}; {med(requests):.0f} requests")


def _contend(args: tuple[str, dict[str, str], float | None, int, int]) -> tuple[float, float, list[float]]:
    """(first append's start, last append's end, each append's latency) of one writer process,
    which keeps a `LogWriter` open per log it appends to (as a service writing many logs does)."""
    url, options, interval, appends, seed = args
    prefix = open_store(url, options)
    rng = random.Random(seed)
    logs = LogSet(prefix)
    latencies = []
    dirty = None if interval is None else DirtyLog(prefix, batch_interval_s=interval)
    writers: dict[str, LogWriter] = {}
    began = time.time()
    for _ in range(appends):
        name = f"c{rng.randrange(100):03d}"
        start = time.perf_counter()
        if name not in writers:
            writers[name] = LogWriter(logs.log_store(name), dirty_log=dirty)
        writers[name].append([b"x" * 100])
        latencies.append(time.perf_counter() - start)
    for writer in writers.values():
        writer.close()  # waits for the dirty records
    if dirty is not None:
        dirty.close()
    return began, time.time(), latencies


def bench_contention(base_url: str, options: dict[str, str], writers: int, appends: int) -> None:
    for interval in (None, 0.005, 0.1, 0.5):
        url = f"{base_url}-contention-{time.time_ns()}"
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(writers) as pool:
            results = pool.map(_contend, [(url, options, interval, appends, s) for s in range(writers)])
        elapsed = max(r[1] for r in results) - min(r[0] for r in results)
        latencies = sorted(x for r in results for x in r[2])
        total = writers * appends
        note = f"p50 {statistics.median(latencies) * 1e3:.0f} ms, p99 {latencies[int(0.99 * len(latencies)) - 1] * 1e3:.0f} ms"
        if interval is not None:
            dirty = LogReader(dirty_store(open_store(url, options))).manifest()
            note += f"; dirty log: {dirty.next_offset - 1} records in {len(dirty.fragments)} fragments"
        label = "without dirty log" if interval is None else f"dirty log, batch interval {interval * 1e3:g} ms"
        row(f"{writers} writer processes, 100 logs, {label}", f"{total / elapsed:.1f} appends/s", note)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--logs", type=int, default=10_000)
    parser.add_argument("--changed", type=int, default=10)
    parser.add_argument("--triggers", type=int, default=15)
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--appends", type=int, default=40, help="appends per writer process (contention)")
    parser.add_argument("--only", choices=("triggers", "contention"), help="run one part")
    parser.add_argument("--endpoint", help="a running S3 server (default: start SeaweedFS)")
    parser.add_argument("--prefix", help="with --endpoint: where the logs live (reused if present)")
    args = parser.parse_args()
    if args.endpoint:
        options = {"endpoint": args.endpoint}
        run(args, args.prefix or "s3://wal3-test/herd", options)
        return
    with tempfile.TemporaryDirectory(prefix="wal3-herd-") as tmp, running_seaweed(Path(tmp)) as server:
        run(args, server.new_url("herd"), server.options)


def run(args: argparse.Namespace, url: str, options: dict[str, str]) -> None:
    prefix = open_store(url, options)
    print(f"{'measure':<62} {'value':>18}  note")
    if args.only != "contention":
        elapsed = set_up(prefix, args.logs)
        row(f"set-up: {args.logs} logs (one manifest PUT each, 64 threads)", f"{elapsed:.1f} s")
        bench_triggers(prefix, args.logs, args.changed, args.triggers)
    if args.only != "triggers":
        bench_contention(url, options, args.writers, args.appends)


if __name__ == "__main__":
    main()
