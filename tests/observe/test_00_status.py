"""The status model behind the console and the Prometheus exporter: the figures of `wal3 info`
and `wal3 cursor list` for a log or a log set, refreshed at most once per TTL, and for a log set
re-reading only what the dirty log says changed (plus lagging cursors, plus a periodic full
scan), so that a scrape of thousands of logs does not cost a manifest GET per log."""

from __future__ import annotations

import itertools

import pytest

from tests.support.fakes import CountingStore, FailingStore
from wal3_spark.clock import ManualClock
from wal3_spark.errors import StorageError
from wal3_spark.format.layout import MANIFEST_KEY
from wal3_spark.format.manifest import SnapshotOptions
from wal3_spark.log.committer import Committer
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.writer import LogWriter
from wal3_spark.logset.dirty import DirtyLog, dirty_store
from wal3_spark.logset.info import summarise
from wal3_spark.logset.logs import LogSelection, LogSet
from wal3_spark.observe.status import StatusModel
from wal3_spark.storage import open_store
from wal3_spark.storage.base import ObjectStore

_names = itertools.count()
NAMES = ["a", "b", "c", "d"]


def append(prefix: ObjectStore, dirty: DirtyLog | None, name: str, n: int = 3) -> int:
    with LogWriter(LogSet(prefix).log_store(name), dirty_log=dirty) as writer:
        return writer.append([b"r%d" % i for i in range(n)]).limit


@pytest.fixture
def herd():
    """Four logs under a prefix with a dirty log; a cursor at the tail of `a`, one 2 records
    behind on `b`; `c` and `d` without cursors."""
    prefix = open_store(f"memory://status-{next(_names)}")
    dirty = DirtyLog(prefix)
    for name in NAMES:
        append(prefix, dirty, name)
    dirty.flush()
    CursorStore(LogSet(prefix).log_store("a")).advance("reader", 4)
    CursorStore(LogSet(prefix).log_store("b")).advance("reader", 2)
    yield prefix, dirty
    dirty.close()


def watch(store: ObjectStore, **settings) -> tuple[ManualClock, StatusModel]:
    """A status model of `store` on a clock that moves only when told."""
    clock = ManualClock()
    return clock, StatusModel(store, clock=clock, **settings)


def figures(summary):
    """A summary without the figures that depend on when it was measured."""
    doc = summary.to_dict()
    for cursor in doc["cursors"]:
        del cursor["moved_ago_s"], cursor["lag_s"]
    return doc


def test_00_a_log_sets_status_holds_what_wal3_ls_shows(herd):
    prefix, _ = herd
    status = StatusModel(prefix).status()
    assert status.is_log_set and status.error is None and not status.incremental
    assert [figures(s) for s in status.logs] == [figures(s) for s in summarise(LogSet(prefix))]
    b = status.log("b")
    assert (b.records, b.fragments, b.snapshots, b.sealed) == (3, 1, 0, False)
    [reader] = b.cursors
    assert (reader.offset, reader.records_behind) == (2, 2) and reader.bytes_behind == b.bytes
    assert reader.lag_s is not None and reader.lag_s >= 0
    assert b.last_commit_us is not None and b.last_commit_us <= status.measured_us
    assert status.log("a").cursors[0].records_behind == 0 and status.log("a").cursors[0].lag_s == 0


def test_01_within_the_ttl_a_status_costs_no_request(herd):
    prefix, _ = herd
    counting = CountingStore(prefix)
    clock, model = watch(counting, ttl_s=10)
    first = model.status()
    before = counting.requests()
    clock.advance(9.9)
    assert model.status() is first and counting.requests() == before
    clock.advance(0.1)
    assert model.status() is not first and counting.requests() > before


def test_02_with_nothing_appended_a_refresh_reads_the_dirty_log_and_lagging_cursors_only(herd):
    prefix, _ = herd
    counting = CountingStore(prefix)
    clock, model = watch(counting, ttl_s=0, cursors_every_s=30)
    model.status()
    assert counting.logs_touched() >= set(NAMES)
    counting.counts.clear()
    clock.advance(1)
    status = model.status()
    assert status.incremental
    assert counting.logs_touched() == {"_dirty"} and counting.requests() == 1  # its manifest
    # Once per cursors_every_s, the log whose cursor trails its tail (`b`): a consumer catching
    # up moves its cursor without an append.
    CursorStore(LogSet(prefix).log_store("b")).advance("reader", 3)
    clock.advance(30)
    counting.counts.clear()
    assert model.status().log("b").cursors[0].offset == 3
    assert counting.logs_touched() == {"_dirty", "b"}


def test_03_an_append_rereads_that_log_only(herd):
    prefix, dirty = herd
    counting = CountingStore(prefix)
    clock, model = watch(counting, ttl_s=0)
    model.status()
    tail = append(prefix, dirty, "c", 5)
    dirty.flush()
    counting.counts.clear()
    clock.advance(1)
    status = model.status()
    assert status.log("c").next_offset == tail == 9
    assert counting.logs_touched() == {"_dirty", "c"}
    # one listing of its cursors (none) and its manifest
    assert counting.counts[("get", "c")] == 1 and counting.counts[("list", "c")] == 1


