"""What the console's pages show, computed from the core's modules (never written to the log).

The log page's figures are `wal3 info`'s (`wal3_spark.observe.log_info.log_info`), so the two
always agree; the console adds what a page can show and a terminal cannot: fragment write times
(from their UUIDv7 paths: no fragment is read), the append rate they give, the age of the oldest
record each cursor has not read, and what the next garbage collection would do (its dry run).

The record browser reads one page: a scan of `[start, start + size)` fetches only the fragments
that hold those offsets (`LogReader.scan`), whatever the log's size.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any

from wal3_spark.cli.output import record_json
from wal3_spark.clock import micros
from wal3_spark.errors import GCRefused, InvalidOption
from wal3_spark.format.garbage import load_garbage
from wal3_spark.format.uuid7 import uuid7_timestamp_us
from wal3_spark.log.reader import LogReader, iter_fragments
from wal3_spark.log.snapshots import SnapshotCache
from wal3_spark.observe.log_info import log_info
from wal3_spark.ops.garbage_collector import DEFAULT_GRACE_S, GarbageCollector, GCOptions
from wal3_spark.storage.base import ObjectStore

#: the append-rate chart's buckets: one a minute over the last ten minutes
RATE_BUCKETS = 10
RATE_BUCKET_S = 60
#: rows a record page shows unless asked for another size, and the most it ever shows
PAGE_SIZE = 50
MAX_PAGE_SIZE = 1000
#: characters of one value a record page shows (a page of large records stays a page)
MAX_CELL = 1000


@dataclass(frozen=True)
class FragmentPoint:
    """One fragment as the timeline draws it."""

    path: str
    start: int
    limit: int
    num_bytes: int
    #: its write time (µs, from its UUIDv7); None for a fragment named by a sequence number
    written_us: int | None

    @property
    def records(self) -> int:
        return self.limit - self.start


def fragments(store: ObjectStore, cache: SnapshotCache | None = None) -> list[FragmentPoint]:
    """Every fragment of the log, oldest first, with its write time (no fragment is read)."""
    manifest = LogReader(store).manifest()
    return [
        FragmentPoint(ref.path, ref.start, ref.limit, ref.num_bytes,
                      uuid7_timestamp_us(str(ref.seq_no)) if isinstance(ref.seq_no, str) else None)
        for ref in iter_fragments(store, manifest, 0, cache=cache)
    ]


def append_rate(points: list[FragmentPoint], now_us: int) -> list[dict[str, Any]]:
    """Records appended per bucket over the last `RATE_BUCKETS` minutes, oldest bucket first
    (by fragment write time: a fragment's records count in the minute it was written)."""
    span_us = RATE_BUCKET_S * 1_000_000
    first = now_us - RATE_BUCKETS * span_us
    counts = [0] * RATE_BUCKETS
    for point in reversed(points):
        if point.written_us is None:
            continue
        if point.written_us < first:
            break  # fragments are in offset order, which is write order but for clock skew
        counts[min(RATE_BUCKETS - 1, (point.written_us - first) // span_us)] += point.records
    return [{"minutes_ago": RATE_BUCKETS - i, "records": n, "per_s": n / RATE_BUCKET_S}
            for i, n in enumerate(counts)]


def log_page(store: ObjectStore, cache: SnapshotCache | None = None) -> dict[str, Any]:
    """The log page: `wal3 info`'s figures, the last commit's time, the append rate, and each
    cursor's lag with the age of the oldest record it has not read."""
    info = log_info(store)
    points = fragments(store, cache)
    now = micros()
    written = [p.written_us for p in points if p.written_us is not None]
    rate = append_rate(points, now)
    recent = rate[-5:]
    return {
        "info": info,
        "cursors": list(info["lag"].values()),
        "last_commit_us": max(written, default=None),
        "rate": rate,
        "rate_per_s": sum(b["records"] for b in recent) / (len(recent) * RATE_BUCKET_S),
        "now_us": now,
    }


def records_page(store: ObjectStore, start: int | None, at: dt.datetime | None,
                 size: int = PAGE_SIZE) -> dict[str, Any]:
    """One page of records from `start` (or from the first written at or after `at`; by
    default the newest page), reading only the fragments that hold them."""
    if not 1 <= size <= MAX_PAGE_SIZE:
        raise InvalidOption(f"page size {size}: give a size within [1, {MAX_PAGE_SIZE}]")
    reader = LogReader(store)
    manifest = reader.manifest()
    oldest, tail = manifest.oldest_offset, manifest.next_offset
    if at is not None:
        start = reader.scan(start_time=at, max_records=0, manifest=manifest).start
    elif start is None:
        start = max(oldest, tail - size)
    if start < oldest:
        start = oldest  # collected: the page starts at what is left (the page says so)
    scan = reader.scan(start, max_records=size, manifest=manifest)
    rows = [{key: _cell(value) for key, value in record_json(row, manifest.is_raw).items()}
            for batch in scan.reader for row in batch.to_pylist()]
    # a raw log's body is `body` or, where not UTF-8, `body_base64`: every key any row has
    columns = list(dict.fromkeys(key for row in rows for key in row)) or [f.name for f in scan.schema]
    return {
        "oldest": oldest, "tail": tail, "start": scan.start, "limit": scan.limit, "size": size,
        "columns": columns, "rows": rows,
        "previous": max(oldest, scan.start - size) if scan.start > oldest else None,
        "next": scan.limit if scan.limit < tail else None,
        "last": max(oldest, tail - size),
    }


def _cell(value: Any) -> Any:
    """A record's value as a page shows it: nested values as JSON, long ones cut at MAX_CELL
    characters (saying how long they are)."""
    if isinstance(value, (list, dict)):
        value = json.dumps(value, ensure_ascii=False)
    if isinstance(value, str) and len(value) > MAX_CELL:
        return f"{value[:MAX_CELL]}… ({len(value)} characters)"
    return value


def gc_state(store: ObjectStore) -> dict[str, Any]:
    """`gc/GARBAGE` as it is and a dry run of the next collection: what it would drop and which
    cursor holds the cutoff where it is (the lowest one)."""
    garbage, _ = load_garbage(store)
    state: dict[str, Any] = {"url": store.url, "pending": None if garbage.is_empty() else garbage.summary(),
                             "grace_s": DEFAULT_GRACE_S, "report": None, "refused": None, "holder": None}
    collector = GarbageCollector(store, GCOptions(force=True, writer="wal3 console (dry run)"))
    try:
        report = collector.run(dry_run=True)
    except GCRefused as exc:
        state["refused"] = str(exc)
        return state
    state["report"] = report.to_dict()
    if report.cursors:
        name = min(report.cursors, key=lambda n: (report.cursors[n], n))
        state["holder"] = {"name": name, "offset": report.cursors[name]}
    return state
