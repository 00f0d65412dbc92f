"""Garbage keeps its grace interval: the orphan sweep must not delete what GC just dropped.

Found while building `wal3 stress` (a 20 s local run counted 149 "orphans deleted" with no
failed append): every GC run ends with an orphan sweep that deletes unreferenced fragments older
than the orphan grace, judged by the fragment's own age. The fragments an apply step has just
dropped are unreferenced and, being below every cursor, usually old, so the same run deletes
them at once, instead of after the grace interval that readers still working from the manifest
before the apply rely on (docs/operations.md, "delete" step).
"""

from __future__ import annotations

import time

import pytest

from wal3_spark import CursorStore, LogReader, LogWriter, open_store
from wal3_spark.gc import GarbageCollector
from wal3_spark.reader import read_range


@pytest.mark.xfail(strict=True, reason="the orphan sweep deletes the fragments the applied garbage "
                   "dropped before the grace interval ends; a reader of the manifest from before the "
                   "apply gets CorruptLog (found by wal3 stress)")
def test_00_fragments_dropped_by_gc_outlive_the_grace_interval_for_older_readers() -> None:
    store = open_store("memory://gc-garbage-grace")
    with LogWriter(store) as writer:
        for i in range(4):
            writer.append([b"r%d" % i])
    CursorStore(store).advance("consumer", 4)
    before = LogReader(store).manifest()  # a reader loads the manifest, then GC runs
    two_hours_later = time.time() + 7200  # the fragments were written long ago

    report = GarbageCollector(store, force=True, clock=lambda: two_hours_later).run()

    assert report.steps == ["compute", "apply", "mark"]  # applied; deletion waits for the grace
    assert report.orphans_deleted == []
    reader = LogReader(store)
    bodies = [read_range(store, part, None).column("body").to_pylist()
              for part in reader.plan(1, 5, manifest=before)]
    assert bodies == [[b"r0"], [b"r1"], [b"r2"], [b"r3"]]
