"""Append latency under object-store latency: the "Reduced Tail Latency" experiment of Chroma's
wal3 design.

    ./dev python benchmarks/latency.py                      # fixed 100 ms per request
    ./dev python benchmarks/latency.py --scenario tail      # 1% of requests take 10x, hedged or not
    ./dev python benchmarks/latency.py --scenario tail --tail-methods get,put_if_absent
    ./dev python benchmarks/latency.py --serial             # also one manifest write at a time
    ./dev python benchmarks/latency.py --ordered            # writes to one key act in the order sent
    ./dev python benchmarks/latency.py --store local --rate 500 --serial   # a real store underneath
    ./dev python benchmarks/latency.py --store gcs --latency-ms 0 --rate 200   # an emulator
    ./dev python benchmarks/latency.py --latency-ms 400 --batch-interval-ms 80 --rate 2500
                                                            # every time constant 4x, rate / 4

An open-loop generator calls `LogWriter.submit` with one 100-byte record at 10,000 appends/s
(in 1 ms ticks), against an in-memory store behind `LatencyStore` (every request waits the
latency before it acts). Each append's latency runs from its scheduled submit time to the moment
its future resolves, so a stalled generator cannot hide latency. After each run every future
must have resolved to its own offset, offsets must follow submit order, and the log must hold
exactly the submitted records in that order: the benchmark fails otherwise. With hedging, the
hedges sent must stay within the budget (one per 1/hedges_per_s seconds of the run): it fails
otherwise.

The CPU probe times a fixed pure-Python loop before and after the runs: on a quiet machine it
takes about 0.1 s. Where it takes much longer, a latency benchmark measures the scheduler too.

Chroma's published numbers for the same experiment (wal3's design, "Reduced Tail Latency"):
p50 270 ms, p99 330 ms, max 360 ms.
"""

from __future__ import annotations

import argparse
import functools
import gc
import itertools
import logging
import math
import os
import resource
import sys
import tempfile
import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from wal3_spark.log.reader import LogReader  # noqa: E402
from wal3_spark.log.writer import LogWriter, LogWriterOptions  # noqa: E402
from wal3_spark.storage import open_store  # noqa: E402
from wal3_spark.storage.base import ObjectStore  # noqa: E402
from wal3_spark.storage.hedged import HedgedStore, HedgePolicy  # noqa: E402
from wal3_spark.testing import LatencyStore  # noqa: E402

_names = itertools.count()


@dataclass(frozen=True)
class Run:
    label: str
    latencies_ms: np.ndarray
    appends: int
    fragments: int
    slow_requests: int
    hedges: int
    #: hedges the budget allowed in the run's wall time (0: no hedging)
    budget: int
    cpu_s: float
    #: of which the generator thread's (submitting, its callbacks' bookkeeping, its sleeps)
    generator_cpu_s: float
    #: drains of the manifest-write chain after a lost write (each a wait for the writes in
    #: flight and an ordinary commit); None where not counted
    drained: int | None
    #: writes of the last link's bytes sent instead of a drain after a chained write lost to a
    #: reordering (docs/design/21-pipelined-manifest-writes.md); None where not counted
    resent: int | None
    #: garbage collections during the run: total wall time of full (generation 2) ones, the
    #: longest (every thread of the process stops while one runs)
    full_gc_s: float
    longest_gc_ms: float

    def line(self) -> str:
        p50, p90, p99 = np.percentile(self.latencies_ms, [50, 90, 99])
        return (
            f"{self.label:<46} p50 {p50:6.0f}  p90 {p90:6.0f}  p99 {p99:6.0f}  "
            f"max {self.latencies_ms.max():6.0f} ms  {self.appends:>7,} appends  "
            f"{self.fragments:>5} fragments  {self.slow_requests:>4} slow requests  "
            f"{self.hedges:>4} hedges{f' (budget {self.budget})' if self.budget else ''}  "
            f"{self.cpu_s:5.1f} CPU s ({self.generator_cpu_s:.1f} generator)  "
            f"{'-' if self.drained is None else self.drained} drained  "
            f"{'-' if self.resent is None else self.resent} resent  "
            f"full GC {self.full_gc_s:.2f} s, longest GC {self.longest_gc_ms:.0f} ms"
        )


class GcPauses:
    """Times the garbage collections made while it is entered (gc.callbacks)."""

    def __init__(self) -> None:
        self.full_s = self.longest_s = self._started = 0.0

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        took = time.perf_counter() - self._started
        self.longest_s = max(self.longest_s, took)
        if info["generation"] == 2:
            self.full_s += took

    def __enter__(self) -> GcPauses:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)


def record(i: int, size: int) -> bytes:
    return f"{i:012d}".encode().ljust(size, b".")


