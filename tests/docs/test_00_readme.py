"""The README's and the user guide's examples run as written and print what their comments say."""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.spark import spark_env

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
GUIDE = ROOT / "docs" / "guide"


def example(marker: str, page: Path = README, lang: str = "python") -> str:
    """The `lang` code block of `page` that contains `marker`."""
    blocks = re.findall(rf"```{lang}\n(.*?)```", page.read_text(), flags=re.S)
    return next(b for b in blocks if marker in b)


def run_example(marker: str, page: Path = README, *, timeout: float = 120,
                env: dict[str, str] | None = None) -> list[str]:
    """What the Python block of `page` containing `marker` prints, line by line (in a fresh process)."""
    result = subprocess.run([sys.executable, "-c", example(marker, page)], capture_output=True,
                            text=True, timeout=timeout, env=env)
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout.splitlines()


def test_00_readme_spark_example_runs(spark):
    """Append, read a range with startingOffsets/endingOffsets, drain a stream with a cursor.

    Run in this process: the example's getOrCreate() returns the session's SparkSession.
    """
    code = example('format("wal3").mode("append")')
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md (Spark example)", "exec"), {"__name__": "readme_example"})
    lines = out.getvalue().splitlines()
    assert lines == ["10 11", "100"]


def test_01_readme_sql_example_runs(spark, tmp_path):
    """The SQL block, statement by statement, on a local log instead of the example's bucket."""
    sql = example("CREATE TABLE events", lang="sql")
    assert "s3://bucket/logs/events" in sql
    sql = sql.replace("s3://bucket/logs/events", (tmp_path / "events").as_uri())
    statements = [s.strip() for s in re.sub(r"--[^\n]*", "", sql).split(";") if s.strip()]
    spark.sql("DROP TABLE IF EXISTS events")
    results = []
    for statement in statements:
        df = spark.sql(statement)
        if statement.startswith("SELECT"):
            results.append(sorted(tuple(row) for row in df.collect()))
    assert results == [[("click", 5, 5)], [(3, 4), (4, 5)]]
    assert not spark.catalog.tableExists("events")


@pytest.mark.parametrize("page", [README, GUIDE / "python.md"], ids=["readme", "guide"])
def test_02_python_api_example_runs(page):
    lines = run_example("LogWriter(url)", page)
    assert lines[0] == "1 4 [5, 6, 7, 8, 9]"
    assert lines[1] == "[2, 3, 4] [2, 3, 4]"
    assert lines[2].startswith("9 records, setsum ")


def test_03_guide_log_set_example_runs():
    lines = run_example("LogSet(prefix).names()", GUIDE / "log-sets.md")
    assert lines == [
        "['acme', 'globex', 'initech']",
        "{'acme': 2, 'globex': 2}",
    ]


def test_04_guide_dirty_log_example_runs():
    lines = run_example("changes_since(LogSet(prefix), None)", GUIDE / "log-sets.md")
    assert lines == ["{'acme': 2, 'globex': 2} {'globex': 4}"]


def test_05_guide_duckdb_polars_example_runs():
    lines = run_example("duckdb.from_arrow", GUIDE / "python.md")
    assert lines == [
        "[('north', 100.0), ('south', 100.0)]",
        "[(200, 300)]",
        "(300, 4)",
        "100",
        "250 251",
    ]


@pytest.mark.spark
def test_06_guide_native_scan_example_runs():
    lines = run_example("Wal3Log.forPath", GUIDE / "native-scan.md", timeout=300, env=spark_env())
    assert lines[-2:] == ["4 4.0", "[('bob', 2), ('ann', 3)]"]
