"""What every job shares: its SparkSession, its `--option key=value` arguments, its errors.

The session is set up for where it runs. On a local master (`local[*]`, `local-cluster[...]`)
the executors are processes of this machine, so they run this interpreter (PYSPARK_PYTHON, when
unset) and see a source tree this interpreter imported wal3_spark from
(`spark.executorEnv.PYTHONPATH`). On any other master the job touches neither: the cluster's
nodes have their own paths, and the environment the executors run is the deployment's choice
(docs/deploy.md), which `register` checks the driver can start too.
"""

from __future__ import annotations

import argparse
import logging
import os
import site
import sys
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from wal3_spark.errors import SparkSetupError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)


def session(app: str, master: str | None = None, conf: dict[str, str] | None = None,
            logs: list[str] | None = None) -> SparkSession:
    """The job's SparkSession (`master` if given, else spark-submit's, else `local[*]`), with
    `wal3` registered; warns when the `logs` it will read or write are paths only this machine
    may see (`warn_if_driver_local`)."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise SparkSetupError(
            "the Spark jobs need PySpark, which this environment lacks: install it with "
            "`pip install \"wal3-spark[spark]\"`, or run the job with a Spark installation's "
            "spark-submit (docs/deploy.md)"
        ) from None

    from wal3_spark.spark import register

    builder = SparkSession.builder.appName(app)
    if master is None and not submitted():
        master = "local[*]"
    if master is not None:
        builder = builder.master(master)
    # off whatever the cluster's defaults say: with pushdown on, a DataFrame reused after a
    # filtered query returns the filtered rows (docs/design/54-spark-batch-caching-and-pushdown.md); the jobs read
    # ranges with startingOffsets/endingOffsets
    builder = builder.config("spark.sql.python.filterPushdown.enabled", "false")
    environment, settings = executor_environment(master or submitted_master())
    for key, value in environment.items():
        os.environ.setdefault(key, value)
    for key, value in {**settings, **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("WAL3_LOG_LEVEL", "WARN"))
    register(spark)
    for url in logs or []:
        warn_if_driver_local(spark, url)
    return spark


def submitted() -> bool:
    """Whether we run under spark-submit (which sets the master itself)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ or "SPARK_SUBMIT_OPTS" in os.environ or any(
        "spark-submit" in a for a in sys.argv[:1]
    )


def submitted_master() -> str:
    """The master spark-submit gave the driver JVM (before the SparkContext exists)."""
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # connects to spark-submit's JVM; starts none
    return SparkConf().get("spark.master", "local[*]")


def executor_environment(master: str) -> tuple[dict[str, str], dict[str, str]]:
    """(environment variables to default, Spark settings) that make the executors of `master`
    run this interpreter and import this wal3_spark: only for a local master, whose executors
    are processes of this machine. Elsewhere this interpreter's path means nothing."""
    if not is_local_master(master):
        return {}, {}
    environment = {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    source = source_tree()
    if source is None:
        return environment, {}
    # Python workers started by the driver JVM (data source planning, streaming source runners)
    # and the executors' workers import wal3_spark from the source tree too.
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return environment, {"spark.executorEnv.PYTHONPATH": os.pathsep.join([str(source), *paths])}


def is_local_master(master: str) -> bool:
    """Whether every executor of `master` runs on this machine (`local...`, `local-cluster[...]`)."""
    return master.startswith("local")


def source_tree() -> Path | None:
    """The directory wal3_spark was imported from when it is a source tree (a checkout), not an
    installed copy in site-packages that every interpreter of this environment sees anyway."""
    import wal3_spark

    root = Path(wal3_spark.__file__).resolve().parents[1]
    installed = {Path(p).resolve() for p in [*site.getsitepackages(), site.getusersitepackages()]}
    return None if root in installed else root


def warn_if_driver_local(spark: SparkSession, url: str) -> None:
    """Warn when a cluster's executors are to write or read a log in this machine's filesystem."""
    master = spark.sparkContext.master or ""
    if is_local_master(master) or urlparse(url).scheme not in ("", "file"):
        return
    logger.warning(
        "%s is a path in the driver's filesystem, and the master %s runs executors on other "
        "machines: every node (the driver and each worker) must see the same files there (a "
        "shared filesystem such as NFS mounted at the same path), or executors write fragments "
        "the driver never sees and read nothing. Use an object store URL (s3://...) otherwise.",
        url, master,
    )


def store_options(pairs: list[str] | None) -> dict[str, str]:
    """`--option key=value` arguments as a dict."""
    out = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--option expects key=value, got {pair!r}")
        out[key] = value
    return out


def add_log_or_set(parser: argparse.ArgumentParser, prefix_help: str) -> None:
    """`--log URL` or `--prefix URL` (one of them), and the `--logs`/`--pattern` selection of a
    log set's logs that `log_selection` reads: the jobs that take one log or a log set alike."""
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--log", help="log URL")
    which.add_argument("--prefix", help=prefix_help)
    parser.add_argument("--logs", help="with --prefix: only these logs (comma-separated names)")
    parser.add_argument("--pattern", help="with --prefix: only the logs whose names match this glob")


def log_selection(names: str | None, pattern: str | None) -> str:
    """The `logs` option selecting a log set's logs from `--logs a,b` or `--pattern GLOB`
    (neither: every log)."""
    return names or pattern or "*"


def error(message: str) -> None:
    """Print `message` as argparse prints a usage error: `PROG: error: message` on stderr."""
    print(f"{os.path.basename(sys.argv[0])}: error: {message}", file=sys.stderr)
