"""Log sets: the logs directly under a prefix, named, selected and read as one.

The listing must cost O(logs), never O(objects): a counting store checks that discovering a set
of logs with many fragments each reads one listing page and one manifest per log."""

from __future__ import annotations

import threading

import pytest

from tests.support.fakes import CountingStore, FailingStore
from wal3_spark.errors import InvalidLogName, StorageError
from wal3_spark.log.writer import LogWriter
from wal3_spark.logset.logs import (
    ALL_LOGS,
    MAX_NAME_LENGTH,
    LogSelection,
    LogSet,
    LogTail,
    check_log_name,
    is_log_name,
)
from wal3_spark.storage import open_store
from wal3_spark.storage.base import Blob
from wal3_spark.storage.forwarding import ForwardingStore

# ------------------------------------------------------------------------------------ names


@pytest.mark.parametrize(
    "name", ["orders", "tenant-42", "a.b", "x_y", "user@example.com", "0", "A" * MAX_NAME_LENGTH]
)
def test_00_valid_log_names(name: str) -> None:
    assert check_log_name(name) == name
    assert is_log_name(name)


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("", "it is empty"),
        ("a/b", "'/'"),
        ("..", "starts with '.'"),
        (".hidden", "starts with '.'"),
        ("_dirty", "reserved"),
        ("_mine", "reserved"),
        ("tab\there", "'\\t'"),
        ("nul\x00", "'\\x00'"),
        ("orders\n", "'\\n'"),
        ("\norders", "'\\n'"),
        ("or\rders", "'\\r'"),
        ("esc\x1b", "'\\x1b'"),
        ("line\u2028", "'\\u2028'"),
        ("a b", "' '"),
        ("a:b", "':'"),
        ("a%20b", "'%'"),
        ("glob*", "'*'"),
        ("back\\slash", "'\\\\'"),
        ("café", "'é'"),
        ("A" * (MAX_NAME_LENGTH + 1), f"{MAX_NAME_LENGTH + 1} characters long"),
        (None, "NoneType, not a string"),
        (42, "int, not a string"),
    ],
)
def test_01_invalid_log_names_are_refused_naming_the_value_and_the_problem(name: object, problem: str) -> None:
    with pytest.raises(InvalidLogName) as err:
        check_log_name(name)
    message = str(err.value)
    assert repr(name) in message and problem in message
    assert "ASCII letters, digits" in message  # the rule, so the user can fix the name
    assert not is_log_name(name)


def test_02_selections() -> None:
    assert ALL_LOGS.matches("a") and not ALL_LOGS.matches("_dirty") and not ALL_LOGS.matches("a b")
    explicit = LogSelection.of(["b", "a", "b"])
    assert explicit.names == ("a", "b") and explicit.is_explicit
    assert explicit.matches("a") and not explicit.matches("c")
    glob = LogSelection.matching("tenant-[0-4]*")
    assert glob.matches("tenant-3x") and not glob.matches("tenant-5") and not glob.matches("Tenant-1")
    assert not LogSelection.matching("*").matches("_dirty")
    with pytest.raises(InvalidLogName, match="'_dirty'"):
        LogSelection.of(["a", "_dirty"])
    with pytest.raises(InvalidLogName, match="at least one"):
        LogSelection.of([])
    with pytest.raises(InvalidLogName, match="must not be empty"):
        LogSelection.matching("")
    with pytest.raises(ValueError, match="not both"):
        LogSelection(names=("a",), pattern="*")
    assert LogSelection.parse() == ALL_LOGS
    assert LogSelection.parse(" b, a ,").names == ("a", "b")
    assert LogSelection.parse(pattern="t-*") == LogSelection.matching("t-*")
    with pytest.raises(InvalidLogName, match="not both"):
        LogSelection.parse("a", "*")


# -------------------------------------------------------------------------------- discovery


def _make_logs(prefix_url: str, options: dict[str, str], names: list[str], appends: int = 1) -> None:
    for name in names:
        with LogWriter(f"{prefix_url}/{name}", options=options) as writer:
            for i in range(appends):
                writer.append([f"{name}-{i}".encode()])


