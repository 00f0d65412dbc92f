"""UUIDv7 (RFC 9562) whose 12-bit `rand_a` field carries the microseconds within the millisecond.

Fragment paths embed a UUIDv7 made from the fragment's write time, so a reader knows when a
fragment was written from its path alone, without a GET: time seeks and timestamp filter
pushdown can skip fragments by listing the manifest. Putting the sub-millisecond microseconds in
`rand_a` (RFC 9562 section 6.2, method 3, with a 1000-step instead of a 4096-step fraction)
makes the exact `timestamp_us` recoverable; the 62 random bits of `rand_b` keep paths unique.

Design: docs/design/13-fragment-timestamps.md.
"""

from __future__ import annotations

import secrets
import uuid

_MAX_UNIX_MS = (1 << 48) - 1


def new_uuid7(timestamp_us: int) -> uuid.UUID:
    """A fresh UUIDv7 for `timestamp_us` (microseconds since the Unix epoch)."""
    unix_ms, micros = divmod(timestamp_us, 1000)
    if timestamp_us < 0 or unix_ms > _MAX_UNIX_MS:
        raise ValueError(f"timestamp_us {timestamp_us} is outside the range of a UUIDv7")
    rand_b = secrets.randbits(62)
    value = (unix_ms << 80) | (0x7 << 76) | (micros << 64) | (0b10 << 62) | rand_b
    return uuid.UUID(int=value)


def uuid7_timestamp_us(u: uuid.UUID | str, *, exact: bool = False) -> int | None:
    """The write time in µs encoded in `u`, or None when `u` is not a UUIDv7.

    A UUIDv7 from another generator (whose `rand_a` is random, >= 1000) yields its millisecond
    timestamp: precise to the millisecond, never later than the true time; with `exact`, None
    (it cannot be one of ours: readers that need the microsecond read the fragment instead).
    """
    if isinstance(u, str):
        try:
            u = uuid.UUID(u)
        except ValueError:
            return None
    if u.version != 7 or u.variant != uuid.RFC_4122:
        return None
    unix_ms = u.int >> 80
    rand_a = (u.int >> 64) & 0xFFF
    if rand_a >= 1000:
        return None if exact else unix_ms * 1000
    return unix_ms * 1000 + rand_a
