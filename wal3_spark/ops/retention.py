"""A log's retention policy: set in its manifest by compare-and-swap, applied by every garbage
collection of the log (`wal3_spark.ops.garbage_collector`).

`set_retention` (`wal3 retention`) records the policy as the seal is recorded: one manifest
compare-and-swap that rebases on whatever raced it (appends, compaction, GC), so nothing else in
the manifest changes. `policy_cutoff` is what garbage collection asks of it: the first offset
the policy keeps (`wal3_spark.format.retention.retention_cutoff`), from the fragments' write
times and the log's bytes.

Design: docs/design/33-retention.md.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass

import numpy as np

from wal3_spark.errors import InvalidOption
from wal3_spark.format.layout import FragmentRef
from wal3_spark.format.manifest import Manifest
from wal3_spark.format.retention import (
    MAX_AGE_MS,
    RetentionPolicy,
    newest_record_us,
    retention_cutoff,
)
from wal3_spark.format.units import size_text
from wal3_spark.log.committer import Committer
from wal3_spark.log.fragment_io import fetch_fragment
from wal3_spark.log.reader import iter_fragments
from wal3_spark.log.snapshots import SnapshotCache
from wal3_spark.storage import StoreLike, resolve_store
from wal3_spark.storage.base import ObjectStore

logger = logging.getLogger(__name__)

#: the largest max-bytes: a JVM long, what every reader of the manifest takes
MAX_BYTES = (1 << 63) - 1


@dataclass
class RetentionReport:
    """A log's retention policy after `set_retention` (or as it is, for `wal3 info`)."""

    url: str
    #: `{"max_age_ms", "max_bytes"}` (the bounds set), or None: no policy
    retention: dict[str, int] | None
    #: the policy as `wal3 retention` takes it (`max-age 7d, max-bytes 1GiB`), or "none"
    described: str
    #: the policy before this call
    previous: dict[str, int] | None
    changed: bool
    oldest_offset: int
    next_offset: int

    def to_dict(self) -> dict:
        return asdict(self)


def _positive(value: object, name: str, example: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value <= 0:
        raise InvalidOption(f"{name}={value!r}: give a number > 0, e.g. {example}")
    return float(value)


def make_policy(max_age_s: float | None = None, max_bytes: int | None = None) -> RetentionPolicy:
    """The policy of these bounds (seconds, bytes), each checked: InvalidOption names a bound
    that is zero, negative, not finite, not a number or out of range, and asks for one."""
    if max_age_s is None and max_bytes is None:
        raise InvalidOption("a retention policy needs max_age_s or max_bytes (or both); to remove "
                            "a log's policy, clear it (clear=True, `wal3 retention URL --clear`)")
    age_ms = None
    if max_age_s is not None:
        age_ms = max(1, round(_positive(max_age_s, "max_age_s", "604800 (7 days)") * 1000))
        if age_ms > MAX_AGE_MS:
            raise InvalidOption(f"max_age_s={max_age_s!r}: give at most 100 years ({MAX_AGE_MS // 1000} s)")
    if max_bytes is not None and (isinstance(max_bytes, bool) or not isinstance(max_bytes, int)):
        raise InvalidOption(f"max_bytes={max_bytes!r}: give an integer number of bytes > 0, e.g. 1 << 30")
    if max_bytes is not None:
        _positive(max_bytes, "max_bytes", "1 << 30 (1GiB)")
        if max_bytes > MAX_BYTES:
            raise InvalidOption(f"max_bytes={max_bytes!r}: give at most {MAX_BYTES} (a long, as every reader "
                                "of the manifest parses it)")
    return RetentionPolicy(age_ms, max_bytes)


def largest_fragment(store: ObjectStore, manifest: Manifest) -> FragmentRef | None:
    """The log's largest fragment (its own, through the snapshots)."""
    return max(iter_fragments(store, manifest, manifest.own_oldest_offset), key=lambda f: f.num_bytes,
               default=None)


def set_retention(
    log: StoreLike,
    *,
    max_age_s: float | None = None,
    max_bytes: int | None = None,
    clear: bool = False,
    options: Mapping[str, str] | None = None,
) -> RetentionReport:
    """Record the log's retention policy (or, with `clear`, remove it) in its manifest; every
    later garbage collection of the log applies it, even below its cursors.

    Bad input changes nothing: InvalidOption for a bound that is zero, negative or not a number,
    for `clear` with a bound or for neither, and for a `max_bytes` below the log's largest
    fragment (it could never be met: garbage collection removes whole fragments); LogNotFound
    for a URL without a log."""
    if clear and (max_age_s is not None or max_bytes is not None):
        raise InvalidOption("clear=True removes the policy: give it alone, or give max_age_s and/or "
                            "max_bytes without it")
    policy = None if clear else make_policy(max_age_s, max_bytes)
    store = resolve_store(log, options)
    committer = Committer(store, writer="wal3-spark retention")
    manifest = committer.manifest()  # LogNotFound before anything is written
    if policy is not None and policy.max_bytes is not None:
        largest = largest_fragment(store, manifest)
        if largest is not None and largest.num_bytes > policy.max_bytes:
            raise InvalidOption(
                f"{store.url}: max_bytes {size_text(policy.max_bytes)} cannot hold the log's largest "
                f"fragment ({largest.num_bytes} bytes, {largest.path}), and garbage collection removes "
                f"whole fragments only: give max_bytes >= {largest.num_bytes} (several times the "
                "writers' fragment size, so that the log keeps more than its newest fragment)")
    previous = manifest.retention
    result = committer.update_result(lambda m: m.with_retention(policy, committer.writer))
    assert result.current is not None
    current = result.current.value
    logger.info("%s: retention policy %s", store.url, policy.describe() if policy else "cleared")
    return RetentionReport(
        url=store.url,
        retention=current.retention.to_dict() if current.retention else None,
        described=current.retention.describe() if current.retention else "none",
        previous=previous.to_dict() if previous else None,
        changed=previous != current.retention,
        oldest_offset=current.oldest_offset,
        next_offset=current.next_offset,
    )


def own_bytes(manifest: Manifest) -> int:
    """The bytes of the log's own fragments (what max-bytes bounds)."""
    return sum(s.num_bytes for s in manifest.snapshots) + sum(f.num_bytes for f in manifest.fragments)


def _written_us(store: ObjectStore, ref: FragmentRef) -> int | None:
    """`newest_record_us`, or for a fragment whose path holds no time (a Chroma S3 log's
    sequence-numbered ones) the newest `timestamp_us` in its file."""
    written = newest_record_us(ref)
    if written is not None:
        return written
    from wal3_spark.format.fragment import decode_fragment  # Parquet: only for such fragments

    decoded = decode_fragment(fetch_fragment(store, ref), path=ref.path, raw=True)
    return int(np.max(np.asarray(decoded.timestamp_us)))


def policy_cutoff(
    store: ObjectStore, manifest: Manifest, now_us: int, cache: SnapshotCache | None = None
) -> int | None:
    """The first offset the manifest's retention policy keeps at `now_us`, or None (no policy,
    or it removes nothing). Reads fragments' times from the manifest and snapshots (a file only
    for a fragment whose path holds no time), walking only as far as the policy removes."""
    policy = manifest.retention
    if policy is None:
        return None
    refs = iter_fragments(store, manifest, manifest.own_oldest_offset, cache=cache)
    return retention_cutoff(refs, own_bytes(manifest), manifest.next_offset, policy, now_us,
                            written_us=lambda ref: _written_us(store, ref))


__all__ = ["RetentionReport", "make_policy", "policy_cutoff", "set_retention"]
