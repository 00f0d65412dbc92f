"""A log deleted and created again under the same name is another log: its manifest records a
new incarnation, cursors record theirs, and a cursor of an earlier incarnation is reported stale,
replaced by its consumer's next move and never wedges garbage collection (the streams: spark/test_20_recreated_logs).
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from dataclasses import replace

import pytest

from wal3_spark.cli.main import main
from wal3_spark.errors import CommitFailed, CorruptLog, CursorError, LogRecreated
from wal3_spark.format.incarnation import UNPINNED, UNRECORDED, pinned, same_log
from wal3_spark.format.layout import FRAGMENT_PREFIX, MANIFEST_KEY, Cursor, cursor_key, dumps
from wal3_spark.format.manifest import Manifest
from wal3_spark.format.uuid7 import uuid7_timestamp_us
from wal3_spark.log.committer import Committer
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.fragment_io import write_fragments
from wal3_spark.log.reader import LogReader
from wal3_spark.log.writer import LogWriter, LogWriterOptions, to_batches
from wal3_spark.ops.copy import copy_log
from wal3_spark.ops.garbage_collector import GCOptions, collect_garbage
from wal3_spark.ops.verify import verify
from wal3_spark.storage import open_store
from wal3_spark.storage.base import Blob
from wal3_spark.storage.forwarding import ForwardingStore


def delete_log(store) -> None:
    """What an operator's `rm -rf` / `aws s3 rm --recursive` of the log's root does."""
    for meta in list(store.list("")):
        store.delete(meta.key)


def incarnation(store) -> str | None:
    return LogReader(store).manifest().incarnation


def test_00_a_new_log_records_a_uuid7_incarnation_that_every_later_manifest_keeps(store):
    writer = LogWriter(store)
    writer.append([b"a"] * 3)
    first = incarnation(store)
    assert first is not None and uuid7_timestamp_us(first) is not None
    for _ in range(3):
        writer.append([b"b"])
    Committer(store).seal()
    assert incarnation(store) == first
    again = Manifest.from_bytes(store.get(MANIFEST_KEY).data)
    assert again.incarnation == first and json.loads(again.to_bytes())["incarnation"] == first


def test_01_a_log_created_again_gets_another_incarnation_and_a_copy_its_own(store, tmp_path):
    LogWriter(store).append([b"a"] * 3)
    first = incarnation(store)
    delete_log(store)
    LogWriter(store).append([b"b"])
    assert incarnation(store) not in (None, first)
    source, target = open_store((tmp_path / "src").as_uri()), open_store((tmp_path / "dst").as_uri())
    LogWriter(source).append([b"x"] * 2)
    copy_log(source, target)
    assert incarnation(target) not in (None, incarnation(source))


@pytest.mark.parametrize("bad", ["", "not-a-uuid", 7, True, ["x"], "0192F0C1-3E4B-7A1C-8D2E-3F4A5B6C7D8E"])
def test_02_a_malformed_incarnation_is_a_corrupt_manifest(bad):
    doc = json.loads(Manifest.empty("w").to_bytes())
    doc["incarnation"] = bad
    with pytest.raises(CorruptLog, match="incarnation"):
        Manifest.from_bytes(dumps(doc))
    cursor = Cursor(1, 2, "w").to_dict() | {"incarnation": bad}
    with pytest.raises(CorruptLog, match="incarnation"):
        Cursor.from_dict(cursor, "cursor/c.json")


def test_03_a_log_without_incarnation_keeps_working_and_never_gets_one(store):
    LogWriter(store).append([b"a"] * 2)
    legacy = replace(LogReader(store).manifest(), incarnation=None)
    store.put_if_match(MANIFEST_KEY, legacy.to_bytes(), store.head(MANIFEST_KEY).etag)
    assert "incarnation" not in json.loads(store.get(MANIFEST_KEY).data)
    LogWriter(store).append([b"b"])
    cursors = CursorStore(store)
    cursors.advance("c", 3)
    assert incarnation(store) is None
    assert cursors.get("c").cursor == Cursor(3, cursors.get("c").cursor.epoch_us, "wal3-spark")
    assert [r.as_py() for b in LogReader(store).read(1) for r in b.column("body")] == [b"a", b"a", b"b"]


def test_04_the_rule_for_recorded_incarnations():
    assert same_log("x", "x", 5, 3) and not same_log("x", "y", 1, 9)
    assert not same_log(None, "y", 1, 9) and not same_log("x", None, 1, 9) and same_log(None, None, 1, 1)
    # recorded before incarnations existed: trusted, unless beyond the tail
    assert same_log(UNRECORDED, "y", 9, 9) and not same_log(UNRECORDED, "y", 10, 9)


def recreate_with_fewer_records(store, before: int = 11, after: int = 5) -> None:
    LogWriter(store).append([b"old"] * before)
    CursorStore(store).advance("billing", before + 1)
    delete_log_but_cursors(store)
    LogWriter(store).append([b"new"] * after)


def delete_log_but_cursors(store) -> None:
    """A log deleted by removing its data and manifest: a consumer's cursor object was left (or
    was written back by a consumer that had not noticed)."""
    for meta in list(store.list("")):
        if not meta.key.startswith("cursor/"):
            store.delete(meta.key)


def test_05_a_cursor_of_an_earlier_incarnation_is_stale_not_broken_and_advance_replaces_it(store):
    recreate_with_fewer_records(store, 11, 5)  # the old cursor (12) is beyond the new tail (6)
    cursors = CursorStore(store)
    states, broken = cursors.list_all()
    assert states == [] and [(b.name, b.stale) for b in broken] == [("billing", True)]
    assert "earlier incarnation" in broken[0].problem
    with pytest.raises(CursorError, match="stale"):
        cursors.get("billing")
    # the consumer's next commit resets it (it raised "beyond the tail" before, forever)
    state = cursors.advance("billing", 3)
    assert state.cursor.offset == 3 and state.cursor.incarnation == incarnation(store)
    assert cursors.list_all() == ([cursors.get("billing")], [])


def test_06_a_stale_cursor_below_the_new_tail_is_stale_too_and_move_replaces_it(store):
    recreate_with_fewer_records(store, 3, 9)  # the old cursor (4) is inside the new log
    cursors = CursorStore(store)
    assert [b.stale for b in cursors.list_all()[1]] == [True]
    assert cursors.move("billing", 2).cursor.offset == 2  # backwards, without --force
    assert cursors.list_all()[1] == []


def test_07_advance_never_records_an_offset_of_another_incarnation(store):
    LogWriter(store).append([b"old"] * 4)
    old = incarnation(store)
    delete_log(store)
    LogWriter(store).append([b"new"] * 4)
    with pytest.raises(LogRecreated, match="deleted and created again"):
        CursorStore(store).advance("billing", 3, incarnation=old)
    assert CursorStore(store).list_all() == ([], [])


def test_08_gc_counts_a_stale_cursor_as_pinning_the_whole_log_and_never_refuses(store):
    recreate_with_fewer_records(store, 11, 5)
    report = collect_garbage(store, GCOptions(grace_s=0), keep_from=4)
    assert report.cursors == {"billing": 1} and report.cutoff == 1
    assert any("stale" in note for note in report.notes)
    assert LogReader(store).manifest().oldest_offset == 1
    assert CursorStore(store).lowest() == 1


def test_09_scan_from_a_stale_cursor_fails_or_restarts_at_the_oldest_offset(store):
    recreate_with_fewer_records(store, 11, 5)
    cursors = CursorStore(store)
    with pytest.raises(LogRecreated, match="on_recreated_log"):
        cursors.scan_from("billing")
    scan = cursors.scan_from("billing", on_recreated_log="restart")
    assert scan.reader.read_all().num_rows == 5
    cursors.advance("billing", scan.position)
    assert cursors.scan_from("billing").reader.read_all().num_rows == 0


def run_main(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def test_10_cli_lists_a_stale_cursor_and_cursor_set_replaces_it(tmp_path):
    root = tmp_path / "log"
    url = root.as_uri()
    LogWriter(open_store(url)).append([b"old"] * 11)
    assert run_main("cursor", "set", url, "billing", "12")[0] == 0
    shutil.rmtree(root / "log")
    shutil.rmtree(root / "manifest")
    LogWriter(open_store(url)).append([b"new"] * 5)
    code, out, err = run_main("cursor", "list", url)
    assert code == 0 and "billing" in out and "stale" in out and "earlier incarnation" in out, out
    code, out, _ = run_main("info", url, "--json")
    info = json.loads(out)
    assert info["stale_cursors"] == ["billing"] and info["incarnation"] == incarnation(open_store(url))
    code, out, err = run_main("cursor", "set", url, "billing", "2")
    assert code == 0, err
    assert run_main("cursor", "get", url, "billing")[1] == "2\n"
    cursor = json.loads((root / cursor_key("billing")).read_bytes())
    assert cursor["incarnation"] == incarnation(open_store(url))


def test_11_fragments_written_before_a_log_was_deleted_never_commit_into_the_log_created_again(store):
    writer = LogWriter(store)
    writer.append([b"a"] * 3)
    first = incarnation(store)
    files = write_fragments(store, to_batches([b"lost"])[0], None, fragment_bytes=1 << 20)
    delete_log(store)  # takes the fragments just written with it
    with pytest.raises(CommitFailed, match="deleted since these fragments were written"):
        Committer(store).commit(files, incarnation=first)
    assert not store.exists(MANIFEST_KEY)  # nor is the log created for them
    LogWriter(store).append([b"b"])
    with pytest.raises(CommitFailed, match="deleted since these fragments were written"):
        Committer(store).commit(files, incarnation=first)
    with pytest.raises(CommitFailed):  # the old writer's first append fails, whole, and it learns
        writer.append([b"c"])
    writer.append([b"d"])
    assert [r.as_py() for r in LogReader(store).read_table(1).column("body")] == [b"b", b"d"]


def test_12_a_cursor_beyond_one_read_of_the_tail_but_not_the_next_is_read_again_not_a_crash(store):
    writer = LogWriter(store)
    writer.append([b"a"] * 3)
    old = store.get(MANIFEST_KEY).data
    writer.append([b"b"] * 3)
    CursorStore(store).advance("c", 7)

    class StaleOnce(ForwardingStore):
        served = False

        def get(self, key):
            blob = self.inner.get(key)
            if key == MANIFEST_KEY and not self.served:
                self.served = True
                return Blob(old, blob.etag)
            return blob

    with pytest.raises(CorruptLog, match="before cursor .c. at 7, and the next did not"):
        CursorStore(StaleOnce(store)).scan_from("c")
    assert CursorStore(store).scan_from("c").records == 0


class RecreatedAfterUpload(ForwardingStore):
    """`inner`, where the log is deleted and created again (holding `b"new"`) right after the
    first fragment upload: between a writer's upload and its commit, deterministically."""

    def __init__(self, inner) -> None:
        super().__init__(inner)
        self.fired = False

    def put_if_absent(self, key, data):
        etag = self.inner.put_if_absent(key, data)
        if key.startswith(FRAGMENT_PREFIX) and not self.fired:
            self.fired = True
            delete_log(self.inner)
            LogWriter(self.inner).append([b"new"])
        return etag


