"""A log's incarnation: an identity that survives its name (docs/design/17-incarnations.md).

A log deleted and created again under the same URL starts at offset 1 again, so an offset a
consumer kept (a stream's checkpoint, a cursor) would silently skip the new log's first records,
or point beyond its tail. The first manifest of a log records a fresh incarnation (a UUIDv7, so
it also says when the log was created); every later manifest keeps it. Consumers write it next
to each offset they keep and compare it with the manifest's before they use the offset.

A manifest without one was written before incarnations existed (or by a writer that does not
know them, such as Chroma's): its identity is unknown, and it never gets one later (a log's
incarnation is fixed when it is created). What a recorded incarnation means against such a log
is `same_log`'s rule.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from wal3_spark.clock import micros
from wal3_spark.errors import CorruptLog
from wal3_spark.format.uuid7 import new_uuid7


class _Marker:
    """A named stand-in for an incarnation that is not one. Pickled by name, so it is still
    itself after travelling between a Spark driver and its executors (`is` compares it)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name

    def __reduce__(self) -> str:
        return self.name


#: what a consumer records for an offset it read before incarnations existed (its checkpoint or
#: cursor has no incarnation at all): trusted as it always was, unless the offset is beyond the tail
UNRECORDED = _Marker("UNRECORDED")

#: what a writer records for fragments written when no one incarnation of the log was known: the
#: log did not exist yet (a routing sink's new log, which the commit creates), or the tasks of one
#: job saw different ones. The commit then takes whichever incarnation it finds, or none, once it
#: has checked that every fragment is still there (a log deleted since took them with it;
#: docs/design/17-incarnations.md)
UNPINNED = _Marker("UNPINNED")


def new_incarnation() -> str:
    """A fresh incarnation for a log being created now."""
    return str(new_uuid7(micros()))


def parse_incarnation(value: Any, obj: str, field: str = "incarnation") -> str | None:
    """An incarnation read from storage (None: absent); CorruptLog for anything but a UUID."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            if str(uuid.UUID(value)) == value:
                return value
        except ValueError:
            pass
    raise CorruptLog("an incarnation is a UUID", obj, f"{field!r} is not a UUID: {value!r}")


def same_log(recorded: object, current: object, offset: int, tail: int) -> bool:
    """Whether an offset recorded with incarnation `recorded` still belongs to a log whose
    manifest now has incarnation `current` (or whose later offset recorded it) and next offset
    `tail`.

    - recorded `UNRECORDED` (a checkpoint or cursor older than incarnations): the same log,
      unless `offset` is beyond the tail, which a log never shrinks below (it was re-created);
    - otherwise the same log exactly when the incarnations are equal, None included: a log
      created without an incarnation never gets one, and a log that has one keeps it, so a
      recorded one that differs (or is missing on either side only) means another log.
    """
    if recorded is UNRECORDED:
        return offset <= tail
    return recorded == current


def pinned(seen: Iterable[object]) -> object:
    """The incarnation fragments written by several tasks were written for: the one every task
    saw, else `UNPINNED` (some saw no log, or they saw different ones)."""
    values = list(seen)
    first = values[0] if values else UNPINNED
    if any(v is UNPINNED or v is UNRECORDED or v != first for v in values):
        return UNPINNED
    return first


def describe(incarnation: object) -> str:
    """An incarnation for messages."""
    if incarnation is UNRECORDED:
        return "not recorded"
    if incarnation is UNPINNED:
        return "none yet (the log did not exist)"
    return "none (a log created before incarnations)" if incarnation is None else str(incarnation)
