"""Garbage collection never deletes what an append may still commit (issue 7, failure 3).

An append uploads its fragments first and commits them after; until then they look exactly like
the orphans of failed appends. `wal3 gc --grace 0` between the two must not turn the commit
into a manifest that points at nothing."""

from __future__ import annotations

import time

import pytest

from wal3_spark.cli import main as wal3_main
from wal3_spark.committer import Committer
from wal3_spark.errors import CommitFailed
from wal3_spark.gc import GarbageCollector
from wal3_spark.reader import LogReader
from wal3_spark.storage import open_store
from wal3_spark.verify import verify
from wal3_spark.writer import LogWriter, to_batches, write_fragments


@pytest.fixture
def store(store_url, store_options):
    return open_store(store_url, store_options)


def upload(store, bodies):
    batches, _ = to_batches(bodies)
    return write_fragments(store, batches, None, fragment_bytes=1 << 20)


def bodies(store) -> list[bytes]:
    return LogReader(store).read_table().column("body").to_pylist()


@pytest.mark.xfail(strict=True, reason="issue 7: fixed by the next commits")
def test_00_gc_grace_0_between_upload_and_commit_loses_nothing(store, store_url, request, monkeypatch):
    if store_url.startswith("s3://"):
        for name, value in request.getfixturevalue("seaweed").env.items():
            monkeypatch.setenv(name, value)
    LogWriter(store).append(b"r0")
    files = upload(store, [b"r1", b"r2"])
    assert wal3_main(["gc", store_url, "--grace", "0"]) == 0
    result = Committer(store).commit(files)
    assert (result.start, result.limit) == (2, 4)
    assert bodies(store) == [b"r0", b"r1", b"r2"]
    assert verify(store).ok


@pytest.mark.xfail(strict=True, reason="issue 7: fixed by the next commits")
def test_01_a_commit_of_fragments_gc_swept_as_orphans_is_refused_and_commits_nothing(store):
    LogWriter(store).append(b"r0")
    files = upload(store, [b"r1"])
    # a collector whose clock says the fragment is far older than any orphan grace
    report = GarbageCollector(store, grace_s=0, now=lambda: time.time() + 7 * 86400).run()
    assert report.orphans_deleted == [files[0].path]
    with pytest.raises(CommitFailed, match="rerun the append"):
        Committer(store).commit(files)
    assert bodies(store) == [b"r0"]
    assert verify(store).ok
    assert LogWriter(store).append(b"r1 again").start == 2  # a rerun works
