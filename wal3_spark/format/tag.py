"""A tag as a pure value (docs/format.md section 10): `tag/<name>.json`, a named range of a log's
records that can be read again as long as the tag exists, and that garbage collection keeps
while the tag holds them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from wal3_spark.errors import CorruptLog, InvalidOption
from wal3_spark.format.incarnation import parse_incarnation
from wal3_spark.format.layout import dumps, loads, parse_offset, position, require_field

TAG_PREFIX = "tag/"

_TAG_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,199}")


def tag_key(name: str) -> str:
    if not isinstance(name, str) or not _TAG_NAME.fullmatch(name) or name.endswith(".json"):
        raise InvalidOption(
            f"invalid tag name {name!r}: use 1-200 letters, digits, '.', '_' and '-', not starting "
            "with '.' or '-' (for example q3-close)"
        )
    return f"{TAG_PREFIX}{name}.json"


@dataclass(frozen=True)
class Tag:
    """`tag/<name>.json`: the log's records [start, offset), named. `hold`: garbage collection
    keeps them (from `start`) while the tag exists; else a read of the tag after GC collected
    some of them fails with DataLost rather than return fewer rows."""

    offset: int
    start: int
    hold: bool
    created_us: int
    writer: str
    incarnation: str | None = None

    def to_bytes(self) -> bytes:
        doc: dict[str, Any] = {"offset": position(self.offset), "start": position(self.start),
                               "hold": self.hold, "created_us": self.created_us,
                               "writer": self.writer}
        if self.incarnation is not None:
            doc["incarnation"] = self.incarnation
        return dumps(doc)

    @classmethod
    def from_bytes(cls, data: bytes, obj: str) -> Tag:
        doc = loads(data, obj)
        hold = doc.get("hold", False) if isinstance(doc, dict) else None
        if not isinstance(hold, bool):
            raise CorruptLog("field type", obj, f"'hold' is not true or false: {hold!r}")
        tag = cls(
            offset=parse_offset(doc.get("offset"), obj, "offset"),
            start=parse_offset(doc.get("start"), obj, "start"),
            hold=hold,
            created_us=require_field(doc, "created_us", obj, int),
            writer=require_field(doc, "writer", obj, str),
            incarnation=parse_incarnation(doc.get("incarnation"), obj),
        )
        if tag.start > tag.offset:
            raise CorruptLog("a tag's start is at or below its offset", obj,
                             f"start {tag.start} is beyond offset {tag.offset}")
        return tag
