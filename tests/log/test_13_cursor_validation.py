"""Cursors are validated wherever they are set, and a malformed cursor object never wedges the log:
`cursor delete` and `cursor set --force` always work, `cursor list` and `info` show it as broken,
and `gc` refuses while it is there, naming it and the fix."""

from __future__ import annotations

import json
import re

import pytest

from tests.cli.test_00_cli import fails, ok, wal3
from wal3_spark.errors import CursorError
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.writer import LogWriter
from wal3_spark.storage import open_store

pytestmark = pytest.mark.slow  # every test runs the wal3 command in subprocesses


@pytest.fixture
def url(tmp_path) -> str:
    url = str(tmp_path / "log")
    writer = LogWriter(open_store(url))
    for body in (b"a", b"b", b"c", b"d", b"e"):  # offsets [1, 6), one fragment each
        writer.append(body)
    return url


def put_cursor_object(url: str, key: str, doc) -> None:
    data = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    open_store(url).put_if_absent(key, data)


def test_00_negative_and_beyond_the_tail_offsets_are_refused(url):
    proc = wal3("cursor", "set", url, "c", "-3")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    fails("cursor", "set", url, "c", "1000", match="beyond the tail")
    fails("cursor", "set", url, "c", "1000", "--force", match="beyond the tail")
    assert ok("cursor", "list", url) == ""
    ok("cursor", "set", url, "c", "6")  # the tail itself: consumed everything
    cursors = CursorStore(open_store(url))
    for bad in (-3, 7):
        with pytest.raises(CursorError):
            cursors.move("c", bad)
        with pytest.raises(CursorError):
            cursors.create("d", bad)


def test_01_below_the_oldest_offset_only_when_forced(url):
    ok("cursor", "set", url, "c", "4")
    ok("gc", url, "--grace", "0", "--force")
    oldest = json.loads(ok("info", url, "--json"))["oldest_offset"]
    assert oldest > 1
    fails("cursor", "set", url, "d", "1", match="oldest")
    ok("cursor", "set", url, "d", "1", "--force")


@pytest.mark.parametrize("key, doc", [
    ("cursor/c.json", {"position": {"offset": -3}, "epoch_us": 1, "writer": "x"}),
    ("cursor/c.json", b"{not json"),
    ("cursor/bad-name.json", {"position": {"offset": 2}, "epoch_us": 1, "writer": "x"}),
    ("cursor/c.json", {"position": {"offset": 1000}, "epoch_us": 1, "writer": "x"}),  # beyond the tail
])
def test_02_a_malformed_cursor_object_is_shown_blocks_gc_and_can_be_removed(url, key, doc):
    name = key[len("cursor/"):-len(".json")]
    ok("cursor", "set", url, "good", "3")
    put_cursor_object(url, key, doc)
    listed = ok("cursor", "list", url)
    assert re.search(r"^good +3 ", listed, re.M) and re.search(rf"^{name} +broken: ", listed, re.M), listed
    info = json.loads(ok("info", url, "--json"))
    assert info["cursors"]["good"] == 3 and name in info["broken_cursors"]
    assert "broken" in ok("info", url)
    err = fails("gc", url, "--grace", "0", match=name)
    assert "wal3 cursor delete" in err
    ok("cursor", "delete", url, name)
    assert "broken" not in ok("cursor", "list", url)
    ok("gc", url, "--grace", "0")


def test_03_set_force_repairs_a_cursor_holding_a_bad_offset(url):
    put_cursor_object(url, "cursor/c.json", {"position": {"offset": -3}, "epoch_us": 1, "writer": "x"})
    fails("cursor", "get", url, "c", match="broken")
    ok("cursor", "set", url, "c", "2", "--force")
    assert ok("cursor", "get", url, "c") == "2\n"
    ok("gc", url, "--grace", "0")


def test_04_a_consumer_advancing_its_cursor_replaces_a_broken_object_of_that_name(url):
    put_cursor_object(url, "cursor/c.json", b"{not json")
    cursors = CursorStore(open_store(url))
    assert cursors.advance("c", 3).cursor.offset == 3
    assert cursors.get("c").cursor.offset == 3 and cursors.list_all()[1] == []


