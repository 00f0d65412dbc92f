"""Commits under writes whose outcome is unknown (issue 7, failures 1 and 2): a manifest PUT that
times out and lands late, after the committer has already reloaded the manifest, must neither
duplicate records nor, when the commit gives up, have its fragments deleted under it."""

from __future__ import annotations

import functools
import itertools

import pytest

from wal3_spark import committer as committer_module
from wal3_spark.committer import Committer
from wal3_spark.errors import CommitOutcomeUnknown
from wal3_spark.format import MANIFEST_KEY
from wal3_spark.reader import LogReader
from wal3_spark.spark.tasks import commit_files
from wal3_spark.storage import LateLandingStore, open_store
from wal3_spark.verify import verify
from wal3_spark.writer import LogWriter, to_batches, write_fragments

_names = itertools.count()


@pytest.fixture
def store():
    return open_store(f"memory://certainty-{next(_names)}")


def raw_files(store, bodies):
    batches, _ = to_batches(bodies)
    return write_fragments(store, batches, None, fragment_bytes=1 << 20)


def bodies(store) -> list[bytes]:
    return LogReader(store).read_table().column("body").to_pylist()


def late_manifest_writes(store, **kw) -> LateLandingStore:
    return LateLandingStore(store, keys=[MANIFEST_KEY], **kw)


def test_00_a_manifest_write_landing_right_after_the_reload_is_committed_once(store):
    LogWriter(store).append(b"r0")
    late = late_manifest_writes(store, writes=[1], land="after_get")
    result = LogWriter(late).append([b"r1", b"r2"])
    assert late.counts["landed"] == 1, late.counts  # the scenario really happened
    assert bodies(store) == [b"r0", b"r1", b"r2"]
    assert (result.start, result.limit) == (2, 4)
    assert verify(store).ok


def test_01_an_idempotent_commit_whose_own_write_landed_late_is_not_a_duplicate(store):
    LogWriter(store).append(b"r0")
    late = late_manifest_writes(store, writes=[1], land="after_get")
    result = Committer(late).commit(raw_files(store, [b"r1", b"r2"]), app_id="q", version=0)
    assert late.counts["landed"] == 1, late.counts
    assert not result.duplicate and (result.start, result.limit) == (2, 4)
    assert bodies(store) == [b"r0", b"r1", b"r2"]
    assert LogReader(store).manifest().txns["q"].version == 0


def test_02_the_spark_commit_path_deletes_nothing_when_the_outcome_is_unknown(store, monkeypatch):
    """Every manifest write times out; the commit gives up; the first write lands afterwards."""
    monkeypatch.setattr(committer_module, "Committer", functools.partial(Committer, max_attempts=3))
    LogWriter(store).append(b"r0")
    late = late_manifest_writes(store, probability=1.0, land="manual")
    files = raw_files(store, [b"r1", b"r2"])
    with pytest.raises(CommitOutcomeUnknown, match="wal3 verify"):
        commit_files(late, files, target=None, merge_schema=False, writer="t", since=2)
    assert all(store.exists(f.path) for f in files)
    late.land_all()  # the store finally processes the requests it had received
    assert late.counts["landed"] == 1 and late.counts["condition_lost"] == 2, late.counts
    assert bodies(store) == [b"r0", b"r1", b"r2"]
    assert verify(store).ok


def test_03_a_spark_abort_after_an_unknown_commit_outcome_keeps_the_fragments(store, monkeypatch):
    """Spark calls abort() when commit() raised: every task's message is there then."""
    from wal3_spark.spark.batch_writer import FragmentSink, Wal3CommitMessage
    from wal3_spark.spark.options import WRITE, parse

    monkeypatch.setattr(committer_module, "Committer", functools.partial(Committer, max_attempts=3))
    LogWriter(store).append(b"r0")
    late = late_manifest_writes(store, probability=1.0, land="manual")
    sink = FragmentSink(parse({"path": store.url}, WRITE), None, 2)
    monkeypatch.setattr(type(sink.options), "open_store", lambda _self: late)
    messages = [Wal3CommitMessage(tuple(raw_files(store, [b"r1"])), 0),
                Wal3CommitMessage(tuple(raw_files(store, [b"r2"])), 1)]
    with pytest.raises(CommitOutcomeUnknown):
        sink.commit_messages(messages)
    sink.abort_messages(messages)
    late.land_all()
    assert bodies(store) == [b"r0", b"r1", b"r2"]
    assert verify(store).ok


def test_04_an_abort_of_a_job_whose_tasks_failed_deletes_its_fragments(store):
    from wal3_spark.spark.batch_writer import FragmentSink, Wal3CommitMessage
    from wal3_spark.spark.options import WRITE, parse

    LogWriter(store).append(b"r0")
    sink = FragmentSink(parse({"path": store.url}, WRITE), None, 2)
    files = raw_files(store, [b"r1"])
    sink.abort_messages([Wal3CommitMessage(tuple(files), 0), None])  # commit was never called
    assert not store.exists(files[0].path)
    assert bodies(store) == [b"r0"]
