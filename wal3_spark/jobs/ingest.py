"""Ingest files of any Spark format into a wal3 log (one atomic append).

    spark-submit jobs/ingest.py --format parquet --input /data/orders/ --log s3://wal3/orders
    spark-submit jobs/ingest.py --format csv --read-option header=true --read-option inferSchema=true \
        --input 'in/*.csv' --log /tmp/logs/orders --merge-schema
"""

from __future__ import annotations

import argparse
import sys

from wal3_spark.clock import SYSTEM
from wal3_spark.jobs import common


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input", required=True, action="append", help="input path or glob; repeatable")
    p.add_argument("--format", default="parquet", help="any Spark format: parquet, csv, json, orc, text...")
    p.add_argument("--read-option", action="append", metavar="KEY=VALUE", help="reader option; repeatable")
    p.add_argument("--log", required=True, help="log URL (file://, s3://, or a local path)")
    p.add_argument("--merge-schema", action="store_true", help="allow adding nullable columns")
    p.add_argument("--fragment-bytes", default=None, help="bytes per fragment (e.g. 64m)")
    p.add_argument("--filter-column", metavar="COLUMN",
                   help="give each fragment a stream filter of this column (readers of a few of "
                        "its values skip the fragments without them)")
    p.add_argument("--option", action="append", metavar="KEY=VALUE", help="store option; repeatable")
    args = p.parse_args(argv)

    spark = common.session("wal3-ingest", logs=[args.log])
    df = spark.read.format(args.format).options(**common.store_options(args.read_option)).load(args.input)
    writer = df.write.format("wal3").mode("append").options(**common.store_options(args.option))
    if args.merge_schema:
        writer = writer.option("mergeSchema", "true")
    if args.fragment_bytes:
        writer = writer.option("fragmentBytes", args.fragment_bytes)
    if args.filter_column:
        writer = writer.option("filterColumn", args.filter_column)
    t0 = SYSTEM.monotonic()
    writer.save(args.log)
    elapsed = SYSTEM.monotonic() - t0
    from wal3_spark.log.reader import LogReader
    from wal3_spark.storage import open_store

    m = LogReader(open_store(args.log, common.store_options(args.option) or None)).manifest()
    print(f"ingested {args.input} ({args.format}) into {args.log} in {elapsed:.1f} s; "
          f"log offsets now [{m.oldest_offset}, {m.next_offset}), {len(m.fragments)} fragments")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
