"""Benchmark: the wal3 data source against Spark's native Parquet on the same cached DataFrame.

    spark-submit --properties-file conf/spark-defaults.conf --master 'local[2]' \
        jobs/benchmark.py --rows 3000000

Prints one table: write (df.write.format("wal3") vs df.write.parquet), read back (batch and an
AvailableNow stream vs spark.read.parquet, all into the `noop` sink so every column is
materialised), the driver's commit latency (one manifest CAS per job), and rows/s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402


def timed(fn, repeat: int) -> float:
    times = []
    for i in range(repeat):
        t0 = time.perf_counter()
        fn(i)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=3_000_000)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--repeat", type=int, default=3, help="runs per measurement (median)")
    p.add_argument("--dir", help="work directory (default: a temp dir, removed afterwards)")
    p.add_argument("--fragment-bytes", default="64m")
    args = p.parse_args(argv)

    work = Path(args.dir or tempfile.mkdtemp(prefix="wal3-bench-"))
    metrics = work / "commit-metrics.jsonl"
    os.environ["WAL3_SPARK_METRICS_FILE"] = str(metrics)
    spark = _common.session("wal3-benchmark", conf={
        "spark.sql.execution.arrow.maxRecordsPerBatch": "65536",
        # the commit runs in a Python worker of the driver JVM: pass the metrics file on
        "spark.executorEnv.WAL3_SPARK_METRICS_FILE": str(metrics),
    })
    from pyspark.sql import functions as F

    df = spark.range(0, args.rows, numPartitions=args.partitions).select(
        F.col("id"),
        (F.col("id") % 1_000_003).cast("int").alias("customer"),
        (F.col("id") * 0.37).alias("amount"),
        F.concat(F.lit("sku-"), (F.col("id") % 50_000).cast("string")).alias("sku"),
        F.timestamp_seconds(F.lit(1_700_000_000) + F.col("id") % 86_400).alias("at"),
        (F.col("id") % 7 == 0).alias("flag"),
    ).cache()
    df.count()

    def write_parquet(i):
        df.write.mode("overwrite").parquet(str(work / f"parquet-{i}"))

    def write_wal3(i):
        df.write.format("wal3").mode("append").option("fragmentBytes", args.fragment_bytes) \
            .save((work / f"wal3-{i}").as_uri())

    t_pq_w = timed(write_parquet, args.repeat)
    t_w3_w = timed(write_wal3, args.repeat)
    url = (work / "wal3-0").as_uri()

    def read_parquet(_):
        spark.read.parquet(str(work / "parquet-0")).write.format("noop").mode("overwrite").save()

    def read_wal3(_):
        spark.read.format("wal3").load(url).write.format("noop").mode("overwrite").save()

    def stream_wal3(i):
        q = (spark.readStream.format("wal3").load(url).writeStream.format("noop")
             .option("checkpointLocation", str(work / f"ckpt-{i}-{time.time_ns()}"))
             .trigger(availableNow=True).start())
        q.awaitTermination()

    t_pq_r = timed(read_parquet, args.repeat)
    t_w3_r = timed(read_wal3, args.repeat)
    t_w3_s = timed(stream_wal3, args.repeat)
    commits = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.exists() else []
    commit_ms = statistics.median(c["seconds"] for c in commits) * 1000 if commits else float("nan")
    fragments = statistics.median(c["fragments"] for c in commits) if commits else 0
    pq_bytes = sum(f.stat().st_size for f in (work / "parquet-0").rglob("*.parquet"))
    w3_bytes = sum(f.stat().st_size for f in (work / "wal3-0" / "log").rglob("*.parquet"))

    rows = args.rows
    cores = spark.sparkContext.defaultParallelism
    print()
    print(f"wal3-spark benchmark: {rows:,} rows x 6 columns, {args.partitions} partitions, "
          f"master {spark.sparkContext.master} ({cores} cores), median of {args.repeat}")
    print(f"{'measurement':34} {'seconds':>8} {'rows/s':>12} {'vs parquet':>10}")
    for name, t, base in [
        ("write  df.write.parquet", t_pq_w, t_pq_w),
        ("write  df.write.format('wal3')", t_w3_w, t_pq_w),
        ("read   spark.read.parquet", t_pq_r, t_pq_r),
        ("read   spark.read.format('wal3')", t_w3_r, t_pq_r),
        ("read   readStream wal3 AvailableNow", t_w3_s, t_pq_r),
    ]:
        print(f"{name:34} {t:8.2f} {rows / t:12,.0f} {t / base:9.2f}x")
    print(f"driver commit (one manifest CAS): median {commit_ms:.1f} ms for {fragments:.0f} "
          f"fragments over {len(commits)} commits")
    print(f"bytes on disk: parquet {pq_bytes / 1e6:.1f} MB, wal3 fragments {w3_bytes / 1e6:.1f} MB")
    spark.stop()
    if not args.dir:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
