"""Seams into an operation that tests and `wal3 stress` use and no caller of the library should:
they stay out of the operations' public signatures, which say what a user may choose.

`after_steps(observer)` calls `observer` with each step's name as branching, deleting a log,
checkpointing or compacting finishes it, within a `with` block (`wal3_spark.log.steps`).
`hooked(collector, after_step=..., orphan_clock=...)` gives a `GarbageCollector` a function
called with each step's name once it is done (what it raises ends the run there, as a crash
would), and the clock its orphan sweep ages fragments by (run ahead, the sweep races appends
still committing as it would after a writer stalled between upload and commit).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from wal3_spark.clock import Clock
from wal3_spark.log import steps

if TYPE_CHECKING:
    from wal3_spark.ops.garbage_collector import GarbageCollector


def hooked(collector: GarbageCollector, *, after_step: Callable[[str], None] | None = None,
           orphan_clock: Clock | None = None) -> GarbageCollector:
    """`collector`, with the seams given set (the others as they were)."""
    if after_step is not None:
        collector._after_step = after_step
    if orphan_clock is not None:
        collector._orphan_clock = orphan_clock
    return collector


@contextmanager
def after_steps(observer: Callable[[str], None]) -> Iterator[None]:
    """Within the block, `observer` is called with the name of each step of `branch`,
    `delete_branch`, `checkpoint` and `compact` once it is done (what it raises ends the
    operation there)."""
    token = steps.observer.set(observer)
    try:
        yield
    finally:
        steps.observer.reset(token)
