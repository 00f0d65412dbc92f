"""Small helpers for using the wal3 data source from a SparkSession.

- `register(spark)`: register the `wal3` format explicitly (Spark's own lookup of `pyspark_wal3`
  runs the interpreter named by the driver JVM's environment and misses `spark.pyspark.python`;
  this works however the interpreter was chosen, Spark Connect included);
- `activate_session(spark)`: PySpark resolves `format("wal3")` through the JVM thread's active
  session, which a Python thread other than the main one does not have. Call this first in every
  thread that reads or writes wal3 (e.g. concurrent appends from a thread pool);
- `ensure_worker_python()`: make executors use the driver's Python (PYSPARK_PYTHON) when unset.

Design: docs/design/50-installs.md.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

from pyspark.sql.utils import is_remote

from wal3_spark.errors import SparkSetupError
from wal3_spark.spark.source import Wal3DataSource


def ensure_worker_python() -> None:
    """Set PYSPARK_PYTHON (and the driver's) to this interpreter when unset."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def is_connect(spark: Any) -> bool:
    """Whether `spark` is a Spark Connect session (no JVM in this process)."""
    if is_remote():
        return True
    return type(spark).__module__.startswith("pyspark.sql.connect")


def register(spark: Any) -> None:
    """Register the `wal3` format on `spark` (classic or Spark Connect).

    Spark 4.3 finds `pyspark_wal3` by itself only with the interpreter the driver JVM's
    environment names (PYSPARK_DRIVER_PYTHON, else PYSPARK_PYTHON, else `python3` on its PATH):
    `--conf spark.pyspark.python=...` never reaches it, so the lookup runs a Python without
    wal3-spark and `format("wal3")` is DATA_SOURCE_NOT_FOUND. A registered source runs the
    SparkContext's interpreter (spark.pyspark.python, else PYSPARK_PYTHON) instead, on the driver
    as on the executors; `check_worker_python` makes sure the driver can start it.
    """
    if not is_connect(spark):
        check_worker_python(spark.sparkContext.pythonExec)
    spark.dataSource.register(Wal3DataSource)


def check_worker_python(python: str) -> None:
    """Fail with what to do when the driver cannot start `python`, the executors' interpreter.

    A Python data source runs one interpreter, on the executors and on the driver (which plans
    reads, commits writes and runs the streaming source there), and a relative path such as
    `./env/bin/python` (an environment shipped with `--archives env.tar.gz#env`) resolves in
    the driver's working directory too. Without this check the first read or write fails in
    the JVM with "Cannot run program".
    """
    if os.sep in python:
        path = Path(python)
        found = path if path.is_absolute() else Path.cwd() / path
        if found.is_file() and os.access(found, os.X_OK):
            return
        where = f"{found}, which does not exist on the driver"
    else:
        if shutil.which(python):
            return
        where = "a command not on the driver's PATH"
    raise SparkSetupError(
        f"the executors' Python interpreter {python!r} (spark.pyspark.python, else PYSPARK_PYTHON) "
        f"is {where}, and Spark runs the wal3 data source's driver-side steps (planning reads, "
        "committing writes, the streaming source) with that same interpreter. Make the same "
        "environment reachable there: for an environment shipped with --archives env.tar.gz#env "
        f"and ./env/bin/python, unpack it in the driver's working directory ({Path.cwd()}) too "
        "(mkdir env && tar -xzf env.tar.gz -C env); or use an interpreter path that every node "
        "and the driver have (see docs/deploy.md)."
    )


def activate_session(spark: Any) -> None:
    """Make `spark` the JVM thread's active session, so `format("wal3")` resolves in this thread.

    Needed in any Python thread other than the main one (PySpark 4.3); harmless elsewhere and a
    no-op for Spark Connect sessions.
    """
    if is_connect(spark):
        return
    jvm = spark._jvm
    jsession = spark._jsparkSession
    try:
        jvm.org.apache.spark.sql.classic.SparkSession.setActiveSession(jsession)
    except Exception:  # noqa: BLE001 - a Py4J error: Spark < 4 kept SparkSession in org.apache.spark.sql
        jvm.org.apache.spark.sql.SparkSession.setActiveSession(jsession)
