"""What a stress run has shown so far: gathered from the run directory, printed as a table.

Appends are counted from the writers' journals (the authority on what the API answered),
verification from the readers' ledgers (each reader verifies the whole log on its own: a
violation any reader saw counts, and "verified" is the least any reader verified), faults from
every process's stats file plus the supervisor's own kills and server restarts.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from wal3_spark.stress.journal import (
    ACK,
    FAILED,
    KILLED,
    UNKNOWN,
    End,
    Intent,
    Outcome,
    read_new,
)
from wal3_spark.stress.ledger import VIOLATIONS
from wal3_spark.stress.rundir import RunDir

#: fault kinds every process injects into its store calls (FaultyStore's, storms, late writes)
STORE_FAULTS = ("drop", "delay", "error_5xx", "timeout_after_write", "precondition_storm", "storm",
                "late_landing")
#: the orphan race: collector runs whose orphan sweep's clock was ahead (`orphan_race`, what a run
#: requires) and the appends refused by the horizon they raised (`orphan_race_refused`, the
#: writers' side: proof that a sweep raced appends still committing; how many depends on how
#: many appends are in flight at the time, so a run does not wait for one)
ORPHAN_RACE = "orphan_race"
ORPHAN_RACE_REFUSED = "orphan_race_refused"
#: late writes that did land after their request was reported ambiguous: `late_landing` only
#: counts writes held back, and one that never lands (its process killed, or its condition
#: lost first) never tests what the count is for, a duplicate from a late landing
LATE_LANDED = "late_landed"
#: manifests damaged on their way to a reader (`wal3_spark.stress.damage`), and what became of
#: them: refused (CorruptLog, what a run requires), harmless (nothing a read acts on changed, or
#: the read was the undamaged one's), shortened (a read that acted on the damage: a violation)
DAMAGE_MANIFEST = "damage_manifest"
DAMAGE_REFUSED = "damage_refused"
DAMAGE_SHORTENED = "damage_shortened"
#: what a run with compactors requires: a compaction committed (runs of fragments merged)
COMPACTED = "compacted"


class AppendTally:
    """Appends by outcome, read incrementally from the writers' journals."""

    def __init__(self) -> None:
        self.offsets: dict[str, int] = {}
        self.open: dict[str, set[int]] = {}
        self.ended: dict[str, str] = {}
        self.outcomes: Counter[str] = Counter()
        self.records_acknowledged = 0

    def update(self, run: RunDir) -> None:
        for writer, path in run.journals():
            entries, self.offsets[writer] = read_new(path, self.offsets.get(writer, 0))
            waiting = self.open.setdefault(writer, set())
            for entry in entries:
                if isinstance(entry, Intent):
                    waiting.add(entry.append)
                elif isinstance(entry, Outcome):
                    waiting.discard(entry.append)
                    self.outcomes[entry.kind] += 1
                    if entry.kind == ACK:
                        self.records_acknowledged += entry.limit - entry.start  # type: ignore[operator]
                elif isinstance(entry, End):
                    self.ended[writer] = entry.how

    def counts(self) -> dict[str, int]:
        killed = sum(len(a) for w, a in self.open.items() if self.ended.get(w) == KILLED)
        waiting = sum(len(a) for w, a in self.open.items() if w not in self.ended)
        return {
            "acknowledged": self.outcomes[ACK],
            "unknown": self.outcomes[UNKNOWN],
            "in flight when killed": killed,
            "failed": self.outcomes[FAILED],
            "in flight": waiting,
        }


