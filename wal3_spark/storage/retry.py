"""Jittered exponential backoff, shared by the stores and the commit protocol.

Every retry loop in wal3-spark goes through here so that attempts are always bounded and
concurrent clients never retry in lockstep (which would make contention worse, not better).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterator
from typing import TypeVar

from wal3_spark.clock import SYSTEM, Clock
from wal3_spark.errors import TransientError

logger = logging.getLogger(__name__)

T = TypeVar("T")


def backoff_delays(
    attempts: int,
    base: float = 0.2,
    cap: float = 4.0,
    *,
    jitter: float = 0.5,
    rng: random.Random | None = None,
) -> Iterator[float]:
    """The `attempts - 1` sleeps between `attempts` tries, in seconds.

    The i-th ceiling is `min(cap, base * 2**i)`; each delay is drawn uniformly from
    `[ceiling * (1 - jitter), ceiling]`. The default `jitter=0.5` ("equal jitter") keeps a floor,
    so a bounded number of attempts spans a predictable minimum time (enough to ride out a
    server restart); `jitter=1.0` ("full jitter") spreads contending clients the most.
    """
    if attempts < 1:
        raise ValueError(f"attempts must be >= 1, got {attempts}")
    if not 0.0 <= jitter <= 1.0:
        raise ValueError(f"jitter must be within [0, 1], got {jitter}")
    draw = (rng or random).random
    for i in range(attempts - 1):
        ceiling = min(cap, base * 2.0 ** min(i, 64))  # 2.0**1024 overflows: a float cannot hold it
        yield ceiling * (1.0 - jitter * draw())


def retry(
    fn: Callable[[], T],
    *,
    retry_on: tuple[type[BaseException], ...] = (TransientError,),
    attempts: int = 6,
    base: float = 0.2,
    cap: float = 4.0,
    jitter: float = 0.5,
    what: str = "operation",
    clock: Clock = SYSTEM,
) -> T:
    """Call `fn` until it returns, retrying the exceptions in `retry_on` with backoff (slept on
    `clock`).

    After the last attempt the last exception propagates unchanged. With the defaults the
    total sleep is at most 0.2 + 0.4 + 0.8 + 1.6 + 3.2 = 6.2 s.
    """
    delays = backoff_delays(attempts, base, cap, jitter=jitter)
    attempt = 1
    while True:
        try:
            return fn()
        except retry_on as exc:
            delay = next(delays, None)
            if delay is None:
                logger.debug("%s failed on attempt %d, giving up: %s", what, attempt, exc)
                raise
            logger.debug("%s failed on attempt %d (%s); retrying in %.3f s", what, attempt, exc, delay)
            clock.sleep(delay)
            attempt += 1
