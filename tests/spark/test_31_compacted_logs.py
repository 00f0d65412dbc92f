"""A compacted log (docs/format.md section 4, "Compacted fragments") reads in Spark exactly as
before its compaction: format("wal3") and the native scan, whole and from a startingTimestamp
that falls inside the compacted fragment (its rows keep their own write times)."""

from __future__ import annotations

import pyarrow as pa

from wal3_spark import LogReader, LogWriter, compact
from wal3_spark.clock import ManualClock
from wal3_spark.spark import Wal3Log

NOW = 1_800_000_000.0


def _rows(df) -> list:
    return [tuple(r) for r in df.orderBy("_offset").collect()]


def test_00_format_wal3_and_the_native_scan_read_a_compacted_log_as_before(spark, tmp_path):
    url = (tmp_path / "log").as_uri()
    clock = ManualClock(NOW)
    with LogWriter(url, clock=clock) as writer:
        for i in range(6):
            clock.advance(1.0)
            writer.append(pa.table({"id": pa.array(range(i * 10, i * 10 + 5), pa.int64())}))
    third_ms = int((NOW + 3) * 1000)  # the third append's records, offsets 11-15, were written then

    def everything() -> tuple[list, list, list, int]:
        source = spark.read.format("wal3").load(url)
        native = Wal3Log.forPath(spark, url).toDF()
        late = spark.read.format("wal3").option("startingTimestamp", third_ms).load(url)
        return _rows(source), _rows(native), _rows(late), source.count()

    before = everything()
    assert compact(url, clock=ManualClock(NOW + 3600.0)).fragments_after == 1
    assert len(LogReader(url).manifest().fragments) == 1
    after = everything()
    assert after == before
    assert after[0] == after[1]  # the native scan reads each row's own _timestamp
    assert after[2][0][1] == 11 and after[3] == 30
