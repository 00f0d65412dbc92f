"""`python -m wal3_spark.jobs [NAME]`: the jobs and the files spark-submit runs them from.

With a NAME, only that job's file (for `spark-submit "$(python -m wal3_spark.jobs NAME)"`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from wal3_spark.jobs import JOBS

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m wal3_spark.jobs",
        description="List the wal3-spark jobs and the files spark-submit runs them from.",
        epilog='spark-submit [OPTIONS] "$(python -m wal3_spark.jobs quickstart)" [JOB ARGS]; '
               "python -m wal3_spark.jobs.quickstart [JOB ARGS] runs it on local[*].")
    parser.add_argument("name", nargs="?", choices=sorted(JOBS), help="print only this job's file")
    args = parser.parse_args(argv)
    if args.name:
        print(HERE / f"{args.name}.py")
        return 0
    width = max(map(len, JOBS))
    for name, summary in JOBS.items():
        print(f"{name:{width}}  {HERE / f'{name}.py'}\n{'':{width}}  {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