def generate(writer: LogWriter, rate: float, seconds: float, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Submit `rate` records per second for `seconds`, in 1 ms ticks; return scheduled times,
    resolution times and the offsets each append was acknowledged with.

    The generator wakes once per millisecond tick, not once per record: a sleep of a fraction of
    a millisecond costs tens of microseconds of CPU in this process, and at 10,000 appends/s a
    wake-up per record took about half the process's CPU. It keeps the offsets, not the
    futures: 200,000 futures alive (each with its condition, lock and callbacks) make every
    full garbage collection traverse millions of objects, a stall of the whole process that an
    application dropping its futures once resolved never pays."""
    n = int(rate * seconds)
    scheduled = np.arange(n) / rate
    resolved = np.full(n, np.nan)
    offsets = np.full((n, 2), -1, dtype=np.int64)
    start = time.monotonic()

    def done(i: int, future: Future) -> None:
        resolved[i] = time.monotonic() - start
        appended = future.result()  # a failed append leaves -1: `check` fails the run
        offsets[i] = appended.start, appended.limit

    i = 0
    while i < n:
        now = time.monotonic() - start
        due = min(n, int(now * rate) + 1)
        while i < due:
            writer.submit(record(i, size)).add_done_callback(functools.partial(done, i))
            i += 1
        if i < n:
            time.sleep(max(0.0, (math.floor(now * 1000) + 1) / 1000 - (time.monotonic() - start)))
    writer.flush()
    return scheduled, resolved, offsets


def check(store: ObjectStore, offsets: np.ndarray, size: int) -> None:
    """Every append acknowledged with its own offset, in submit order, and in the log."""
    starts, limits = offsets[:, 0], offsets[:, 1]
    if not (np.all(starts >= 0) and np.all(limits - starts == 1) and np.all(np.diff(starts) == 1)):
        raise AssertionError("appends were not acknowledged with consecutive offsets in submit order")
    bodies = LogReader(store).read_table(int(starts[0]), int(limits[-1])).column("body").to_pylist()
    if bodies != [record(i, size) for i in range(len(offsets))]:
        raise AssertionError("the log does not hold exactly the submitted records in order")


def run_once(label: str, args: argparse.Namespace, tail_share: float, writer_options: dict) -> Run:
    if args.store == "local":  # a real store: a write takes time to apply, as on S3
        with tempfile.TemporaryDirectory(prefix="wal3-latency-bench-") as root:
            return measure(label, args, tail_share, writer_options, open_store(root))
    if args.store in ("s3", "gcs", "azure"):  # a server started for the run (emulators: GCS, Azure)
        from tests.support.seaweed import running_seaweed
        from wal3_spark.testing.emulators import running_azurite, running_fake_gcs

        launch = {"s3": running_seaweed, "gcs": running_fake_gcs, "azure": running_azurite}[args.store]
        with tempfile.TemporaryDirectory(prefix="wal3-latency-bench-") as root, launch(Path(root)) as server:
            return measure(label, args, tail_share, writer_options, open_store(server.new_url("latency"), server.options))
    return measure(label, args, tail_share, writer_options,
                   open_store(f"memory://latency-bench-{os.getpid()}-{next(_names)}"))


def measure(label: str, args: argparse.Namespace, tail_share: float, writer_options: dict,
            inner: ObjectStore) -> Run:
    """One run against `inner` behind `LatencyStore`."""
    tail_methods = args.tail_methods.split(",") if args.tail_methods else None
    store = LatencyStore(inner, args.latency_ms / 1000, tail_share=tail_share,
                         tail_factor=args.tail_factor, tail_methods=tail_methods, seed=next(_names),
                         ordered=args.ordered)
    if args.gc_freeze:
        gc.collect()
        gc.freeze()
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    with LogWriter(store, LogWriterOptions(**writer_options)) as writer, GcPauses() as pauses:
        writer.append(record(-1, args.record_bytes))  # creates the log: not part of the run
        started, generator_cpu = time.monotonic(), time.thread_time()
        scheduled, resolved, offsets = generate(writer, args.rate, args.seconds, args.record_bytes)
        generator_cpu = time.thread_time() - generator_cpu
    wall_s = time.monotonic() - started
    used = resource.getrusage(resource.RUSAGE_SELF)
    cpu_s = used.ru_utime + used.ru_stime - cpu.ru_utime - cpu.ru_stime
    check(inner, offsets, args.record_bytes)
    keep = scheduled >= args.warmup_s
    latencies = (resolved - scheduled)[keep] * 1000
    manifest = LogReader(inner).manifest()
    hedges = budget = 0
    if isinstance(writer.store, HedgedStore):
        hedges = writer.store.stats.hedged
        budget = int(wall_s * writer.store.policy.hedges_per_s) + 1
        if hedges > budget:
            raise AssertionError(f"{hedges} hedges in {wall_s:.1f} s: over the budget of {budget}")
    return Run(label, latencies, len(offsets), len(manifest.fragments), store.slow_requests, hedges,
               budget, cpu_s, generator_cpu, getattr(writer._chain, "drained", None),
               getattr(writer._chain, "resent", None), pauses.full_s, pauses.longest_s * 1000)


def cpu_probe() -> float:
    """Seconds a fixed pure-Python loop takes (about 0.1 s on a quiet machine)."""
    started, total = time.perf_counter(), 0
    for i in range(2_000_000):
        total += i
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", choices=["fixed", "tail"], default="fixed")
    parser.add_argument("--rate", type=float, default=10_000, help="appends per second")
    parser.add_argument("--record-bytes", type=int, default=100)
    parser.add_argument("--latency-ms", type=float, default=100.0, help="added to every store request")
    parser.add_argument("--tail-factor", type=float, default=10.0, help="tail scenario: slow requests take this x latency")
    parser.add_argument("--tail-share", type=float, default=0.01, help="tail scenario: share of slow requests")
    parser.add_argument("--tail-methods", default="", help="tail scenario: only these store methods "
                        "(comma-separated, e.g. get,put_if_absent) draw the tail; default: all")
    parser.add_argument("--hedges-per-s", type=float, default=HedgePolicy.hedges_per_s,
                        help="tail scenario: the hedging budget")
    parser.add_argument("--hedge-factor", type=float, default=HedgePolicy.factor,
                        help="tail scenario: hedge after this x the recent latency quantile")
    parser.add_argument("--hedge-quantile", type=float, default=HedgePolicy.quantile)
    parser.add_argument("--store", choices=["memory", "local", "s3", "gcs", "azure"], default="memory",
                        help="what LatencyStore wraps: the in-memory store, a fresh local directory, or a "
                        "server started for each run (SeaweedFS, fake-gcs-server, Azurite)")
    parser.add_argument("--batch-interval-ms", type=float, default=20.0,
                        help="LogWriter batch_interval_s, in ms (Chroma's default: 20)")
    parser.add_argument("--serial", action="store_true",
                        help="also run with one manifest write at a time (max_manifest_writes=1, "
                        "LogWriter's default), alternating with 8 in flight")
    parser.add_argument("--ordered", action="store_true",
                        help="the store applies conditional writes to one key in the order they "
                        "were due, as a store across a network applies them as they arrive; by "
                        "default a pause of this process (a full garbage collection) can reorder "
                        "them (LatencyStore's docstring)")
    parser.add_argument("--gc-freeze", action="store_true",
                        help="gc.freeze() before each run, as an application may after start-up: full "
                        "garbage collections then traverse only objects made since (the appends in "
                        "flight), not every module's")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of one run")
    parser.add_argument("--warmup-s", type=float, default=2.0, help="appends scheduled before this are not measured")
    parser.add_argument("--repeat", type=int, default=1, help="runs per configuration, alternating")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    print(f"load average at start: {os.getloadavg()[0]:.2f}; CPU probe {cpu_probe():.2f} s; "
          f"{args.rate:,.0f} appends/s of {args.record_bytes} B, {args.latency_ms:.0f} ms per "
          f"request, {args.seconds:.0f} s per run", flush=True)
    configs: list[tuple[str, float, dict]] = [("8 manifest writes in flight", 0.0, {})]
    writer_options = {"batch_interval_s": args.batch_interval_ms / 1000, "max_manifest_writes": 8}
    if args.scenario == "tail":
        hedge = HedgePolicy(hedges_per_s=args.hedges_per_s, factor=args.hedge_factor,
                            quantile=args.hedge_quantile)
        configs = [("no hedging, 8 in flight", args.tail_share, {}),
                   ("hedging, 8 in flight", args.tail_share, {"hedge": hedge})]
    if args.serial:
        configs += [(label.replace("8 manifest writes in flight", "1 manifest write at a time")
                     .replace("8 in flight", "1 at a time"), share, {**options, "max_manifest_writes": 1})
                    for label, share, options in configs]
    runs: dict[str, list[Run]] = {label: [] for label, _, _ in configs}
    for _ in range(args.repeat):
        for label, tail_share, options in configs:
            run = run_once(label, args, tail_share, {**writer_options, **options})
            runs[label].append(run)
            print(run.line(), flush=True)
    print(f"load average at end: {os.getloadavg()[0]:.2f}; CPU probe {cpu_probe():.2f} s")
    if args.scenario == "fixed" and args.latency_ms == 100 and args.rate == 10_000:
        print("baseline: Chroma's wal3 in the same experiment (its design's \"Reduced Tail Latency\"): "
              "p50 270, p99 330, max 360 ms; "
              "target p50 <= 250, p99 <= 300, max <= 360 ms")
    elif args.scenario == "tail":
        print("target: hedged p99 within 2x its p50, hedges within the budget")
    if args.repeat > 1:
        for label, got in runs.items():
            stats = np.array([np.percentile(r.latencies_ms, [50, 99]).tolist() + [r.latencies_ms.max()] for r in got])
            med, low, high = np.median(stats, axis=0), stats.min(axis=0), stats.max(axis=0)
            print(f"{label}: median of {len(got)} runs: p50 {med[0]:.0f} ms ({low[0]:.0f}-{high[0]:.0f}), "
                  f"p99 {med[1]:.0f} ms ({low[1]:.0f}-{high[1]:.0f}), max {med[2]:.0f} ms ({low[2]:.0f}-{high[2]:.0f})")


if __name__ == "__main__":
    main()
