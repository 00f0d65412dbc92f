"""Sizes and durations as people type them: one grammar for every Spark option, command-line
flag and job argument that takes one.

A size is bytes or a number with a binary unit (`67108864`, `64k`, `64m`, `64MiB`, `1g`); a
duration is a number with a unit (`500ms`, `90s`, `30m`, `12h`, `7d`, `2w`, `1.5h`). What a bare
number means depends on where it is typed, so each caller says (`bare_unit`): milliseconds for
Spark options (Kafka's `maxTriggerDelay` takes plain milliseconds), seconds for the command
line's `--grace`-style flags, nothing for a retention age (`7` could be seconds or days: a unit
is required). Numbers are plain ASCII digits (Python's `int()` also takes `1_0` and other
scripts' digits, which no other reader of the value would), and every duration is bounded by
100 years, past any grace, timeout or retention, so no clock computation overflows.
"""

from __future__ import annotations

import math
import re
from typing import Literal

#: the longest duration anything takes: 100 years
MAX_DURATION_MS = int(100 * 365.25 * 86400 * 1000)

_SIZE = re.compile(r"\s*([0-9]{1,20})\s*([kmgt]?)(i?b)?\s*", re.I)
_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}

_DURATION = re.compile(r"\s*([0-9]{1,20}(?:\.[0-9]{1,20})?)\s*(ms|s|min|m|h|d|w)?\s*", re.I)
_DURATION_MS = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000,
                "w": 7 * 86_400_000}
#: the forms a duration error names
DURATION_FORMS = "500ms, 90s, 30m, 12h, 7d or 2w"


def parse_size(text: str) -> int:
    """`67108864`, `64k`, `64m`, `64MB`, `64MiB`, `1g` -> bytes (binary units); ValueError
    names the forms taken. Callers bound the result (a fragment needs at least 1 KiB...)."""
    m = _SIZE.fullmatch(text)
    if not m:
        raise ValueError("expected a size such as 67108864, 64k, 64m or 1g")
    return int(m.group(1)) * _SIZE_UNITS[m.group(2).lower()]


def size_text(size: int) -> str:
    """A size in the largest binary unit that divides it (`64MiB`), else bytes."""
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size % scale == 0:
            return f"{size // scale}{unit}"
    return f"{size} bytes"


def parse_duration_ms(text: str, *, bare_unit: Literal["ms", "s"] | None = "ms") -> int:
    """A duration -> whole milliseconds within [0, 100 years] (fractions of a millisecond are
    dropped); a number without a unit is in `bare_unit`, or refused when it is None. ValueError
    names the forms taken."""
    m = _DURATION.fullmatch(text)
    unit = (m.group(2) or bare_unit) if m else None
    value = float(m.group(1)) * _DURATION_MS[unit.lower()] if m and unit else math.nan
    if not (math.isfinite(value) and 0 <= value <= MAX_DURATION_MS):
        bare = {"ms": " or plain milliseconds", "s": " or plain seconds", None: ""}[bare_unit]
        raise ValueError(f"expected a duration of at most 100 years such as {DURATION_FORMS}{bare}")
    return int(value)


def duration_text(ms: int) -> str:
    """A duration as `parse_duration_ms` reads it, in the largest unit that divides it."""
    for unit in ("w", "d", "h", "m", "s"):
        if ms and ms % _DURATION_MS[unit] == 0:
            return f"{ms // _DURATION_MS[unit]}{unit}"
    return f"{ms}ms"
