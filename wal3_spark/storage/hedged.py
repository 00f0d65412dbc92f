"""Hedged requests: the "robust" object storage of Chroma's wal3 design, which cuts the latency tail
of object stores by sending a second copy of a slow idempotent request and taking whichever answers
first.

What may be hedged, and why it is safe:
- reads (`get`, `get_range`, `head`): any answer is an answer the store could have given;
- create-if-absent of keys under the prefixes the caller names (`create_prefixes`): keys only
  this caller writes with these bytes (a fresh fragment path, a content-addressed snapshot). The
  two copies carry the same bytes and at most one creates the object; the other sees 412, which
  is success when the object holds our bytes (read back when it cannot be told otherwise).
- never `put_if_match` (a manifest, cursor or garbage CAS): a copy that lands late could apply a
  stale update where the object went back to an old version (`gc/GARBAGE` does), and the commit
  protocol's ambiguity handling assumes one request per attempt. Never `list` or `delete`.

When to hedge (that design's algorithm): a request still unanswered after a threshold (`factor` x
the `quantile` of the last `window` latencies of its kind) gets one copy, if no hedge was sent in
the last 1/`hedges_per_s` seconds (the budget: hedging is the opposite of backing off, so it is
strictly rationed) and fewer than `max_outstanding` requests are in flight through this store.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from wal3_spark.clock import SYSTEM, Clock
from wal3_spark.errors import (
    AmbiguousWrite,
    InvalidOption,
    ObjectNotFound,
    PreconditionFailed,
)
from wal3_spark.storage.base import Blob, ObjectMeta, ObjectStore
from wal3_spark.storage.forwarding import ForwardingStore

logger = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class HedgePolicy:
    """When a slow request gets a second copy; the defaults suit S3-like latencies."""

    #: budget: at most one hedge per 1/hedges_per_s seconds, whatever the load
    hedges_per_s: float = 10.0
    #: threshold = factor x this quantile of the recent latencies of the same kind of request
    quantile: float = 0.9
    factor: float = 2.0
    #: never hedge sooner than this (a threshold from a few fast requests would hedge everything)
    min_threshold_s: float = 0.01
    #: how many recent latencies the estimate uses, and how many it needs before any hedge
    window: int = 200
    min_samples: int = 20
    #: no hedge while this many requests (first copies and hedges) are in flight
    max_outstanding: int = 64

    def __post_init__(self) -> None:
        checks = [
            (self.hedges_per_s > 0, "hedges_per_s must be > 0"),
            (0 < self.quantile < 1, "quantile must be within (0, 1)"),
            (self.factor >= 1, "factor must be >= 1"),
            (self.min_threshold_s >= 0, "min_threshold_s must be >= 0"),
            (self.window >= 1 and 1 <= self.min_samples <= self.window,
             "window must be >= 1 and min_samples within [1, window]"),
            (self.max_outstanding >= 1, "max_outstanding must be >= 1"),
        ]
        for ok, what in checks:
            if not ok:
                raise InvalidOption(f"HedgePolicy: {what} (got {self})")


@dataclass(frozen=True)
class HedgeStats:
    requests: int
    hedged: int
    #: slow requests not hedged because a hedge was sent less than 1/hedges_per_s ago
    over_budget: int
    #: slow requests not hedged because max_outstanding requests were in flight
    over_outstanding: int
    #: hedges whose answer came first
    hedge_won: int


class HedgedStore(ForwardingStore):
    """`inner` with slow idempotent requests hedged; see the module docstring.

    `clock` (its monotonic time) times requests and the budget; tests inject one. Waiting for
    the threshold uses real time.
    """

    def __init__(
        self,
        inner: ObjectStore,
        policy: HedgePolicy | None = None,
        *,
        create_prefixes: tuple[str, ...] = (),
        clock: Clock = SYSTEM,
    ) -> None:
        super().__init__(inner)
        self.policy = policy or HedgePolicy()
        self.create_prefixes = create_prefixes
        self._clock = clock
        self._setup()

    def _setup(self) -> None:
        self._changed = threading.Condition()
        self._latencies: dict[str, deque[float]] = {}
        self._last_hedge: float | None = None
        self._outstanding = 0
        self._counts = dict.fromkeys(HedgeStats.__dataclass_fields__, 0)
        # Threads are created on demand and reused; a first copy never waits for a free one.
        self._pool = ThreadPoolExecutor(max_workers=1024, thread_name_prefix="wal3-hedged")

    def __getstate__(self) -> dict[str, Any]:
        return {"inner": self.inner, "policy": self.policy, "create_prefixes": self.create_prefixes}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["inner"], state["policy"], create_prefixes=state["create_prefixes"])  # type: ignore[misc]

    @property
    def stats(self) -> HedgeStats:
        with self._changed:
            return HedgeStats(**self._counts)

    def wait_for(self, predicate: Callable[[HedgeStats], bool], timeout: float | None = None) -> bool:
        """Block until `predicate(stats)` holds (tests and monitoring); False on timeout."""
        with self._changed:
            return self._changed.wait_for(lambda: predicate(HedgeStats(**self._counts)), timeout)

    def threshold(self, kind: str) -> float | None:
        """How long a request of `kind` may take before it is hedged; None: too few samples."""
        with self._changed:
            samples = self._latencies.get(kind)
            if samples is None or len(samples) < self.policy.min_samples:
                return None
            estimate = float(np.quantile(np.fromiter(samples, float), self.policy.quantile))
        return max(self.policy.min_threshold_s, self.policy.factor * estimate)

    # --------------------------------------------------------------------------------- API

    def get(self, key: str) -> Blob:
        return self._hedged("get", lambda: self.inner.get(key), _definitive_read)

    def get_range(self, key: str, start: int, length: int) -> bytes:
        return self._hedged("get", lambda: self.inner.get_range(key, start, length), _definitive_read)

    def head(self, key: str) -> ObjectMeta:
        return self._hedged("head", lambda: self.inner.head(key), _definitive_read)

    def put_if_absent(self, key: str, data: bytes) -> str:
        if not key.startswith(self.create_prefixes):
            return self.inner.put_if_absent(key, data)
        attempts = self._attempts("create", lambda: self.inner.put_if_absent(key, data), _succeeded)
        return self._resolve_create(key, data, attempts)

    # ---------------------------------------------------------------------------- plumbing

    def _hedged(self, kind: str, call: Callable[[], T], definitive: Callable[[Future], bool]) -> T:
        attempts = self._attempts(kind, call, definitive)
        for attempt in attempts:
            if attempt.done() and definitive(attempt):
                return attempt.result()
        return attempts[0].result()  # both failed: the first copy's error

    def _attempts(self, kind: str, call: Callable[[], T], definitive: Callable[[Future], bool]) -> list[Future]:
        """Send `call`, hedge it once if it is slow; return when one attempt gave a definitive
        answer or every attempt ended. The first attempt is always element 0."""
        with self._changed:
            self._counts["requests"] += 1
        first = self._send(kind, call)
        wait([first], timeout=self.threshold(kind))
        if first.done() or not self._may_hedge():
            wait([first])
            return [first]
        hedge = self._send(kind, call)
        attempts = [first, hedge]
        pending = set(attempts)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            if any(definitive(f) for f in done):
                if hedge in done and definitive(hedge) and not (first.done() and definitive(first)):
                    with self._changed:
                        self._counts["hedge_won"] += 1
                break
        return attempts

    def _may_hedge(self) -> bool:
        """Take the budget (one hedge per 1/hedges_per_s) if it and the outstanding bound allow."""
        with self._changed:
            now = self._clock.monotonic()
            if self._outstanding >= self.policy.max_outstanding:
                self._counts["over_outstanding"] += 1
                allowed = False
            elif self._last_hedge is not None and now - self._last_hedge < 1.0 / self.policy.hedges_per_s:
                self._counts["over_budget"] += 1
                allowed = False
            else:
                self._last_hedge = now
                self._counts["hedged"] += 1
                allowed = True
            self._changed.notify_all()
            return allowed

    def _send(self, kind: str, call: Callable[[], T]) -> Future:
        with self._changed:
            self._outstanding += 1
        started = self._clock.monotonic()

        def timed() -> T:
            try:
                return call()
            finally:
                self._finished(kind, self._clock.monotonic() - started)

        return self._pool.submit(timed)

    def _finished(self, kind: str, latency: float) -> None:
        with self._changed:
            self._outstanding -= 1
            samples = self._latencies.setdefault(kind, deque(maxlen=self.policy.window))
            samples.append(latency)

    def _resolve_create(self, key: str, data: bytes, attempts: list[Future]) -> str:
        """One answer for a create sent once or twice: created if either copy created it, or if
        a copy saw 412 while the other may have written it and the object holds our bytes."""
        for attempt in attempts:
            if attempt.done() and attempt.exception() is None:
                return attempt.result()
        errors = [attempt.exception() for attempt in attempts]
        if any(isinstance(e, PreconditionFailed) for e in errors) and len(attempts) > 1:
            if any(isinstance(e, AmbiguousWrite) for e in errors):
                return self._read_back(key, data, errors)
            raise next(e for e in errors if isinstance(e, PreconditionFailed))
        ambiguous = [e for e in errors if isinstance(e, AmbiguousWrite)]
        raise ambiguous[0] if ambiguous else next(e for e in errors if e is not None)

    def _read_back(self, key: str, data: bytes, errors: list[BaseException | None]) -> str:
        try:
            blob = self.inner.get(key)
        except ObjectNotFound:
            blob = None
        if blob is not None and blob.data == data:
            logger.debug("%s: hedged create of %s: the other copy wrote it", self.url, key)
            return blob.etag
        raise next(e for e in errors if isinstance(e, PreconditionFailed))

    def shutdown(self) -> None:
        """Release this wrapper's threads; the inner store stays open."""
        self._pool.shutdown(wait=False)

    def close(self) -> None:
        self.shutdown()
        super().close()


def _definitive_read(attempt: Future) -> bool:
    """A read's answer is final when it returned or found nothing; other errors wait for the
    other copy."""
    error = attempt.exception()
    return error is None or isinstance(error, ObjectNotFound)


def _succeeded(attempt: Future) -> bool:
    return attempt.exception() is None
