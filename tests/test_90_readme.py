"""The README's Python examples run as written and print what their comments say."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.spark import spark_env

README = Path(__file__).resolve().parents[1] / "README.md"


def run_example(marker: str, *, timeout: float = 120, env: dict[str, str] | None = None) -> list[str]:
    """What the README's Python block containing `marker` prints, line by line."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    example = next(b for b in blocks if marker in b)
    result = subprocess.run([sys.executable, "-c", example], capture_output=True, text=True,
                            timeout=timeout, env=env)
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout.splitlines()


def test_00_readme_python_api_example_runs():
    lines = run_example("LogWriter(url)")
    assert lines[0] == "1 4 [5, 6, 7, 8, 9]"
    assert lines[1] == "[2, 3, 4] [2, 3, 4]"
    assert lines[2].startswith("9 records, setsum ")


def test_01_readme_log_set_example_runs():
    lines = run_example("LogSet(prefix).names()")
    assert lines == [
        "['acme', 'globex', 'initech']",
        "{'acme': 2, 'globex': 2}",
    ]


def test_02_readme_duckdb_polars_example_runs():
    lines = run_example("duckdb.from_arrow")
    assert lines == [
        "[('north', 100.0), ('south', 100.0)]",
        "[(200, 300)]",
        "(300, 4)",
        "100",
        "250 251",
    ]


def test_03_readme_dirty_log_example_runs():
    lines = run_example("changes_since(LogSet(prefix), None)")
    assert lines == ["{'acme': 2, 'globex': 2} {'globex': 4}"]


@pytest.mark.spark
def test_04_readme_native_scan_example_runs():
    lines = run_example("Wal3Log.forPath", timeout=300, env=spark_env())
    assert lines[-2:] == ["4 4.0", "[('bob', 2), ('ann', 3)]"]
