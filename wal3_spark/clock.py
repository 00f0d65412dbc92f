"""The clock every component that stamps or ages something is given (as SlateDB injects its).

A clock is a function returning seconds since the epoch, `time.time` by default. The committer
stamps txns with it, cursors their moves, the writer its fragments, garbage collection ages
garbage and orphans by it, lag measures against it: tests and `wal3 stress` move time for one
component by passing it another clock, never by patching a module.
"""

from __future__ import annotations

import time
from collections.abc import Callable

#: seconds since the epoch, as `time.time`
Clock = Callable[[], float]


def micros(clock: Clock = time.time) -> int:
    """The clock's time in whole microseconds since the epoch (the unit stored in the log)."""
    return int(clock() * 1_000_000)
