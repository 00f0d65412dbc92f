"""Small helpers for using the wal3 data source from a SparkSession.

- `register(spark)`: register the `wal3` format explicitly (auto-registration needs the
  `pyspark_wal3` module on the driver's Python path; this always works, Spark Connect included);
- `activate_session(spark)`: PySpark resolves `format("wal3")` through the JVM thread's active
  session, which a Python thread other than the main one does not have. Call this first in every
  thread that reads or writes wal3 (e.g. concurrent appends from a thread pool);
- `ensure_worker_python()`: make executors use the driver's Python (PYSPARK_PYTHON) when unset.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from pyspark.sql.utils import is_remote

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
    """Register the `wal3` format on `spark` (classic or Spark Connect)."""
    spark.dataSource.register(Wal3DataSource)


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
    except Exception:  # Spark < 4 kept SparkSession in org.apache.spark.sql
        jvm.org.apache.spark.sql.SparkSession.setActiveSession(jsession)
