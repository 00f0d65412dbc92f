"""Installing: `format("wal3")` auto-registers in the project's own (editable) environment from
any directory, and `./dev` says which Python it needs when the one it finds is too old."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
from dataclasses import dataclass
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


# ------------------------------------------------------------------ the wheel, without PySpark


@dataclass
class Installed:
    """The wheel built from this checkout, installed into a fresh environment without PySpark."""

    wheel: Path
    venv: Path

    @property
    def python(self) -> str:
        return str(self.venv / "bin" / "python")


def outside_env() -> dict[str, str]:
    """This process's environment without anything pointing at the checkout or its environment:
    no PYTHONPATH, no PYSPARK_*, PATH without the test environment's bin/."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV",
                        "SPARK_HOME", "PYSPARK_SUBMIT_ARGS")}
    ours = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != ours)
    return env


def run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 300,
        ) -> subprocess.CompletedProcess:
    result = subprocess.run(cmd, cwd=cwd, env=env or outside_env(), capture_output=True, text=True,
                            timeout=timeout)
    assert result.returncode == 0, (cmd, result.stdout[-3000:], result.stderr[-6000:])
    return result


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Installed:
    """`pip wheel` of a copy of the checkout's sources (an in-tree build would leave build/ in
    the checkout, and stale files there end up in later wheels), then `pip install` of the
    wheel into a new virtual environment: the packages come from pip's cache (or PyPI)."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "pyspark_wal3.py"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "wal3_spark", source / "wal3_spark",
                    ignore=shutil.ignore_patterns("__pycache__"))
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check",
         "--quiet", "-w", str(work / "dist"), str(source)], cwd=work)
    [wheel] = (work / "dist").glob("wal3_spark-*.whl")
    venv = work / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=work)
    # this environment's pip installs into the new one (no pip of its own to bootstrap); never
    # with this process's PYTHONPATH (set once a Spark session started in the run), through
    # which pip would find the checkout's editable wal3-spark "already satisfied" and skip it
    run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
         "--disable-pip-version-check", "--quiet", str(wheel)], cwd=work, timeout=600)
    return Installed(wheel, venv)


CORE_SCRIPT = textwrap.dedent(
    """
    import importlib, importlib.util, json, pkgutil, sys
    from pathlib import Path
    import wal3_spark
    from wal3_spark import LogReader, LogWriter
    from wal3_spark.storage import open_store
    store = open_store(sys.argv[1])
    LogWriter(store).append([b"a", b"b"])
    LogWriter(store).append([b"c"])
    batches = list(LogReader(store).read())
    # every module but the Spark layer, the jobs that use it and the modules of the optional
    # console and metrics extras (Flask, prometheus-client) imports without PySpark
    # (`__main__` modules run their command when imported)
    skipped = ("wal3_spark.spark", "wal3_spark.jobs.", "wal3_spark.console.app",
               "wal3_spark.observe.metrics")
    modules = [m.name for m in pkgutil.walk_packages(wal3_spark.__path__, "wal3_spark.")
               if not m.name.startswith(skipped) and not m.name.endswith(".__main__")]
    for name in modules:
        importlib.import_module(name)
    print(json.dumps(dict(
        records=[b.decode() for batch in batches for b in batch.column("body").to_pylist()],
        offsets=[o for batch in batches for o in batch.column("_offset").to_pylist()],
        modules=modules, typed=Path(wal3_spark.__file__).with_name("py.typed").exists(),
        pyspark=importlib.util.find_spec("pyspark") is not None,
        pandas=importlib.util.find_spec("pandas") is not None)))
    """
)


@pytest.mark.slow
def test_04_the_wheel_installs_and_runs_the_core_without_pyspark(installed, tmp_path):
    from importlib.metadata import PathDistribution

    requires = PathDistribution(next(
        (installed.venv / "lib").glob("python3.*/site-packages/wal3_spark-*.dist-info"))).requires
    assert [r for r in requires if r.startswith(("pyspark", "pandas"))] == [
        'pyspark[connect]<5,>=4.3; extra == "spark"', 'pandas<3,>=2.2; extra == "spark"']
    script = tmp_path / "core.py"
    script.write_text(CORE_SCRIPT)
    out = json.loads(run([installed.python, str(script), str(tmp_path / "log")],
                         cwd=tmp_path).stdout.strip().splitlines()[-1])
    assert (out["records"], out["offsets"]) == (["a", "b", "c"], [1, 2, 3])
    assert {"wal3_spark.log.writer", "wal3_spark.cli.main", "wal3_spark.storage.s3",
            "wal3_spark.jobs"} <= set(out["modules"])
    assert out["pyspark"] is False and out["pandas"] is False
    assert out["typed"] is True
    help_text = run([str(installed.venv / "bin" / "wal3"), "--help"], cwd=tmp_path).stdout
    assert "usage: wal3" in help_text and "verify" in help_text
    info = run([str(installed.venv / "bin" / "wal3"), "info", str(tmp_path / "log")], cwd=tmp_path)
    assert "[1, 4)  (3 records)" in info.stdout
    # without the optional extras, the console and the exporter say which extra to install
    for command, extra in (("console", "console"), ("exporter", "metrics")):
        done = subprocess.run([str(installed.venv / "bin" / "wal3"), command, str(tmp_path / "log")],
                              cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert done.returncode != 0 and f"pip install 'wal3-spark[{extra}]'" in done.stderr, done
        assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_05_the_installed_package_runs_the_jobs_with_the_checkouts_help(installed, tmp_path):
    listing = run([installed.python, "-m", "wal3_spark.jobs"], cwd=tmp_path).stdout
    site = next((installed.venv / "lib").glob("python3.*/site-packages"))
    for job in ("quickstart", "ingest", "tail", "pipeline", "verify", "gc"):
        path = run([installed.python, "-m", "wal3_spark.jobs", job], cwd=tmp_path).stdout.strip()
        assert path == str(site / "wal3_spark" / "jobs" / f"{job}.py") and path in listing
        # --help needs no PySpark: the installed module and the checkout's entry point agree
        installed_help = run([installed.python, "-m", f"wal3_spark.jobs.{job}", "--help"],
                             cwd=tmp_path).stdout
        checkout_help = run([sys.executable, str(ROOT / "jobs" / f"{job}.py"), "--help"],
                            cwd=ROOT, env=dict(os.environ)).stdout
        assert installed_help == checkout_help and installed_help.startswith("usage: ")


# ------------------------------------------------------------- a standalone cluster, two recipes


class Daemon:
    """A Spark master or worker started with PySpark's own `spark-class`, its output drained by
    a thread that sets `ready` when `marker` appears (the line is kept in `found`)."""

    def __init__(self, args: list[str], env: dict[str, str], marker: str):
        self.lines: list[str] = []
        self.found = ""
        self.ready = threading.Event()
        self.marker = marker
        # its own process group: stopping it stops the executors and Python workers it started
        self.proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, start_new_session=True)
        self.thread = threading.Thread(target=self._drain, daemon=True)
        self.thread.start()

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if not self.ready.is_set() and self.marker in line:
                self.found = line
                self.ready.set()
        self.ready.set()  # exited: wait() reports it

    def wait(self, timeout: float) -> str:
        assert self.ready.wait(timeout) and self.found, "".join(self.lines[-50:])
        return self.found

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(60)
        self.thread.join(60)


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


@pytest.fixture
def standalone(tmp_path):
    """A master and one worker (1 core, 1 GB) on loopback, on ports the OS picks; the URL."""
    env = {**outside_env(), "SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": "127.0.0.1"}
    spark_class = str(spark_home() / "bin" / "spark-class")
    daemons = []
    try:
        master = Daemon([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                         "--port", "0", "--webui-port", "0"], env, "Starting Spark master at ")
        daemons.append(master)
        url = master.wait(180).split("Starting Spark master at ")[1].strip()
        worker = Daemon([spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                         "--cores", "1", "--memory", "1g", "--webui-port", "0",
                         "--work-dir", str(tmp_path / "work"), url],
                        env, "Successfully registered with master")
        daemons.append(worker)
        worker.wait(180)
        yield url, tmp_path / "work"
    finally:
        for daemon in reversed(daemons):
            daemon.stop()


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.timeout(900)
def test_06_standalone_cluster_runs_the_installed_job_with_both_recipes(installed, standalone, tmp_path):
    """docs/deploy.md's standalone recipes, as written there (plus the small --rows, a file://
    log, which one machine shares with itself, and no Spark UI): the environment packed with
    venv-pack and shipped with --archives; the driver runs the same environment unpacked in its
    working directory, outside the checkout, with no PYTHONPATH."""
    master, work = standalone
    driver = tmp_path / "driver"
    driver.mkdir()
    assert ROOT not in driver.parents
    venv_pack = str(Path(sys.executable).parent / "venv-pack")
    run([venv_pack, "--prefix", str(installed.venv), "--output", "env.tar.gz", "--quiet"], cwd=driver)
    (driver / "env").mkdir()
    run(["tar", "-xzf", "env.tar.gz", "-C", "env"], cwd=driver)
    job = run(["./env/bin/python", "-m", "wal3_spark.jobs", "quickstart"], cwd=driver).stdout.strip()
    assert job.startswith(str(driver / "env"))
    submit = [str(spark_home() / "bin" / "spark-submit"), "--master", master,
              "--archives", "env.tar.gz#env", "--conf", "spark.ui.enabled=false"]
    args = ["--rows", "3000", "--partitions", "2", "--max-records-per-trigger", "1000"]
    env = {**outside_env(), "SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": "127.0.0.1"}
    recipes = {
        "environment": (submit, {"PYSPARK_PYTHON": "./env/bin/python"}),
        "conf": ([*submit, "--conf", "spark.pyspark.python=./env/bin/python",
                  "--conf", "spark.pyspark.driver.python=./env/bin/python"], {}),
    }
    for name, (command, extra) in recipes.items():
        log = (tmp_path / f"log-{name}").as_uri()
        result = subprocess.run([*command, job, *args, "--log", log], cwd=driver,
                                env={**env, **extra}, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, (name, result.stdout[-3000:], result.stderr[-8000:])
        assert "result               OK" in result.stdout, (name, result.stdout)
        assert "verify               ok" in result.stdout
        assert "streamed back        3000 rows in 3 micro-batches" in result.stdout
        # a file:// log on a cluster works only on a filesystem every node shares: said so
        # (spark-submit prints the Python driver's stderr on its stdout)
        assert f"{log} is a path in the driver's filesystem" in result.stdout
        assert "every node" in result.stdout
    # both applications' executors ran in the worker, with the archive unpacked beside them
    apps = sorted(work.glob("app-*"))
    assert len(apps) == 2 and all((app / "0" / "env" / "bin" / "python").exists() for app in apps)


def test_07_executor_environment_is_set_for_local_masters_only():
    from wal3_spark.jobs.common import executor_environment

    for master in ("local[2]", "local-cluster[2,1,1024]", "local"):
        environment, settings = executor_environment(master)
        assert environment["PYSPARK_PYTHON"] == sys.executable
        # the checkout is a source tree: its path goes to the executors
        assert settings["spark.executorEnv.PYTHONPATH"].split(os.pathsep)[0] == str(ROOT)
    for master in ("spark://10.0.0.1:7077", "yarn", "k8s://https://10.0.0.1:6443"):
        assert executor_environment(master) == ({}, {})


def test_08_register_says_what_to_do_when_the_driver_cannot_start_the_executors_python(
        tmp_path, monkeypatch):
    from wal3_spark.errors import SparkSetupError
    from wal3_spark.spark.session import check_worker_python

    monkeypatch.chdir(tmp_path)
    check_worker_python(sys.executable)
    with pytest.raises(SparkSetupError, match=r"tar -xzf env.tar.gz -C env") as caught:
        check_worker_python("./env/bin/python")
    assert str(tmp_path / "env" / "bin" / "python") in str(caught.value)
    with pytest.raises(SparkSetupError, match="not on the driver's PATH"):
        check_worker_python("no-such-python-3.11")
    (tmp_path / "env" / "bin").mkdir(parents=True)
    (tmp_path / "env" / "bin" / "python").symlink_to(sys.executable)
    check_worker_python("./env/bin/python")


def test_09_a_job_without_pyspark_says_to_install_the_spark_extra():
    """The core installs without PySpark; a Spark job run there names the extra to install
    instead of dying with a bare ModuleNotFoundError."""
    code = (
        "import sys\n"
        "sys.modules['pyspark'] = None  # as in an environment without PySpark\n"
        "from wal3_spark.errors import SparkSetupError\n"
        "from wal3_spark.jobs import common\n"
        "try:\n"
        "    common.session('no-pyspark', master='local[1]')\n"
        "except SparkSetupError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert 'pip install "wal3-spark[spark]"' in out.stdout, out.stdout + out.stderr