@pytest.mark.parametrize("depth", [1, 4])  # one manifest write in flight, or a chain of them
@pytest.mark.parametrize("warm", [False, True])  # the commit thread knows the old manifest, or not
def test_13_pipelined_submits_written_before_a_log_was_deleted_fail_and_never_commit(store, depth, warm):
    LogWriter(store).append([b"old"])
    hooked = RecreatedAfterUpload(store)
    with LogWriter(hooked, LogWriterOptions(max_manifest_writes=depth, batch_bytes=1)) as writer:
        if warm:
            hooked.fired = True
            assert writer.submit([b"warm"]).result(timeout=60).start == 2
            hooked.fired = False
        future = writer.submit([b"lost 1", b"lost 2"])
        with pytest.raises(CommitFailed, match="deleted since"):
            future.result(timeout=60)
        assert hooked.fired
        assert bodies(store) == [b"new"]  # nothing of the failed append, nor of the old log
        # the writer learns the new log: its next append goes there
        assert writer.submit([b"after"]).result(timeout=60).start == 2
    assert bodies(store) == [b"new", b"after"]
    assert verify(store).ok


def bodies(store) -> list[bytes]:
    return LogReader(store).read_table().column("body").to_pylist()


def test_14_fragments_written_for_no_log_commit_into_a_log_created_meanwhile_not_into_one_deleted_since(store):
    """`UNPINNED` (a routing sink's new log): another writer creating the log meanwhile is fine;
    the fragments gone with a log deleted since is not, whatever its incarnation now."""
    files = write_fragments(store, to_batches([b"mine"])[0], None, fragment_bytes=1 << 20)
    LogWriter(store).append([b"theirs"])  # created meanwhile by another writer
    assert Committer(store).commit(files, incarnation=UNPINNED).start == 2
    assert bodies(store) == [b"theirs", b"mine"]

    delete_log(store)
    files = write_fragments(store, to_batches([b"lost"])[0], None, fragment_bytes=1 << 20)
    delete_log(store)  # created, written for, and deleted: the fragments went with it
    with pytest.raises(CommitFailed, match="is gone: the log was deleted"):
        Committer(store).commit(files, incarnation=UNPINNED)
    assert not store.exists(MANIFEST_KEY)
    LogWriter(store).append([b"again"])
    with pytest.raises(CommitFailed, match="is gone: the log was deleted"):
        Committer(store).commit(files, incarnation=UNPINNED)
    assert bodies(store) == [b"again"]


def test_15_tasks_that_saw_one_incarnation_pin_it_others_pin_nothing():
    import pickle

    assert pinned(["a", "a"]) == "a"
    assert pinned([None, None]) is None
    for mixed in (["a", "b"], ["a", UNPINNED], [UNPINNED], []):
        assert pinned(mixed) is UNPINNED
    assert pickle.loads(pickle.dumps(UNPINNED)) is UNPINNED  # travels to executors and back
    assert pickle.loads(pickle.dumps(UNRECORDED)) is UNRECORDED
