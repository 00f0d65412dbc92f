"""The sink and source with executors in separate processes (local-cluster[2,1,1024]), and over
Spark Connect. A second SparkContext cannot live in the test process, so each runs as a script
in a subprocess and reports JSON on its last line."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tests.support.spark import ROOT, connect_env, run_spark_script

pytestmark = [pytest.mark.timeout(400), pytest.mark.cluster]

CLUSTER_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from wal3_spark.jobs.common import session
    spark = session("wal3-cluster-test")
    from pyspark.sql import functions as F
    url = sys.argv[1]

    def flaky(batches):
        from pyspark import TaskContext
        ctx = TaskContext.get()
        for i, b in enumerate(batches):
            yield b
            if ctx.attemptNumber() == 0 and ctx.partitionId() == 1:
                raise RuntimeError("injected first-attempt failure")

    df = spark.range(0, 20000, numPartitions=4).select("id", (F.col("id") * 2).alias("twice"))
    df.write.format("wal3").mode("append").save(url)
    df2 = spark.range(20000, 30000, numPartitions=2).select("id", (F.col("id") * 2).alias("twice"))
    df2.mapInArrow(flaky, df2.schema).write.format("wal3").mode("append").save(url)
    back = spark.read.format("wal3").load(url)
    stats = back.agg(F.count("*").alias("n"), F.countDistinct("id").alias("ids"),
                     F.min("_offset").alias("lo"), F.max("_offset").alias("hi"),
                     F.sum(F.col("twice") - 2 * F.col("id")).alias("bad")).first()
    q = (spark.readStream.format("wal3").option("maxRecordsPerTrigger", "12000").load(url)
         .writeStream.format("memory").queryName("cluster_stream")
         .option("checkpointLocation", sys.argv[2]).trigger(availableNow=True).start())
    q.awaitTermination()
    streamed = spark.sql("select count(*) n, count(distinct _offset) d from cluster_stream").first()
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()
    from wal3_spark.ops.verify import verify
    print(json.dumps(dict(n=stats.n, ids=stats.ids, lo=stats.lo, hi=stats.hi, bad=stats.bad,
                          streamed=streamed.n, distinct=streamed.d, executors=executors,
                          batches=[p["numInputRows"] for p in q.recentProgress if p["numInputRows"]],
                          verify=verify(url).ok)))
    spark.stop()
    """
)

CONNECT_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    sys.path.insert(0, {root!r})
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    from wal3_spark.spark import register
    spark = SparkSession.builder.remote("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    register(spark)
    url = sys.argv[1]
    df = spark.range(0, 5000, numPartitions=2).select("id", F.col("id").cast("string").alias("s"))
    df.write.format("wal3").mode("append").save(url)
    df.write.format("wal3").mode("append").save(url)
    back = spark.read.format("wal3").load(url)
    r = back.agg(F.count("*").alias("n"), F.countDistinct("_offset").alias("d"),
                 F.max("_offset").alias("hi")).first()
    err = ""
    try:
        spark.range(3).select(F.col("id").cast("string").alias("id")).write.format("wal3") \\
            .mode("append").save(url)
    except Exception as exc:
        err = str(exc)
    print(json.dumps(dict(n=r.n, d=r.d, hi=r.hi, connect=type(spark).__module__,
                          mismatch="schema mismatch" in err)))
    spark.stop()
    """
)


def last_json(stdout: str) -> dict:
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise AssertionError(f"no JSON result in output:\n{stdout[-3000:]}")


def test_00_sink_and_source_on_local_cluster(tmp_path):
    script = tmp_path / "cluster_job.py"
    script.write_text(CLUSTER_SCRIPT)
    url = (tmp_path / "log").as_uri()
    result = run_spark_script([str(script), url, str(tmp_path / "ckpt")],
                              master="local-cluster[2,1,1024]", timeout=360)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-6000:]
    out = last_json(result.stdout)
    assert out["executors"] >= 3  # two executors plus the driver's block manager
    assert out["n"] == 30000 and out["ids"] == 30000 and out["bad"] == 0
    assert (out["lo"], out["hi"]) == (1, 30000)
    assert out["streamed"] == 30000 and out["distinct"] == 30000
    assert out["batches"] == [12000, 12000, 6000]
    assert out["verify"] is True


def test_01_batch_append_and_read_over_spark_connect(tmp_path):
    script = tmp_path / "connect_job.py"
    script.write_text(CONNECT_SCRIPT.format(root=str(ROOT)))
    url = (tmp_path / "log").as_uri()
    result = subprocess.run([sys.executable, str(script), url], cwd=ROOT, env=connect_env(),
                            capture_output=True, text=True, timeout=360)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-6000:]
    out = last_json(result.stdout)
    assert "connect" in out["connect"]
    assert (out["n"], out["d"], out["hi"]) == (10000, 10000, 10000)
    assert out["mismatch"] is True
