"""spark-submit entry point of `wal3_spark.jobs.compact` (see --help); an installed wal3-spark runs
the same job as `python -m wal3_spark.jobs.compact`."""

import sys

import _common  # noqa: F401 (a checkout's wal3_spark when none is installed)

from wal3_spark.jobs.compact import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
