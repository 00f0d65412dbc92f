"""One compare-and-swap loop for every mutable object of a log: the manifest, each cursor and
`gc/GARBAGE`.

In the spirit of SlateDB's `TransactionalObject::maybe_apply_update` (slatedb-txn-obj): callers
supply only a pure decision (`decide`: the new value, or None when there is nothing to do); this
module reads, decides, prepares and validates the new value, writes it conditionally (create if
absent, or If-Match on the ETag read), and on a lost race reads again and decides again, with
full-jitter backoff, within an attempt limit and a deadline.

What SlateDB's loop leaves to its store, this one decides: the *ambiguous* write (a timeout or 5xx
after the request was sent), which may have landed, may never land, or may land later: a request
stuck in the server is processed whenever the server gets to it, still conditioned on the version
it was sent with. So after an ambiguous write conditioned on version V (an ETag, or absence):

1. every later read first asks whether the intended change is already there (`landed`: fragment
   paths for a commit, which are unique, so the answer is definitive; the bytes sent for a cursor
   or the garbage); if so the outcome is WRITTEN;
2. if the read still shows V, the lost request may land at any moment: "not there yet" proves
   nothing. Writing again conditioned on V is safe all the same: of two writes conditioned on one
   version at most one lands, and the next read tells which;
3. if the read shows another version, the lost request can never land (its condition is gone for
   good: every write of these objects changes their bytes, see docs/design/20-committing.md), so the
   decision taken on the new version is definite.

When the deadline or the attempt limit comes while a lost request may still land (2), the outcome
is UNKNOWN: the caller must neither retry blindly (it could apply the change twice) nor undo
anything the change refers to (it may be published later). pyiceberg calls this
`CommitStateUnknownException`; Chroma's wal3 `LogContentionDurable`.
"""

from __future__ import annotations

import enum
import itertools
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

from wal3_spark.clock import SYSTEM, Clock
from wal3_spark.errors import (
    AmbiguousWrite,
    CommitFailed,
    ObjectNotFound,
    PreconditionFailed,
    TransientError,
    Wal3Error,
)
from wal3_spark.storage.base import ObjectStore
from wal3_spark.storage.retry import backoff_delays

logger = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class Versioned(Generic[T]):
    """A value as stored: its bytes and the ETag that conditional writes compare."""

    value: T
    etag: str
    data: bytes


class StaleVersion(Exception):
    """Raised by a decision (or a `landed` check) that found the version it was given already
    replaced: e.g. the walk of a manifest's snapshot tree found a snapshot garbage collection
    removed after that manifest was read. `CasObject.apply` reads again and decides again, as
    after a lost race: it is never the caller's error."""


class Outcome(enum.Enum):
    WRITTEN = "written"
    NOTHING_TO_DO = "nothing to do"
    UNKNOWN = "outcome unknown"


@dataclass(frozen=True)
class CasResult(Generic[T]):
    outcome: Outcome
    #: WRITTEN: the version holding the change (ours, or a later one in which it was found);
    #: NOTHING_TO_DO: the version decided on; UNKNOWN: the last version read. None: absent.
    current: Versioned[T] | None
    attempts: int
    conflicts: int
    #: UNKNOWN: the error that ended the attempt to find out (None: the attempts ran out)
    cause: BaseException | None = None


@dataclass(frozen=True)
class InFlight:
    """A conditional write sent outside `CasObject.apply` whose outcome is not known: `data`
    conditioned on `on` (an ETag; "" for absence). A writer that pipelines its manifest writes
    (`wal3_spark.log.chain`) hands it back to `apply`, which resolves it by the ambiguity rules."""

    data: bytes
    on: str


@dataclass(frozen=True)
class CasPolicy:
    """How long to keep trying. Full-jitter backoff: a lost race is cheap (the loser only reads
    again), so it is retried quickly, and racing writers spread out."""

    max_attempts: int = 200
    deadline_s: float = 300.0
    backoff_base_s: float = 0.002
    backoff_cap_s: float = 0.1

    def delays(self) -> Iterator[float]:
        return itertools.chain(
            backoff_delays(self.max_attempts, self.backoff_base_s, self.backoff_cap_s, jitter=1.0),
            itertools.repeat(self.backoff_cap_s),
        )


#: the version of an object that does not exist (what a create-if-absent is conditioned on)
_ABSENT = ""
_NO_LOST_WRITE = None


