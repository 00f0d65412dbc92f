"""wal3-spark quickstart: append, stream back with a cursor, verify, print a summary.

    spark-submit jobs/quickstart.py                       # a log in a fresh temp directory
    spark-submit jobs/quickstart.py --log /data/logs/orders --rows 1000000
    spark-submit --properties-file conf/s3-example.conf jobs/quickstart.py --log s3://wal3/orders
    python -m wal3_spark.jobs.quickstart --rows 10000     # an installed wal3-spark, local[*]

Steps: generate `--rows` orders and append them in two batch jobs (each one manifest
compare-and-swap), stream the log back with Trigger.AvailableNow in bounded micro-batches while a
wal3 cursor follows the committed offsets, read its last ten records in batch by their offsets
(`startingOffsets`, which plans only the fragments that hold them), then verify the whole log
(every fragment's setsum recomputed).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from wal3_spark.cli.arguments import partitions_arg, positive_arg
from wal3_spark.clock import SYSTEM
from wal3_spark.jobs import common


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--log", help="log URL or directory (default: a new temp directory)")
    parser.add_argument("--rows", type=positive_arg, default=200_000, help="rows to generate (default 200000)")
    parser.add_argument("--partitions", type=partitions_arg, default=4, help="write tasks per append")
    parser.add_argument("--max-records-per-trigger", type=positive_arg, default=50_000)
    parser.add_argument("--cursor", default="quickstart", help="wal3 cursor the stream moves")
    parser.add_argument("--option", action="append", metavar="KEY=VALUE",
                        help="store option (endpoint, credentials, ...); repeatable")
    args = parser.parse_args(argv)
    options = common.store_options(args.option)

    work = Path(tempfile.mkdtemp(prefix="wal3-quickstart-"))
    url = args.log or (work / "log").as_uri()
    if "://" not in url:
        url = Path(url).resolve().as_uri()

    spark = common.session("wal3-quickstart", logs=[url])
    from pyspark.sql import DataFrame, functions as F

    from wal3_spark.log.reader import LogReader
    from wal3_spark.ops.verify import verify
    from wal3_spark.storage import open_store

    def orders(start: int, n: int) -> DataFrame:
        return spark.range(start, start + n, numPartitions=args.partitions).select(
            F.col("id").alias("order_id"),
            (F.col("id") % 1000).alias("customer_id"),
            F.element_at(F.array(*[F.lit(c) for c in ("DE", "FR", "US", "JP", "BR")]),
                         (F.col("id") % 5 + 1).cast("int")).alias("country"),
            F.round((F.col("id") * 7919 % 100_000) / 100.0, 2).alias("amount"),
            F.current_timestamp().alias("created_at"),
        )

    half = args.rows // 2
    t0 = SYSTEM.monotonic()
    orders(0, half).write.format("wal3").mode("append").options(**options).save(url)
    orders(half, args.rows - half).write.format("wal3").mode("append").options(**options).save(url)
    t_write = SYSTEM.monotonic() - t0

    # Stream it back: bounded micro-batches, the cursor follows the committed offsets.
    t0 = SYSTEM.monotonic()
    query = (
        spark.readStream.format("wal3").options(**options)
        .option("maxRecordsPerTrigger", str(args.max_records_per_trigger))
        .option("cursor", args.cursor)
        .load(url)
        .writeStream.format("memory").queryName("quickstart_stream")
        .option("checkpointLocation", str(work / "checkpoint"))
        .trigger(availableNow=True).start()
    )
    query.awaitTermination()
    batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    streamed = spark.sql("SELECT count(*) n, count(DISTINCT _offset) d, min(_offset) lo, "
                         "max(_offset) hi, sum(amount) total FROM quickstart_stream").first()
    assert streamed is not None  # an aggregate has a row
    t_stream = SYSTEM.monotonic() - t0

    batch = spark.read.format("wal3").options(**options).load(url)
    # a range by its offsets: only the fragments that hold them are read
    tail = (spark.read.format("wal3").options(**options)
            .option("startingOffsets", str(args.rows - 9)).load(url))
    tail_rows = tail.count()
    by_country = {r.country: r.n for r in batch.groupBy("country").agg(F.count("*").alias("n")).collect()}

    store = open_store(url, options or None)
    manifest = LogReader(store).manifest()
    from wal3_spark.log.cursors import CursorStore

    cursor = CursorStore(store).get(args.cursor)
    report = verify(store)
    expected_total = orders(0, args.rows).agg(F.sum("amount")).collect()[0][0]

    ok = (
        streamed.n == args.rows and streamed.d == args.rows and streamed.lo == 1
        and streamed.hi == args.rows and abs(streamed.total - expected_total) < 1e-6 * args.rows
        and tail_rows == 10 and report.ok and manifest.next_offset == args.rows + 1
    )
    print()
    print("wal3-spark quickstart")
    print(f"  log                  {url}")
    print(f"  appended             {args.rows} rows in 2 jobs, {t_write:.1f} s")
    print(f"  fragments            {len(manifest.fragments)} ({manifest.acc_bytes / 1e6:.1f} MB)")
    print(f"  offsets              [{manifest.oldest_offset}, {manifest.next_offset})")
    print(f"  streamed back        {streamed.n} rows in {len(batches)} micro-batches {batches}, "
          f"{t_stream:.1f} s")
    print(f"  cursor {args.cursor!r:13} {cursor.cursor.offset if cursor else None} "
          "(trails the checkpoint by at most one batch)")
    print(f"  rows by country      {dict(sorted(by_country.items()))}")
    print(f"  range read           {tail_rows} rows from startingOffsets {args.rows - 9}")
    print(f"  verify               {'ok' if report.ok else 'FAILED'} (setsum {report.setsum[:16]}...)")
    for problem in report.problems:
        print(f"    {problem}")
    print(f"  result               {'OK' if ok else 'MISMATCH'}")
    spark.stop()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
