"""The jobs, shipped in the package so that an installed wal3-spark runs them, not only a checkout.

Each job is a module with a `main(argv)`: run it with `python -m wal3_spark.jobs.NAME` (a local
Spark, `local[*]`), or give spark-submit its file, which `python -m wal3_spark.jobs NAME` prints:

    spark-submit --master spark://host:7077 "$(python -m wal3_spark.jobs quickstart)" --help

A checkout's top-level `jobs/` holds the same jobs as thin spark-submit entry points
(`spark-submit jobs/quickstart.py`). The jobs need PySpark (`pip install "wal3-spark[spark]"`
where the platform brings none); `gc --driver-only`, `verify --prefix --driver-only` and
`compact --driver-only` do not.
"""

from __future__ import annotations

#: name -> what the job does (`python -m wal3_spark.jobs` prints them)
JOBS = {
    "quickstart": "generate, append, stream back with a cursor, verify, print a summary",
    "ingest": "files of any Spark format into a log (one atomic append)",
    "tail": "stream a log or a log set to the console or to Parquet",
    "pipeline": "log -> transformation -> log (or log sets), exactly-once",
    "verify": "recompute every fragment's setsum on executors (a log, or every log of a set)",
    "gc": "garbage-collect the logs under a prefix, through its dirty log when it has one",
    "compact": "merge runs of small fragments of a log or of every log of a set, records kept",
}
