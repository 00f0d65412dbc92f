"""A stream overtaken by the log's retention policy (docs/design/33-retention.md) on local[2]:
a running query fails with DataLost naming the policy, so does its restart from the overtaken
checkpoint, and with failOnDataLoss=false the restart skips to the oldest offset kept."""

from __future__ import annotations

import pyarrow as pa
import pytest

from tests.spark.test_09_stream_read import sink_rows, start_to_parquet
from wal3_spark import LogReader, LogWriter, set_retention
from wal3_spark.ops.garbage_collector import GarbageCollector, GCOptions

pytestmark = pytest.mark.timeout(300)


def _append(url: str, first: int, fragments: int) -> None:
    with LogWriter(url) as writer:
        for i in range(first, first + fragments):
            writer.append(pa.table({"id": pa.array(range(i * 10, i * 10 + 10), pa.int64())}))


def test_00_a_stream_overtaken_by_retention_fails_naming_it_or_skips(spark, tmp_path):
    url = (tmp_path / "log").as_uri()
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    _append(url, 0, 5)  # offsets [1, 51), 10 a fragment
    q = start_to_parquet(spark, url, ckpt, out, cursor="consumer")
    try:
        q.processAllAvailable()
        _append(url, 5, 5)  # [51, 101): unread
        size = LogReader(url).manifest().fragments[-1].num_bytes
        set_retention(url, max_bytes=2 * size + size // 2)  # room for the newest two
        report = GarbageCollector(url, GCOptions(grace_s=0)).run()
        # the cursor trails the checkpoint by one batch (Spark commits a batch's end to the
        # source when it plans the next one): GC may see it at 51 or not yet written
        assert report.first_to_keep == 81
        assert report.cursors_overtaken in ({}, {"consumer": 51}), report.cursors_overtaken
        with pytest.raises(Exception, match=r"retention policy \(max-bytes"):
            q.processAllAvailable()
    finally:
        q.stop()
    restarted = start_to_parquet(spark, url, ckpt, out, cursor="consumer")
    try:
        with pytest.raises(Exception, match=r"offsets \[51, 81\).*retention policy"):
            restarted.processAllAvailable()
    finally:
        restarted.stop()
    skipping = start_to_parquet(spark, url, ckpt, out, cursor="consumer", failOnDataLoss="false")
    try:
        skipping.processAllAvailable()
    finally:
        skipping.stop()
    assert sorted(r.id for r in sink_rows(spark, out)) == list(range(50)) + list(range(80, 100))
