"""Distributed scrub of a wal3 log, or of every log of a log set: recompute every fragment's
setsum and compare with the manifest (exit status 1 when anything is wrong).

    spark-submit jobs/verify.py --log s3://wal3/orders --option endpoint=http://127.0.0.1:8333
    spark-submit jobs/verify.py --prefix s3://wal3/tenants [--pattern 'tenant-*'] [--driver-only]

With `--log`, the fragments of the one log are checked on executors. With `--prefix`, each log
of the set (the logs directly under the prefix; `--logs`/`--pattern` select some) is verified
whole by one Spark task (`--driver-only`: 16 threads in this process, no Spark): one line per
log, then a summary.
"""

from __future__ import annotations

import argparse
import sys

from wal3_spark.cli.arguments import partitions_arg
from wal3_spark.jobs import common


def verify_one(url: str, options: dict[str, str]) -> dict:
    """`verify` of one log as a small dict; never raises (the error is its problem)."""
    from wal3_spark.errors import Wal3Error
    from wal3_spark.ops.verify import verify

    try:
        report = verify(url, options=options)
    except Wal3Error as exc:
        return {"url": url, "ok": False, "summary": "", "problems": [str(exc)]}
    summary = f"{report.fragments} fragments, {report.records} records, {report.bytes / 1e6:.1f} MB"
    return {"url": url, "ok": report.ok, "summary": summary, "problems": [str(p) for p in report.problems]}


def verify_set(args: argparse.Namespace, options: dict[str, str]) -> int:
    from wal3_spark.logset.logs import LogSelection, LogSet

    logs = LogSet(args.prefix, LogSelection.parse(args.logs, args.pattern), options=options)
    scan = logs.tails()  # logs whose manifest cannot be read are verified too: they fail
    urls = [logs.log_url(name) for name in sorted([*scan.tails, *scan.failed])]
    if args.driver_only or not urls:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(16) as pool:
            results = list(pool.map(lambda url: verify_one(url, options), urls))
    else:
        spark = common.session("wal3-verify", logs=[args.prefix])
        try:
            results = (spark.sparkContext.parallelize(urls, len(urls))
                       .map(lambda url: verify_one(url, options)).collect())
        finally:
            spark.stop()
    for result in results:
        print(f"{result['url']}: {result['summary']}{': ' if result['summary'] else ''}"
              f"{'ok' if result['ok'] else 'FAILED'}")
        for problem in result["problems"]:
            print(f"  {problem}")  # "extra" (unreferenced) objects are listed but do not fail
    failed = [r for r in results if not r["ok"]]
    print(f"{len(results)} logs under {args.prefix}: {len(failed)} failed")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_log_or_set(p, "verify every log of the log set under this prefix")
    p.add_argument("--driver-only", action="store_true", help="with --prefix: threads in this process, no Spark")
    p.add_argument("--partitions", type=partitions_arg, help="with --log: scrub tasks (default: 4 x cores)")
    p.add_argument("--option", action="append", metavar="KEY=VALUE", help="store option; repeatable")
    args = p.parse_args(argv)
    options = common.store_options(args.option)
    if args.log and (args.logs or args.pattern or args.driver_only):
        p.error("--logs, --pattern and --driver-only go with --prefix")
    from wal3_spark.errors import Wal3Error

    if args.prefix:
        try:
            return verify_set(args, options)
        except Wal3Error as exc:
            common.error(str(exc))
            return 2 if isinstance(exc, ValueError) else 1
    spark = common.session("wal3-verify", logs=[args.log])
    from wal3_spark.spark.distributed_verify import verify_on_spark

    report = verify_on_spark(spark, args.log, options, args.partitions)
    print(f"{args.log}: {report.fragments} fragments, {report.records} records, "
          f"{report.bytes / 1e6:.1f} MB: {'ok' if report.ok else 'FAILED'}")
    for problem in report.problems:
        print(f"  {problem}")  # "extra" (unreferenced) objects are listed but do not fail
    spark.stop()
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
