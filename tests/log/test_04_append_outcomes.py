"""An append ends in exactly one of three outcomes: committed (offsets), `CommitFailed`
(nothing written: safe to retry) or `CommitOutcomeUnknown` (look before retrying); never in a
reader's error. Garbage collection running between a commit's manifest read and its walk of the
snapshot tree (the "already committed?" check) deletes a snapshot the walk needs: every path
into `commit` reads the manifest again and commits, instead of failing with `DataLost`.

And every value that reaches the manifest is checked before the write, by the rules readers
apply: a commit cannot brick a log."""

from __future__ import annotations

import itertools
import json
import math
import sys
from collections.abc import Callable

import pyarrow as pa
import pytest

from tests.support.fakes import FailingStore, HookedStore
from wal3_spark.errors import (
    AccessDenied,
    CommitFailed,
    CommitOutcomeUnknown,
    CorruptLog,
    InvalidOption,
    StorageError,
)
from wal3_spark.format.layout import FRAGMENT_PREFIX, MANIFEST_KEY, SNAPSHOT_PREFIX
from wal3_spark.format.manifest import Manifest, SnapshotOptions
from wal3_spark.log.committer import Committer
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.fragment_io import write_fragments
from wal3_spark.log.reader import LogReader
from wal3_spark.log.writer import LogWriter, LogWriterOptions, to_batches
from wal3_spark.ops.garbage_collector import GarbageCollector, GCOptions
from wal3_spark.ops.verify import verify
from wal3_spark.spark.commit import commit_files
from wal3_spark.storage import open_store

_names = itertools.count()
OPTIONS = SnapshotOptions(2, 2)


def snapshotted(records: int = 12):
    """A raw log of one-record appends, deep in snapshots, whose manifest does not know the
    newest write time its snapshots hold (`rolled_written_us`, as a log compacted by another
    writer): every commit then looks for its fragments through the snapshot tree."""
    store = open_store(f"memory://outcomes-{next(_names)}")
    writer = LogWriter(store, LogWriterOptions(snapshot_options=OPTIONS))
    for i in range(records):
        writer.append(f"r{i}".encode())
    forget_rolled_bound(store)
    return store


def forget_rolled_bound(store) -> None:
    doc = json.loads(store.get(MANIFEST_KEY).data)
    doc.pop("rolled_written_us", None)
    store.put_if_match(MANIFEST_KEY, json.dumps(doc).encode(), store.get(MANIFEST_KEY).etag)


def collect_behind(store) -> Callable[[], None]:
    """GC, as another process, moving the log's oldest offset past its first snapshots and
    deleting them at once (`wal3 gc --grace 0 --force` with a consumer far ahead)."""

    def run() -> None:
        tail = LogReader(store).manifest().next_offset
        CursorStore(store).advance("consumer", tail - 2)
        GarbageCollector(store, GCOptions(grace_s=0, force=True)).run()

    return run


def gc_after_manifest_read(store, nth: int) -> HookedStore:
    """GC runs right after the `nth` GET of the manifest (from 0): the one the commit decides on."""
    reads = itertools.count()
    return HookedStore(store, when=lambda key: key == MANIFEST_KEY and next(reads) == nth,
                       hook=collect_behind(store), after=True)


def upload(store, bodies):
    batches, _ = to_batches(bodies)
    return write_fragments(store, batches, None, fragment_bytes=1 << 20)


def bodies(store) -> list[bytes]:
    return LogReader(store).read_table().column("body").to_pylist()


def committer_commit(hooked, store):
    files = upload(store, [b"new 1", b"new 2"])
    return Committer(hooked, snapshot_options=OPTIONS).commit(files)


def spark_sink_commit(hooked, store):
    """What the batch and stream sinks' driver commit runs (`commit_files`)."""
    files = upload(store, [b"new 1", b"new 2"])
    incarnation = LogReader(store).manifest().incarnation  # as the driver planned the write
    return commit_files(hooked, files, target=None, merge_schema=False, writer="sink", since=1,
                        incarnation=incarnation)


def writer_append(hooked, store):
    return LogWriter(hooked, LogWriterOptions(snapshot_options=OPTIONS)).append([b"new 1", b"new 2"])


def writer_submit(hooked, store):
    """The pipelined path (`submit`: a chain of manifest writes where the store allows it)."""
    with LogWriter(hooked, LogWriterOptions(snapshot_options=OPTIONS, batch_bytes=1)) as writer:
        return writer.submit([b"new 1", b"new 2"]).result(timeout=60)


#: each path into `commit`, and which of its manifest reads the commit decides on (a LogWriter
#: reads the manifest once when it opens the log, and again before its first commit)
PATHS = [(committer_commit, 0), (spark_sink_commit, 0), (writer_append, 1), (writer_submit, 1)]


@pytest.mark.parametrize("path,nth", PATHS, ids=[p.__name__ for p, _ in PATHS])
def test_00_gc_deleting_a_snapshot_under_a_commit_is_not_a_readers_error(path, nth):
    store = snapshotted()
    snapshots_before = set(store.list(SNAPSHOT_PREFIX))
    hooked = gc_after_manifest_read(store, nth)
    try:
        result = path(hooked, store)
    except (CommitFailed, CommitOutcomeUnknown) as exc:  # allowed outcomes, but not expected here
        pytest.fail(f"{path.__name__}: {type(exc).__name__}: {exc}")
    assert hooked.fired
    assert snapshots_before - set(store.list(SNAPSHOT_PREFIX)), "GC deleted no snapshot"
    assert (result.start, result.limit) == (13, 15)
    assert bodies(store)[-2:] == [b"new 1", b"new 2"]
    assert bodies(store).count(b"new 1") == 1
    assert verify(store).ok


