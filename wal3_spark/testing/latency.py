"""A store whose every request takes a given time: object-store latency with a heavy tail,
reproducible on a laptop, for the latency benchmarks (`benchmarks/latency.py`).

Each request waits `latency_s` before the inner store acts on it (the pessimistic place for the
delay: a write that is still in flight has not happened yet), and a share of requests
(`tail_share`) waits `tail_factor` times longer: the heavy tail of spinning disks behind object
storage that hedging (`HedgedStore`) is meant to cut.

The delay is slept in the caller's thread, so a pause of the whole process (a full garbage
collection) lets every request whose delay ran out during it act in whatever order the threads
wake: conditional writes to one key sent 22 ms apart can then act out of order, which a store
across a network, applying requests as they arrive, does not do (docs/benchmarks.md, "Appends
under 100 ms per request"). `ordered=True` keeps the order of conditional writes to the same key
by their due times instead, to measure the protocol apart from that coupling; the default stays
the pessimistic one.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Collection

from wal3_spark.clock import SYSTEM, Clock
from wal3_spark.storage.base import ObjectStore
from wal3_spark.testing.faults import InjectingStore, T


class LatencyStore(InjectingStore):
    """`inner` with `latency_s` added before every request, `tail_factor` x that for a random
    `tail_share` of them (of the methods named in `tail_methods`; all when None).
    `slow_requests` counts the requests that drew the tail."""

    def __init__(
        self,
        inner: ObjectStore,
        latency_s: float,
        *,
        tail_share: float = 0.0,
        tail_factor: float = 10.0,
        tail_methods: Collection[str] | None = None,
        seed: int = 0,
        clock: Clock = SYSTEM,
        ordered: bool = False,
    ) -> None:
        if latency_s < 0:
            raise ValueError(f"latency_s must be >= 0, got {latency_s}")
        if not 0.0 <= tail_share <= 1.0:
            raise ValueError(f"tail_share must be a probability in [0, 1], got {tail_share}")
        if tail_factor < 1.0:
            raise ValueError(f"tail_factor must be >= 1, got {tail_factor}")
        super().__init__(inner, ("slow",), seed)
        self.latency_s = latency_s
        self.tail_share = tail_share
        self.tail_factor = tail_factor
        self.tail_methods = None if tail_methods is None else frozenset(tail_methods)
        self.clock = clock
        self.ordered = ordered
        #: per key, the due times of the conditional writes waiting to act (`ordered`)
        self._due: dict[str, list[float]] = defaultdict(list)
        self._turn = threading.Condition(self._lock)

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        del state["_due"], state["_turn"]
        return state

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        self._due = defaultdict(list)
        self._turn = threading.Condition(self._lock)

    @property
    def slow_requests(self) -> int:
        return self.counts["slow"]

    def _delay(self, method: str) -> float:
        with self._lock:
            slow = self._rng.random() < self.tail_share and (
                self.tail_methods is None or method in self.tail_methods
            )
            self._counts["slow"] += slow
        return self.latency_s * (self.tail_factor if slow else 1.0)

    def _call(self, method: str, key: str, fn: Callable[[], T]) -> T:
        self.clock.sleep(self._delay(method))
        return fn()

    def _write(self, method: str, key: str, data: bytes, etag: str | None, fn: Callable[[], str]) -> str:
        delay = self._delay(method)
        if not self.ordered:
            self.clock.sleep(delay)
            return fn()
        due = self.clock.monotonic() + delay
        with self._lock:
            self._due[key].append(due)
        try:
            self.clock.sleep(delay)
            with self._turn:  # act only once every write to `key` due earlier has acted
                self._turn.wait_for(lambda: min(self._due[key]) >= due)
            return fn()
        finally:
            with self._turn:
                self._due[key].remove(due)
                if not self._due[key]:
                    del self._due[key]
                self._turn.notify_all()