def test_04_what_the_dirty_log_does_not_record_shows_at_the_next_full_scan(herd):
    prefix, _ = herd
    clock, model = watch(prefix, ttl_s=0, full_scan_every_s=300)
    assert model.status().log("d").sealed is False
    Committer(LogSet(prefix).log_store("d")).seal()  # no dirty-log record
    append(prefix, None, "e")  # an appender that did not opt in
    clock.advance(299)
    status = model.status()
    assert status.log("d").sealed is False and status.log("e") is None
    clock.advance(1)
    status = model.status()
    assert not status.incremental
    assert status.log("d").sealed is True and status.log("e").records == 3


def test_05_a_deleted_log_leaves_the_status(herd):
    prefix, dirty = herd
    clock, model = watch(prefix, ttl_s=0)
    assert model.status().log("c") is not None
    store = LogSet(prefix).log_store("c")
    for meta in list(store.list("")):
        store.delete(meta.key)
    clock.advance(301)  # the next full scan
    assert model.status().log("c") is None


def test_06_a_single_log(herd):
    prefix, _ = herd
    counting = CountingStore(LogSet(prefix).log_store("b"))
    model = StatusModel(counting, ttl_s=0)
    status = model.status()
    assert not status.is_log_set and [s.name for s in status.logs] == ["b"]
    assert status.logs[0].cursors[0].records_behind == 2
    # one listing of the cursors, a GET for the cursor, and the manifest read after it
    assert counting.by_operation() == {"list": 1, "get": 2, "head": 1}


def test_07_an_explicit_selection_reports_a_missing_log_as_an_error(herd):
    prefix, _ = herd
    status = StatusModel(prefix, selection=LogSelection.of(["a", "nope"])).status()
    assert [s.name for s in status.logs] == ["a", "nope"]
    assert status.log("nope").error is not None and status.log("a").error is None


def test_08_fragments_and_snapshots_count_the_whole_tree_and_read_each_snapshot_once():
    from tests.support.fakes import snapshotted_log

    store = snapshotted_log(f"memory://status-{next(_names)}", 200, SnapshotOptions(3, 4))
    counting = CountingStore(store)
    model = StatusModel(counting, ttl_s=0)
    summary = model.status().logs[0]
    from wal3_spark.observe.log_info import log_info

    info = log_info(store)
    assert (summary.fragments, summary.snapshots) == (info["fragments"], info["snapshots"]) and info["snapshots"] > 3
    counting.counts.clear()
    model.status()
    assert counting.by_operation() == {"list": 1, "get": 1}  # cursors (none), the manifest


def test_09_an_unreadable_dirty_log_makes_a_refresh_read_every_log(herd):
    prefix, _ = herd
    model = StatusModel(prefix, ttl_s=0)
    first = model.status()
    assert model.store.exists(MANIFEST_KEY) is False
    broken = dirty_store(prefix)
    broken.put_if_match(MANIFEST_KEY, b"not json", broken.get(MANIFEST_KEY).etag)
    status = model.status()  # the dirty log unreadable: a full scan instead, which works
    assert status.error is None and not status.incremental
    assert [s.name for s in status.logs] == [s.name for s in first.logs]


def test_10_a_failed_refresh_serves_the_last_figures_with_the_error(herd):
    prefix, _ = herd
    store = FailingStore(prefix, lambda key: True, lambda key: StorageError("the store is unreachable"),
                         ops=["get", "list_children"], down=False)
    clock, model = watch(store, ttl_s=0)
    first = model.status()
    store.down = True
    clock.advance(1)
    status = model.status()
    assert "unreachable" in status.error
    assert status.logs == first.logs and status.measured_us == first.measured_us
    store.down = False
    clock.advance(1)
    assert model.status().error is None


def test_11_ages_grow_between_reads_of_a_log(herd):
    """A log not re-read (nothing appended, its trailing cursor not due) keeps its figures, but
    its cursors' ages are as of the refresh: the oldest unread record is older by the time
    elapsed, and so is the cursor's last move; a cursor at the tail stays at 0."""
    prefix, _ = herd
    clock, model = watch(prefix, ttl_s=0, cursors_every_s=3600)
    first = model.status()
    clock.advance(5)
    later = model.status()
    assert later.incremental and later.measured_us - first.measured_us == 5_000_000
    [b0], [b5] = first.log("b").cursors, later.log("b").cursors
    assert b5.offset == b0.offset and b5.lag_s == pytest.approx(b0.lag_s + 5)
    assert b5.moved_ago_s == pytest.approx(b0.moved_ago_s + 5)
    assert later.log("a").cursors[0].lag_s == 0