def test_03_discovery_lists_logs_in_o_logs_and_reads_their_tails(
    store_url: str, store_options: dict[str, str]
) -> None:
    names = ["a", "b", "c-1", "c-2"]
    _make_logs(store_url, store_options, names, appends=3)  # 3 fragments per log
    prefix = open_store(store_url, store_options)
    prefix.put_if_absent("_dirty/manifest/MANIFEST", b"{}")  # reserved: never listed nor read
    prefix.put_if_absent("not a log/x", b"")  # not a log name: skipped
    prefix.put_if_absent("empty/log/orphan", b"")  # a directory without a manifest: no log
    counting = CountingStore(prefix)
    logs = LogSet(counting)
    assert logs.names() == ["a", "b", "c-1", "c-2", "empty"]
    assert counting.by_operation() == {"list_children": 1}
    scan = logs.tails()
    assert scan.tails == {n: LogTail(n, 1, 4, False) for n in names}
    assert not scan.failed
    # one listing, then one GET per candidate: no fragment was listed or read
    assert counting.by_operation() == {"list_children": 2, "get": 5}
    assert LogSet(prefix, LogSelection.matching("c-*")).names() == ["c-1", "c-2"]


def test_04_explicit_names_need_no_listing_and_missing_logs_are_absent(
    store_url: str, store_options: dict[str, str]
) -> None:
    _make_logs(store_url, store_options, ["a"])
    counting = CountingStore(open_store(store_url, store_options))
    logs = LogSet(counting, LogSelection.of(["a", "later"]))
    scan = logs.tails()
    assert list(scan.tails) == ["a"] and not scan.failed
    assert counting.by_operation() == {"get": 2}


def test_05_log_stores_and_urls_are_the_logs_own(store_url: str, store_options: dict[str, str]) -> None:
    logs = LogSet(store_url, options=store_options)
    with LogWriter(logs.log_store("x")) as writer:
        writer.append([b"1", b"2"])
    assert logs.log_url("x") == f"{store_url}/x"
    assert logs.log_store("x").url == logs.log_url("x")
    again = LogSet(store_url, options=store_options).tails()
    assert again.tails["x"].next_offset == 3
    with pytest.raises(InvalidLogName, match="'../x'"):
        logs.log_store("../x")


def test_06_one_unreadable_manifest_fails_only_that_log(tmp_path) -> None:
    url = str(tmp_path / "logs")
    _make_logs(url, {}, ["a", "b", "c"])
    prefix = open_store(url)
    prefix.put_if_match("b/manifest/MANIFEST", b"{not json", prefix.head("b/manifest/MANIFEST").etag)
    failing = FailingStore(prefix, lambda key: key.startswith("c/"), lambda key: StorageError(f"boom {key}"))
    scan = LogSet(failing, max_workers=2).tails()
    assert list(scan.tails) == ["a"]
    assert sorted(scan.failed) == ["b", "c"]
    assert "valid JSON" in str(scan.failed["b"]) and "boom" in str(scan.failed["c"])


def test_07_many_logs_are_read_in_parallel_in_name_order(tmp_path) -> None:
    url = str(tmp_path / "logs")
    names = [f"t{i:03d}" for i in range(40)]
    _make_logs(url, {}, names)
    in_flight, peak = [0], [0]
    lock = threading.Lock()
    barrier = threading.Barrier(4, timeout=30)

    class Gate(ForwardingStore):
        def get(self, key: str) -> Blob:
            with lock:
                in_flight[0] += 1
                peak[0] = max(peak[0], in_flight[0])
            if key in {f"t00{i}/manifest/MANIFEST" for i in range(4)}:
                barrier.wait()  # only passes if 4 reads are in flight at once
            try:
                return self.inner.get(key)
            finally:
                with lock:
                    in_flight[0] -= 1

    loaded = list(LogSet(Gate(open_store(url)), max_workers=4).manifests())
    assert [entry.name for entry in loaded] == names
    assert all(entry.manifest is not None for entry in loaded)
    assert peak[0] == 4  # bounded by max_workers
