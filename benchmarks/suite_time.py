"""Wall-clock and CPU time of test files, one file at a time (docs/development.md).

    ./dev python benchmarks/suite_time.py tests/spark/test_08_batch.py
    ./dev python benchmarks/suite_time.py --base /tmp/wal3-base tests/spark/test_22_cluster_connect.py

Each file runs as `python -m pytest FILE -q -p no:cacheprovider` in its own process. CPU is the
user + system time of that process and of every process it started, the JVMs, Python workers
and spark-submit jobs included: this process is a child subreaper (Linux), so descendants that
pytest never waits for (PySpark's gateway JVM) are reparented to it and reaped here, and their
time counted. Under load, CPU time moves much less than wall-clock time, so compare both.

With `--base DIR` (a worktree of the code before a change) each file runs there first, then in
this checkout, so that both sides of a comparison see the same load. The load average is printed
before and after each run.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> None:
    """Orphaned descendants are reparented to this process (instead of init), so their CPU time
    reaches RUSAGE_CHILDREN once they are reaped."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")


def reap_all() -> None:
    """Wait for every descendant left (their time is counted only once they are reaped)."""
    while True:
        try:
            os.wait()
        except ChildProcessError:
            return


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_file(checkout: Path, test_file: str) -> tuple[float, float, str]:
    """Wall seconds, CPU seconds and pytest's last line for one file run in `checkout`."""
    cpu_before, start = cpu_seconds(), time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", test_file, "-q", "-p", "no:cacheprovider"],
                          cwd=checkout, capture_output=True, text=True)
    reap_all()
    wall, cpu = time.monotonic() - start, cpu_seconds() - cpu_before
    lines = proc.stdout.strip().splitlines()
    return wall, cpu, lines[-1] if lines else f"exit status {proc.returncode}"


def load() -> str:
    return f"{os.getloadavg()[0]:.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", help="test files, relative to the checkout")
    parser.add_argument("--base", type=Path, help="a checkout of the code before the change, run first")
    args = parser.parse_args(argv)
    become_subreaper()
    sides = [("base", args.base.resolve()), ("new", ROOT)] if args.base else [("new", ROOT)]
    print(f"{'file':<42} {'side':<5} {'wall s':>7} {'CPU s':>7}  load      result", flush=True)
    for test_file in args.files:
        for side, checkout in sides:
            before = load()
            wall, cpu, result = run_file(checkout, test_file)
            print(f"{Path(test_file).name:<42} {side:<5} {wall:7.1f} {cpu:7.1f}  {before}->{load()}  "
                  f"{result}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
