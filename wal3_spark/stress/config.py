"""What a stress run does: its processes, streams, load and faults (one JSON file per run, read
by every process it starts)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class FaultRates:
    """Faults every process of the run injects into its own store calls.

    `drop`, `delay`, `error_5xx`, `timeout_after_write` and `precondition_storm` are
    `FaultyStore`'s probabilities per call; `max_delay_s` bounds a slow request. 412 storms are
    windows of `storm_length_s` seconds, starting every `storm_every_s` seconds on average,
    during which a conditional write fails with a spurious 412 with probability `storm_rate`.
    `late_landing`: the probability that a conditional write times out and lands later, still
    conditioned on what it was sent with (`LateLandingStore`).
    `orphan_race`: the probability that a collector's run sweeps orphans with its clock ahead by
    more than the orphan grace, so that the fragments of appends still committing look like
    orphans left long ago: the race of docs/design/32-orphan-horizon.md (GC's horizon against the commit).
    `damage_manifest`: see the field.
    """

    drop: float = 0.01
    delay: float = 0.05
    max_delay_s: float = 0.25
    error_5xx: float = 0.01
    timeout_after_write: float = 0.01
    precondition_storm: float = 0.01
    storm_every_s: float = 30.0
    storm_length_s: float = 2.0
    storm_rate: float = 0.7
    late_landing: float = 0.01
    orphan_race: float = 0.1
    #: readers only: the probability that a GET of the manifest returns it with one digit
    #: changed (`wal3_spark.stress.damage`), which every read must refuse or read unchanged
    damage_manifest: float = 0.02

    def injects(self, kind: str) -> bool:
        """Whether these rates inject `kind` at all (`storm`, the store faults, `orphan_race`)."""
        if kind == "storm":
            return self.storm_every_s > 0 and self.storm_length_s > 0 and self.storm_rate > 0
        if kind == "precondition_storm":
            return self.precondition_storm > 0 or self.injects("storm")
        return getattr(self, kind) > 0


@dataclass(frozen=True)
class StressConfig:
    url: str
    #: store options (endpoint, region, ...); never credentials: children inherit the environment
    options: dict[str, str] = field(default_factory=dict)
    seed: int = 0
    duration_s: float = 60.0
    writers: int = 3
    readers: int = 2
    collectors: int = 1
    streams: int = 16
    #: Zipf exponent of the choice of stream: 0 is uniform, larger makes a few streams hot
    stream_skew: float = 1.2
    max_records_per_append: int = 64
    #: small, so that large appends span several fragments committed together
    fragment_bytes: int = 128 << 10
    #: manifest compaction thresholds, small so that snapshots roll and GC rebuilds them
    snapshot_rollover: int = 8
    fragment_rollover: int = 16
    #: mean seconds between kill -9s (of a writer, reader or collector, in turn); 0: none
    kill_every_s: float = 15.0
    #: seconds between restarts of the server the run started itself (SeaweedFS, or a GCS or
    #: Azure emulator keeping its objects on disk); 0: none
    server_restart_every_s: float = 300.0
    summary_every_s: float = 60.0
    #: go on past the duration (at most 3 times as long again) until every fault kind was injected
    require_every_fault: bool = False
    gc_grace_s: float = 5.0
    gc_every_s: float = 1.0
    #: the retention actor (`wal3 stress --retention SIZE`): the log gets a max-bytes policy of
    #: this many bytes, which each collector run, now and then, sets again as this or twice
    #: this (racing appends and the other collectors); records it removes before a reader read
    #: them are accounted `removed_by_retention`, not lost. 0: no policy
    retention_bytes: int = 0
    #: records a reader reads per cycle (it persists its state and moves its cursor after each)
    read_chunk: int = 5000
    #: seconds after which a reader ends its cycle early (after the fragment it is reading):
    #: progress is only kept once persisted, and a reader slower than the kills would otherwise
    #: lose every chunk and fall behind for good (an S3 run on a loaded machine did)
    read_cycle_s: float = 5.0
    #: compactor processes (`wal3_spark.stress.compactor`): `compact` in a loop racing the
    #: appends; 0: none
    compactors: int = 0
    #: mean seconds between a compactor's runs
    compact_every_s: float = 1.0
    #: small, so that a run merges a few fragments and merged ones are merged again
    compact_target_bytes: int = 1 << 20
    #: fragments younger than this are not compacted (`compact`'s default: the writers see through
    #: a compaction). A manifest here holds `fragment_rollover` fragments before the oldest roll
    #: into a snapshot, less than a second of appends, so a longer settle would leave the
    #: compactors little to race
    compact_settle_s: float = 0.0
    #: how far behind a compactor holds its cursor, in seconds of appends
    compact_hold_s: float = 10.0
    faults: FaultRates = field(default_factory=FaultRates)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> StressConfig:
        known = {f.name for f in fields(cls)}
        config = cls(**{k: v for k, v in d.items() if k in known and k != "faults"})
        return replace(config, faults=FaultRates(**d.get("faults", {})))

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json(), indent=2))

    @classmethod
    def load(cls, path: Path) -> StressConfig:
        return cls.from_json(json.loads(path.read_text()))


@dataclass(frozen=True)
class LogSetStressConfig:
    """What a log-set run (`wal3 stress --logs N`, `wal3_spark.stress.logset`) does."""

    url: str
    logs: int = 4
    writers: int = 2
    duration_s: float = 60.0
    seed: int = 0
    #: mean seconds between deletions and re-creations of a log of the set
    recreate_every_s: float = 5.0
    #: the probability that a GET of a manifest by the reader is damaged (0: none)
    damage_manifest: float = 0.02
    max_records_per_append: int = 16
    #: records the reader reads per scan (it moves its cursor after each)
    read_chunk: int = 200
    #: seconds between the reader's full scans of the set (the dirty log between them)
    full_scan_every_s: float = 5.0

    def names(self) -> list[str]:
        return [f"log{i:02d}" for i in range(self.logs)]
