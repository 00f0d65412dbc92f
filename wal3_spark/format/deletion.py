"""A log's deletion record and which objects under a log's root are the log's own (docs/format.md
sections 1 and 10), as pure values.

Deleting a log is several requests, and a process can die between any two. What may be deleted
must be proved to belong to the log, and the proof must survive the manifest's removal: so the
deleter writes `manifest/DELETION` *before* it removes anything, and removes it last. A location
with neither a manifest nor a deletion record holds no log of its own (a log set's prefix, a
mistyped URL), and nothing there is deleted. Even then only the objects the layout names
(`is_log_object`) are removed: another log nested below the root (`root/orders/...`) shares no
key with them, so deleting a log never removes another log's objects.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from wal3_spark.format.incarnation import parse_incarnation
from wal3_spark.format.layout import dumps, loads, parse_fragment_path, require_field
from wal3_spark.format.lineage import pin_key

DELETION_KEY = "manifest/DELETION"

#: every object a log writes under its root, by its full key (docs/format.md section 1 and 10):
#: the manifest and its deletion record, snapshots, the garbage file, cursors, pins, tags and
#: compaction records;
#: fragments by `parse_fragment_path`. A full match, so `orders/manifest/MANIFEST` (a log nested
#: below this one) or `cursor/x/y.json` is never taken for one of this log's objects.
_LOG_OBJECT = re.compile(
    r"manifest/MANIFEST|manifest/DELETION|gc/GARBAGE"
    r"|snapshot/SNAPSHOT\.[0-9a-f]{64}"
    r"|cursor/[A-Za-z0-9_]+\.json"
    r"|pin/[0-9a-f]{32}\.json"
    r"|tag/[A-Za-z0-9_][A-Za-z0-9._-]{0,199}\.json"
    r"|compacted/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.json"
)


def is_log_object(key: str) -> bool:
    """Whether `key` (relative to a log's root) is one of the objects a log keeps there."""
    if _LOG_OBJECT.fullmatch(key):
        return True
    try:
        parse_fragment_path(key)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class Deletion:
    """`manifest/DELETION`: the log at `log` is being deleted. Written before anything is
    removed; names what a re-run must still release (the pin the log held in its parent)."""

    #: the URL of the log being deleted
    log: str
    #: its incarnation (None: the log had none)
    incarnation: str | None
    #: the parent's URL and the pin this log (a branch) held in it; None: not a branch
    parent_log: str | None
    parent_pin: str | None
    started_us: int
    writer: str

    def to_bytes(self) -> bytes:
        doc: dict[str, object] = {"log": self.log}
        if self.incarnation is not None:
            doc["incarnation"] = self.incarnation
        if self.parent_log is not None and self.parent_pin is not None:
            doc["parent"] = {"log": self.parent_log, "pin": self.parent_pin}
        doc["started_us"] = self.started_us
        doc["writer"] = self.writer
        return dumps(doc)

    @classmethod
    def from_bytes(cls, data: bytes, obj: str) -> Deletion:
        doc = loads(data, obj)
        parent = doc.get("parent") if isinstance(doc, dict) else None
        parent_log = parent_pin = None
        if parent is not None:
            parent_log = require_field(parent, "log", obj, str)
            parent_pin = require_field(parent, "pin", obj, str)
            pin_key(parent_pin)  # a damaged name is CorruptLog, never a key to delete
        return cls(
            log=require_field(doc, "log", obj, str),
            incarnation=parse_incarnation(doc.get("incarnation"), obj),
            parent_log=parent_log,
            parent_pin=parent_pin,
            started_us=require_field(doc, "started_us", obj, int),
            writer=require_field(doc, "writer", obj, str),
        )
