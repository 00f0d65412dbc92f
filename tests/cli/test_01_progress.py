"""The long `wal3` commands (verify, gc, copy, cat) draw a progress bar (tqdm) on stderr when it
is a terminal, and nothing at all when it is not: run under a pseudo-terminal, then with pipes."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pyarrow as pa
import pytest

from tests.cli.test_00_cli import ROOT, wal3
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.writer import LogWriter
from wal3_spark.storage import open_store

FRAGMENTS = 6


def on_terminal(*args: str, stdout_path: Path | None = None) -> tuple[int, str]:
    """Run `wal3 ARGS` with stderr (and stdout, unless `stdout_path`) on a pseudo-terminal of
    120 columns; its exit status and everything the terminal received."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    stdout = open(stdout_path, "wb") if stdout_path else None
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "wal3_spark.cli.main", *args], cwd=ROOT, env=env,
            stdin=subprocess.DEVNULL, stdout=stdout or follower, stderr=follower,
        )
        os.close(follower)
        received = bytearray()
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the process closed its side of the terminal
                break
            if not chunk:
                break
            received += chunk
        return proc.wait(timeout=120), received.decode(errors="replace")
    finally:
        os.close(leader)
        if stdout:
            stdout.close()


@pytest.fixture
def url(tmp_path) -> str:
    url = str(tmp_path / "log")
    with LogWriter(open_store(url)) as writer:
        for i in range(FRAGMENTS):
            writer.append(pa.table({"id": list(range(i * 10, i * 10 + 10))}))
    return url


def test_00_verify_shows_a_bar_on_a_terminal_and_nothing_through_a_pipe(url):
    code, screen = on_terminal("verify", url)
    assert code == 0 and "verifying" in screen and f"0/{FRAGMENTS} " in screen, screen
    assert "OK" in screen
    piped = wal3("verify", url)
    assert piped.returncode == 0 and piped.stderr == "" and ": OK:" in piped.stdout and "\r" not in piped.stdout


def test_01_copy_and_gc_show_bars_on_a_terminal_only(url, tmp_path):
    code, screen = on_terminal("copy", url, str(tmp_path / "copy"))
    assert code == 0 and "copying" in screen and f"0/{FRAGMENTS} " in screen, screen
    piped = wal3("copy", url, str(tmp_path / "copy2"))
    assert piped.returncode == 0 and piped.stderr == ""

    CursorStore(open_store(url)).advance("c", 41)
    code, screen = on_terminal("gc", url, "--grace", "0", "--force")
    assert code == 0 and "deleting" in screen and "0/4 " in screen, screen
    CursorStore(open_store(str(tmp_path / "copy2"))).advance("c", 41)
    piped = wal3("gc", str(tmp_path / "copy2"), "--grace", "0", "--force")
    assert piped.returncode == 0 and piped.stderr == "" and "deleted 4 objects" in piped.stdout


def test_02_cat_shows_a_bar_only_when_records_go_elsewhere_than_the_terminal(url, tmp_path):
    out = tmp_path / "records.jsonl"
    code, screen = on_terminal("cat", url, "--from", "5", stdout_path=out)
    assert code == 0 and "reading" in screen and "0/56 " in screen, screen
    assert len(out.read_text().splitlines()) == 56 and "reading" not in out.read_text()

    code, screen = on_terminal("cat", url, "--to", "4")
    assert code == 0 and "reading" not in screen and screen.count('"_offset"') == 3, screen

    piped = wal3("cat", url)
    assert piped.returncode == 0 and piped.stderr == "" and len(piped.stdout.splitlines()) == 60
