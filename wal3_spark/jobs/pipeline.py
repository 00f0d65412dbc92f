"""log -> transformation -> log, exactly-once (the sink commits each batch with its batchId).

    spark-submit jobs/pipeline.py --source /tmp/logs/orders --sink /tmp/logs/big_orders \
        --checkpoint /tmp/ckpt/big_orders --where "amount > 500" \
        --with-column "amount_eur=round(amount * 0.92, 2)" --available-now

    spark-submit jobs/pipeline.py --source s3://wal3/tenants --source-logs '*' \
        --sink s3://wal3/tenants_clean --route-by _log --checkpoint /tmp/ckpt/clean --available-now

Restarting with the same --checkpoint continues where it stopped; a micro-batch replayed after a
crash is recognised by the sink's `txns` entry and not appended twice.

Log sets: with --source-logs (`*`, a glob, or names a,b) --source is a prefix whose logs are read
as one stream with a `_log` column; with --route-by COLUMN --sink is a prefix and each row goes
to the log that COLUMN names (created on first use; exactly-once per log). `--route-by _log`
writes each source log's records to the sink log of the same name. The source's `_log` is
dropped otherwise (kept as `src_log` with --keep-source-offsets).
"""

from __future__ import annotations

import argparse
import sys

from wal3_spark.cli.arguments import positive_arg
from wal3_spark.jobs import common


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--source", required=True, help="source log URL (a prefix with --source-logs)")
    p.add_argument("--source-logs", metavar="SELECTION",
                   help="read the log set under --source: * (every log), a glob, or names a,b")
    p.add_argument("--sink", required=True,
                   help="sink log URL, created on first append (a prefix with --route-by)")
    p.add_argument("--route-by", metavar="COLUMN",
                   help="write each row to the log under --sink named by this string column")
    p.add_argument("--filter-column", metavar="COLUMN",
                   help="give each fragment of the sink a stream filter of this column (readers of "
                        "a few of its values skip the fragments without them)")
    p.add_argument("--dirty-log", action="store_true",
                   help="record the sink's commits in the dirty log of its prefix")
    p.add_argument("--checkpoint", required=True, help="checkpoint directory (also the writer id)")
    p.add_argument("--where", help="SQL filter applied to each record")
    p.add_argument("--with-column", action="append", metavar="NAME=EXPR", help="derived column; repeatable")
    p.add_argument("--keep-source-offsets", action="store_true",
                   help="keep the source's _offset/_timestamp as src_offset/src_timestamp")
    p.add_argument("--max-records-per-trigger", type=positive_arg, default=100_000)
    p.add_argument("--available-now", action="store_true", help="drain the source, then stop")
    p.add_argument("--option", action="append", metavar="KEY=VALUE", help="store option (both logs)")
    args = p.parse_args(argv)

    spark = common.session("wal3-pipeline", logs=[args.source, args.sink])
    from pyspark.sql import functions as F

    options = common.store_options(args.option)
    reader = (spark.readStream.format("wal3").options(**options)
              .option("maxRecordsPerTrigger", str(args.max_records_per_trigger)))
    if args.source_logs:
        reader = reader.option("logs", args.source_logs)
    df = reader.load(args.source)
    if args.where:
        df = df.where(args.where)
    for spec in args.with_column or []:
        name, sep, expr = spec.partition("=")
        if not sep:
            p.error(f"--with-column expects NAME=EXPR, got {spec!r}")
        df = df.withColumn(name.strip(), F.expr(expr))
    system = {"_offset": "src_offset", "_timestamp": "src_timestamp"}
    if args.source_logs and args.route_by != "_log":
        system["_log"] = "src_log"
    for column, renamed in system.items():
        df = df.withColumnRenamed(column, renamed) if args.keep_source_offsets else df.drop(column)
    writer = (df.writeStream.format("wal3").options(**options)
              .option("checkpointLocation", args.checkpoint))
    if args.route_by:
        writer = writer.option("logColumn", args.route_by)
    if args.filter_column:
        writer = writer.option("filterColumn", args.filter_column)
    if args.dirty_log:
        writer = writer.option("dirtyLog", "true")
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    query = writer.start(args.sink)
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()
    progress = [p["numInputRows"] for p in query.recentProgress]
    print(f"pipeline {args.source} -> {args.sink}: {sum(progress)} records in {len(progress)} batches")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
