"""The named steps of operations made of several requests (branching, deleting a log,
checkpointing, compacting), and the one observer that may watch them.

Tests and `wal3 stress` crash or race an operation between two of its steps to prove each is
safe to die after; a caller of the library has no reason to, so the observer is no parameter of
the operations: it is set for a block with `wal3_spark.testing.hooks.after_steps` and read here.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar

#: called with each step's name once it is done; what it raises ends the operation there
observer: ContextVar[Callable[[str], None] | None] = ContextVar("wal3_after_step", default=None)


def done(name: str) -> None:
    """Step `name` of the running operation is done: tell the observer, if any."""
    hook = observer.get()
    if hook is not None:
        hook(name)