class CasObject(Generic[T]):
    """One object under compare-and-swap. Remembers the last version it read or wrote, so that a
    lone writer's next update needs no read (one PUT). Not thread-safe; cheap to create."""

    def __init__(
        self,
        store: ObjectStore,
        key: str,
        *,
        parse: Callable[[bytes], T],
        serialise: Callable[[T], bytes],
        validate: Callable[[T], None] | None = None,
        policy: CasPolicy | None = None,
        gave_up: type[Wal3Error] = CommitFailed,
        clock: Clock = SYSTEM,
    ) -> None:
        """`clock` times the deadline and the backoff between attempts."""
        self.store = store
        self.clock = clock
        self.key = key
        self.parse = parse
        self.serialise = serialise
        self.validate = validate
        self.policy = policy or CasPolicy()
        self.gave_up = gave_up
        self.requests = {"get": 0, "put": 0}
        #: the last version read or written (None: absent); meaningful once `known`
        self.last: Versioned[T] | None = None
        self.known = False

    def __repr__(self) -> str:
        return f"CasObject({self.store.url!r}, {self.key!r})"

    def load(self) -> Versioned[T] | None:
        """The stored version (None when absent); one GET, remembered."""
        self.requests["get"] += 1
        try:
            blob = self.store.get(self.key)
        except ObjectNotFound:
            self.last, self.known = None, True
            return None
        self.last = Versioned(self.parse(blob.data), blob.etag, blob.data)
        self.known = True
        return self.last

    def remember(self, version: Versioned[T]) -> None:
        """`version` was written outside `apply` (a pipelined write whose answer came back):
        condition the next update on it."""
        self.last, self.known = version, True

    def encode(self, value: T) -> bytes:
        """The bytes `apply` would write for `value`: validated, then serialised."""
        if self.validate is not None:
            self.validate(value)
        return self.serialise(value)

    def forget(self) -> None:
        """Read before the next update (another process is known to have written)."""
        self.known = False

    def apply(
        self,
        decide: Callable[[T | None], T | None],
        *,
        landed: Callable[[T | None], bool | None] | None = None,
        prepare: Callable[[T], T] | None = None,
        in_flight: InFlight | None = None,
    ) -> CasResult[T]:
        """Read, decide, prepare, validate, write conditionally; see the module docstring.

        `decide(value)` (None: absent) returns the new value, or None when there is nothing to
        do; it may raise to refuse. It is called again on every fresh read, so it must be a pure
        function of the value. `prepare` writes what the new value needs before it is published
        (idempotent I/O, e.g. snapshots). `landed(value)` says, after an ambiguous write, whether
        the intended change is in `value` (None: cannot tell, which ends with UNKNOWN); by
        default, whether the stored bytes are the bytes sent. Raises `gave_up` (nothing was
        written) when the attempts or the deadline run out with no write that may still land.

        `in_flight`: a write of the same change sent earlier, outside this call, that may have
        landed or may still land; it is treated as this call's own ambiguous write (looked for in
        every version read, written again only on the version it was conditioned on).
        """
        policy = self.policy
        deadline = self.clock.monotonic() + policy.deadline_s
        delays = policy.delays()
        sent: list[bytes] = [in_flight.data] if in_flight is not None else []
        #: the version a lost write may still land on
        lost_on: str | None = in_flight.on if in_flight is not None else _NO_LOST_WRITE
        attempts = conflicts = failures = 0  # failures: rounds ended by a transient error
        error: BaseException | None = None  # the last transient error
        if self.known and in_flight is None:
            current = self.last
        else:
            try:
                current = self._read(deadline, delays, lost_on)
            except _Unreadable as exc:
                return CasResult(Outcome.UNKNOWN, self.last, 0, 0, exc.__cause__)
            except Exception as exc:  # a broken object, unless a lost write may land
                if lost_on is _NO_LOST_WRITE:
                    raise
                return CasResult(Outcome.UNKNOWN, self.last, 0, 0, exc)

        def result(outcome: Outcome, cause: BaseException | None = None) -> CasResult[T]:
            return CasResult(outcome, current, attempts, conflicts, cause)

        def out_of_time() -> bool:
            return attempts + failures >= policy.max_attempts or self.clock.monotonic() > deadline

        while True:
            if sent:  # an ambiguous write was sent: look for it in every version read since
                try:
                    found = self._landed(current, landed, sent)
                except (TransientError, StaleVersion) as exc:  # e.g. a snapshot the check reads: read again
                    failures += 1
                    if out_of_time():
                        return result(Outcome.UNKNOWN, exc)
                    logger.warning("%s: could not check whether %s landed: %s", self.store.url, self.key, exc)
                    self.clock.sleep(next(delays))
                    try:
                        current = self._read(deadline, delays, lost_on or _version(current))
                    except _Unreadable as unreadable:
                        return result(Outcome.UNKNOWN, unreadable.__cause__)
                    continue
                except Exception as exc:  # noqa: BLE001 (whether it landed is unknown: say so)
                    return result(Outcome.UNKNOWN, exc)
                if found is None:
                    return result(Outcome.UNKNOWN)
                if found:
                    logger.info("%s: the ambiguous write of %s had landed", self.store.url, self.key)
                    return result(Outcome.WRITTEN)
                if lost_on is not _NO_LOST_WRITE and _version(current) != lost_on:
                    lost_on = _NO_LOST_WRITE  # its condition is gone: it can never land
            if out_of_time():
                break
            data: bytes | None = None  # the bytes of this round's write, once serialised
            try:
                new = decide(current.value if current is not None else None)
                if new is None:
                    return result(Outcome.UNKNOWN if lost_on is not _NO_LOST_WRITE else Outcome.NOTHING_TO_DO)
                if prepare is not None:
                    new = prepare(new)
                if self.validate is not None:
                    self.validate(new)
                data = self.serialise(new)
                attempts += 1
                self.requests["put"] += 1
                if current is None:
                    etag = self.store.put_if_absent(self.key, data)
                else:
                    etag = self.store.put_if_match(self.key, data, current.etag)
                current = self.last = Versioned(new, etag, data)
                self.known = True
                return result(Outcome.WRITTEN)
            except PreconditionFailed:
                conflicts += 1
                logger.debug("%s: %s changed under us (attempt %d)", self.store.url, self.key, attempts)
                self.clock.sleep(next(delays))
            except StaleVersion as exc:  # the decision found the version it read replaced: read again
                conflicts, failures = conflicts + 1, failures + 1
                logger.info("%s: %s changed under a decision (%s); reading it again", self.store.url, self.key, exc)
            except AmbiguousWrite as exc:
                if data is None:  # raised while deciding or preparing: not this object's write
                    raise
                logger.warning("%s: %s; checking whether it landed", self.store.url, exc)
                sent.append(data)
                lost_on = _version(current)
            except TransientError as exc:
                if not sent and attempts == 0:
                    raise  # nothing was sent yet: known not to have changed anything
                failures, error = failures + 1, exc
                logger.warning("%s: transient error writing %s: %s", self.store.url, self.key, exc)
                self.clock.sleep(next(delays))
            except Exception as exc:  # a refusal, unless a lost write may land
                if lost_on is _NO_LOST_WRITE:
                    raise
                return result(Outcome.UNKNOWN, exc)
            try:
                current = self._read(deadline, delays, lost_on)
            except _Unreadable as exc:
                return result(Outcome.UNKNOWN, exc.__cause__)
            except Exception as exc:  # a broken object, unless a lost write may land
                if lost_on is _NO_LOST_WRITE:
                    raise
                return result(Outcome.UNKNOWN, exc)
        if lost_on is not _NO_LOST_WRITE:
            return result(Outcome.UNKNOWN, error)
        raise self.gave_up(
            f"gave up writing {self.key} of {self.store.url} after {attempts} attempts "
            f"({conflicts} conflicts); nothing was written. Too many concurrent writers, or the "
            "store is failing: retry"
        ) from error

    def _landed(
        self, current: Versioned[T] | None, landed: Callable[[T | None], bool | None] | None, sent: list[bytes]
    ) -> bool | None:
        """Whether the ambiguous write's change is in `current`; may raise what `landed` raises."""
        if landed is None:
            return _sent(current, sent)
        return landed(current.value if current is not None else None)

    def _read(self, deadline: float, delays: Iterator[float], lost_on: str | None) -> Versioned[T] | None:
        """Read, riding out transient errors until the deadline. Past it, the error propagates,
        unless a lost write may still land: then the outcome is unknown (`_Unreadable`)."""
        while True:
            try:
                return self.load()
            except TransientError:
                if self.clock.monotonic() > deadline:
                    if lost_on is not _NO_LOST_WRITE:
                        raise _Unreadable() from None
                    raise
                self.clock.sleep(next(delays))


class _Unreadable(Exception):
    """The object could not be read before the deadline."""


def _version(current: Versioned | None) -> str:
    return _ABSENT if current is None else current.etag


def _sent(current: Versioned | None, sent: list[bytes]) -> bool:
    return current is not None and current.data in sent
