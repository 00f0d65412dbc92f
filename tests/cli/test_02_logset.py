"""`wal3 ls PREFIX` and `wal3 info PREFIX`: each log's records, bytes, tail, seal and cursor lag,
and a summary of the set and its dirty log; local filesystem, SeaweedFS, fake-gcs-server and Azurite."""

from __future__ import annotations

import json

import pytest

import wal3_spark.cli.main as cli
from wal3_spark.log.committer import Committer
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.writer import LogWriter
from wal3_spark.logset.dirty import DirtyLog
from wal3_spark.logset.logs import LogSet
from wal3_spark.storage import open_store


@pytest.fixture
def herd(store_url: str, store_options: dict[str, str], store_env: dict[str, str]) -> str:
    """Three logs under a prefix, written through its dirty log: acme (a cursor 2 records
    behind), globex, initech (sealed)."""
    prefix = open_store(store_url, store_options)
    logs = LogSet(prefix)
    with DirtyLog(prefix) as dirty:
        for name in ("acme", "globex", "initech"):
            with LogWriter(logs.log_store(name), dirty_log=dirty) as writer:
                writer.append([b"a", b"b"])
                writer.append([b"c"])
    CursorStore(logs.log_store("acme")).advance("billing", 2)
    Committer(logs.log_store("initech")).seal()
    return store_url


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_00_ls_shows_each_log(herd: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "ls", herd)
    assert code == 0
    lines = [line.split() for line in out.splitlines()]
    assert lines[0] == ["LOG", "RECORDS", "BYTES", "OLDEST", "TAIL", "SEALED", "CURSORS", "LAG"]
    assert [line[0] for line in lines[1:]] == ["acme", "globex", "initech"]  # never _dirty
    acme, globex, initech = lines[1:]
    assert acme[1:3] != ["0", "0"] and acme[1] == "3" and acme[3:8] == ["1", "4", "no", "1", "2"]
    assert acme[8] == "(billing)"
    assert globex[5:] == ["no", "0", "-"] and initech[5] == "yes"

    code, out, _ = run(capsys, "ls", herd, "--json", "--pattern", "[ai]*")
    docs = json.loads(out)
    assert [d["name"] for d in docs] == ["acme", "initech"]
    assert docs[0]["records"] == 3 and docs[0]["next_offset"] == 4 and docs[0]["bytes"] > 0
    assert docs[0]["cursors"][0]["name"] == "billing" and docs[0]["cursors"][0]["records_behind"] == 2
    assert docs[1]["sealed"] is True

    code, out, _ = run(capsys, "ls", herd, "--logs", "globex,nope")
    assert code == 1  # a named log that does not exist is an error row, not left out
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["globex", "nope"]
    assert "error: no wal3 log at" in out.splitlines()[2]


def test_01_info_on_a_prefix_summarises_the_set(herd: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "info", herd, "--json")
    assert code == 0
    info = json.loads(out)
    assert (info["logs"], info["records"], info["sealed"]) == (3, 9, ["initech"])
    assert info["most_behind"]["log"] == "acme" and info["most_behind"]["records_behind"] == 2
    assert info["dirty_log"]["next_offset"] == 7 and info["dirty_log"]["gc_cursor"] is None
    assert info["unreadable"] == {} and info["bytes"] > 0
    code, out, _ = run(capsys, "info", herd)
    assert code == 0 and "(3 logs)" in out and "most behind: acme/billing at 2" in out
    assert "dirty log      offsets [1, 7)" in out


def test_02_bad_input_and_unreadable_logs(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "ls", str(tmp_path), "--logs", "a b")
    assert code == 2 and "invalid log name 'a b'" in err
    code, _, err = run(capsys, "info", str(tmp_path / "empty"))
    assert code == 1 and "no wal3 log" in err
    with LogWriter(str(tmp_path / "good")) as writer:
        writer.append([b"x"])
    bad = open_store(str(tmp_path / "bad"))
    bad.put_if_absent("manifest/MANIFEST", b"{not json")
    code, out, _ = run(capsys, "ls", str(tmp_path))
    assert code == 1
    assert "bad" in out and "error: " in out and "good" in out
    code, out, _ = run(capsys, "info", str(tmp_path), "--json")
    assert code == 0 and list(json.loads(out)["unreadable"]) == ["bad"]


def test_03_ls_reports_named_logs_that_do_not_exist_and_explains_an_empty_listing(
    tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A mistyped name or prefix must not read as a set without that log: a named log that does
    not exist is an error (exit 1 with --json as without), and an empty listing says why on
    stderr, pointing at `wal3 info` when the URL is a log itself."""
    with LogWriter(str(tmp_path / "acme")) as writer:
        writer.append([b"x"])
    code, out, _ = run(capsys, "ls", str(tmp_path), "--logs", "acme,nope", "--json")
    assert code == 1
    assert [(s["name"], s["error"] is None) for s in json.loads(out)] == [("acme", True), ("nope", False)]
    code, out, err = run(capsys, "ls", str(tmp_path / "acme"))
    assert code == 0 and out.splitlines() == [out.splitlines()[0]]  # the header only
    assert "no wal3 log directly under" in err and f"wal3 info {(tmp_path / 'acme').as_uri()}" in err
    code, _, err = run(capsys, "ls", str(tmp_path / "nothing"))
    assert code == 0 and "no wal3 log directly under" in err and "is a log itself" not in err
