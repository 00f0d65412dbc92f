"""Fragments under a log name that has no manifest (a failed or killed job wrote them for a log
it never created): prefix garbage collection removes them once they are older than the orphan
grace, after fencing them with an empty log whose orphan horizon makes a first commit still in
flight fail cleanly instead of publishing deleted files; younger ones are left alone."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

from wal3_spark.errors import LogNotFound, PastOrphanHorizon
from wal3_spark.format.incarnation import UNPINNED, UNRECORDED
from wal3_spark.format.layout import MANIFEST_KEY
from wal3_spark.log.committer import Committer
from wal3_spark.log.fragment_io import write_fragments
from wal3_spark.log.reader import LogReader
from wal3_spark.log.writer import LogWriter
from wal3_spark.logset.logs import LogSet
from wal3_spark.ops.garbage_collector import GarbageCollector, GCOptions
from wal3_spark.storage import open_store

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = pa.schema([pa.field("id", pa.int64())])


def leftovers(prefix: str, name: str, age_s: float) -> list:
    """What a task of a failed job leaves for a log it meant to create: an uploaded fragment,
    written `age_s` ago, and no manifest."""
    store = LogSet(prefix).log_store(name)
    batch = pa.record_batch([pa.array([1, 2, 3], pa.int64())], schema=SCHEMA)
    return write_fragments(store, [batch], SCHEMA, fragment_bytes=1 << 20,
                           timestamp_us=int((time.time() - age_s) * 1e6), item_hash="blake3")


def test_00_old_fragments_without_a_manifest_are_fenced_then_swept(tmp_path):
    prefix = tmp_path.as_uri()
    files = leftovers(prefix, "ghost", age_s=7200)  # past the default orphan grace (1 h)
    store = LogSet(prefix).log_store("ghost")
    with pytest.raises(LogNotFound):  # an ordinary run: no log here
        GarbageCollector(store).run()
    dry = GarbageCollector(store, GCOptions(orphans_without_log=True)).run(dry_run=True)
    assert dry.orphans_deleted == [files[0].path] and not store.exists(MANIFEST_KEY)

    report = GarbageCollector(store, GCOptions(orphans_without_log=True)).run()
    assert report.orphans_deleted == [files[0].path]
    assert not store.exists(files[0].path)
    manifest = LogReader(store).manifest()  # the fence: an empty log with the orphan horizon
    assert manifest.next_offset == 1 and manifest.orphan_horizon_us > 0
    # the job's first commit, still in flight, fails cleanly instead of publishing a deleted file
    # (a routing sink's commit of a log that did not exist: UNPINNED, the reason named all the same)
    for incarnation in (UNRECORDED, UNPINNED):
        with pytest.raises(PastOrphanHorizon):
            Committer(store).commit(files, schema=SCHEMA, incarnation=incarnation)
    assert LogReader(store).manifest().next_offset == 1
    # and the log takes ordinary appends
    LogWriter(store).append(pa.table({"id": pa.array([7], pa.int64())}))
    assert LogReader(store).read_table().num_rows == 1


def test_01_young_fragments_without_a_manifest_may_be_a_first_commit_in_flight(tmp_path):
    prefix = tmp_path.as_uri()
    files = leftovers(prefix, "creating", age_s=10)
    store = LogSet(prefix).log_store("creating")
    with pytest.raises(LogNotFound):
        GarbageCollector(store, GCOptions(orphans_without_log=True)).run()
    assert store.exists(files[0].path) and not store.exists(MANIFEST_KEY)
    result = Committer(store).commit(files, schema=SCHEMA)  # the commit lands afterwards
    assert (result.start, result.limit) == (1, 4)


@pytest.mark.slow
def test_02_the_prefix_gc_job_sweeps_names_without_a_manifest(tmp_path):
    prefix = tmp_path.as_uri()
    with LogWriter(LogSet(prefix).log_store("real")) as writer:
        writer.append(pa.table({"id": pa.array([1], pa.int64())}))
    old = leftovers(prefix, "ghost", age_s=1200)
    young = leftovers(prefix, "creating", age_s=10)
    proc = subprocess.run([sys.executable, str(ROOT / "jobs" / "gc.py"), "--prefix", str(tmp_path),
                           "--driver-only", "--grace", "0"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    logs = LogSet(open_store(prefix))
    assert not logs.log_store("ghost").exists(old[0].path)
    assert logs.log_store("creating").exists(young[0].path)
    assert LogReader(logs.log_store("real")).read_table().num_rows == 1
