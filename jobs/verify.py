"""Distributed scrub of a wal3 log: recompute every fragment's setsum on executors and compare
with the manifest (exit status 1 when anything is wrong).

    spark-submit jobs/verify.py --log s3://wal3/orders --option endpoint=http://127.0.0.1:8333
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--log", required=True, help="log URL")
    p.add_argument("--partitions", type=int, help="scrub tasks (default: 4 x cores)")
    p.add_argument("--option", action="append", metavar="KEY=VALUE", help="store option; repeatable")
    args = p.parse_args(argv)
    spark = _common.session("wal3-verify")
    from wal3_spark.spark.scrub import scrub

    report = scrub(spark, args.log, _common.store_options(args.option), args.partitions)
    print(f"{args.log}: {report.fragments} fragments, {report.records} records, "
          f"{report.bytes / 1e6:.1f} MB: {'ok' if report.ok else 'FAILED'}")
    for problem in report.problems:
        print(f"  {problem}")  # "extra" (unreferenced) objects are listed but do not fail
    spark.stop()
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
