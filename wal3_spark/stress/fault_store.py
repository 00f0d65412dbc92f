"""The store each stress process uses: the log's real store behind fault injection.

`FaultyStore` injects drops, slow requests, 5xx, timeouts after the write and spurious 412s;
`Storms` turns the spurious 412s into storms now and then; `LateLandingStore` (outermost) makes some
conditional writes time out and land later, still conditioned on what they were sent with, either
right after the writer's next read of the key (the late landing that can place a commit twice) or
after a few more requests. Readers' stores also damage a manifest now and then (`ManifestDamage`).
Counts are per process; the supervisor adds up every process's stats file.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable

from wal3_spark.storage import ObjectStore, open_store
from wal3_spark.stress.config import StressConfig
from wal3_spark.stress.damage import ManifestDamage
from wal3_spark.testing import FaultyStore, LateLandingStore

#: a late write chosen to land "random"ly lands within this many more requests
LATE_AFTER_REQUESTS = 8


class Storms:
    """412 storms: a background thread that raises a `FaultyStore`'s spurious-412 probability
    to `rate` for `length_s` seconds, at exponentially distributed intervals."""

    def __init__(self, store: FaultyStore, rng: random.Random, every_s: float, length_s: float,
                 rate: float, stop: threading.Event) -> None:
        self.store = store
        self.rng = rng
        self.every_s = every_s
        self.length_s = length_s
        self.rate = rate
        self.stop = stop
        self.count = 0
        self._base = store.probabilities["precondition_storm"]

    def start(self) -> None:
        if self.every_s > 0 and self.length_s > 0:
            threading.Thread(target=self._run, name="stress-storms", daemon=True).start()

    def _run(self) -> None:
        while not self.stop.wait(self.rng.expovariate(1.0 / self.every_s)):
            self.count += 1
            self.store.probabilities["precondition_storm"] = self.rate
            self.stop.wait(self.length_s)
            self.store.probabilities["precondition_storm"] = self._base


def fault_store(
    config: StressConfig, name: str, stop: threading.Event, *, damage_manifests: bool = False
) -> tuple[ObjectStore, Callable[[], dict[str, int]]]:
    """The log's store for process `name`, with faults; and a function counting them by kind.
    `damage_manifests` (readers): some manifest GETs return a damaged manifest
    (`wal3_spark.stress.damage`)."""
    rates = config.faults
    rng = random.Random(f"{config.seed}/{name}/faults")
    faulty = FaultyStore(
        open_store(config.url, config.options),
        seed=rng.randrange(2**32),
        drop=rates.drop,
        delay=rates.delay,
        error_5xx=rates.error_5xx,
        timeout_after_write=rates.timeout_after_write,
        precondition_storm=rates.precondition_storm,
        max_delay_s=rates.max_delay_s,
    )
    storms = Storms(faulty, rng, rates.storm_every_s, rates.storm_length_s, rates.storm_rate, stop)
    storms.start()
    late = LateLandingStore(
        faulty,
        probability=rates.late_landing,
        methods=("put_if_match", "put_if_absent"),
        land=rng.choice(("after_get", "random")),
        after_requests=LATE_AFTER_REQUESTS,
        seed=rng.randrange(2**32),
    )

    damage = ManifestDamage(late, rates.damage_manifest if damage_manifests else 0.0,
                            seed=rng.randrange(2**32))

    def counts() -> dict[str, int]:
        held = late.counts
        damaged = {"damage_manifest": damage.count} if damage_manifests else {}
        return {**faulty.counts, "storm": storms.count, "late_landing": held["held"],
                "late_landed": held["landed"], **damaged}

    return (damage if damage_manifests else late), counts