def test_05_a_cursor_beyond_the_tail_is_broken_and_set_force_repairs_it(url):
    """Written by hand or by an old version: GC refuses naming it and the fix (with force too:
    collecting up to it would drop records appended later), `cursor set --force` moves it back."""
    put_cursor_object(url, "cursor/c.json", {"position": {"offset": 1000}, "epoch_us": 1, "writer": "x"})
    assert "offset 1000 is beyond the tail (next offset 6)" in ok("cursor", "list", url)
    fails("cursor", "get", url, "c", match="beyond the tail")
    with pytest.raises(CursorError, match="beyond the tail"):
        CursorStore(open_store(url)).scan_from("c")
    err = fails("gc", url, "--grace", "0", "--force", match="cursor/c.json")
    assert "wal3 cursor set " in err and " c OFFSET --force" in err
    fails("cursor", "set", url, "c", "3", match="refusing to move it back")
    ok("cursor", "set", url, "c", "3", "--force")
    assert "broken" not in ok("cursor", "list", url)
    ok("gc", url, "--grace", "0")
    assert json.loads(ok("info", url, "--json"))["oldest_offset"] == 3


@pytest.mark.parametrize("doc", [
    {"position": {"offset": True}, "epoch_us": 1, "writer": "x"},  # JSON's true is not 1
    {"position": {"offset": 2.0}, "epoch_us": 1, "writer": "x"},
    {"position": {"offset": "2"}, "epoch_us": 1, "writer": "x"},
    {"position": {"offset": 2**64}, "epoch_us": 1, "writer": "x"},  # past u64
    {"position": {"offset": 10**400}, "epoch_us": 1, "writer": "x"},
    {"position": {"offset": 2}, "epoch_us": True, "writer": "x"},
    {"position": {"offset": 2}, "epoch_us": 10**400, "writer": "x"},
    {"offset": True},
    b'{"position": {"offset": ' + b"9" * 5000 + b'}, "epoch_us": 1, "writer": "x"}',  # past json's int limit
    b"[" * 100_000,  # nested deeper than Python's parser goes (it raised RecursionError)
])
def test_06_a_cursor_whose_offset_is_not_a_plain_u64_integer_is_broken_for_every_reader(url, doc):
    from tests.cli.test_00_cli import run_main
    from wal3_spark.errors import CorruptLog
    from wal3_spark.format.layout import Cursor, loads

    data = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    with pytest.raises(CorruptLog, match="cursor/c.json"):
        Cursor.from_dict(loads(data, "cursor/c.json"), "cursor/c.json")
    put_cursor_object(url, "cursor/c.json", data)
    ok("cursor", "set", url, "good", "3")
    with pytest.raises(CursorError, match="broken"):
        CursorStore(open_store(url)).get("c")
    code, out, err = run_main("cursor", "list", url, "--json")
    listed = json.loads(out)
    assert code == 0 and [c["name"] for c in listed["cursors"]] == ["good"], (out, err)
    problem = listed["broken_cursors"]["c"]
    assert problem.startswith("broken: ") and len(problem) < 400, problem  # a huge value is abbreviated
    code, out, _ = run_main("info", url, "--json")
    assert code == 0 and "c" in json.loads(out)["broken_cursors"] and "c" not in json.loads(out)["cursors"]


def test_07_the_largest_u64_offset_and_time_are_read():
    from wal3_spark.format.layout import Cursor

    doc = {"position": {"offset": 2**64 - 1}, "epoch_us": 2**64 - 1, "writer": "x"}
    assert Cursor.from_dict(doc, "cursor/c.json") == Cursor(2**64 - 1, 2**64 - 1, "x")


@pytest.mark.parametrize("char", ["\n", "\r", "\t", "\x00", "\x1b", "\x7f", "\u2028"])
def test_08_a_cursor_name_with_a_newline_or_control_character_is_refused(url, char):
    """`re.match` with `$` let `billing\\n` through (a `cursor/billing\\n.json`): the whole name
    must follow the rule, through the API and the command alike."""
    from wal3_spark.format.layout import cursor_key

    for name in (f"billing{char}", f"{char}billing", f"bil{char}ling"):
        with pytest.raises(CursorError, match="invalid cursor name"):
            cursor_key(name)
        with pytest.raises(CursorError, match="invalid cursor name"):
            CursorStore(open_store(url)).create(name, 2)
    if char != "\x00":  # no command line can hold a NUL
        fails("cursor", "set", url, f"billing{char}", "2", code=2, match="invalid cursor name")
    assert [meta.key for meta in open_store(url).list("cursor/")] == []
