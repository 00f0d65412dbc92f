"""Stream a wal3 log, or a log set, to the console or to Parquet (Ctrl-C stops; --available-now drains and exits).

    spark-submit jobs/tail.py --log /tmp/logs/orders                       # console, from the tail
    spark-submit jobs/tail.py --log s3://wal3/orders --starting-offsets earliest \
        --output /data/orders-parquet --checkpoint /data/ckpt/orders --cursor archiver --available-now
    spark-submit jobs/tail.py --prefix s3://wal3/tenants --pattern 'acme-*'   # every log of a set, + _log

With --prefix the stream reads the logs directly under the prefix (all of them, the --logs named
or those matching --pattern) as one, each record with its log's name in `_log`; logs created
while it runs join at their oldest offset (--new-logs latest: at their tail), and --cursor moves
that cursor on every log.
"""

from __future__ import annotations

import argparse
import sys
import tempfile

from wal3_spark.cli.arguments import positive_arg
from wal3_spark.jobs import common


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_log_or_set(p, "stream every log of the log set under this prefix")
    p.add_argument("--new-logs", choices=("earliest", "latest"),
                   help="with --prefix: where logs created while the stream runs start (default earliest)")
    p.add_argument("--output", help="Parquet directory (default: print to the console)")
    p.add_argument("--checkpoint", help="checkpoint directory (default: a temp dir for console)")
    p.add_argument("--starting-offsets", default="latest", help="earliest | latest | an offset")
    p.add_argument("--cursor", help="wal3 cursor to move as batches commit")
    p.add_argument("--max-records-per-trigger", type=positive_arg)
    p.add_argument("--available-now", action="store_true", help="read what is there, then stop")
    p.add_argument("--option", action="append", metavar="KEY=VALUE", help="store option; repeatable")
    args = p.parse_args(argv)
    if args.output and not args.checkpoint:
        p.error("--output needs --checkpoint (exactly-once Parquet output)")
    if not args.prefix and (args.logs or args.pattern or args.new_logs):
        p.error("--logs, --pattern and --new-logs go with --prefix")
    if args.logs and args.pattern:
        p.error("select logs with --logs or --pattern, not both")

    spark = common.session("wal3-tail", logs=[args.prefix or args.log])
    reader = (spark.readStream.format("wal3").options(**common.store_options(args.option))
              .option("startingOffsets", args.starting_offsets))
    if args.cursor:
        reader = reader.option("cursor", args.cursor)
    if args.max_records_per_trigger:
        reader = reader.option("maxRecordsPerTrigger", str(args.max_records_per_trigger))
    if args.prefix:
        reader = reader.option("logs", common.log_selection(args.logs, args.pattern))
        if args.new_logs:
            reader = reader.option("newLogOffsets", args.new_logs)
    df = reader.load(args.prefix or args.log)
    checkpoint = args.checkpoint or tempfile.mkdtemp(prefix="wal3-tail-")
    writer = df.writeStream.option("checkpointLocation", checkpoint)
    if args.output:
        writer = writer.format("parquet").option("path", args.output)
    else:
        writer = writer.format("console").option("truncate", "false").option("numRows", "50")
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    query = writer.start()
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
