"""Time has one owner: this module. Every component that stamps, ages, times out, backs off or
measures is given a `Clock` (as SlateDB injects its `SystemClock`), and no other module of the
package reads the time or sleeps (tests/package/test_01_clock.py checks the source for it).

A clock answers three questions: `now` (wall time, seconds since the epoch: what is stored in
the log, txns, cursors and garbage, and what ages fragments for garbage collection),
`monotonic` (for deadlines, timers and latencies: never jumps back) and `sleep`. `SYSTEM` is the
machine's; `SystemClock(skew_s=...)` is a machine whose wall clock is off (`wal3 stress` runs a
garbage collector ahead of the writers this way); `ManualClock` moves only when told, so tests
age things or run out deadlines without waiting, and see every sleep the code asked for.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    """What a component needs of time."""

    def now(self) -> float:
        """Wall time, seconds since the epoch (may jump when the machine's clock is set)."""

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin that never go back: deadlines, timers, latencies."""

    def sleep(self, seconds: float) -> None:
        """Wait `seconds` (a manual clock moves by them instead)."""


class SystemClock:
    """The machine's clocks; `skew_s` moves its wall clock (a machine whose clock is ahead or
    behind), never its monotonic one."""

    def __init__(self, skew_s: float = 0.0) -> None:
        self.skew_s = skew_s

    def now(self) -> float:
        return time.time() + self.skew_s

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def __repr__(self) -> str:
        return f"SystemClock(skew_s={self.skew_s})" if self.skew_s else "SystemClock()"


#: the machine's clock: every component's default
SYSTEM = SystemClock()


class ManualClock:
    """A clock that moves only when told (SlateDB's `MockSystemClock`): `advance` moves both its
    wall and its monotonic time, `set` its wall time; `sleep` moves them at once instead of
    waiting, and is recorded in `sleeps`. Code that backs off until a deadline then runs in no
    real time, and a test can say how long it would have waited. Thread-safe."""

    def __init__(self, now: float = 1_800_000_000.0, monotonic: float = 0.0) -> None:
        self._now = now
        self._monotonic = monotonic
        self._lock = threading.Lock()
        #: every sleep asked for, in order
        self.sleeps: list[float] = []

    def now(self) -> float:
        with self._lock:
            return self._now

    def monotonic(self) -> float:
        with self._lock:
            return self._monotonic

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.sleeps.append(seconds)
        self.advance(max(seconds, 0.0))

    def advance(self, seconds: float) -> None:
        """Let `seconds` pass (they must not be negative: monotonic time never goes back)."""
        if seconds < 0:
            raise ValueError(f"a clock advances by seconds >= 0, not {seconds}")
        with self._lock:
            self._now += seconds
            self._monotonic += seconds

    def set(self, now: float) -> None:
        """Set the wall time (it may go back, as a machine's can); monotonic time is unchanged."""
        with self._lock:
            self._now = now

    def __repr__(self) -> str:
        return f"ManualClock(now={self._now}, monotonic={self._monotonic})"


def micros(clock: Clock = SYSTEM) -> int:
    """The clock's wall time in whole microseconds since the epoch (the unit stored in the log)."""
    return int(clock.now() * 1_000_000)


def utc_text(seconds: float) -> str:
    """A wall time (seconds since the epoch) as error messages and reports show it."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))