def is_manifest(key: str) -> bool:
    return key == MANIFEST_KEY


def is_fragment(key: str) -> bool:
    return key.startswith(FRAGMENT_PREFIX)


#: what fails an append before any write that may land: the store refusing the manifest write
#: or a fragment upload, a damaged or refused read of the manifest the commit decides on
FAULTS = {
    "manifest write refused": ("put", is_manifest, lambda k: AccessDenied(f"no write to {k}"), 0),
    "manifest write failed otherwise": ("put", is_manifest, lambda k: StorageError(f"{k}: HTTP 400"), 0),
    "manifest read refused": ("get", is_manifest, lambda k: AccessDenied(f"no read of {k}"), 1),
    "manifest read damaged": ("get", is_manifest, lambda k: CorruptLog("a digit", k, "damaged"), 1),
    "fragment upload refused": ("put", is_fragment, lambda k: AccessDenied(f"no write to {k}"), 0),
}


@pytest.mark.parametrize("fault", list(FAULTS))
@pytest.mark.parametrize("path,nth", PATHS, ids=[p.__name__ for p, _ in PATHS])
def test_05_an_append_that_fails_before_any_write_may_land_is_commit_failed(path, nth, fault):
    """Whatever failed it (the store's refusal, a reader's error about the manifest), the append
    ends in CommitFailed (its cause in the message), never in the store's or a reader's error:
    the caller learns from the type alone that nothing was written and a retry is safe."""
    store = snapshotted(3)
    op, when, error, after = FAULTS[fault]
    after = after if path in (writer_append, writer_submit) else 0
    ops = ("get",) if op == "get" else ("put_if_absent", "put_if_match")
    refusing = FailingStore(store, when, error, ops=ops, calls=range(after, sys.maxsize))
    before = bodies(store)
    try:
        path(refusing, store)
    except CommitFailed as exc:
        assert type(exc.__cause__).__name__ in exc.args[0]
    else:  # these paths upload through the unrefusing store: the commit went through
        assert when is is_fragment and path in (committer_commit, spark_sink_commit), fault
        return
    assert bodies(store) == before


# -- values that reach the manifest ------------------------------------------------------


BAD_VERSIONS = ["7", 1.5, True, math.nan, -1, 10**40, None]


@pytest.mark.parametrize("version", BAD_VERSIONS, ids=repr)
def test_01_a_commit_with_a_version_readers_would_refuse_writes_nothing(version):
    store = open_store(f"memory://outcomes-{next(_names)}")
    LogWriter(store).append(b"r0")
    before = store.get(MANIFEST_KEY).data
    files = upload(store, [b"r1"])
    kwargs = {"app_id": "j", "version": version} if version is not None else {"app_id": 7, "version": 1}
    with pytest.raises(InvalidOption):
        Committer(store).commit(files, **kwargs)
    assert store.get(MANIFEST_KEY).data == before
    assert LogWriter(store).append(b"r1 again").start == 2  # the log still works
    assert verify(store).ok


@pytest.mark.parametrize("field,value", [("records", 1.5), ("records", 0), ("records", "2"),
                                         ("num_bytes", -1), ("num_bytes", 2**64), ("setsum", "00")])
def test_02_a_fragment_readers_would_refuse_is_not_committed(field, value):
    store = open_store(f"memory://outcomes-{next(_names)}")
    LogWriter(store).append(b"r0")
    before = store.get(MANIFEST_KEY).data
    file = upload(store, [b"r1"])[0]
    with pytest.raises(InvalidOption, match=field):
        Committer(store).commit([type(file)(**{**file.__dict__, field: value})])
    assert store.get(MANIFEST_KEY).data == before


def test_03_scrub_refuses_what_from_bytes_refuses():
    """One set of rules: a manifest value built in memory that a reader would refuse is refused
    before it is written, with the same message."""
    store = open_store(f"memory://outcomes-{next(_names)}")
    LogWriter(store).append(b"r0")
    good = Manifest.from_bytes(store.get(MANIFEST_KEY).data)
    from wal3_spark.format.manifest import Txn

    for bad in (good.with_txns({"j": Txn("7", 1)}), good.with_txns({"j": Txn(-1, 1)}),
                good.with_txns({"j": Txn(10**40, 1)}), good.with_txns({7: Txn(1, 1)})):
        with pytest.raises(CorruptLog) as written:
            bad.scrub()
        if isinstance(next(iter(bad.txns)), int):  # JSON keys are strings: no stored form
            continue
        with pytest.raises(CorruptLog) as read:
            Manifest.from_bytes(json.dumps({**json.loads(good.to_bytes()),
                                            "txns": {k: vars(v) for k, v in bad.txns.items()}}).encode())
        assert written.value.problem == read.value.problem


def test_04_a_structured_commit_keeps_its_schema_checks():
    """The argument checks come before the schema checks and do not change them."""
    store = open_store(f"memory://outcomes-{next(_names)}")
    LogWriter(store).append(pa.table({"i": [1]}))
    assert LogWriter(store).append(pa.table({"i": [2]})).start == 2

