"""Append -> visible: how long an acknowledged append takes to reach a running stream's sink.

    ./dev python benchmarks/stream_visible.py                 # wal3 and Spark's `rate`, alternating
    ./dev python benchmarks/stream_visible.py --rate 100 --seconds 30 --repeat 3
    ./dev python benchmarks/stream_visible.py --conf spark.sql.streaming.pollingDelay=1ms

A `LogWriter` in this process submits one small record every 1/rate seconds to a log in a fresh
local directory; a `spark.readStream.format("wal3")` query with the default trigger (a
micro-batch as soon as the previous one ended) reads it into a `foreach` sink that records,
for every row, the wall time it reached the sink (in the Python worker: same machine, same
clock). An append's latency is that time minus the moment its future resolved (acknowledged).

The yardstick, in the same run and the same session: Spark's built-in `rate` source at the same
rows per second into the same sink; its latency is the sink time minus the row's `timestamp`
(the time the source assigns the row), so it is what Spark's own per-micro-batch cost adds
without any Python data source. Each query runs `--seconds`; the first `--warmup-s` are not
counted (the source's Python process starts, the first micro-batches plan). Every appended
record must reach the sink exactly once: the benchmark fails otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from wal3_spark.log.writer import LogWriter, LogWriterOptions
from wal3_spark.spark.session import ensure_worker_python, register


class ArrivalSink:
    """A foreach writer: every row's key and the wall time it reached the sink, one JSON file
    per partition and epoch (written at close, outside the timed part)."""

    def __init__(self, folder: str, key: str) -> None:
        self.folder, self.key = folder, key

    def open(self, partition_id: int, epoch_id: int) -> bool:
        self.rows: list[tuple[int, float]] = []
        self.name = f"{self.folder}/{epoch_id}-{partition_id}-{os.getpid()}.json"
        return True

    def process(self, row) -> None:
        self.rows.append((int(row[self.key]), time.time()))

    def close(self, error: BaseException | None) -> None:
        if self.rows:  # whole files only: the benchmark reads them while the query runs
            with open(self.name + ".tmp", "w") as out:
                json.dump(self.rows, out)
            os.rename(self.name + ".tmp", self.name)


def write_options(args: argparse.Namespace) -> dict[str, str]:
    return dict(item.partition("=")[::2] for item in args.write_option)


def arrivals(folder: str) -> dict[int, float]:
    seen: dict[int, float] = {}
    for path in Path(folder).glob("*.json"):
        for key, at in json.loads(path.read_text()):
            if key in seen:
                raise AssertionError(f"row {key} reached the sink twice")
            seen[key] = at
    return seen


def run_wal3(spark, root: Path, args: argparse.Namespace, n: int) -> tuple[np.ndarray, dict[str, float]]:
    log = f"{root}/log-{n}"
    sink = f"{root}/sink-wal3-{n}"
    os.makedirs(sink)
    acked: dict[int, float] = {}
    lock = threading.Lock()
    with LogWriter(log, LogWriterOptions(batch_interval_s=args.batch_interval_ms / 1000)) as writer:
        writer.append(b"-1".ljust(args.record_bytes, b"."))  # creates the log
        query = (spark.readStream.format("wal3").option("startingOffsets", "latest").load(log)
                 .selectExpr("cast(substring_index(cast(body as string), '.', 1) as bigint) as k")
                 .writeStream.foreach(ArrivalSink(sink, "k")).options(**write_options(args))
                 .option("checkpointLocation", f"{root}/checkpoint-wal3-{n}").start())
        while not query.recentProgress:  # the query planned its first micro-batch
            if query.exception() is not None:
                raise AssertionError(f"the stream failed: {query.exception()}")
            time.sleep(0.05)

        def acknowledged(i: int, future) -> None:
            future.result()
            with lock:
                acked[i] = time.time()

        count = int(args.rate * args.seconds)
        started = time.monotonic()
        for i in range(count):
            delay = started + i / args.rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            writer.submit(str(i).encode().ljust(args.record_bytes, b".")).add_done_callback(
                lambda f, i=i: acknowledged(i, f))
        writer.flush()
    deadline = time.monotonic() + 120
    while len(arrivals(sink)) < count:  # the last rows reach the sink
        if query.exception() is not None:
            raise AssertionError(f"the stream failed: {query.exception()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"only {len(arrivals(sink))} of {count} appended rows reached the sink")
        time.sleep(0.2)
    phases = durations(query)
    query.stop()
    seen = arrivals(sink)
    if set(seen) != set(range(count)):
        raise AssertionError("the sink did not get exactly the appended rows")
    keep = [i for i in range(count) if i >= args.warmup_s * args.rate]
    return np.array([(seen[i] - acked[i]) * 1000 for i in keep]), phases


def durations(query) -> dict[str, float]:
    """Median milliseconds of each phase Spark reports per micro-batch (`durationMs` of the
    query's progress), over the micro-batches that read rows."""
    per: dict[str, list[float]] = {}
    for progress in query.recentProgress:
        if progress.get("numInputRows", 0) > 0:
            for phase, ms in progress.get("durationMs", {}).items():
                per.setdefault(phase, []).append(ms)
    return {phase: float(np.median(values)) for phase, values in per.items()}


def run_rate(spark, root: Path, args: argparse.Namespace, n: int) -> tuple[np.ndarray, dict[str, float]]:
    sink = f"{root}/sink-rate-{n}"
    os.makedirs(sink)
    query = (spark.readStream.format("rate").option("rowsPerSecond", int(args.rate)).load()
             .selectExpr("value as k", "cast(timestamp as double) as t")
             .writeStream.foreach(_RateSink(sink)).options(**write_options(args))
             .option("checkpointLocation", f"{root}/checkpoint-rate-{n}").start())
    time.sleep(args.seconds + args.warmup_s)  # the rate source runs on its own clock
    phases = durations(query)
    query.stop()
    rows = []
    for path in Path(sink).glob("*.json"):
        rows.extend(json.loads(path.read_text()))
    first = min(t for _, t, _ in rows)
    return np.array([(at - t) * 1000 for _, t, at in rows if t >= first + args.warmup_s]), phases


class _RateSink(ArrivalSink):
    """Also keeps the row's own `timestamp` (when the rate source assigned it)."""

    def __init__(self, folder: str) -> None:
        super().__init__(folder, "k")

    def process(self, row) -> None:
        self.rows.append((int(row["k"]), float(row["t"]), time.time()))  # type: ignore[arg-type]


def line(label: str, latencies: np.ndarray, phases: dict[str, float]) -> str:
    p50, p90, p99 = np.percentile(latencies, [50, 90, 99])
    return (f"{label:<34} p50 {p50:6.0f}  p90 {p90:6.0f}  p99 {p99:6.0f}  max {latencies.max():6.0f} ms"
            f"  ({len(latencies)} rows); per micro-batch, median ms: "
            + ", ".join(f"{k} {v:.0f}" for k, v in sorted(phases.items())))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=100.0, help="appends (and rate rows) per second")
    parser.add_argument("--seconds", type=float, default=20.0, help="measured length of one query")
    parser.add_argument("--warmup-s", type=float, default=5.0, help="rows before this are not measured")
    parser.add_argument("--record-bytes", type=int, default=100)
    parser.add_argument("--batch-interval-ms", type=float, default=20.0, help="LogWriter batch_interval_s, in ms")
    parser.add_argument("--repeat", type=int, default=1, help="rounds, each wal3 then rate")
    parser.add_argument("--only", choices=["wal3", "rate"], help="run one side only")
    parser.add_argument("--conf", action="append", default=[], help="a Spark conf KEY=VALUE (repeatable)")
    parser.add_argument("--write-option", action="append", default=[],
                        help="a writeStream option KEY=VALUE for both queries (repeatable)")
    args = parser.parse_args()
    ensure_worker_python()
    os.environ.setdefault("PYTHONPATH", str(Path(__file__).resolve().parents[1]))
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master("local[2]").appName("wal3-stream-visible")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"]))
    for item in args.conf:
        key, _, value = item.partition("=")
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    print(f"load average at start: {os.getloadavg()[0]:.2f}; {args.rate:.0f} rows/s, "
          f"{args.seconds:.0f} s per query; conf {args.conf}; write options {args.write_option}", flush=True)
    results: dict[str, list[np.ndarray]] = {"wal3": [], "rate": []}
    with tempfile.TemporaryDirectory(prefix="wal3-visible-bench-") as root:
        for n in range(args.repeat):
            for side, run in (("wal3", run_wal3), ("rate", run_rate)):
                if args.only and side != args.only:
                    continue
                got, phases = run(spark, Path(root), args, n)
                results[side].append(got)
                print(line(f"{side} round {n + 1} (load {os.getloadavg()[0]:.1f})", got, phases), flush=True)
    for side, runs in results.items():
        if len(runs) > 1:
            p = np.array([np.percentile(r, [50, 99]) for r in runs])
            print(f"{side}: median of {len(runs)} rounds: p50 {np.median(p[:, 0]):.0f} ms "
                  f"({p[:, 0].min():.0f}-{p[:, 0].max():.0f}), p99 {np.median(p[:, 1]):.0f} ms "
                  f"({p[:, 1].min():.0f}-{p[:, 1].max():.0f})")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    spark.stop()


if __name__ == "__main__":
    main()
