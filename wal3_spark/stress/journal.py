"""A writer incarnation's journal: what it tried to append and what the API answered.

One JSON line per event, in a file of its own (`journals/<writer>.jsonl`):

- `Intent`: written *before* the append is handed to `LogWriter`, so any record a reader finds
  in the log has its intent on disk by the time the record is readable;
- `Outcome`: what `append` returned or raised (`ack` with offsets [start, limit), `unknown`, or
  `failed`), written as soon as the writer learns it;
- `End`: the incarnation is over: `exit` (stopped cleanly) or `killed`, which the supervisor
  appends after reaping a process it killed (intents without an outcome then stay unknown),
  with the log's tail as it read it after the process died.

Each line goes out in one `write(2)` on an `O_APPEND` descriptor, so a kill -9 leaves whole
lines; a reader consumes complete lines only and remembers how far it got.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path

ACK, UNKNOWN, FAILED = "ack", "unknown", "failed"
EXIT, KILLED = "exit", "killed"


@dataclass(frozen=True)
class Intent:
    append: int
    #: (stream, seq) of each record, in append order
    records: tuple[tuple[int, int], ...]
    #: "append" (LogWriter.append) or "submit" (LogWriter.submit)
    api: str


@dataclass(frozen=True)
class Outcome:
    append: int
    kind: str
    start: int | None = None
    limit: int | None = None
    #: the exception's type, for unknown and failed outcomes
    error: str | None = None


@dataclass(frozen=True)
class End:
    how: str
    #: for `killed`: the log's next offset, read after the process was reaped. A write the dead
    #: process left in flight can only land on the manifest of that moment (every manifest
    #: write is conditional), so once the log holds offset `tail` it never will.
    tail: int | None = None


Entry = Intent | Outcome | End


def to_json(entry: Entry) -> dict:
    if isinstance(entry, Intent):
        return {"intent": entry.append, "records": [list(r) for r in entry.records], "api": entry.api}
    if isinstance(entry, Outcome):
        line = {"outcome": entry.append, "kind": entry.kind}
        if entry.kind == ACK:
            line.update(start=entry.start, limit=entry.limit)
        if entry.error:
            line["error"] = entry.error
        return line
    return {"end": entry.how} if entry.tail is None else {"end": entry.how, "tail": entry.tail}


def from_json(line: dict) -> Entry:
    if "intent" in line:
        return Intent(int(line["intent"]), tuple((int(s), int(q)) for s, q in line["records"]), line["api"])
    if "outcome" in line:
        return Outcome(int(line["outcome"]), line["kind"], line.get("start"), line.get("limit"),
                       line.get("error"))
    return End(line["end"], line.get("tail"))


class Journal:
    """The writing side; thread-safe (outcomes of `submit` arrive on the writer's thread)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._lock = threading.Lock()

    def write(self, entry: Entry) -> None:
        line = (json.dumps(to_json(entry), separators=(",", ":")) + "\n").encode()
        with self._lock:
            os.write(self._fd, line)

    def close(self) -> None:
        with self._lock:
            os.close(self._fd)


def mark_killed(path: Path, tail: int | None) -> None:
    """Record that the incarnation writing `path` was killed (call after reaping it), and the
    tail read since (None if it could not be read)."""
    journal = Journal(path)
    try:
        journal.write(End(KILLED, tail))
    finally:
        journal.close()


def read_new(path: Path, offset: int) -> tuple[list[Entry], int]:
    """The complete entries after byte `offset`, and the offset after the last of them."""
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read()
    complete = data[: data.rfind(b"\n") + 1]
    entries = [from_json(json.loads(line)) for line in complete.splitlines() if line.strip()]
    return entries, offset + len(complete)
