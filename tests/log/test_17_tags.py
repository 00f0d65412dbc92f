"""Tags: a named offset of a log whose reads return the same records every time, before and
after later appends and garbage collection (held tags keep them; a tag without hold fails with
DataLost rather than return fewer rows); listing, deleting, and clear errors."""

from __future__ import annotations

import json

import pytest

from wal3_spark.errors import DataLost, InvalidOption, TagError
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.reader import LogReader
from wal3_spark.log.tags import TagStore
from wal3_spark.log.writer import LogWriter
from wal3_spark.ops.garbage_collector import GarbageCollector, GCOptions
from wal3_spark.storage import open_store
from wal3_spark.storage.common import file_url
from wal3_spark.testing.hooks import hooked


def fill(url: str, appends: int, start: int = 0) -> None:
    writer = LogWriter(url)
    for i in range(appends):
        writer.append([f"r{start + i * 5 + j:04d}".encode() for j in range(5)])


def tagged(url: str, name: str) -> list[tuple[int, bytes]]:
    start, limit = TagStore(url).range(name)
    table = LogReader(url).read_table(start, limit)
    return list(zip(table.column("_offset").to_pylist(), table.column("body").to_pylist()))


def collect(url: str) -> None:
    CursorStore(url).move("gc", LogReader(url).manifest().next_offset, allow_backwards=True)
    GarbageCollector(url, GCOptions(grace_s=0, force=True)).run()


@pytest.fixture
def url(tmp_path) -> str:
    return file_url(str(tmp_path / "log"))


def test_00_a_held_tag_reads_the_same_rows_before_and_after_appends_and_gc(url):
    fill(url, 6)  # [1, 31)
    TagStore(url).create("q3-close", at=23, hold=True)
    before = tagged(url, "q3-close")
    assert [o for o, _ in before] == list(range(1, 23))
    fill(url, 6, start=30)
    collect(url)  # the cursor at the tail: only the tag holds the log back
    assert LogReader(url).manifest().oldest_offset == 1
    assert tagged(url, "q3-close") == before
    TagStore(url).delete("q3-close")
    collect(url)
    assert LogReader(url).manifest().oldest_offset > 23


def test_01_a_tag_without_hold_fails_once_its_records_are_collected(url):
    fill(url, 6)
    TagStore(url).create("daily")  # at the tail: [1, 31)
    fill(url, 2, start=30)
    assert len(tagged(url, "daily")) == 30
    collect(url)
    with pytest.raises(DataLost, match=r"offsets \[1, \d+\)"):
        tagged(url, "daily")


def test_02_list_delete_and_errors(url, tmp_path):
    with pytest.raises(TagError, match="no wal3 log"):
        TagStore(url).create("x")
    fill(url, 2)
    tags = TagStore(url)
    tags.create("b", at=3)
    tags.create("a", hold=True)
    assert [(t.name, t.tag.offset, t.tag.hold) for t in tags.list()] == [("a", 11, True), ("b", 3, False)]
    with pytest.raises(TagError, match="already exists"):
        tags.create("a")
    with pytest.raises(TagError, match=r"give --at within \[1, 11\]"):
        tags.create("c", at=12)
    with pytest.raises(InvalidOption, match="invalid tag name"):
        tags.create("../x")
    with pytest.raises(TagError, match="no tag 'zz' in .*its tags: a, b"):
        tags.get("zz")
    tags.delete("b")
    with pytest.raises(TagError, match="no tag 'b'"):
        tags.delete("b")
    # a tag of an earlier log under the same name is refused
    store = open_store(url)
    for meta in list(store.list()):
        if not meta.key.startswith("tag/"):
            store.delete(meta.key)
    fill(url, 3)
    with pytest.raises(TagError, match="earlier log"):
        tags.range("a")


def test_03_a_held_tag_made_while_a_collection_runs_keeps_its_records(url):
    fill(url, 10)  # [1, 51)
    CursorStore(url).create("gc", 41)
    made = {}

    def race(step: str) -> None:
        if step == "compute" and not made:
            made["tag"] = TagStore(url).create("race", at=45, hold=True).tag

    hooked(GarbageCollector(url, GCOptions(grace_s=0, force=True)), after_step=race).run()
    tag = made["tag"]
    assert LogReader(url).manifest().oldest_offset <= tag.start
    assert [o for o, _ in tagged(url, "race")] == list(range(tag.start, 45))


