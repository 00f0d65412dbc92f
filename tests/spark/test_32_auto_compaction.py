"""autoCompact on the batch and streaming sinks (wal3_spark.log.auto_compaction): a stream and a
batch sink feeding one log both compact it in the background of their commits; the fragment count
drops while they write, every record is read once, the log verifies. The options are checked
without Spark."""

from __future__ import annotations

import time

import pytest

from tests.spark.test_08_batch import append, check_log, read, sample
from wal3_spark.errors import InvalidOption
from wal3_spark.log.reader import LogReader
from wal3_spark.spark import options as opts

pytestmark = pytest.mark.timeout(300)

AUTO = {"autoCompact": "true", "autoCompactFragments": "4"}


def fragments(url: str) -> int:
    return len(LogReader(url).manifest().fragments)


def until(condition, timeout_s: float = 120.0) -> bool:
    """Whether `condition()` holds within `timeout_s` (the compaction runs in the process of
    Spark's commit, out of the test's reach: it is observed through the manifest)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def test_00_a_stream_and_a_batch_sink_with_auto_compact_on_one_log(spark, log_url, tmp_path):
    source, sink = log_url, log_url + "-sink"
    append(sample(spark, 400, parts=1), source, fragmentBytes="1k")  # many small fragments
    q = (spark.readStream.format("wal3").option("maxRecordsPerTrigger", "20").load(source)
         .drop("_offset", "_timestamp")
         .writeStream.format("wal3").option("checkpointLocation", str(tmp_path / "ckpt"))
         .options(**AUTO).trigger(availableNow=True).start(sink))
    for i in range(6):  # a second sink on the same log meanwhile
        append(sample(spark, 5, start=1000 + i * 5, parts=1), sink, **AUTO)
    q.awaitTermination(240)
    assert q.exception() is None
    commits = 20 + 6
    assert until(lambda: fragments(sink) < commits // 2), fragments(sink)
    ids = [r.id for r in read(spark, sink).select("id").collect()]
    assert sorted(ids) == list(range(400)) + list(range(1000, 1030))  # every record once
    check_log(sink)


@pytest.mark.parametrize("options, match", [
    ({"autoCompact": "maybe"}, "autoCompact"),
    ({"autoCompact": "true", "autoCompactFragments": "1"}, "autoCompactFragments"),
    ({"autoCompact": "true", "autoCompactFragments": "many"}, "autoCompactFragments"),
    ({"autoCompact": "true", "autoCompactTargetBytes": "10"}, "autoCompactTargetBytes"),
    ({"autoCompactFragments": "8"}, "applies only with autoCompact"),
    ({"autoCompact": "true", "logColumn": "tenant"}, "routing sink"),
])
def test_01_bad_auto_compact_options_are_refused(options, match):
    with pytest.raises(InvalidOption, match=match):
        opts.parse({"path": "/tmp/x", **options}, opts.WRITE)


def test_02_auto_compact_options_and_their_defaults():
    assert opts.parse({"path": "/x"}, opts.WRITE).auto_compact is None
    assert opts.parse({"path": "/x", "autoCompact": "false"}, opts.WRITE).auto_compact is None
    on = opts.parse({"path": "/x", "autocompact": "true", "checkpointLocation": "/c"}, opts.STREAM_WRITE)
    assert on.auto_compact is not None and (on.auto_compact.fragments, on.auto_compact.target_bytes) == (16, 64 << 20)
    tuned = opts.parse({"path": "/x", "autoCompact": "true", "autoCompactFragments": "8",
                        "autoCompactTargetBytes": "8m"}, opts.WRITE).auto_compact
    assert tuned is not None and (tuned.fragments, tuned.target_bytes) == (8, 8 << 20)
    with pytest.raises(InvalidOption, match="does not apply"):
        opts.parse({"path": "/x", "autoCompact": "true"}, opts.READ)
