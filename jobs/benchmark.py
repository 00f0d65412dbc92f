"""Benchmark: the wal3 data source and native scan against Spark's Parquet on the same data,
one table row per measurement listed below.

    ./dev spark-submit --properties-file conf/spark-defaults.conf --master 'local[2]' \\
        jobs/benchmark.py --rows 3000000 --core

One cached DataFrame of 6 columns (`id` long, `name` string, `amount` double, `ts` timestamp,
`bucket` long, `tag` = uuid() string). Each row of the table is a wal3 measurement
next to its Parquet baseline: every measurement runs once to warm up, then the two sides of
each comparison take turns `--repeat` times (so both see the same load on a shared machine);
the table shows medians, the spread of the wal3 side, the ratio of the medians, and the ratio
of the median CPU seconds that Spark's processes (the driver JVM, which runs the executors in
local mode, and its Python processes) spent, which a loaded machine disturbs far less.

- write: `df.write.format("wal3")` vs `df.write.parquet`;
- read: `spark.read.format("wal3")` into the `noop` sink (`verifyOnRead` on, the default: the
  digest of each fragment's bytes; `records`: every record's setsum item too; and off), `sum(id), count(name)` and `count()`, each vs `spark.read.parquet`; and the transport
  floor: a Python source yielding the same Arrow batches from memory (`transport_floor`);
- stream: a `Trigger.AvailableNow` drain of twice `--rows` (two appends, two Parquet writes)
  into `noop` vs `spark.readStream.parquet` of the same rows, with the same number of
  micro-batches (printed; all at once, and 4 fragments vs 4 files per trigger); and the drain's
  floor: the same source yielding each micro-batch's Arrow batches from memory (`transport_floor`);
- native scan (`Wal3Log.forPath(spark, url).toDF()`, Spark's own Parquet reader over the
  fragments) vs `spark.read.parquet`: the full rows into `noop`, `sum(id), count(name)`,
  `where bucket = 7` + `sum(amount)`, and `count()`.

`--core` then runs the rest of the table outside Spark: the core append rows
(`benchmarks/core.py --append-only`: `LogWriter.append` vs `pq.write_table`), then the append
latency rows (`benchmarks/latency.py`, 10 s runs: 10,000 appends/s at 100 ms per request, one
manifest write at a time and 8 in flight, next to Chroma's published numbers; then the hedging
rows, 1% of reads and creates 10x, hedged or not, at 2,000 appends/s).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

sys.path.insert(0, str(_common.ROOT))  # jobs.transport_floor, as Spark's workers import it
from wal3_spark.jobs.common import session  # noqa: E402

from wal3_spark.cli.arguments import count_arg, partitions_arg, positive_arg  # noqa: E402 (after the path set-up)


def cpu_seconds(root: int) -> float:
    """CPU time of process `root` and all its descendants, living or reaped (Linux /proc)."""
    children: dict[int, list[int]] = {}
    used: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # exited meanwhile
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
        used[int(entry)] = sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += used.get(pid, 0)
        todo.extend(children.get(pid, []))
    return total / os.sysconf("SC_CLK_TCK")


def alternate(sides: dict[str, Callable[[int], None]], repeat: int,
              root: int) -> dict[str, tuple[list[float], list[float]]]:
    """(wall seconds, CPU seconds of `root`'s process tree) per run: one warm-up run each
    (index -1), then the sides take turns, each round starting one side later than the one
    before, so that no side always runs right after the same other one: the default read,
    always run straight after the Parquet baseline, measured slower than
    `verifyOnRead=records`, which does more work; that the order caused it is a guess."""
    times: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in sides}
    for fn in sides.values():
        fn(-1)
    order = list(sides.items())
    for i in range(repeat):
        shift = i % len(order)
        for name, fn in order[shift:] + order[:shift]:
            t0, c0 = time.perf_counter(), cpu_seconds(root)
            fn(i)
            times[name][0].append(time.perf_counter() - t0)
            times[name][1].append(cpu_seconds(root) - c0)
    return times


GROUPS = ("write", "read", "stream", "scan")


def micro_batches(query) -> int:
    """How many micro-batches of a finished query read any rows."""
    return sum(1 for p in query.recentProgress if p.get("numInputRows", 0) > 0)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=positive_arg, default=3_000_000)
    p.add_argument("--partitions", type=partitions_arg, default=4)
    p.add_argument("--repeat", type=positive_arg, default=3, help="alternating runs per measurement (median)")
    p.add_argument("--dir", help="work directory (default: a temp dir, removed afterwards)")
    p.add_argument("--fragment-bytes", default="64m")
    p.add_argument("--only", nargs="+", choices=GROUPS, default=GROUPS,
                   help="which groups of rows to measure (the logs are written in any case)")
    p.add_argument("--case-limit", type=count_arg,
                   help="native scan: fragments up to which per-file values are a CASE rather than "
                        "a broadcast join (wal3_spark.spark.native_scan.CASE_LIMIT; to compare the two)")
    p.add_argument("--runs", action="store_true",
                   help="also print every run's wall seconds, in the order they ran (bimodal? drifting?)")
    p.add_argument("--core", action="store_true",
                   help="afterwards, run benchmarks/core.py --append-only (core append rows)")
    args = p.parse_args(argv)
    load_before = os.getloadavg()

    work = Path(args.dir or tempfile.mkdtemp(prefix="wal3-bench-"))
    metrics = work / "commit-metrics.jsonl"
    os.environ["WAL3_SPARK_METRICS_FILE"] = str(metrics)
    spark = session("wal3-benchmark", conf={
        "spark.sql.execution.arrow.maxRecordsPerBatch": "65536",
        # the commit runs in a Python worker of the driver JVM: pass the metrics file on
        "spark.executorEnv.WAL3_SPARK_METRICS_FILE": str(metrics),
        "spark.ui.showConsoleProgress": "false",
    })
    from pyspark.sql import functions as F

    from jobs.transport_floor import MemoryFloorSource
    from wal3_spark.spark import Wal3Log, native_scan

    spark.dataSource.register(MemoryFloorSource)

    if args.case_limit is not None:
        native_scan.CASE_LIMIT = args.case_limit
    jvm = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()

    df = spark.range(0, args.rows, numPartitions=args.partitions).select(
        F.col("id"),
        F.concat(F.lit("name-"), (F.col("id") % 100_000).cast("string")).alias("name"),
        (F.col("id") * 0.37).alias("amount"),
        F.timestamp_seconds(F.lit(1_700_000_000) + F.col("id") % 86_400).alias("ts"),
        (F.col("id") % 1024).alias("bucket"),
        F.expr("uuid()").alias("tag"),
    ).cache()
    df.count()

    def write_parquet(i):
        df.write.mode("overwrite").parquet(str(work / f"parquet-{i}"))

    def write_wal3(i):
        df.write.format("wal3").mode("append").option("fragmentBytes", args.fragment_bytes) \
            .save((work / f"wal3-{i}").as_uri())

    rows: list[tuple[str, tuple, tuple]] = []  # (name, wal3 side, baseline side)
    if "write" in args.only:
        t = alternate({"parquet": write_parquet, "wal3": write_wal3}, args.repeat, jvm)
        rows.append(("write  df.write.format('wal3')", t["wal3"], t["parquet"]))
    else:
        write_parquet(0)
        write_wal3(0)
    parquet, url = str(work / "parquet-0"), (work / "wal3-0").as_uri()

    def noop(frame) -> None:
        frame.write.format("noop").mode("overwrite").save()

    def aggregate(frame) -> None:
        frame.selectExpr("sum(id)", "count(name)").collect()

    def filtered(frame) -> None:
        frame.where("bucket = 7").selectExpr("sum(amount)").collect()

    def count(frame) -> None:
        frame.count()

    def wal3(verify: str = "true"):
        return spark.read.format("wal3").option("verifyOnRead", verify).load(url)

    if "read" in args.only:
        t = alternate({"parquet": lambda _: noop(spark.read.parquet(parquet)),
                       "wal3": lambda _: noop(wal3()),
                       "records": lambda _: noop(wal3(verify="records")),
                       "unverified": lambda _: noop(wal3(verify="false")),
                       "floor": lambda _: noop(spark.read.format("wal3memory").load(url))},
                      args.repeat, jvm)
        rows.append(("read   full rows into noop", t["wal3"], t["parquet"]))
        rows.append(("read   full rows, verifyOnRead=records", t["records"], t["parquet"]))
        rows.append(("read   full rows, verifyOnRead=false", t["unverified"], t["parquet"]))
        rows.append(("read   floor: batches from memory (transport)", t["floor"], t["parquet"]))
        for label, query in (("sum(id), count(name)", aggregate), ("count()", count)):
            t = alternate({"parquet": lambda _, q=query: q(spark.read.parquet(parquet)),
                           "wal3": lambda _, q=query: q(wal3())}, args.repeat, jvm)
            rows.append((f"read   {label}", t["wal3"], t["parquet"]))
    if "stream" in args.only:
        # twice the rows: two appends to one log, two Parquet writes to one directory
        stream_parquet, stream_url = str(work / "stream-parquet"), (work / "stream-wal3").as_uri()
        for _ in range(2):
            df.write.mode("append").parquet(stream_parquet)
            df.write.format("wal3").mode("append").option("fragmentBytes", args.fragment_bytes) \
                .save(stream_url)
        batches: dict[str, set[int]] = {}

        def drain(name: str, per_trigger: int | None):
            def run(i: int) -> None:
                if name == "parquet":
                    reader = spark.readStream.schema(df.schema)
                    if per_trigger is not None:
                        reader = reader.option("maxFilesPerTrigger", per_trigger)
                    source = reader.parquet(stream_parquet)
                else:  # wal3, or its floor: the same source yielding its batches from memory
                    reader = spark.readStream.format("wal3memory" if name == "floor" else "wal3")
                    if per_trigger is not None:
                        reader = reader.option("maxFragmentsPerTrigger", per_trigger)
                    source = reader.load(stream_url)
                q = (source.writeStream.format("noop")
                     .option("checkpointLocation", str(work / f"ckpt-{name}-{time.time_ns()}"))
                     .trigger(availableNow=True).start())
                q.awaitTermination()
                batches.setdefault(f"{name}-{per_trigger}", set()).add(micro_batches(q))
            return run

        for per_trigger, label in ((None, "all at once"), (4, "4 per trigger")):
            t = alternate({
                "parquet": drain("parquet", per_trigger),
                "wal3": drain("wal3", per_trigger),
                "floor": drain("floor", per_trigger),
            }, args.repeat, jvm)
            ours, theirs = batches[f"wal3-{per_trigger}"], batches[f"parquet-{per_trigger}"]
            if ours != theirs:
                print(f"warning: micro-batches differ ({label}): wal3 {sorted(ours)}, "
                      f"parquet {sorted(theirs)}", file=sys.stderr)
            rows.append((f"stream AvailableNow {2 * args.rows / 1e6:g}M rows, {label} "
                         f"({'/'.join(map(str, sorted(ours)))} batches)", t["wal3"], t["parquet"]))
            rows.append((f"stream   floor: batches from memory, {label}", t["floor"], t["parquet"]))
    if "scan" in args.only:
        native = Wal3Log.forPath(spark, url)
        for label, query in (
            ("full rows into noop", noop),
            ("sum(id), count(name)", aggregate),
            ("where bucket = 7, sum(amount)", filtered),
            ("count()", count),
        ):
            t = alternate({"parquet": lambda _, q=query: q(spark.read.parquet(parquet)),
                           "native": lambda _, q=query: q(native.toDF())}, args.repeat, jvm)
            rows.append((f"scan   {label}", t["native"], t["parquet"]))

    commits = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.exists() else []
    commit_ms = statistics.median(c["seconds"] for c in commits) * 1000 if commits else float("nan")
    fragments = statistics.median(c["fragments"] for c in commits) if commits else 0
    pq_bytes = sum(f.stat().st_size for f in Path(parquet).rglob("*.parquet"))
    w3_bytes = sum(f.stat().st_size for f in (work / "wal3-0" / "log").rglob("*.parquet"))

    cores = spark.sparkContext.defaultParallelism
    print()
    print(f"wal3-spark benchmark: {args.rows:,} rows x 6 columns, {args.partitions} partitions, "
          f"master {spark.sparkContext.master} ({cores} cores), warm-up + median of {args.repeat} "
          "alternating runs")
    print(f"load average before {load_before[0]:.1f}, after {os.getloadavg()[0]:.1f} (1 min)")
    print(f"{'measurement':52} {'wal3 s':>7} {'(spread)':>13} {'parquet s':>9} {'(spread)':>13} "
          f"{'ratio':>7} {'CPU ratio':>9}")
    for name, (ours, ours_cpu), (base, base_cpu) in rows:
        spread = f"({min(ours):.2f}-{max(ours):.2f})"
        base_spread = f"({min(base):.2f}-{max(base):.2f})"
        print(f"{name:52} {statistics.median(ours):7.2f} {spread:>13} {statistics.median(base):9.2f} "
              f"{base_spread:>13} "
              f"{statistics.median(ours) / statistics.median(base):6.2f}x "
              f"{statistics.median(ours_cpu) / statistics.median(base_cpu):8.2f}x")
    if args.runs:
        for name, (ours, _), (base, _) in rows:
            print(f"runs   {name.split(maxsplit=1)[1]:45} wal3 {' '.join(f'{x:.2f}' for x in ours)}"
                  f"   baseline {' '.join(f'{x:.2f}' for x in base)}")
    print(f"driver commit (one manifest CAS): median {commit_ms:.1f} ms for {fragments:.0f} "
          f"fragments over {len(commits)} commits")
    print(f"bytes on disk: parquet {pq_bytes / 1e6:.1f} MB, wal3 fragments {w3_bytes / 1e6:.1f} MB")
    spark.stop()
    if not args.dir:
        shutil.rmtree(work, ignore_errors=True)
    if args.core:
        return _core_rows()
    return 0


#: the table's rows measured outside Spark, each a benchmark script and its arguments
_CORE_ROWS = (
    ("core.py", "--append-only"),
    ("latency.py", "--seconds", "10", "--serial", "--gc-freeze"),
    ("latency.py", "--scenario", "tail", "--rate", "2000", "--seconds", "10", "--tail-methods", "get,put_if_absent"),
)


def _core_rows() -> int:
    benchmarks = Path(__file__).resolve().parents[1] / "benchmarks"
    for script, *arguments in _CORE_ROWS:
        print(f"\n$ ./dev python benchmarks/{script} {' '.join(arguments)}", flush=True)
        code = subprocess.call([sys.executable, str(benchmarks / script), *arguments])
        if code:
            return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
