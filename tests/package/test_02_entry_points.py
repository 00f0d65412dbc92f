"""One way in: every public entry point takes where the log lives as a URL (or a path), opened
with its `options`, or as a store already open, and both reach the same log."""

from __future__ import annotations

import itertools

import pytest

from wal3_spark import errors
from wal3_spark.format.layout import MANIFEST_KEY
from wal3_spark.log.committer import Committer
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.reader import LogReader
from wal3_spark.log.writer import LogWriter
from wal3_spark.logset.dirty import DirtyLog
from wal3_spark.logset.logs import LogSet
from wal3_spark.ops.copy import copy_log
from wal3_spark.ops.garbage_collector import GarbageCollector, collect_garbage
from wal3_spark.ops.verify import verify
from wal3_spark.storage import open_store, resolve_store
from wal3_spark.storage.s3 import S3Store

_names = itertools.count()

#: every entry point that holds the store it was given, built on a log or a log set's prefix
ENTRY_POINTS = {
    "LogReader": LogReader,
    "CursorStore": CursorStore,
    "Committer": Committer,
    "GarbageCollector": GarbageCollector,
    "LogWriter": LogWriter,
    "LogSet": LogSet,
    "DirtyLog": DirtyLog,
}


@pytest.fixture
def url() -> str:
    return f"memory://entry-{next(_names)}/logs/a"


@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
def test_00_each_entry_point_takes_a_url_or_a_store(name, url):
    entry = ENTRY_POINTS[name]
    store = open_store(url)
    given = entry(store)
    assert given.store is store or given.store.url.startswith(url)  # the dirty log's lives below
    opened = entry(url)
    assert opened.store.url == given.store.url
    s3 = entry("s3://bucket/logs/a", options={"endpoint": "http://127.0.0.1:1"})
    store_of = s3.prefix if name == "DirtyLog" else s3.store
    assert isinstance(store_of, S3Store) and store_of.settings.endpoint == "http://127.0.0.1:1"
    with pytest.raises(errors.InvalidOption, match="already open"):
        entry(store, options={"endpoint": "http://127.0.0.1:1"})
    for closing in (given, opened, s3):
        getattr(closing, "close", lambda: None)()


def test_01_a_url_and_a_store_reach_the_same_log(url, tmp_path):
    with LogWriter(url) as writer:
        writer.append(b"a")
    store = open_store(url)
    Committer(url).manifest()
    assert LogReader(store).read_table().column("body").to_pylist() == [b"a"]
    CursorStore(url).advance("c", 1)
    assert CursorStore(store).get("c").cursor.offset == 1
    assert verify(url).ok and verify(store).records == 1
    assert collect_garbage(url, dry_run=True).oldest_offset == 1
    assert LogSet(url.rsplit("/", 1)[0]).names() == ["a"]
    copied = copy_log(url, store.url + "-copy")
    assert copied.records == 1 and copy_log(store, open_store(url + "-again")).verified
    with LogWriter(tmp_path / "local") as local:  # a path is a local log
        local.append(b"p")
    assert LogReader(str(tmp_path / "local")).read_table().num_rows == 1


def test_02_copy_options_open_the_destination_unless_it_has_its_own(url):
    with LogWriter(url) as writer:
        writer.append(b"a")
    destination = open_store(url + "-copy")
    # the source's options do not reach a destination that is already open
    copy_log(url, destination, options={"region": "eu-west-1"})
    assert destination.exists(MANIFEST_KEY)
    with pytest.raises(errors.InvalidOption, match="already open"):
        copy_log(url, open_store(url + "-x"), destination_options={"region": "eu-west-1"})


def test_03_what_is_neither_a_url_nor_a_store_is_refused_by_name():
    with pytest.raises(errors.InvalidUrl, match="got int 7"):
        resolve_store(7)  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidUrl):
        LogReader("ftp://host/log")


def test_04_a_log_sets_operations_take_its_url_or_its_store(url):
    """The prefix operations (garbage collection's plan and finish, the dirty log's roll-up)
    open the log set's prefix from a URL as its logs do."""
    from wal3_spark.logset import prefix_gc
    from wal3_spark.logset.dirty import roll_up

    prefix = url.rsplit("/", 1)[0]
    with DirtyLog(prefix) as dirty, LogWriter(url, dirty_log=dirty) as writer:
        writer.append(b"a")
    by_url, by_store = prefix_gc.plan(prefix), prefix_gc.plan(open_store(prefix))
    assert by_url == by_store and by_url.names == ["a"]
    assert prefix_gc.finish(prefix, by_url, [], grace_s=0.0) is not None
    assert roll_up(prefix, 1).skipped and roll_up(open_store(prefix), 1).skipped
    with pytest.raises(errors.InvalidOption, match="already open"):
        prefix_gc.plan(open_store(prefix), options={"region": "eu-west-1"})


def test_05_every_entry_point_refuses_an_unknown_store_option(tmp_path):
    """The Python API's entry points all open their URL through `open_store`: each refuses the
    typo before it reads or writes anything."""
    from wal3_spark import TagStore, branch, checkpoint, delete_branch
    from wal3_spark.logset import prefix_gc
    from wal3_spark.observe.status import StatusModel

    url, other = (tmp_path / "log").as_uri(), (tmp_path / "other").as_uri()
    LogWriter(url).append(b"a")
    typo = {"endpont": "http://127.0.0.1:1"}
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    calls = {
        **{name: lambda entry=entry: entry(url, options=typo) for name, entry in ENTRY_POINTS.items()},
        "TagStore": lambda: TagStore(url, options=typo),
        "collect_garbage": lambda: collect_garbage(url, options=typo),
        "verify": lambda: verify(url, options=typo),
        "copy_log": lambda: copy_log(url, other, options=typo),
        "copy_log destination": lambda: copy_log(url, other, destination_options=typo),
        "branch": lambda: branch(url, other, options=typo),
        "branch destination": lambda: branch(url, other, destination_options=typo),
        "delete_branch": lambda: delete_branch(url, options=typo),
        "checkpoint": lambda: checkpoint(url, options=typo),
        "prefix gc plan": lambda: prefix_gc.plan(tmp_path.as_uri(), options=typo),
        "StatusModel": lambda: StatusModel(url, options=typo),
    }
    for name, call in calls.items():
        with pytest.raises(errors.InvalidOption, match="unknown store option 'endpont'"):
            call()
            pytest.fail(f"{name} accepted the typo")
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before
