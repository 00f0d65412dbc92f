"""A branch's lineage as pure values (docs/format.md section 10): the `parent` field in its
manifest and the pin it leaves in its parent (a tag, the other named range of a log, is
`wal3_spark.format.tag`).

A branch reads its parent's records below the branch point through the parent's own fragments,
so the parent's garbage collection must keep them: the pin is what it honours, as it honours a
cursor. A pin names its branch, so that a pin whose branch was never published (its creator
died between the two writes) can be told from a live one and dropped (`wal3_spark.log.branches`).

Design: docs/design/26-branches-and-tags.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from wal3_spark.errors import CorruptLog
from wal3_spark.format.incarnation import parse_incarnation
from wal3_spark.format.layout import (
    check_int,
    dumps,
    loads,
    parse_offset,
    parse_setsum,
    position,
    require_field,
)
from wal3_spark.format.setsum import Setsum

PIN_PREFIX = "pin/"

_PIN_NAME = re.compile(r"[0-9a-f]{32}")


def pin_key(name: str) -> str:
    if not _PIN_NAME.fullmatch(name or ""):
        raise CorruptLog("a pin name is 32 lowercase hex digits", PIN_PREFIX + str(name),
                         f"{name!r} is not a pin name")
    return f"{PIN_PREFIX}{name}.json"


@dataclass(frozen=True)
class Parent:
    """A branch manifest's `parent`: it reads `log`'s records [start, offset) as its own first
    ones, and its own offsets continue from `offset`."""

    #: the parent log's URL
    log: str
    #: the branch point: the parent's records below it are the branch's
    offset: int
    #: the first parent offset the branch reads (the parent's oldest when it was branched)
    start: int
    #: the pin this branch holds in the parent (`pin/<pin>.json` under the parent)
    pin: str
    #: the parent's incarnation when branched (None: the parent has none)
    incarnation: str | None
    #: the sum of the setsums of the parent's fragments holding [start, offset), whole (a
    #: fragment the branch point cuts counts whole): what `verify` checks the parent range by
    setsum: Setsum

    def check(self, obj: str) -> None:
        check_int(self.offset, obj, "parent offset")
        check_int(self.start, obj, "parent start")
        if not isinstance(self.log, str) or not self.log:
            raise CorruptLog("field type", obj, f"the parent log {self.log!r} is not a URL")
        if self.start > self.offset:
            raise CorruptLog("a branch's parent start is at or below its branch point", obj,
                             f"parent start {self.start} is beyond the branch point {self.offset}")
        pin_key(self.pin)
        parse_incarnation(self.incarnation, obj, "parent incarnation")

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"log": self.log, "offset": position(self.offset),
                               "start": position(self.start), "pin": self.pin}
        if self.incarnation is not None:
            doc["incarnation"] = self.incarnation
        doc["setsum"] = self.setsum.hexdigest()
        return doc

    @classmethod
    def from_dict(cls, doc: Any, obj: str) -> Parent:
        if not isinstance(doc, dict):
            raise CorruptLog("field type", obj, f"'parent' is not an object: {doc!r}")
        parent = cls(
            log=require_field(doc, "log", obj, str),
            offset=parse_offset(doc.get("offset"), obj, "parent offset"),
            start=parse_offset(doc.get("start"), obj, "parent start"),
            pin=require_field(doc, "pin", obj, str),
            incarnation=parse_incarnation(doc.get("incarnation"), obj, "parent incarnation"),
            setsum=parse_setsum(doc.get("setsum"), obj, "parent setsum"),
        )
        parent.check(obj)
        return parent


@dataclass(frozen=True)
class Pin:
    """`pin/<name>.json` in a parent log: garbage collection keeps every offset at or after
    `start` while the pin exists, as it does for a cursor."""

    #: the branch's URL: the pin is live while that URL's manifest names this pin as its parent's
    branch: str
    start: int
    #: the branch point (for people and `wal3 info`; GC reads `start`)
    offset: int
    #: when the pin was written: a pin whose branch does not exist is dropped only once it is
    #: older than the orphan grace (its creator may still be publishing the branch)
    created_us: int
    writer: str

    def to_bytes(self) -> bytes:
        return dumps({"branch": self.branch, "start": position(self.start),
                      "offset": position(self.offset), "created_us": self.created_us,
                      "writer": self.writer})

    @classmethod
    def from_bytes(cls, data: bytes, obj: str) -> Pin:
        doc = loads(data, obj)
        return cls(
            branch=require_field(doc, "branch", obj, str),
            start=parse_offset(doc.get("start") if isinstance(doc, dict) else None, obj, "start"),
            offset=parse_offset(doc.get("offset"), obj, "offset"),
            created_us=require_field(doc, "created_us", obj, int),
            writer=require_field(doc, "writer", obj, str),
        )
