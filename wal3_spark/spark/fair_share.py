"""Sharing one micro-batch's admission limits fairly among the logs of a log set.

A log-set stream has one `maxRecordsPerTrigger` (or bytes, or fragments) for all its logs. Taking
the logs in name order, or by how much each has, would let one hot log fill every batch while the
cold ones wait forever. So:

- records are shared max-min fairly (water-filling): each log gets what it has, up to a common
  level chosen so that the total fits; the units left over by rounding go to the logs served
  least recently;
- bytes and fragments are admitted a fragment at a time, round-robin over the logs, least
  recently served first, so a batch too small for one fragment per log serves the others next.

`Rotation` remembers, on the driver, which trigger last served each log. It is not in the
checkpoint: after a restart every log is equally stale, which is still fair.

Design: docs/design/52-logset-stream-and-routing-sink.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Limits:
    """The limits of one micro-batch (None: unlimited)."""

    max_records: int | None = None
    max_bytes: int | None = None
    max_fragments: int | None = None


@dataclass(frozen=True)
class Chunk:
    """A fragment's share of a log's range: offsets [start, limit) costing `num_bytes`."""

    start: int
    limit: int
    num_bytes: int


@dataclass
class Rotation:
    """Which trigger last admitted records of each log: the least recently served go first."""

    last_served: dict[str, int] = field(default_factory=dict)
    trigger: int = 0

    def order(self, names: Iterable[str]) -> list[str]:
        return sorted(names, key=lambda n: (self.last_served.get(n, -1), n))

    def served(self, names: Iterable[str]) -> None:
        self.trigger += 1
        for name in names:
            self.last_served[name] = self.trigger

    def forget(self, keep: Iterable[str]) -> None:
        """Drop logs no longer in the set (bounded memory as logs come and go)."""
        keep = set(keep)
        self.last_served = {n: t for n, t in self.last_served.items() if n in keep}


def water_fill(available: Mapping[str, int], total: int, order: list[str]) -> dict[str, int]:
    """Records per log: max-min fair shares of `total` (no log gets more than it has); the
    remainder rounding leaves goes one by one to logs in `order` (least recently served first)."""
    share = dict.fromkeys(available, 0)
    remaining = total
    waiting = sorted((n for n in available if available[n] > 0), key=lambda n: available[n])
    while waiting and remaining >= len(waiting):
        level = remaining // len(waiting)
        still = []
        for name in waiting:
            take = min(level, available[name] - share[name])
            share[name] += take
            remaining -= take
            if share[name] < available[name]:
                still.append(name)
        waiting = still
    for name in order:
        if remaining == 0:
            break
        if share.get(name, 0) < available.get(name, 0):
            share[name] += 1
            remaining -= 1
    return share


def admit(
    begins: Mapping[str, int],
    tails: Mapping[str, int],
    chunks: Callable[[str, int, int], Iterator[Chunk]],
    limits: Limits,
    rotation: Rotation,
) -> dict[str, int]:
    """Each log's end offset for the next micro-batch (its begin when it gets nothing).

    `chunks(name, begin, end)` yields the fragments covering [begin, end) of one log (read
    lazily: only logs that get a turn load their fragment lists). At least one fragment is
    admitted whenever any log has records, so a fragment larger than maxBytesPerTrigger never
    stalls the stream.
    """
    available = {n: tails[n] - begins[n] for n in begins if tails.get(n, 0) > begins[n]}
    order = rotation.order(available)
    caps = dict(available)
    if limits.max_records is not None:
        caps = water_fill(available, limits.max_records, order)
    ends = {n: begins[n] + caps.get(n, 0) for n in begins}
    if limits.max_bytes is not None or limits.max_fragments is not None:
        ends = _round_robin(begins, ends, [n for n in order if caps[n] > 0], chunks, limits)
    rotation.served(n for n in begins if ends[n] > begins[n])
    return ends


def _round_robin(
    begins: Mapping[str, int],
    caps: Mapping[str, int],
    order: list[str],
    chunks: Callable[[str, int, int], Iterator[Chunk]],
    limits: Limits,
) -> dict[str, int]:
    """Admit fragments one per log per round until the byte or fragment budget is spent; a log
    whose next fragment does not fit is done for this batch, the others go on."""
    ends = dict(begins)
    pending = {n: chunks(n, begins[n], caps[n]) for n in order}
    used_bytes = used_fragments = 0
    while pending:
        for name in list(pending):
            chunk = next(pending[name], None)
            if chunk is None:
                del pending[name]
                continue
            first = used_fragments == 0
            over_files = limits.max_fragments is not None and used_fragments >= limits.max_fragments
            over_bytes = (limits.max_bytes is not None
                          and used_bytes + chunk.num_bytes > limits.max_bytes)
            if over_files:
                return ends
            if over_bytes and not first:
                del pending[name]
                continue
            used_bytes += chunk.num_bytes
            used_fragments += 1
            ends[name] = min(chunk.limit, caps[name])
    return ends