def test_04_cli(url, capsys):
    from wal3_spark.cli.main import main

    fill(url, 2)
    assert main(["tag", url, "q3-close", "--at", "7", "--hold", "--json"]) == 0
    made = json.loads(capsys.readouterr().out)
    assert (made["name"], made["offset"], made["start"], made["hold"]) == ("q3-close", 7, 1, True)
    assert main(["tag", url, "--list", "--json"]) == 0
    assert [t["name"] for t in json.loads(capsys.readouterr().out)["tags"]] == ["q3-close"]
    assert main(["tag", url, "q3-close", "--delete", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["deleted"] is True
    assert main(["tag", url, "nope", "--delete"]) == 1
    assert "no tag 'nope'" in capsys.readouterr().err
    main(["tag", url, "kept"])
    capsys.readouterr()
    # a combination that would do something else than asked is a usage error, and does nothing
    for argv, match in ((["--delete"], "--delete without a tag NAME"), (["--at", "3"], "--at without a tag NAME"),
                        (["--hold"], "--hold without a tag NAME"), (["kept", "--list"], "--list takes no NAME"),
                        (["--list", "--delete"], "--list takes no NAME and no --delete"),
                        (["kept", "--delete", "--hold"], "--delete takes neither --at nor --hold")):
        assert main(["tag", url, *argv]) == 2, argv
        captured = capsys.readouterr()
        assert match in captured.err and captured.out == "", (argv, captured)
    assert [t.name for t in TagStore(url).list()] == ["kept"]


def test_05_a_tag_read_is_never_partial_and_its_errors_give_the_right_fix(url):
    """failOnDataLoss=false would let a tag read skip a fragment garbage collection deletes
    between planning and reading, returning fewer rows: the combination is refused. The errors
    name the fixes that exist (`--delete`, `--hold`), not the ones of a cursor's reader."""
    from wal3_spark.spark.options import READ, parse

    with pytest.raises(InvalidOption, match="failOnDataLoss.*fewer rows"):
        parse({"path": url, "tag": "daily", "failOnDataLoss": "false"}, READ)
    assert parse({"path": url, "tag": "daily", "failOnDataLoss": "true"}, READ).tag == "daily"
    fill(url, 6)
    TagStore(url).create("daily")
    with pytest.raises(TagError, match=r"`wal3 tag \S+ daily --delete`"):
        TagStore(url).create("daily")
    collect(url)
    with pytest.raises(DataLost, match=r"Tag 'daily' names \[1, 31\).*--hold") as info:
        TagStore(url).range("daily")
    assert "failOnDataLoss" not in str(info.value)


#: characters no name may hold: line ends (a trailing newline passed `re.match` with `$`), other
#: control characters, and Unicode's line and paragraph separators
CONTROL = ["\n", "\r", "\r\n", "\t", "\x00", "\x1b", "\x7f", "\x85", "\u2028"]


@pytest.mark.parametrize("char", CONTROL)
def test_06_a_tag_or_pin_name_with_a_newline_or_control_character_is_refused(url, char, capsys):
    """`wal3 tag src $'tag\\n'` created `tag/tag\\n.json`: a name is refused unless all of it
    follows the rule, wherever the character is."""
    from wal3_spark.cli.main import main
    from wal3_spark.errors import CorruptLog
    from wal3_spark.format.lineage import pin_key
    from wal3_spark.format.tag import tag_key
    from wal3_spark.spark.options import READ, parse

    fill(url, 1)
    for name in (f"tag{char}", f"{char}tag", f"t{char}ag"):
        with pytest.raises(InvalidOption, match="invalid tag name"):
            tag_key(name)
        with pytest.raises(InvalidOption, match="invalid tag name"):
            TagStore(url).create(name)
        with pytest.raises(InvalidOption, match="invalid tag name"):
            parse({"path": url, "tag": name}, READ)
        with pytest.raises(CorruptLog, match="not a pin name"):
            pin_key("0" * 32 + char if name.startswith("tag") else char + "0" * 32)
    assert main(["tag", url, f"tag{char}"]) == 2
    assert "invalid tag name" in capsys.readouterr().err
    assert [meta.key for meta in open_store(url).list("tag/")] == []


def test_07_a_tag_naming_no_records_reads_zero_rows_after_gc(url, spark):
    """A tag made at the oldest offset names an empty range, which garbage collection cannot take
    anything from: it failed with DataLost once the oldest offset moved past it."""
    fill(url, 2)  # [1, 11)
    TagStore(url).create("empty", at=1)
    fill(url, 2, start=10)
    collect(url)
    assert LogReader(url).manifest().oldest_offset > 1
    assert TagStore(url).range("empty") == (1, 1)
    assert tagged(url, "empty") == []
    assert spark.read.format("wal3").option("tag", "empty").load(url).count() == 0
    from wal3_spark.spark import Wal3Log

    assert Wal3Log.forPath(spark, url).toDF(tag="empty").count() == 0
