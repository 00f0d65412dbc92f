"""The run directory: everything a stress run's processes share besides the log itself.

    config.json            the StressConfig
    journals/<writer>.jsonl each writer incarnation's journal (`wal3_spark.stress.journal`)
    readers/<reader>.json  each reader slot's verified state (its ledger), survives kills
    stats/<process>.json   each process incarnation's counters (faults injected, GC runs, ...)
    logs/<process>.log     each process incarnation's stderr
    final.json             written by the supervisor when writers have stopped: the final tail
    summary.json           the last summary

It is local even when the log is on S3: it is the test's memory, not the log's.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any


def write_json(path: Path, value: Any) -> None:
    """Replace `path` atomically: a process killed mid-write leaves the previous version. The
    temporary name is the thread's own, so threads writing one file at once never share it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(value, separators=(",", ":")))
    os.replace(tmp, path)


def read_json(path: Path) -> Any:
    """The JSON at `path`, or None if it does not exist yet."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


class RunDir:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def create(self) -> RunDir:
        for sub in ("journals", "readers", "stats", "logs"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        return self

    @property
    def config(self) -> Path:
        return self.root / "config.json"

    @property
    def final(self) -> Path:
        return self.root / "final.json"

    @property
    def summary(self) -> Path:
        return self.root / "summary.json"

    def journal(self, writer: str) -> Path:
        return self.root / "journals" / f"{writer}.jsonl"

    def journals(self) -> list[tuple[str, Path]]:
        """(writer, path) of every journal, in name order."""
        return sorted((p.stem, p) for p in (self.root / "journals").glob("*.jsonl"))

    def reader_state(self, reader: str) -> Path:
        return self.root / "readers" / f"{reader}.json"

    def reader_states(self) -> dict[str, Any]:
        return {p.stem: read_json(p) for p in sorted((self.root / "readers").glob("*.json"))}

    def stats(self, process: str) -> Path:
        return self.root / "stats" / f"{process}.json"

    def all_stats(self) -> list[Any]:
        return [read_json(p) for p in sorted((self.root / "stats").glob("*.json"))]

    def log(self, process: str) -> Path:
        return self.root / "logs" / f"{process}.log"
