"""The streaming jobs on log sets: `jobs/pipeline.py` reads a log set and routes each record to the
sink log of the same name; `jobs/tail.py --prefix` streams a selection of a set to Parquet with
`_log`."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.spark import ROOT, run_spark_script
from wal3_spark.log.reader import LogReader
from wal3_spark.log.writer import LogWriter
from wal3_spark.logset.logs import LogSet
from wal3_spark.ops.verify import verify
from wal3_spark.storage import open_store

pytestmark = pytest.mark.timeout(900)


def append(prefix: str, name: str, ids: range) -> None:
    with LogWriter(f"{prefix}/{name}") as writer:
        writer.append(pa.table({"id": pa.array(ids, pa.int64()), "src": [name] * len(ids)}))


def run(job: str, *args: str) -> None:
    result = run_spark_script([str(ROOT / "jobs" / job), *args], timeout=400)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-5000:]


def sink_rows(prefix: str) -> dict[str, list[tuple[int, str]]]:
    return {name: sorted(zip(*LogReader(open_store(f"{prefix}/{name}")).read_table()
                             .select(["id", "src"]).to_pydict().values()))
            for name in LogSet(prefix).names()}


@pytest.mark.slow
def test_00_pipeline_routes_a_log_set_and_tail_reads_a_prefix(tmp_path: Path) -> None:
    source, sink = (tmp_path / "src").as_uri(), (tmp_path / "out").as_uri()
    append(source, "a", range(0, 6))
    append(source, "b", range(100, 104))
    append(source, "c", range(200, 210))
    pipeline = ("pipeline.py", "--source", source, "--source-logs", "*", "--sink", sink,
                "--route-by", "_log", "--checkpoint", str(tmp_path / "ckpt"),
                "--where", "id % 2 = 0", "--max-records-per-trigger", "5", "--available-now")
    run(*pipeline)  # (restarts of a routed stream: tests/spark/test_29_logset.py)

    even = {"a": range(0, 6, 2), "b": range(100, 104, 2), "c": range(200, 210, 2)}
    assert sink_rows(sink) == {name: [(i, name) for i in ids] for name, ids in even.items()}
    for name in even:
        assert verify(f"{sink}/{name}").ok, name

    out = tmp_path / "tail"
    run("tail.py", "--prefix", sink, "--pattern", "[bc]", "--starting-offsets", "earliest",
        "--output", str(out), "--checkpoint", str(tmp_path / "tail_ckpt"), "--available-now")
    table = pq.read_table(out)
    assert Counter(zip(table.column("_log").to_pylist(), table.column("src").to_pylist())) == {
        ("b", "b"): 2, ("c", "c"): 5}


@pytest.mark.parametrize("args, message", [
    (["--log", "/tmp/x", "--pattern", "a*"], "--logs, --pattern and --new-logs go with --prefix"),
    (["--prefix", "/tmp/x", "--logs", "a", "--pattern", "a*"], "--logs or --pattern, not both"),
])
def test_01_tail_refuses_bad_log_set_arguments_before_starting_spark(args, message) -> None:
    result = subprocess.run([sys.executable, str(ROOT / "jobs" / "tail.py"), *args], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and message in result.stderr, result.stderr
