"""A streaming sink with 1-second triggers, with and without autoCompact, side by side.

    ./dev python benchmarks/auto_compaction.py                      # 10 minutes
    ./dev python benchmarks/auto_compaction.py --minutes 2 --every 20

Two queries run at once in one local Spark session, on the same load: Spark's `rate` source
(`--rate` rows per second, 2 partitions) into a wal3 log with `autoCompact=true`, and the same
into a second log without it, each with a 1-second processing-time trigger. Every `--every`
seconds the benchmark prints, for both logs, the fragments in the manifest and the time of one
`LogReader.read_table` of the whole log. At the end: each query's micro-batch time (Spark's
`durationMs.addBatch`: the tasks' writes and the driver's commit), medians with min-max
(the first `--warmup` batches left out), and a check that every row reached each log once.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from wal3_spark.errors import LogNotFound
from wal3_spark.log.reader import LogReader
from wal3_spark.spark.session import ensure_worker_python, register


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.0f} ({min(values):.0f}-{max(values):.0f})"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--every", type=float, default=60.0, help="seconds between samples")
    p.add_argument("--rate", type=int, default=200, help="rows per second into each log")
    p.add_argument("--fragments", type=int, default=16, help="autoCompactFragments")
    p.add_argument("--warmup", type=int, default=5, help="micro-batches not counted")
    args = p.parse_args()

    ensure_worker_python()
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("wal3-auto-compaction")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.streaming.numRecentProgressUpdates", "5000")
             .config("spark.ui.enabled", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    folder = tempfile.mkdtemp(prefix="wal3-auto-compaction-")
    urls = {"autoCompact": Path(folder, "auto").as_uri(), "without": Path(folder, "plain").as_uri()}
    queries = {}
    for name, url in urls.items():
        writer = (spark.readStream.format("rate").option("rowsPerSecond", args.rate)
                  .option("numPartitions", 2).load().selectExpr("value AS id", "timestamp AS at")
                  .writeStream.format("wal3").option("checkpointLocation", f"{folder}/ckpt-{name}")
                  .trigger(processingTime="1 second"))
        if name == "autoCompact":
            writer = writer.option("autoCompact", "true").option("autoCompactFragments", args.fragments)
        queries[name] = writer.start(url)
    print(f"# rate {args.rate} rows/s into each log, 1 s triggers, {args.minutes} min; load "
          f"{os.getloadavg()[0]:.1f}", flush=True)
    print("| t (s) | fragments, autoCompact | fragments, without | read s, autoCompact | read s, without |")
    print("|---|---|---|---|---|")
    started = time.monotonic()
    end = started + args.minutes * 60
    while time.monotonic() < end:
        time.sleep(min(args.every, max(0.0, end - time.monotonic())))
        row = [f"{time.monotonic() - started:.0f}"]
        reads = []
        for url in urls.values():
            reader = LogReader(url)
            try:
                row.append(str(len(reader.manifest().fragments)))
            except LogNotFound:  # no micro-batch committed yet
                row.append("-")
                reads.append("-")
                continue
            t0 = time.perf_counter()
            reader.read_table()
            reads.append(f"{time.perf_counter() - t0:.3f}")
        print("| " + " | ".join(row + reads) + " |", flush=True)
    for q in queries.values():
        q.stop()
    load = os.getloadavg()[0]
    print(f"\n# micro-batch time (durationMs.addBatch, ms), batches after the first {args.warmup}; "
          f"load {load:.1f}")
    print("| sink | batches | median (min-max) ms | rows | in the log once |")
    print("|---|---|---|---|---|")
    for name, q in queries.items():
        progress = [pr for pr in q.recentProgress if pr["numInputRows"] > 0]
        times = [float(pr["durationMs"]["addBatch"]) for pr in progress[args.warmup:]]
        rows = sum(pr["numInputRows"] for pr in q.recentProgress)
        ids = LogReader(urls[name]).read_table().column("id").to_pylist()
        once = len(ids) == len(set(ids)) == rows
        print(f"| {name} | {len(times)} | {spread(times)} | {rows} | {once} |")
        if not once:
            raise SystemExit(f"{name}: {len(ids)} rows in the log, {len(set(ids))} distinct, {rows} sent")
    spark.stop()


if __name__ == "__main__":
    main()
