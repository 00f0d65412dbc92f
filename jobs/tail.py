"""Stream a wal3 log to the console or to Parquet (Ctrl-C stops; --available-now drains and exits).

    spark-submit jobs/tail.py --log /tmp/logs/orders                       # console, from the tail
    spark-submit jobs/tail.py --log s3://wal3/orders --starting-offsets earliest \
        --output /data/orders-parquet --checkpoint /data/ckpt/orders --cursor archiver --available-now
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--log", required=True, help="log URL")
    p.add_argument("--output", help="Parquet directory (default: print to the console)")
    p.add_argument("--checkpoint", help="checkpoint directory (default: a temp dir for console)")
    p.add_argument("--starting-offsets", default="latest", help="earliest | latest | an offset")
    p.add_argument("--cursor", help="wal3 cursor to move as batches commit")
    p.add_argument("--max-records-per-trigger", type=int)
    p.add_argument("--available-now", action="store_true", help="read what is there, then stop")
    p.add_argument("--option", action="append", metavar="KEY=VALUE", help="store option; repeatable")
    args = p.parse_args(argv)
    if args.output and not args.checkpoint:
        p.error("--output needs --checkpoint (exactly-once Parquet output)")

    spark = _common.session("wal3-tail")
    reader = (spark.readStream.format("wal3").options(**_common.store_options(args.option))
              .option("startingOffsets", args.starting_offsets))
    if args.cursor:
        reader = reader.option("cursor", args.cursor)
    if args.max_records_per_trigger:
        reader = reader.option("maxRecordsPerTrigger", str(args.max_records_per_trigger))
    df = reader.load(args.log)
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