@dataclass
class Summary:
    url: str
    elapsed_s: float
    duration_s: float
    final: bool = False
    appends: dict[str, int] = field(default_factory=dict)
    records_acknowledged: int = 0
    #: reader slot -> its ledger counts, position and whether it finished
    readers: dict[str, dict[str, Any]] = field(default_factory=dict)
    faults: dict[str, int] = field(default_factory=dict)
    kills: dict[str, int] = field(default_factory=dict)
    #: processes that exited on their own (a bug): role -> count
    crashes: dict[str, int] = field(default_factory=dict)
    gc: dict[str, int] = field(default_factory=dict)
    #: the compactors' counters, summed (`wal3_spark.stress.compactor`)
    compaction: dict[str, int] = field(default_factory=dict)
    #: errors the processes saw and survived, by kind (informational)
    errors: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)
    #: problems `verify` found in the log at the end (orphan files excepted)
    verify_problems: list[str] = field(default_factory=list)
    #: the supervisor's audits of the referenced fragments during the run, and what they found
    audit: dict[str, int] = field(default_factory=dict)
    missing_fragments: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: what the run was configured to exercise: fault kinds (store faults, `kill <role>`,
    #: a server restart such as `seaweed_restart`) and `gc apply`
    required: list[str] = field(default_factory=list)

    def violations(self) -> dict[str, int]:
        """By kind, the most any reader saw; and the reads a damaged manifest shortened."""
        seen = {k: max((r["counts"][k] for r in self.readers.values()), default=0) for k in VIOLATIONS}
        return {**seen, "shortened by a damaged manifest": self.faults.get(DAMAGE_SHORTENED, 0)}

    def verified(self) -> int:
        return min((r["counts"]["verified"] for r in self.readers.values()), default=0)

    def missing(self) -> list[str]:
        """What the run was to exercise and did not (yet)."""
        happened = {**self.faults, **{f"kill {role}": n for role, n in self.kills.items()},
                    **{f"gc {step}": n for step, n in self.gc.items()},
                    COMPACTED: self.compaction.get("fragments written", 0)}
        return [kind for kind in self.required if not happened.get(kind)]

    @property
    def ok(self) -> bool:
        return (
            self.final
            and not any(self.violations().values())
            and not self.verify_problems
            and not self.missing_fragments
            and not any(self.crashes.values())
            and all(r["finished"] for r in self.readers.values())
            and not self.notes
        )

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "violations": self.violations(), "verified": self.verified(), "ok": self.ok}

    def table(self) -> str:
        state = ("PASSED" if self.ok else "FAILED") if self.final else "running"
        rows: list[tuple[str, str, str]] = []

        def section(title: str, items: dict[str, Any]) -> None:
            for i, (name, value) in enumerate(items.items()):
                rows.append((title if i == 0 else "", name, f"{value:,}" if isinstance(value, int) else str(value)))

        section("appends", {**self.appends, "records acknowledged": self.records_acknowledged})
        per_reader = ", ".join(f"{slot} {r['counts']['verified']:,}" for slot, r in self.readers.items())
        decided = {k.replace("_", " "): max((r["counts"].get(k, 0) for r in self.readers.values()), default=0)
                   for k in ("unknown_landed", "unknown_absent", "removed_by_retention")}
        section("records", {"verified": f"{self.verified():,} ({per_reader})", **self.violations()})
        section("unknown", decided)
        section("faults", dict(sorted(self.faults.items())))
        section("kills", {**dict(sorted(self.kills.items())),
                          **{f"crashed {role}": n for role, n in sorted(self.crashes.items()) if n}})
        section("gc", dict(sorted(self.gc.items())))
        if self.compaction:
            section("compact", dict(sorted(self.compaction.items())))
        section("audit", self.audit)
        if self.errors:
            section("errors survived", dict(sorted(self.errors.items())))
        width = max(len(r[1]) for r in rows)
        head = f"wal3 stress {self.url}: {self.elapsed_s:.0f} s of {self.duration_s:.0f} s, {state}"
        lines = [head] + [f"  {a:<9} {b:<{width}}  {c}" for a, b, c in rows]
        if self.missing():
            lines.append(f"  not exercised (yet): {', '.join(self.missing())}")
        if self.final:
            lines.append(f"  verify: {'clean' if not self.verify_problems else self.verify_problems[:5]}")
        for kind, texts in self.examples.items():
            lines += [f"  {kind}: {text}" for text in texts[:3]]
        lines += [f"  missing fragment: {text}" for text in self.missing_fragments[:3]]
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)


def gather(run: RunDir, tally: AppendTally, url: str, elapsed_s: float, duration_s: float,
           kills: Counter[str], crashes: Counter[str], restarts: Counter[str]) -> Summary:
    tally.update(run)
    summary = Summary(url, elapsed_s, duration_s, appends=tally.counts(),
                      records_acknowledged=tally.records_acknowledged,
                      kills=dict(kills), crashes=dict(crashes))
    faults: Counter[str] = Counter()
    gc: Counter[str] = Counter()
    compaction: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    for stats in run.all_stats():
        if stats is None:
            continue
        faults.update(stats["faults"])
        if stats["role"] == "collector":
            gc.update(stats["counters"])
        elif stats["role"] == "compactor":
            compaction.update(stats["counters"])
        else:
            errors.update({f"{stats['role']} {k}": v for k, v in stats["counters"].items() if k != "appends"})
    faults.update(restarts)
    summary.faults, summary.gc, summary.errors = dict(faults), dict(gc), dict(errors)
    summary.compaction = dict(compaction)
    for slot, state in run.reader_states().items():
        if state is None:
            continue
        ledger = state["ledger"]
        summary.readers[slot] = {"counts": ledger["counts"], "position": ledger["position"],
                                 "finished": bool(state.get("finished"))}
        for kind, texts in ledger["examples"].items():
            summary.examples.setdefault(kind, []).extend(texts)
    return summary
