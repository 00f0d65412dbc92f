"""Fault injection: wrap any store so that it fails the way a real S3 store can.

Two wrappers, which compose (each is an `ObjectStore`):
- `FaultyStore`: random drops, 5xx, timeouts after the write, spurious 412s and delays;
- `LateLandingStore`: a conditional write times out and is processed by the store *later*,
  still conditioned on what it was sent with (what S3 does with a request stuck in its front end).

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

Both are `InjectingStore`s: `counts` says how many faults of each kind were injected, so tests
can assert that the faults they rely on really happened. Thread-safe. Picklable: a copy reseeds
its random generator from `seed` and its process id, so workers sharing one pickled store do not
fail in lockstep.
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from wal3_spark.clock import SYSTEM, Clock
from wal3_spark.errors import (
    AmbiguousWrite,
    PreconditionFailed,
    StorageError,
    TransientError,
)
from wal3_spark.storage.base import Blob, ObjectMeta, ObjectStore
from wal3_spark.storage.forwarding import ForwardingStore
from wal3_spark.storage.retry import retry

T = TypeVar("T")

FAULT_KINDS = ("drop", "delay", "error_5xx", "timeout_after_write", "precondition_storm")
#: what `LateLandingStore.counts` reports: writes held back (each raised AmbiguousWrite), then
#: applied late and landed, applied late and lost their condition, or failed when applied
LATE_KINDS = ("held", "landed", "condition_lost", "failed")
LandTrigger = Literal["after_get", "after_requests", "random", "manual"]


class InjectingStore(ForwardingStore):
    """The plumbing of a store that injects faults into `inner`'s calls: a seeded random
    generator and a count of each of `kinds`, both behind one lock, and every call routed to one
    of two hooks: `_call` for the idempotent ones (reads, lists, deletes) and `_write` for the
    two conditional writes. A pickled copy reseeds from `seed` and its process id."""

    def __init__(self, inner: ObjectStore, kinds: Collection[str], seed: int) -> None:
        super().__init__(inner)
        self.seed = seed
        self._counts = dict.fromkeys(kinds, 0)
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

    @property
    def counts(self) -> dict[str, int]:
        """Faults injected so far (by this copy of the store), by kind."""
        with self._lock:
            return dict(self._counts)

    def _inject(self, kind: str) -> None:
        with self._lock:
            self._counts[kind] += 1

    def _call(self, method: str, key: str, fn: Callable[[], T]) -> T:
        """An idempotent call (`method` on `key`, a prefix for lists) made by `fn`."""
        return fn()

    def _write(self, method: str, key: str, data: bytes, etag: str | None, fn: Callable[[], str]) -> str:
        """A conditional write (`etag` None: create-if-absent) made by `fn`."""
        return fn()

    # --------------------------------------------------------------------------------- API

    def get(self, key: str) -> Blob:
        return self._call("get", key, lambda: self.inner.get(key))

    def get_range(self, key: str, start: int, length: int) -> bytes:
        return self._call("get_range", key, lambda: self.inner.get_range(key, start, length))

    def head(self, key: str) -> ObjectMeta:
        return self._call("head", key, lambda: self.inner.head(key))

    def list(self, prefix: str = "") -> Iterator[ObjectMeta]:
        return iter(self._call("list", prefix, lambda: list(self.inner.list(prefix))))

    def list_children(self, prefix: str = "") -> Iterator[str]:
        return iter(self._call("list_children", prefix, lambda: list(self.inner.list_children(prefix))))

    def delete(self, key: str) -> None:
        self._call("delete", key, lambda: self.inner.delete(key))

    def put_if_absent(self, key: str, data: bytes) -> str:
        return self._write("put_if_absent", key, data, None, lambda: self.inner.put_if_absent(key, data))

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        return self._write("put_if_match", key, data, etag, lambda: self.inner.put_if_match(key, data, etag))


class FaultyStore(InjectingStore):
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
        clock: Clock = SYSTEM,
    ) -> None:
        """`clock` sleeps the delays and the read retries."""
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
        super().__init__(inner, FAULT_KINDS, seed)
        self.probabilities = probabilities
        self.max_delay_s = max_delay_s
        self.read_attempts = read_attempts
        self.clock = clock

    def _draw(self) -> float:
        with self._lock:
            return self._rng.random()

    def _maybe_delay(self) -> None:
        if self._draw() < self.probabilities["delay"]:
            self._inject("delay")
            self.clock.sleep(self._draw() * self.max_delay_s)

    def _pick_fault(self, kinds: tuple[str, ...]) -> str | None:
        """At most one of `kinds`, each with its own probability."""
        r = self._draw()
        for kind in kinds:
            r -= self.probabilities[kind]
            if r < 0:
                return kind
        return None

    def _call(self, method: str, key: str, fn: Callable[[], T]) -> T:
        what = f"{method} {key!r}"
        self._maybe_delay()

        def attempt() -> T:
            kind = self._pick_fault(("drop", "error_5xx"))
            if kind is not None:
                self._inject(kind)
                raise TransientError(f"injected {kind} on {what}")
            return fn()

        return retry(attempt, attempts=self.read_attempts, base=0.001, cap=0.005, what=what, clock=self.clock)

    def _write(self, method: str, key: str, data: bytes, etag: str | None, write: Callable[[], str]) -> str:
        create = etag is None
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
            with contextlib.suppress(PreconditionFailed):  # the caller cannot see the outcome
                write()
            raise AmbiguousWrite(key, "injected timeout after the write was sent")
        if kind == "precondition_storm" and (not create or self.inner.exists(key)):
            self._inject(kind)
            raise PreconditionFailed(key, "injected 412")
        return write()


@dataclass
class _HeldWrite:
    """A conditional write the store has received but not yet processed."""

    key: str
    data: bytes
    #: the ETag it is conditioned on; None for a create-if-absent
    etag: str | None
    #: requests still to complete before it lands (for "after_requests" and "random")
    countdown: int


class LateLandingStore(InjectingStore):
    """`inner`, except that chosen conditional writes time out and land late.

    A chosen write raises `AmbiguousWrite` without touching `inner`, as when a request times out
    on the client while it waits in the server. It is applied later, still conditioned on what
    it was sent with (`put_if_match` on its original ETag, `put_if_absent` as a create), when its
    trigger fires (`land`):
    - `"after_get"`: right after the next `get` of the same key returns, so that the caller's
      reload still shows the state the write was conditioned on, and the write lands the moment
      after: "not there yet" proved nothing;
    - `"after_requests"`: after `after_requests` more requests (any kind) to this wrapper;
    - `"random"`: after a uniformly drawn 1..`after_requests` more requests;
    - `"manual"`: only when `land_all()` is called.

    Which writes are held: the conditional writes to `keys` (all keys when None) made with one
    of `methods`, numbered from 1 in call order; those numbered in `writes` are held, and each
    other one is held with `probability`. Pending writes live in this process only: a pickled
    copy starts with none (a request held by a killed process never lands, as on a real store).

    Thread-safe; `counts` reports `LATE_KINDS`. Usable as a fault kind of a stress run:
    `LateLandingStore(FaultyStore(inner, ...), keys=..., probability=0.02, land="random")`.
    """

    def __init__(
        self,
        inner: ObjectStore,
        *,
        keys: Collection[str] | None = None,
        writes: Collection[int] = (),
        probability: float = 0.0,
        land: LandTrigger = "after_get",
        after_requests: int = 1,
        methods: Collection[str] = ("put_if_match",),
        seed: int = 0,
    ) -> None:
        if land not in ("after_get", "after_requests", "random", "manual"):
            raise ValueError(f"land must be after_get, after_requests, random or manual, not {land!r}")
        if not 0.0 <= probability <= 1.0:
            raise ValueError(f"probability must be within [0, 1], got {probability}")
        if after_requests < 1:
            raise ValueError(f"after_requests must be >= 1, got {after_requests}")
        unknown = set(methods) - {"put_if_match", "put_if_absent"}
        if unknown:
            raise ValueError(f"methods must be put_if_match and/or put_if_absent, not {unknown}")
        super().__init__(inner, LATE_KINDS, seed)
        self.keys = None if keys is None else frozenset(keys)
        self.writes = frozenset(writes)
        self.probability = probability
        self.land = land
        self.after_requests = after_requests
        self.methods = frozenset(methods)
        self._seen = 0
        self._held: list[_HeldWrite] = []

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "_held": []}

    @property
    def pending(self) -> int:
        """Writes held back and not yet applied."""
        with self._lock:
            return len(self._held)

    def land_all(self) -> None:
        """Apply every pending write now (in the order they were sent)."""
        with self._lock:
            due, self._held = self._held, []
        self._apply(due)

    # ---------------------------------------------------------------------------- plumbing

    def _choose(self, method: str, key: str, data: bytes, etag: str | None) -> _HeldWrite | None:
        """The write to hold back, if this one is chosen."""
        if method not in self.methods or (self.keys is not None and key not in self.keys):
            return None
        with self._lock:
            self._seen += 1
            if self._seen not in self.writes and not self._rng.random() < self.probability:
                return None
            countdown = self.after_requests
            if self.land == "random":
                countdown = self._rng.randint(1, self.after_requests)
            self._counts["held"] += 1
        return _HeldWrite(key, bytes(data), etag, countdown)

    def _hold(self, held: _HeldWrite) -> AmbiguousWrite:
        """Hold `held` back (its own request counts for the writes held before it only)."""
        self._completed()
        with self._lock:
            self._held.append(held)
        return AmbiguousWrite(held.key, "injected timeout: the store will process the write later")

    def _completed(self, got_key: str | None = None) -> None:
        """One request completed: land the writes whose trigger fired."""
        with self._lock:
            due: list[_HeldWrite] = []
            kept: list[_HeldWrite] = []
            for held in self._held:
                if self.land == "after_get":
                    fire = held.key == got_key
                elif self.land in ("after_requests", "random"):
                    held.countdown -= 1
                    fire = held.countdown <= 0
                else:
                    fire = False
                (due if fire else kept).append(held)
            self._held = kept
        self._apply(due)

    def _apply(self, due: list[_HeldWrite]) -> None:
        for held in due:
            try:
                if held.etag is None:
                    self.inner.put_if_absent(held.key, held.data)
                else:
                    self.inner.put_if_match(held.key, held.data, held.etag)
                kind = "landed"
            except PreconditionFailed:
                kind = "condition_lost"
            except StorageError:
                kind = "failed"
            self._inject(kind)

    def _call(self, method: str, key: str, fn: Callable[[], T]) -> T:
        try:
            return fn()
        finally:
            self._completed(key if method == "get" else None)

    def _write(self, method: str, key: str, data: bytes, etag: str | None, fn: Callable[[], str]) -> str:
        held = self._choose(method, key, data, etag)
        if held is not None:
            raise self._hold(held)
        return self._call(method, key, fn)
