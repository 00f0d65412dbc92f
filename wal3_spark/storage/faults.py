"""Fault injection: wrap any store so that it fails the way a real S3 store can.

`FaultyStore` simulates what a real store shows its caller *after* the store's own retries:

- writes (`put_if_absent`, `put_if_match`), one fault at most per call:
  - `drop`: `TransientError` before anything happens (the request never got through);
  - `error_5xx`: `AmbiguousWrite` without writing (the server failed before acting);
  - `timeout_after_write`: the write is attempted on the inner store, then `AmbiguousWrite`
    (the response was lost: the write landed, unless it lost its condition);
  - `precondition_storm`: `PreconditionFailed` without writing. For `put_if_match` this is a
    spurious 412 (S3 answers 409 to racing conditional writes, which stores report as a lost
    condition). For `put_if_absent` it fires only when the object exists, i.e. when the create
    would fail anyway: no real store reports a false 412 on create.
- reads, lists and deletes are idempotent, so real stores retry them internally: here `drop`
  and `error_5xx` inject a `TransientError` that this wrapper itself retries (`read_attempts`
  tries, milliseconds apart). Only if every try draws a fault does the `TransientError` reach
  the caller, as it would from a store that exhausted its retries.
- every call may first sleep up to `max_delay_s` (`delay`), which shuffles the interleaving of
  concurrent callers.

`counts` says how many faults of each kind were injected, so tests can assert that the faults
they rely on really happened. Thread-safe. Picklable: a copy reseeds its random generator from
`seed` and its process id, so workers sharing one pickled store do not fail in lockstep.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from wal3_spark.errors import AmbiguousWrite, PreconditionFailed, TransientError
from wal3_spark.storage.base import Blob, ObjectMeta, ObjectStore
from wal3_spark.storage.retry import retry

T = TypeVar("T")

FAULT_KINDS = ("drop", "delay", "error_5xx", "timeout_after_write", "precondition_storm")


class FaultyStore(ObjectStore):
    """`inner` with randomly injected faults; see the module docstring for their meaning."""

    def __init__(
        self,
        inner: ObjectStore,
        *,
        seed: int,
        drop: float = 0.0,
        delay: float = 0.0,
        error_5xx: float = 0.0,
        timeout_after_write: float = 0.0,
        precondition_storm: float = 0.0,
        max_delay_s: float = 0.02,
        read_attempts: int = 4,
    ) -> None:
        probabilities = {
            "drop": drop,
            "delay": delay,
            "error_5xx": error_5xx,
            "timeout_after_write": timeout_after_write,
            "precondition_storm": precondition_storm,
        }
        for kind, p in probabilities.items():
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"{kind} must be a probability in [0, 1], got {p}")
        if drop + error_5xx + timeout_after_write + precondition_storm > 1.0:
            raise ValueError("the write fault probabilities must add up to at most 1")
        self.inner = inner
        self.url = inner.url
        self.seed = seed
        self.probabilities = probabilities
        self.max_delay_s = max_delay_s
        self.read_attempts = read_attempts
        self._counts = dict.fromkeys(FAULT_KINDS, 0)
        self._rng = random.Random(seed)
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_lock"], state["_rng"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._rng = random.Random(f"{self.seed}/{os.getpid()}")
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"FaultyStore({self.inner!r})"

    @property
    def counts(self) -> dict[str, int]:
        """Faults injected so far (by this copy of the store), by kind."""
        with self._lock:
            return dict(self._counts)

    # ---------------------------------------------------------------------------- plumbing

    def _draw(self) -> float:
        with self._lock:
            return self._rng.random()

    def _inject(self, kind: str) -> None:
        with self._lock:
            self._counts[kind] += 1

    def _maybe_delay(self) -> None:
        if self._draw() < self.probabilities["delay"]:
            self._inject("delay")
            time.sleep(self._draw() * self.max_delay_s)

    def _pick_fault(self, kinds: tuple[str, ...]) -> str | None:
        """At most one of `kinds`, each with its own probability."""
        r = self._draw()
        for kind in kinds:
            r -= self.probabilities[kind]
            if r < 0:
                return kind
        return None

    def _idempotent(self, what: str, fn: Callable[[], T]) -> T:
        self._maybe_delay()

        def attempt() -> T:
            kind = self._pick_fault(("drop", "error_5xx"))
            if kind is not None:
                self._inject(kind)
                raise TransientError(f"injected {kind} on {what}")
            return fn()

        return retry(attempt, attempts=self.read_attempts, base=0.001, cap=0.005, what=what)

    def _write(self, key: str, create: bool, write: Callable[[], str]) -> str:
        self._maybe_delay()
        kind = self._pick_fault(("drop", "error_5xx", "timeout_after_write", "precondition_storm"))
        if kind == "drop":
            self._inject(kind)
            raise TransientError(f"injected drop: put {key!r} never reached the store")
        if kind == "error_5xx":
            self._inject(kind)
            raise AmbiguousWrite(key, "injected 5xx (the write did not happen)")
        if kind == "timeout_after_write":
            self._inject(kind)
            try:
                write()
            except PreconditionFailed:
                pass  # the caller cannot see the outcome of a timed-out request
            raise AmbiguousWrite(key, "injected timeout after the write was sent")
        if kind == "precondition_storm" and (not create or self.inner.exists(key)):
            self._inject(kind)
            raise PreconditionFailed(key, "injected 412")
        return write()

    # --------------------------------------------------------------------------------- API

    def get(self, key: str) -> Blob:
        return self._idempotent(f"get {key!r}", lambda: self.inner.get(key))

    def get_range(self, key: str, start: int, length: int) -> bytes:
        return self._idempotent(
            f"get_range {key!r}", lambda: self.inner.get_range(key, start, length)
        )

    def head(self, key: str) -> ObjectMeta:
        return self._idempotent(f"head {key!r}", lambda: self.inner.head(key))

    def list(self, prefix: str = "") -> Iterator[ObjectMeta]:
        return iter(self._idempotent(f"list {prefix!r}", lambda: list(self.inner.list(prefix))))

    def delete(self, key: str) -> None:
        self._idempotent(f"delete {key!r}", lambda: self.inner.delete(key))

    def put_if_absent(self, key: str, data: bytes) -> str:
        return self._write(key, True, lambda: self.inner.put_if_absent(key, data))

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        return self._write(key, False, lambda: self.inner.put_if_match(key, data, etag))

    def close(self) -> None:
        self.inner.close()
