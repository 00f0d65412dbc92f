"""A stress writer process: appends stream messages through the public API at a throughput
that keeps changing, and journals every intent and outcome.

Each incarnation draws its `LogWriter` settings (batch size and interval, uploads in flight,
hedged requests or not); every few seconds it draws a new *regime*: `LogWriter.append` (one commit per call) or
`LogWriter.submit` (batched in the background, many appends in flight), a pause between
appends (from none to a fifth of a second), and a size of append (from single records to
`max_records_per_append`, skewed small). What the API answered decides the outcome journaled:

- a result: `ack` with its offsets;
- an error that by its contract means nothing was committed (`CommitFailed`, `LogSealed`,
  `SchemaMismatch`): `failed`, so that any of its records read later is a violation (among them
  `PastOrphanHorizon`: the append lost a race with a collector's orphan sweep, counted apart);
- any other error (`CommitOutcomeUnknown`, an ambiguous or transient storage error, a bug):
  `unknown`, so that its records may appear at most once.
"""

from __future__ import annotations

import logging
import random
import threading
from collections import Counter
from concurrent.futures import Future
from dataclasses import dataclass

from wal3_spark.clock import Clock
from wal3_spark.errors import CommitFailed, LogSealed, PastOrphanHorizon, SchemaMismatch
from wal3_spark.format.manifest import SnapshotOptions
from wal3_spark.log.writer import LogWriter, LogWriterOptions
from wal3_spark.storage import ObjectStore
from wal3_spark.stress.config import StressConfig
from wal3_spark.stress.journal import (
    ACK,
    EXIT,
    FAILED,
    UNKNOWN,
    End,
    Intent,
    Journal,
    Outcome,
)
from wal3_spark.stress.streams import Message, StreamPicker, encode
from wal3_spark.stress.summary import ORPHAN_RACE_REFUSED

logger = logging.getLogger(__name__)

DEFINITE_FAILURES = (CommitFailed, LogSealed, SchemaMismatch)
#: `submit` regimes wait for the oldest future beyond this many in flight
MAX_IN_FLIGHT = 64


def outcome_kind(exc: BaseException) -> str:
    return FAILED if isinstance(exc, DEFINITE_FAILURES) else UNKNOWN


@dataclass(frozen=True)
class Regime:
    api: str
    pause_s: float
    max_records: int
    #: monotonic time at which the next regime is drawn
    until: float

    @classmethod
    def draw(cls, rng: random.Random, max_records: int, now: float) -> Regime:
        return cls(
            api=rng.choice(("append", "submit")),
            pause_s=rng.choice((0.0, 0.001, 0.01, 0.05, 0.2)),
            max_records=rng.choice((1, 4, 16, max_records)),
            until=now + rng.uniform(1.0, 5.0),
        )

    def records(self, rng: random.Random) -> int:
        return 1 + int((self.max_records - 1) * rng.random() ** 2)


class StressWriter:
    def __init__(self, config: StressConfig, name: str, writer: LogWriter, journal: Journal,
                 clock: Clock) -> None:
        self.config = config
        self.name = name
        self.writer = writer
        self.journal = journal
        self.clock = clock
        self.rng = random.Random(f"{config.seed}/{name}")
        self.streams = StreamPicker(self.rng, config.streams, config.stream_skew)
        self.errors: Counter[str] = Counter()
        self.appends = 0
        #: appends refused because a collector's orphan sweep raised the horizon past them
        self.horizon_refusals = 0
        self._in_flight: list[Future] = []

    def run(self, stop: threading.Event) -> None:
        regime = Regime.draw(self.rng, self.config.max_records_per_append, self.clock.monotonic())
        while not stop.is_set():
            if self.clock.monotonic() >= regime.until:
                regime = Regime.draw(self.rng, self.config.max_records_per_append, self.clock.monotonic())
            self.append_one(regime)
            if regime.pause_s:
                stop.wait(self.rng.expovariate(1.0 / regime.pause_s))  # load shaping
        self.writer.close()
        for future in self._in_flight:
            if not future.done():  # close() returned with work still pending: a LogWriter bug
                self.errors["unresolved future at close"] += 1
        self.journal.write(End(EXIT))

    def counters(self) -> dict[str, int]:
        return {"appends": self.appends, **self.errors}

    def faults(self) -> dict[str, int]:
        return {ORPHAN_RACE_REFUSED: self.horizon_refusals}

    def append_one(self, regime: Regime) -> None:
        number = self.appends
        self.appends += 1
        records = tuple(self.streams.take() for _ in range(regime.records(self.rng)))
        bodies = [encode(self.config.seed, Message(s, self.name, q, number, i))
                  for i, (s, q) in enumerate(records)]
        self.journal.write(Intent(number, records, regime.api))
        if regime.api == "append":
            try:
                result = self.writer.append(bodies)
            except Exception as exc:  # noqa: BLE001 - every failure is journaled as this append's outcome
                self._failed(number, exc)
            else:
                self.journal.write(Outcome(number, ACK, result.start, result.limit))
            return
        future = self.writer.submit(bodies)
        future.add_done_callback(lambda f: self._resolved(number, f))
        self._in_flight = [f for f in self._in_flight if not f.done()] + [future]
        if len(self._in_flight) > MAX_IN_FLIGHT:
            self._in_flight.pop(0).exception()

    def _resolved(self, number: int, future: Future) -> None:
        exc = future.exception()
        if exc is not None:
            self._failed(number, exc)
        else:
            done = future.result()
            self.journal.write(Outcome(number, ACK, done.start, done.limit))

    def _failed(self, number: int, exc: BaseException) -> None:
        kind = outcome_kind(exc)
        if isinstance(exc, PastOrphanHorizon):
            self.horizon_refusals += 1
        self.errors[f"{kind}: {type(exc).__name__}"] += 1
        logger.info("%s append %d: %s (%s)", self.name, number, kind, exc)
        self.journal.write(Outcome(number, kind, error=type(exc).__name__))


def open_writer(config: StressConfig, name: str, store: ObjectStore) -> LogWriter:
    rng = random.Random(f"{config.seed}/{name}/writer")
    return LogWriter(store, LogWriterOptions(
        writer=f"wal3 stress {name}",
        fragment_bytes=config.fragment_bytes,
        batch_bytes=rng.choice((16 << 10, 256 << 10, 4 << 20)),
        batch_interval_s=rng.uniform(0.005, 0.1),
        max_uploads=rng.choice((1, 4, 16)),
        hedge=rng.random() < 0.5,
        snapshot_options=SnapshotOptions(config.snapshot_rollover, config.fragment_rollover),
    ))
