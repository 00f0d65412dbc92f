"""Installing: `format("wal3")` auto-registers in the project's own (editable) environment from
any directory, and `./dev` says which Python it needs when the one it finds is too old."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.spark import ROOT

pytestmark = pytest.mark.timeout(400)

# Neither imports wal3_spark nor registers anything: Spark's own lookup must find `pyspark_wal3`.
AUTO_REGISTRATION_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    url = sys.argv[1]
    spark.range(0, 100, numPartitions=2).selectExpr("id", "id * 2 AS twice") \\
        .write.format("wal3").mode("append").save(url)
    back = spark.read.format("wal3").load(url)
    row = back.selectExpr("count(*) n", "max(_offset) hi", "sum(twice - 2 * id) bad").first()
    print(json.dumps(dict(n=row.n, hi=row.hi, bad=row.bad, columns=back.columns,
                          imported="wal3_spark" in sys.modules and "driver")))
    spark.stop()
    """
)


def project_environment() -> dict[str, str]:
    """The environment a user of the project's virtual environment has: its bin/ first on PATH
    (as `activate` does, so Spark's workers run its `python3`), and nothing pointing at the
    checkout (no PYTHONPATH, no PYSPARK_PYTHON)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["VIRTUAL_ENV"] = str(Path(sys.executable).parent.parent)
    return env


def test_00_format_wal3_auto_registers_from_outside_the_checkout(tmp_path):
    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    script = workdir / "job.py"
    script.write_text(AUTO_REGISTRATION_SCRIPT)
    assert ROOT not in workdir.parents
    result = subprocess.run(
        [sys.executable, str(script), (tmp_path / "log").as_uri()], cwd=workdir,
        env=project_environment(), capture_output=True, text=True, timeout=360,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-5000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert (out["n"], out["hi"], out["bad"]) == (100, 100, 0)
    assert out["columns"] == ["id", "twice", "_offset", "_timestamp"]
    # the script never imported wal3_spark: only Spark's lookup (in its Python worker) did
    assert out["imported"] is False


def fake_python(directory: Path, version: str) -> Path:
    """An executable named python3 that reports `version` whatever it is asked."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "python3"
    path.write_text(f"#!/bin/sh\necho {version}\n")
    path.chmod(0o755)
    return path


def run_dev(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([str(ROOT / "dev"), "setup"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60,
                          env={**os.environ, "WAL3_VENV": str(tmp_path / "venv"), **env})


def test_01_dev_names_the_python_it_needs_when_python3_is_too_old(tmp_path):
    fake = fake_python(tmp_path / "bin", "3.10.13")
    result = run_dev(tmp_path, {"PATH": f"{fake.parent}{os.pathsep}{os.environ['PATH']}"})
    assert result.returncode == 1
    assert "needs Python >= 3.11" in result.stderr and "PySpark 4.3" in result.stderr
    assert f"{fake} is Python 3.10.13" in result.stderr
    assert "PYTHON=" in result.stderr  # how to pick another interpreter
    assert not (tmp_path / "venv").exists()  # nothing was created


def test_02_dev_refuses_an_environment_made_with_an_old_python(tmp_path):
    fake_python(tmp_path / "venv" / "bin", "3.10.13").rename(tmp_path / "venv" / "bin" / "python")
    result = run_dev(tmp_path, {})
    assert result.returncode == 1
    assert "is Python 3.10.13" in result.stderr
    assert f"rm -rf {tmp_path / 'venv'}" in result.stderr


def test_03_install_metadata_declares_the_pythons_pyspark_supports():
    import tomllib
    from importlib.metadata import metadata

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == metadata("pyspark")["Requires-Python"]
    assert f"MIN_PYTHON={project['requires-python'].removeprefix('>=')}\n" in (ROOT / "dev").read_text()
