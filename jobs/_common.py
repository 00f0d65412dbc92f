"""Shared start-up for the jobs in this directory (run them with spark-submit).

- makes `wal3_spark` importable from a source checkout (and ships it to executors as a zip when
  it is not installed there);
- sets PYSPARK_PYTHON to this interpreter when unset, so executors run the same Python;
- builds the SparkSession and registers the `wal3` format.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
try:
    import wal3_spark  # noqa: F401
except ImportError:
    sys.path.insert(0, str(ROOT))


def _package_zip() -> str:
    """wal3_spark and pyspark_wal3 as a zip for --py-files style shipping (removed at exit)."""
    folder = tempfile.mkdtemp(prefix="wal3-pyfiles-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    out = Path(folder) / "wal3_spark.zip"
    with zipfile.ZipFile(out, "w") as zf:
        for path in (ROOT / "wal3_spark").rglob("*.py"):
            zf.write(path, path.relative_to(ROOT))
        if (ROOT / "pyspark_wal3.py").exists():
            zf.write(ROOT / "pyspark_wal3.py", "pyspark_wal3.py")
    return str(out)


def session(app: str, master: str | None = None, conf: dict[str, str] | None = None):
    """The job's SparkSession (master from spark-submit unless given), with `wal3` registered."""
    from pyspark.sql import SparkSession

    from wal3_spark.spark import register

    builder = SparkSession.builder.appName(app)
    if master:
        builder = builder.master(master)
    elif "spark.master" not in os.environ.get("SPARK_CONF", "") and not _submitted():
        builder = builder.master("local[*]")
    # off whatever the cluster's defaults say: with pushdown on, a DataFrame reused after a
    # filtered query returns the filtered rows (docs/design.md section 22); the jobs read
    # ranges with startingOffsets/endingOffsets
    builder = builder.config("spark.sql.python.filterPushdown.enabled", "false")
    import wal3_spark

    from_checkout = str(ROOT) in str(Path(wal3_spark.__file__).resolve())
    if from_checkout:
        # Python workers started by the driver JVM (data source planning, streaming source
        # runners) do not see addPyFile: give them the checkout through their environment.
        paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        builder = builder.config("spark.executorEnv.PYTHONPATH", os.pathsep.join([str(ROOT), *paths]))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("WAL3_LOG_LEVEL", "WARN"))
    if from_checkout:
        spark.sparkContext.addPyFile(_package_zip())
    register(spark)
    return spark


def _submitted() -> bool:
    """Whether we run under spark-submit (which sets the master itself)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ or "SPARK_SUBMIT_OPTS" in os.environ or any(
        "spark-submit" in a for a in sys.argv[:1]
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


def log_selection(names: str | None, pattern: str | None) -> str:
    """The `logs` option selecting a log set's logs from `--logs a,b` or `--pattern GLOB`
    (neither: every log)."""
    return names or pattern or "*"
