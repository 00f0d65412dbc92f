"""A log's retention policy as a pure value, and what it lets garbage collection remove.

docs/format.md section 4 (`retention`) and section 8 ("Retention"). The policy is recorded in the
manifest, so that every garbage collection of the log, wherever it runs (`wal3 gc`, the
spark-submit job, a log set's collection), applies the same one: it is the statement that
nobody needs the records past it, whoever has not read them (Kafka's retention.ms and
retention.bytes). `retention_cutoff` decides, without I/O, the first offset the policy keeps:
whole fragments only, oldest first.

Design: docs/design/33-retention.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from wal3_spark.errors import CorruptLog, InvalidOption
from wal3_spark.format.layout import MANIFEST_KEY, FragmentRef, check_int, shown
from wal3_spark.format.units import DURATION_FORMS, MAX_DURATION_MS, duration_text, parse_duration_ms, size_text
from wal3_spark.format.uuid7 import uuid7_timestamp_us

#: the longest age a policy takes: 100 years, as every other duration (format/units.py)
MAX_AGE_MS = MAX_DURATION_MS


def parse_age_ms(text: str) -> int:
    """`7d`, `12h`, `30m`, `90s`, `500ms`, `2w` (a unit is required: a bare number could be
    seconds or milliseconds) -> milliseconds > 0; InvalidOption names the forms taken."""
    try:
        ms = parse_duration_ms(text, bare_unit=None)
    except ValueError:
        ms = 0
    if ms < 1:
        raise InvalidOption(
            f"{shown(text)} is not a retention age: give a number with a unit, greater than 0 and "
            f"at most 100 years, e.g. {DURATION_FORMS}")
    return ms


@dataclass(frozen=True)
class RetentionPolicy:
    """How long and how much of a log garbage collection keeps, whoever has not read it.

    Either bound or both; a fragment goes when it is past either (`retention_cutoff`)."""

    #: a fragment goes once its newest record is older than this (milliseconds)
    max_age_ms: int | None = None
    #: the oldest fragments go while the log holds more bytes than this
    max_bytes: int | None = None

    def check(self, obj: str = MANIFEST_KEY) -> None:
        """A policy read from storage: at least one bound, each an integer > 0."""
        if self.max_age_ms is None and self.max_bytes is None:
            raise CorruptLog("a retention policy has a bound", obj,
                             "its 'retention' has neither max_age_ms nor max_bytes")
        for name in ("max_age_ms", "max_bytes"):
            value = getattr(self, name)
            if value is not None and check_int(value, obj, f"retention {name}") <= 0:
                raise CorruptLog("retention bounds are > 0", obj, f"retention {name} is {value}")

    def to_dict(self) -> dict[str, int]:
        doc = {}
        if self.max_age_ms is not None:
            doc["max_age_ms"] = self.max_age_ms
        if self.max_bytes is not None:
            doc["max_bytes"] = self.max_bytes
        return doc

    @classmethod
    def from_dict(cls, doc: Any, obj: str = MANIFEST_KEY) -> RetentionPolicy:
        if not isinstance(doc, dict) or set(doc) - {"max_age_ms", "max_bytes"}:
            raise CorruptLog("field type", obj, f"'retention' is not {{max_age_ms, max_bytes}}: {shown(doc)}")
        policy = cls(doc.get("max_age_ms"), doc.get("max_bytes"))
        policy.check(obj)
        return policy

    def describe(self) -> str:
        """`max-age 7d, max-bytes 1GiB`: the policy as `wal3 retention` sets it."""
        parts = []
        if self.max_age_ms is not None:
            parts.append(f"max-age {duration_text(self.max_age_ms)}")
        if self.max_bytes is not None:
            parts.append(f"max-bytes {size_text(self.max_bytes)}")
        return ", ".join(parts)


def newest_record_us(ref: FragmentRef) -> int | None:
    """When a fragment's newest record was written (µs): its last segment's time for a
    compacted fragment, its UUIDv7 path's time otherwise (to the millisecond at least: enough
    for an age); None for a fragment whose path holds no time (a Chroma S3 log's)."""
    if ref.segments is not None:
        return ref.segments[-1].timestamp_us
    return uuid7_timestamp_us(str(ref.seq_no)) if isinstance(ref.seq_no, str) else None


def retention_cutoff(
    fragments: Iterable[FragmentRef],
    total_bytes: int,
    tail: int,
    policy: RetentionPolicy,
    now_us: int,
    written_us: Callable[[FragmentRef], int | None] = newest_record_us,
) -> int | None:
    """The first offset `policy` keeps of a log whose fragments are `fragments` (oldest first,
    read only as far as needed) holding `total_bytes` below `tail` (its next offset), or None
    when it removes nothing.

    Whole fragments only, a prefix of the log: a fragment goes when all of it is older than
    max-age (by `written_us`, its newest record's time; one of unknown time stays, and so does
    everything after it), or while the bytes the log holds exceed max-bytes. The newest
    fragment is never removed for size (the log keeps its tail records however large one
    fragment is); for age it is, once all of it is past the age.
    """
    age_before_us = None if policy.max_age_ms is None else now_us - policy.max_age_ms * 1000
    left = total_bytes
    cutoff = None
    for ref in fragments:
        too_big = policy.max_bytes is not None and left > policy.max_bytes and ref.limit < tail
        written = written_us(ref) if age_before_us is not None else None
        too_old = written is not None and age_before_us is not None and written < age_before_us
        if not (too_big or too_old):
            break
        cutoff = ref.limit
        left -= ref.num_bytes
    return cutoff


def described(policy: RetentionPolicy | None) -> str | None:
    """`policy.describe()`, None for no policy: what `DataLost` names."""
    return None if policy is None else policy.describe()


def policy_note(policy: RetentionPolicy | None) -> str:
    """The words a skipped-ahead read's warning adds: which policy may have removed the records."""
    return "" if policy is None else f" (the log's retention policy: {policy.describe()})"
