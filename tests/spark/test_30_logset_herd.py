"""The log-set stream's acceptance scenario (`tests/support/herd.py`): 50 logs, skewed writers, logs
created mid-stream, one sealed, one garbage-collected under the cursor, a restart from the
checkpoint; every record exactly once with the right `_log`. On the local filesystem and SeaweedFS
with local[2], and with executors in separate processes (local-cluster); with and without a dirty
log."""

from __future__ import annotations

import json
import textwrap

import pytest

from tests.support import herd
from tests.support.spark import run_spark_script

pytestmark = pytest.mark.timeout(600)


def check(result: dict) -> None:
    assert result["logs"] == 50
    assert result["missing"] == 0 and result["unexpected"] == 0, result
    assert result["duplicated"] == 0 and result["offsets_repeated"] == 0, result
    assert result["delivered"] == result["appended"], result
    assert result["wrong_log"] == 0, result
    # GC really removed records under the cursor (the stream had read them)
    assert 1 < result["gc_oldest"] <= result["gc_cursor"], result
    # the limit was shared: batches of 300 records until the logs ran dry
    assert result["first_batches"][0] == 300, result


# the herd on the emulators would add minutes; spark/test_21_cloud_stores runs the data source on each of them
@pytest.mark.parametrize("store_url", ["local", "s3"], indirect=True)
def test_00_herd_of_logs_streams_exactly_once(spark, store_url, store_options, tmp_path):
    """Locally without a dirty log (every trigger reads every manifest), on S3 with one."""
    dirty = store_url.startswith("s3://")
    check(herd.run(spark, store_url, store_options, tmp_path, dirty=dirty))


CLUSTER_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from wal3_spark.jobs.common import session
    spark = session("wal3-herd-cluster")
    from tests.support import herd
    result = herd.run(spark, sys.argv[1], {}, Path(sys.argv[2]), dirty=True)
    result["executors"] = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()
    print(json.dumps(result))
    spark.stop()
    """
)


@pytest.mark.cluster
def test_01_herd_of_logs_on_local_cluster(tmp_path):
    script = tmp_path / "herd_job.py"
    script.write_text(CLUSTER_SCRIPT)
    prefix = (tmp_path / "herd").as_uri()
    work = tmp_path / "work"
    work.mkdir()
    result = run_spark_script([str(script), prefix, str(work)], master="local-cluster[2,1,1024]",
                              timeout=540)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-6000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["executors"] >= 3  # two executors plus the driver's block manager
    check(out)
