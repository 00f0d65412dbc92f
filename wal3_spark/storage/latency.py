"""A store whose every request takes a given time: the object-store latency of seed 000's
"Reduced Tail Latency" experiment, reproducible on a laptop, for benchmarks and tests.

Each request waits `latency_s` before the inner store acts on it (the pessimistic place for the
delay: a write that is still in flight has not happened yet), and a share of requests
(`tail_share`) waits `tail_factor` times longer: the heavy tail of spinning disks behind object
storage that hedging (`HedgedStore`) is meant to cut.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Collection, Iterator

from wal3_spark.storage.base import Blob, ObjectMeta, ObjectStore
from wal3_spark.storage.forwarding import ForwardingStore


class LatencyStore(ForwardingStore):
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
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if latency_s < 0:
            raise ValueError(f"latency_s must be >= 0, got {latency_s}")
        if not 0.0 <= tail_share <= 1.0:
            raise ValueError(f"tail_share must be a probability in [0, 1], got {tail_share}")
        if tail_factor < 1.0:
            raise ValueError(f"tail_factor must be >= 1, got {tail_factor}")
        super().__init__(inner)
        self.latency_s = latency_s
        self.tail_share = tail_share
        self.tail_factor = tail_factor
        self.tail_methods = None if tail_methods is None else frozenset(tail_methods)
        self.slow_requests = 0
        self._sleep = sleep
        self._rng = random.Random(seed)
        self._lock = threading.Lock()

    def _wait(self, method: str) -> None:
        with self._lock:
            slow = self._rng.random() < self.tail_share and (
                self.tail_methods is None or method in self.tail_methods
            )
            self.slow_requests += slow
        self._sleep(self.latency_s * (self.tail_factor if slow else 1.0))

    def get(self, key: str) -> Blob:
        self._wait("get")
        return self.inner.get(key)

    def get_range(self, key: str, start: int, length: int) -> bytes:
        self._wait("get_range")
        return self.inner.get_range(key, start, length)

    def head(self, key: str) -> ObjectMeta:
        self._wait("head")
        return self.inner.head(key)

    def put_if_absent(self, key: str, data: bytes) -> str:
        self._wait("put_if_absent")
        return self.inner.put_if_absent(key, data)

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        self._wait("put_if_match")
        return self.inner.put_if_match(key, data, etag)

    def list(self, prefix: str = "") -> Iterator[ObjectMeta]:
        self._wait("list")
        return iter(list(self.inner.list(prefix)))

    def delete(self, key: str) -> None:
        self._wait("delete")
        self.inner.delete(key)
