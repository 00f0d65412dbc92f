"""A commit resolving by its fragments' paths sees through a compaction that replaced them
(wal3_spark.log.replaced): an ambiguous manifest write that landed, a commit retried with the same
fragments, a sink's clean-up of a duplicate. Neither lost nor appended twice, with the compaction
in this process or in another one; a fresh commit makes no request for it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import pyarrow as pa
import pytest

from tests.support.fakes import CountingStore
from wal3_spark.clock import SystemClock
from wal3_spark.errors import AmbiguousWrite, CommitOutcomeUnknown, PastOrphanHorizon
from wal3_spark.format.layout import BLAKE3, MANIFEST_KEY
from wal3_spark.log.committer import Committer
from wal3_spark.log.compaction import compact
from wal3_spark.log.fragment_io import FragmentFile, write_fragments
from wal3_spark.log.reader import LogReader
from wal3_spark.log.replaced import REPLACED_PREFIX
from wal3_spark.log.writer import LogWriter
from wal3_spark.ops.garbage_collector import GarbageCollector, GCOptions
from wal3_spark.ops.verify import verify
from wal3_spark.spark.commit import commit_files
from wal3_spark.storage import open_store
from wal3_spark.storage.base import ObjectStore
from wal3_spark.storage.forwarding import ForwardingStore
from wal3_spark.testing import LateLandingStore


class LandsThenTimesOut(ForwardingStore):
    """The `nth` manifest compare-and-swap lands, then `meanwhile()` runs (a compaction), then
    the writer is told the write timed out: it must find out from the store what happened."""

    def __init__(self, inner: ObjectStore, nth: int, meanwhile: Callable[[], None]) -> None:
        super().__init__(inner)
        self.nth, self.meanwhile, self.seen = nth, meanwhile, 0

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        etag = self.inner.put_if_match(key, data, etag)
        if key == MANIFEST_KEY:
            self.seen += 1
            if self.seen == self.nth:
                self.meanwhile()
                raise AmbiguousWrite(key, "timed out (the write landed)")
        return etag


def ids(url_or_store) -> list[int]:
    return LogReader(url_or_store).read_table().column("id").to_pylist()


SCHEMA = pa.schema([("id", pa.int64())])


def table(first: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(first, first + n), pa.int64())})


def files(store: ObjectStore, first: int, n: int, parts: int = 1) -> list[FragmentFile]:
    """The fragments a writer would commit for ids [first, first + n), `parts` of them."""
    per = n // parts
    return [f for k in range(parts)
            for f in write_fragments(store, table(first + k * per, per).to_batches(), SCHEMA,
                                     fragment_bytes=1 << 20, item_hash=BLAKE3)]


def test_00_an_ambiguous_commit_whose_fragments_were_compacted_meanwhile_lands_once(tmp_path):
    url = f"file://{tmp_path}/log"
    for i in range(3):
        LogWriter(url).append(table(i * 10, 10))
    store = open_store(url)
    new = files(store, 30, 10, parts=2)  # the commit's two fragments
    late = LandsThenTimesOut(store, 1, lambda: compact(store))
    result = Committer(late).commit(new, schema=SCHEMA)
    assert (result.start, result.limit) == (31, 41) and not result.duplicate
    manifest = LogReader(url).manifest()
    assert len(manifest.fragments) == 1 and manifest.compacted_written_us is not None  # really compacted
    assert ids(url) == list(range(40))  # every record once
    assert verify(url).ok


def test_01_a_compaction_in_another_process_while_the_commit_is_ambiguous(tmp_path):
    url = f"file://{tmp_path}/log"
    for i in range(3):
        LogWriter(url).append(table(i * 10, 10))
    store = open_store(url)
    script = "import sys; from wal3_spark.log.compaction import compact; print(len(compact(sys.argv[1]).runs))"

    def other_process() -> None:
        done = subprocess.run([sys.executable, "-c", script, url], capture_output=True, text=True)
        assert done.returncode == 0 and done.stdout.strip() == "1", done.stderr

    result = LogWriter(LandsThenTimesOut(store, 1, other_process)).append(table(30, 10))
    assert (result.start, result.limit) == (31, 41)
    assert len(LogReader(url).manifest().fragments) == 1
    assert ids(url) == list(range(40)) and verify(url).ok


def test_02_a_commit_retried_after_its_fragments_were_compacted_is_not_appended_again(tmp_path):
    url = f"file://{tmp_path}/log"
    LogWriter(url).append(table(0, 10))
    store = open_store(url)
    new = files(store, 10, 10, parts=2)
    first = Committer(store).commit(new, schema=SCHEMA)
    assert compact(store).runs  # the log's fragments, these two among them, are now one
    again = Committer(store).commit(new, schema=SCHEMA)
    assert again.duplicate and (again.start, again.limit) == (first.start, first.limit) == (11, 21)
    assert ids(url) == list(range(20)) and verify(url).ok


def test_03_a_sinks_duplicate_commit_keeps_the_fragments_a_compaction_replaced(tmp_path):
    """A sink's re-run commit reported already in the log deletes its copy of the fragments,
    but not the ones a compaction replaced: readers of the older manifest read them."""
    url = f"file://{tmp_path}/log"
    LogWriter(url).append(table(0, 10))
    store = open_store(url)
    new = files(store, 10, 10)
    incarnation = LogReader(url).manifest().incarnation
    kw = {"target": SCHEMA, "merge_schema": False, "writer": "test", "since": 1, "incarnation": incarnation}
    commit_files(store, new, **kw)
    planned = LogReader(url).manifest()  # a reader plans on it, then the compaction runs
    assert compact(store).runs
    result = commit_files(store, new, **kw)
    assert result.duplicate and (result.start, result.limit) == (11, 21)
    assert all(store.exists(ref.path) for ref in planned.fragments)
    assert ids(url) == list(range(20))


def test_04_a_fresh_commit_after_compactions_looks_at_no_compaction_record(tmp_path):
    url = f"file://{tmp_path}/log"
    for i in range(3):
        LogWriter(url).append(table(i * 10, 10))
    compact(url)
    counting = CountingStore(open_store(url))
    LogWriter(counting).append(table(30, 10))
    assert not [k for k in counting.counts if k[1] == REPLACED_PREFIX.rstrip("/")]
    assert ids(url) == list(range(40))


def test_05_a_retry_after_a_compaction_and_a_sweep_took_its_fragments_is_refused_as_maybe_committed(tmp_path):
    """The first commit's manifest write times out and lands late (outcome unknown); a
    compaction replaces its fragments, and a sweep past the orphan grace deletes them and the
    compaction's record, on a log never collected below a cursor. The retry cannot tell an
    orphan from a committed fragment: it is refused (`PastOrphanHorizon`), commits nothing, and
    says the records may already be in the log (they are) instead of "rerun the append"."""
    url = f"file://{tmp_path}/log"
    LogWriter(url).append(table(0, 10))
    store = open_store(url)
    new = files(store, 10, 10, parts=2)
    late = LateLandingStore(store, keys=[MANIFEST_KEY], probability=1.0, land="manual")
    with pytest.raises(CommitOutcomeUnknown):
        Committer(late, max_attempts=2).commit(new, schema=SCHEMA)
    late.land_all()  # the first write lands after all
    assert compact(store).runs
    report = GarbageCollector(store, GCOptions(grace_s=0), clock=SystemClock(skew_s=7 * 86400)).run()
    assert {f.path for f in new} <= set(report.orphans_deleted)  # replaced, then swept
    assert not list(store.list(REPLACED_PREFIX))  # and the record that proved their commit
    manifest = LogReader(url).manifest()
    assert manifest.collected_written_us is None and manifest.orphan_horizon_us is not None
    with pytest.raises(PastOrphanHorizon, match="already committed: do not rerun") as refused:
        Committer(store).commit(new, schema=SCHEMA)
    assert "wal3 cat" in str(refused.value)
    assert ids(url) == list(range(20))  # every record exactly once
    assert verify(url).ok
