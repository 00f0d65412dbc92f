"""One log of a streamed set failing, without a running query: garbage collected before or
after planning, sealed or gone. It fails alone, or is skipped under failOnDataLoss=false; the
other logs go on."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from tests.support.logsets import append, prefix_url, stream_reader
from wal3_spark import set_retention
from wal3_spark.errors import DataLost
from wal3_spark.format.layout import MANIFEST_KEY
from wal3_spark.log.committer import Committer
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.reader import LogReader
from wal3_spark.ops.garbage_collector import GCOptions, collect_garbage
from wal3_spark.spark.logset_stream import encode
from wal3_spark.storage import open_store


def test_00_a_garbage_collected_log_fails_or_skips_alone():
    prefix = prefix_url()
    append(prefix, "ok", 3)
    append(prefix, "gone", 10)
    append(prefix, "gone", 10, start=10)
    strict, lenient = stream_reader(prefix), stream_reader(prefix, failOnDataLoss="false")
    start = strict.initialOffset()
    CursorStore(open_store(f"{prefix}/gone")).advance("c", 11)
    collect_garbage(f"{prefix}/gone", GCOptions(grace_s=0, force=True))
    assert LogReader(open_store(f"{prefix}/gone")).bounds()[0] == 11
    with pytest.raises(DataLost, match=f"offsets \\[1, 11\\) of {prefix}/gone"):
        strict.latestOffset(start, ReadAllAvailable())
    end = lenient.latestOffset(start, ReadAllAvailable())
    assert end["logs"] == encode({"ok": 4, "gone": 21})["logs"]
    parts = lenient.partitions(start, end)
    assert sorted((rr.log, rr.range.start) for p in parts for rr in p.ranges) == [
        ("gone", 11), ("ok", 1)]


def test_01_a_task_reading_fragments_gc_deleted_after_planning_fails_or_skips_them():
    """GC collects a log between the driver's partitions() and the task's read: the task fails
    naming the collected range of that log, or under failOnDataLoss=false skips it."""
    prefix = prefix_url()
    append(prefix, "ok", 3)
    append(prefix, "gone", 10)
    append(prefix, "gone", 10, start=10)
    strict, lenient = stream_reader(prefix), stream_reader(prefix, failOnDataLoss="false")
    start = strict.initialOffset()
    end = strict.latestOffset(start, ReadAllAvailable())
    plans = [r.partitions(start, end) for r in (strict, lenient)]
    CursorStore(open_store(f"{prefix}/gone")).advance("c", 11)
    collect_garbage(f"{prefix}/gone", GCOptions(grace_s=0, force=True))
    with pytest.raises(DataLost, match=f"offsets \\[1, 11\\) of {prefix}/gone"):
        [batch for part in plans[0] for batch in strict.read(part)]
    table = pa.Table.from_batches([batch for part in plans[1] for batch in lenient.read(part)])
    assert sorted(zip(table.column("_log").to_pylist(), table.column("_offset").to_pylist())) == sorted(
        [("ok", o) for o in range(1, 4)] + [("gone", o) for o in range(11, 21)])


def test_02_sealed_and_missing_logs_do_not_stop_the_others(caplog):
    prefix = prefix_url()
    for name in ("a", "sealed", "vanishing"):
        append(prefix, name, 2)
    r = stream_reader(prefix)
    start = r.initialOffset()
    Committer(open_store(f"{prefix}/sealed")).seal()
    open_store(f"{prefix}/vanishing").delete(MANIFEST_KEY)
    append(prefix, "a", 3, start=2)
    end = r.latestOffset(start, ReadAllAvailable())
    assert end["logs"] == encode({"a": 6, "sealed": 3, "vanishing": 1})["logs"]
    assert f"{prefix}/vanishing has no manifest" in caplog.text
    again = r.latestOffset(end, ReadAllAvailable())
    assert again == end
    assert f"{prefix}/sealed is sealed and read to its end" in caplog.text


def test_03_a_commit_below_what_retention_removed_leaves_that_cursor_and_moves_the_others(caplog):
    """A batch ends at an offset a retention policy has removed since (the query skips ahead
    under failOnDataLoss=false): its commit leaves that log's cursor where it was, with a
    warning naming the policy, moves the other logs' cursors, and the next batch moves it."""
    prefix = prefix_url()
    append(prefix, "ok", 3)
    append(prefix, "old", 10)
    append(prefix, "old", 10, start=10)  # two fragments, [1, 11) and [11, 21)
    reader = stream_reader(prefix, cursor="c", failOnDataLoss="false")
    reader.commit(encode({"ok": 2, "old": 5}))
    old = open_store(f"{prefix}/old")
    set_retention(old, max_bytes=LogReader(old).manifest().fragments[-1].num_bytes * 3 // 2)
    assert collect_garbage(f"{prefix}/old", GCOptions(grace_s=0)).first_to_keep == 11
    with caplog.at_level("WARNING"):
        reader.commit(encode({"ok": 4, "old": 8}))  # planned before the collection
    assert "retention policy" in caplog.text and "not moved to 8" in caplog.text
    at = {n: CursorStore(open_store(f"{prefix}/{n}")).get("c").cursor.offset for n in ("ok", "old")}
    assert at == {"ok": 4, "old": 5}
    reader.commit(encode({"ok": 4, "old": 21}))
    assert CursorStore(old).get("c").cursor.offset == 21
