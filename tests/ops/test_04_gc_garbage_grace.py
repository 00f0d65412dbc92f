"""Garbage keeps its grace interval: the orphan sweep must not delete what GC just dropped.

Found while building `wal3 stress` (a 20 s local run counted 149 "orphans deleted" with no
failed append): every GC run ended with an orphan sweep that deleted unreferenced fragments older
than the orphan grace, judged by the fragment's own age. The fragments an apply step has just
dropped are unreferenced and, being below every cursor, usually old, so the same run deleted
them at once, instead of after the grace interval that readers still working from the manifest
before the apply rely on (docs/operations.md, "delete" step). The rule now: a fragment the
pending garbage drops is never an orphan (docs/design/32-orphan-horizon.md).
"""

from __future__ import annotations

import itertools
import time

import pytest

from wal3_spark import CursorStore, LogReader, LogWriter, open_store
from wal3_spark.clock import ManualClock
from wal3_spark.errors import DataLost
from wal3_spark.log.fragment_io import read_range
from wal3_spark.ops.garbage_collector import GarbageCollector, GCOptions
from wal3_spark.testing.hooks import hooked


def test_00_fragments_dropped_by_gc_outlive_the_grace_interval_for_older_readers() -> None:
    store = open_store("memory://gc-garbage-grace")
    with LogWriter(store) as writer:
        for i in range(4):
            writer.append([b"r%d" % i])
    CursorStore(store).advance("consumer", 4)
    before = LogReader(store).manifest()  # a reader loads the manifest, then GC runs
    two_hours_later = time.time() + 7200  # the fragments were written long ago

    report = GarbageCollector(store, GCOptions(force=True), clock=ManualClock(now=two_hours_later)).run()

    assert report.steps == ["compute", "apply", "mark"]  # applied; deletion waits for the grace
    assert report.orphans_deleted == []
    reader = LogReader(store)
    bodies = [read_range(store, part, None).column("body").to_pylist()
              for part in reader.plan(1, 5, manifest=before)]
    assert bodies == [[b"r0"], [b"r1"], [b"r2"], [b"r3"]]


_names = itertools.count()


def test_01_a_reader_racing_gc_reads_until_the_delete_step_then_gets_the_collected_range() -> None:
    """A reader plans from the manifest before the apply; collectors run again and again (with
    the orphan sweep's clock far ahead, as after a long pause) while it reads: every fragment it
    planned stays until the delete step, which takes them once the grace has passed; a read after
    that names the collected range (DataLost), never CorruptLog."""
    store = open_store(f"memory://gc-garbage-grace-race-{next(_names)}")
    with LogWriter(store) as writer:
        for i in range(4):
            writer.append([b"r%d" % i])
    CursorStore(store).advance("consumer", 3)
    before = LogReader(store).manifest()
    now = time.time()

    def collect(at: float, orphans_at: float | None = None):
        return hooked(GarbageCollector(
            store, GCOptions(force=True, grace_s=600), clock=ManualClock(now=at),
        ), orphan_clock=None if orphans_at is None else ManualClock(now=orphans_at)).run()

    plan = LogReader(store).plan(1, 5, manifest=before)
    assert collect(now).steps == ["compute", "apply", "mark"]
    dropped = [part.ref.path for part in plan[:2]]
    read = [read_range(store, plan[0], None).column("body").to_pylist()]
    for later in (now + 60, now + 300):  # within the grace, the orphan sweep ahead by hours
        report = collect(later, orphans_at=later + 7200)
        assert report.orphans_deleted == [] and report.deleted == []
        assert all(store.exists(path) for path in dropped)
    read.append(read_range(store, plan[1], None).column("body").to_pylist())
    assert read == [[b"r0"], [b"r1"]]

    report = collect(now + 601, orphans_at=now + 7200)
    assert report.steps == ["delete", "reset"] and report.orphans_deleted == []
    assert set(dropped) <= set(report.deleted)
    with pytest.raises(DataLost, match=r"offsets \[1, 3\)"):
        read_range(store, plan[0], None)
    assert read_range(store, plan[2], None).column("body").to_pylist() == [b"r2"]
