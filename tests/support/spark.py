"""Pytest plugin: ONE SparkSession (`local[2,4]`: two cores, tasks retried up to 4 times) per run.

A second SparkContext cannot live in the same process, so the tests that need executors in
separate processes (`local-cluster[2,1,1024]`) and Spark Connect run small scripts through
`spark-submit` / a subprocess instead (`run_spark_script`).

Every JVM of the run (the session's, spark-submit jobs and their launcher, local-cluster workers
and executors, Spark Connect servers) gets `JVM_OPTIONS` through the `java` launcher's
`JDK_JAVA_OPTIONS`, set once when the plugin loads.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "conf"

#: Test JVMs live seconds to minutes over little data, on two cores: C2's compilations (a
#: thread that takes a core while the test waits) and G1's parallel threads never pay off there.
#: C1 only and the serial collector: the quickstart job took 23 s of CPU instead of 40 s
#: (docs/development.md). Tests only: jobs keep Spark's defaults.
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def pytest_configure(config: pytest.Config) -> None:
    """Every JVM the run starts, in this process or a subprocess, takes `JVM_OPTIONS` (the java
    launcher reads `JDK_JAVA_OPTIONS`; it notes so on stderr)."""
    current = os.environ.get("JDK_JAVA_OPTIONS", "")
    if JVM_OPTIONS not in current:
        os.environ["JDK_JAVA_OPTIONS"] = f"{current} {JVM_OPTIONS}".strip()


def _worker_env() -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Python workers must import wal3_spark and pyspark_wal3 even without `pip install -e`.
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(ROOT) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *paths])


def spark_env() -> dict[str, str]:
    """The environment for a spark-submit subprocess (same Python, repo importable)."""
    _worker_env()
    env = dict(os.environ)
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    return env


def connect_env() -> dict[str, str]:
    """`spark_env` for a script whose `SparkSession.builder.remote("local[2]")` starts a Spark
    Connect server: `SPARK_TESTING` makes PySpark bind it to an ephemeral port and connect to
    that one (SPARK-42272), so the run cannot collide on the default 15002 with another test
    run on the machine (it did: "Failed to bind to address 0.0.0.0/0.0.0.0:15002")."""
    return {**spark_env(), "SPARK_TESTING": "1"}


def spark_submit() -> str:
    candidate = Path(sys.executable).parent / "spark-submit"
    return str(candidate) if candidate.exists() else "spark-submit"


def run_spark_script(args: list[str], *, timeout: float = 300, env: dict | None = None,
                     master: str | None = None) -> subprocess.CompletedProcess:
    """Run `spark-submit [--master M] args...` with the quiet test configuration."""
    cmd = [spark_submit(), "--properties-file", str(CONF / "spark-defaults.conf")]
    if master:
        cmd += ["--master", master]
    cmd += args
    return subprocess.run(
        cmd, cwd=ROOT, env={**spark_env(), **(env or {})}, capture_output=True, text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="session")
def spark():
    _worker_env()
    from pyspark.sql import SparkSession

    from wal3_spark.spark.session import register

    builder = (
        SparkSession.builder.master("local[2,4]")
        .appName("wal3-spark-tests")
        .config("spark.sql.python.filterPushdown.enabled", "false")  # as conf/ ships it
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "4")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.streaming.stopTimeout", "30s")
        .config("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"])
        .config("spark.driver.extraJavaOptions",
                f"-Dlog4j2.configurationFile={CONF / 'log4j2.properties'}")
    )
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


@pytest.fixture
def log_url(tmp_path):
    """A fresh local-filesystem log URL."""
    return (tmp_path / f"log-{uuid.uuid4().hex[:8]}").as_uri()


@contextlib.contextmanager
def filter_pushdown(spark, enabled: bool = True) -> Iterator[None]:
    """Plan the block's reads with `spark.sql.python.filterPushdown.enabled` set to `enabled`
    (the session runs with it off, as the project ships it)."""
    key = "spark.sql.python.filterPushdown.enabled"
    before = spark.conf.get(key)
    spark.conf.set(key, str(enabled).lower())
    try:
        yield
    finally:
        spark.conf.set(key, before)
