"""Verification accounting: the 1:1 mapping of acknowledged appends to records read (Chroma's wal3
design, "Verification": "anything other than a 1:1 mapping of writes to reads will indicate a
problem").

A reader feeds the ledger every record it reads, in offset order (`observe`), every range it
had to skip (`skip`), and every entry of the writers' journals (`note`); `settle` then decides
about each append once nothing more can be learnt about it:

- *acknowledged* at [start, limit): decided once the reader has read past `limit`. Record i
  must have been read exactly once, at offset start + i, and be the message the intent
  announced there; otherwise it is `lost` (never read), `duplicated` (read again) or
  `misplaced` (read elsewhere, or another message at its offset);
- *failed* (the API said nothing was committed): none of its records may ever be read: each one
  read is `unexpected`;
- *unknown* (the outcome could not be established, or the writer died first): it may appear at
  most once, all or nothing. It is decided as landed as soon as each of its records was read
  once; otherwise it waits until no late write can land any more: until the reader has read
  past the tail recorded when its writer was killed (`End.tail`), or the end of the run. It is
  then absent if none of it was read, or its missing records are `lost` if only part was.

Decided appends are remembered as intervals of append numbers per writer (appends are decided
nearly in order, so these stay small), so that a copy read later, however much later, still
counts as duplicated (or unexpected). Records that are not stress messages, or whose payload is
not what their stream's generator makes, are `corrupt`. The ledger keeps the first examples of
each violation, with offsets, so that a failed run says where to look.

Pure: no I/O. Its state round-trips through JSON (`to_json`/`from_json`) so that a reader can
persist it before it moves its cursor.
"""

from __future__ import annotations

import bisect
from dataclasses import asdict, dataclass, field, fields

from wal3_spark.stress.journal import ACK, FAILED, UNKNOWN, End, Entry, Intent, Outcome
from wal3_spark.stress.streams import MessageMismatch, decode

#: counters that must stay 0 in a correct run
VIOLATIONS = ("lost", "duplicated", "misplaced", "unexpected", "corrupt", "unreadable")
EXAMPLES_PER_KIND = 10


@dataclass
class Counts:
    records_read: int = 0
    #: records of decided appends read exactly once, where they belong
    verified: int = 0
    lost: int = 0
    duplicated: int = 0
    misplaced: int = 0
    unexpected: int = 0
    corrupt: int = 0
    #: records the reader had to skip: fragments it could not read, ranges collected unread
    unreadable: int = 0
    #: acknowledged records a retention policy removed before the reader read them (`remove`):
    #: accounted, not lost
    removed_by_retention: int = 0
    appends_verified: int = 0
    unknown_landed: int = 0
    unknown_absent: int = 0
    failed_absent: int = 0

    def violations(self) -> dict[str, int]:
        return {kind: getattr(self, kind) for kind in VIOLATIONS}


class IntervalSet:
    """A set of integers as sorted, disjoint, non-adjacent [start, end) intervals."""

    def __init__(self, spans: list[list[int]] | None = None) -> None:
        self.starts = [a for a, _ in spans or ()]
        self.ends = [b for _, b in spans or ()]

    def __contains__(self, x: int) -> bool:
        i = bisect.bisect_right(self.starts, x) - 1
        return i >= 0 and x < self.ends[i]

    def add(self, x: int) -> None:
        if x in self:
            return
        i = bisect.bisect_right(self.starts, x)
        joins_left = i > 0 and self.ends[i - 1] == x
        joins_right = i < len(self.starts) and self.starts[i] == x + 1
        if joins_left and joins_right:
            self.ends[i - 1] = self.ends[i]
            del self.starts[i], self.ends[i]
        elif joins_left:
            self.ends[i - 1] = x + 1
        elif joins_right:
            self.starts[i] = x
        else:
            self.starts.insert(i, x)
            self.ends.insert(i, x + 1)

    def spans(self) -> list[list[int]]:
        return [[a, b] for a, b in zip(self.starts, self.ends, strict=True)]


class IntervalSpans:
    """A set of offsets as sorted, disjoint [start, end) spans, added a range at a time in
    increasing order (what a reader skips only moves forward)."""

    def __init__(self, spans: list[list[int]] | None = None) -> None:
        self.spans = spans or []

    def add(self, start: int, end: int) -> None:
        if self.spans and self.spans[-1][1] == start:
            self.spans[-1][1] = end
        else:
            self.spans.append([start, end])

    def __contains__(self, x: int) -> bool:
        i = bisect.bisect_right([s for s, _ in self.spans], x) - 1
        return i >= 0 and x < self.spans[i][1]


@dataclass
class Pending:
    """An append not decided yet: what its journal said and where its records were read."""

    records: list[tuple[int, int]] | None = None
    outcome: str | None = None
    start: int | None = None
    limit: int | None = None
    #: record index -> every (offset, stream, seq) it was read at
    seen: dict[int, list[tuple[int, int, int]]] = field(default_factory=dict)

    def reads(self) -> int:
        return sum(len(v) for v in self.seen.values())

    def to_json(self) -> dict:
        return {
            "records": self.records,
            "outcome": self.outcome,
            "start": self.start,
            "limit": self.limit,
            "seen": {str(i): v for i, v in self.seen.items()},
        }

    @classmethod
    def from_json(cls, d: dict) -> Pending:
        records = None if d["records"] is None else [tuple(r) for r in d["records"]]
        seen = {int(i): [tuple(x) for x in v] for i, v in d["seen"].items()}
        return cls(records, d["outcome"], d["start"], d["limit"], seen)


class Ledger:
    """See the module docstring. `position` is the first offset not yet read."""

    def __init__(self, seed: int, position: int = 1) -> None:
        self.seed = seed
        self.position = position
        self.counts = Counts()
        self.pending: dict[str, dict[int, Pending]] = {}
        self.present: dict[str, IntervalSet] = {}
        self.absent: dict[str, IntervalSet] = {}
        #: writer incarnation -> how it ended ("exit" or "killed")
        self.ended: dict[str, str] = {}
        #: killed writer incarnation -> the tail after its death (see `End.tail`)
        self.end_tails: dict[str, int] = {}
        self.examples: dict[str, list[str]] = {}
        #: offsets a retention policy removed before this reader read them (`remove`)
        self.removed = IntervalSpans()

    # -- input ---------------------------------------------------------------------------

    def observe(self, offset: int, body: bytes) -> None:
        """The record at `offset` (records must come in offset order, from `position` on)."""
        if offset != self.position:
            raise ValueError(f"records must be observed in order: expected {self.position}, got {offset}")
        self.position = offset + 1
        self.counts.records_read += 1
        try:
            m = decode(self.seed, body)
        except MessageMismatch as exc:
            self._violation("corrupt", f"offset {offset}: {exc}")
            return
        where = f"offset {offset}: writer {m.writer} append {m.append} record {m.index}"
        if m.append in self.present.get(m.writer, ()):
            self._violation("duplicated", f"{where}, an append already read in full, again")
        elif m.append in self.absent.get(m.writer, ()):
            self._violation("unexpected", f"{where}, an append decided absent (failed or never landed)")
        else:
            self._pending(m.writer, m.append).seen.setdefault(m.index, []).append((offset, m.stream, m.seq))

    def skip(self, limit: int, why: str) -> None:
        """Records [position, limit) cannot be read (say why); what they held stays unverified."""
        if limit <= self.position:
            return
        self._violation("unreadable", f"offsets [{self.position}, {limit}): {why}",
                        count=limit - self.position)
        self.position = limit

    def remove(self, limit: int) -> None:
        """Records [position, limit) were removed by the log's retention policy before they were
        read: an acknowledged record due there is `removed_by_retention`, not lost."""
        if limit <= self.position:
            return
        self.removed.add(self.position, limit)
        self.position = limit

    def note(self, writer: str, entry: Entry) -> None:
        """One journal entry of `writer` (entries of one writer must come in journal order)."""
        if isinstance(entry, End):
            self.ended[writer] = entry.how
            if entry.tail is not None:
                self.end_tails[writer] = entry.tail
            return
        pending = self._pending(writer, entry.append)
        if isinstance(entry, Intent):
            pending.records = list(entry.records)
        elif isinstance(entry, Outcome):
            pending.outcome, pending.start, pending.limit = entry.kind, entry.start, entry.limit

    # -- deciding ------------------------------------------------------------------------

    def settle(self, *, final: bool = False) -> None:
        """Decide every append that can be decided; `final`: the run is over, all journals are
        complete and the reader has read the whole log, so decide everything."""
        for writer in list(self.pending):
            appends = self.pending[writer]
            for append in list(appends):
                if self._decide(writer, append, appends[append], final):
                    del appends[append]
            if not appends:
                del self.pending[writer]

    def undecided(self) -> int:
        return sum(len(a) for a in self.pending.values())

    def _decide(self, writer: str, append: int, p: Pending, final: bool) -> bool:
        name = f"writer {writer} append {append}"
        if p.records is None:
            if not final:
                return False
            self._violation("unexpected", f"{name}: {p.reads()} record(s) read that no journal announced",
                            count=p.reads())
            return True
        kind = p.outcome or (UNKNOWN if writer in self.ended or final else None)
        if kind == ACK:
            if self.position < (p.limit or 0) and not final:
                return False
            self._decide_acknowledged(writer, append, p, name)
            return True
        if kind == FAILED:
            if p.reads():
                self._violation("unexpected", f"{name} failed, yet {p.reads()} of its records were read "
                                f"(first at offset {min(x[0] for v in p.seen.values() for x in v)})",
                                count=p.reads())
            else:
                self.counts.failed_absent += 1
            self.absent.setdefault(writer, IntervalSet()).add(append)
            return True
        if kind == UNKNOWN:
            return self._decide_unknown(writer, append, p, name, final)
        return False  # the writer is still waiting for its outcome

    def _decide_acknowledged(self, writer: str, append: int, p: Pending, name: str) -> None:
        assert p.records is not None and p.start is not None and p.limit is not None
        if p.limit - p.start != len(p.records):
            self._violation("misplaced", f"{name}: acknowledged [{p.start}, {p.limit}) for "
                            f"{len(p.records)} records", count=0)
        clean = self._check_records(p, p.start, name)
        self.counts.appends_verified += clean
        self.present.setdefault(writer, IntervalSet()).add(append)

    def _decide_unknown(self, writer: str, append: int, p: Pending, name: str, final: bool) -> bool:
        assert p.records is not None
        once = all(len(p.seen.get(i, ())) == 1 for i in range(len(p.records)))
        cannot_land = self.position > self.end_tails.get(writer, self.position)
        if not p.seen:
            if not (final or cannot_land):
                return False  # a late write may still land
            self.counts.unknown_absent += 1
            self.absent.setdefault(writer, IntervalSet()).add(append)
            return True
        first = min(x[0] for v in p.seen.values() for x in v)
        start = first - min(p.seen)  # where it landed, by its first record read
        if not (once or final or (cannot_land and self.position >= start + len(p.records))):
            return False  # partly read: the rest may be just ahead
        self._check_records(p, start, f"{name} (outcome unknown, landed)")
        self.counts.unknown_landed += 1
        self.present.setdefault(writer, IntervalSet()).add(append)
        return True

    def _check_records(self, p: Pending, start: int, name: str) -> bool:
        """Record i of `p` must have been read once, at `start + i`; counts each one."""
        assert p.records is not None
        clean = True
        for i, (stream, seq) in enumerate(p.records):
            reads = p.seen.get(i, [])
            where = f"{name} record {i} (stream {stream} seq {seq}), due at offset {start + i}"
            if not reads and start + i in self.removed:
                self.counts.removed_by_retention += 1
                continue
            if not reads:
                self._violation("lost", f"{where}: never read")
                clean = False
                continue
            if len(reads) > 1:
                self._violation("duplicated", f"{where}: read at offsets {[r[0] for r in reads]}",
                                count=len(reads) - 1)
                clean = False
            if any(r == (start + i, stream, seq) for r in reads):
                self.counts.verified += 1
            else:
                self._violation("misplaced", f"{where}: read as {reads}")
                clean = False
        extra = [i for i in p.seen if i >= len(p.records)]
        if extra:
            self._violation("corrupt", f"{name}: records {extra} beyond the {len(p.records)} announced",
                            count=len(extra))
            clean = False
        return clean

    # -- plumbing ------------------------------------------------------------------------

    def _pending(self, writer: str, append: int) -> Pending:
        return self.pending.setdefault(writer, {}).setdefault(append, Pending())

    def _violation(self, kind: str, text: str, count: int = 1) -> None:
        setattr(self.counts, kind, getattr(self.counts, kind) + count)
        examples = self.examples.setdefault(kind, [])
        if len(examples) < EXAMPLES_PER_KIND:
            examples.append(text)

    def to_json(self) -> dict:
        return {
            "seed": self.seed,
            "position": self.position,
            "counts": asdict(self.counts),
            "pending": {w: {str(a): p.to_json() for a, p in ps.items()} for w, ps in self.pending.items()},
            "present": {w: s.spans() for w, s in self.present.items()},
            "absent": {w: s.spans() for w, s in self.absent.items()},
            "ended": self.ended,
            "end_tails": self.end_tails,
            "examples": self.examples,
            "removed": self.removed.spans,
        }

    @classmethod
    def from_json(cls, d: dict) -> Ledger:
        ledger = cls(d["seed"], d["position"])
        known = {f.name for f in fields(Counts)}
        ledger.counts = Counts(**{k: v for k, v in d["counts"].items() if k in known})
        ledger.pending = {
            w: {int(a): Pending.from_json(p) for a, p in ps.items()} for w, ps in d["pending"].items()
        }
        ledger.present = {w: IntervalSet(s) for w, s in d["present"].items()}
        ledger.absent = {w: IntervalSet(s) for w, s in d["absent"].items()}
        ledger.ended = dict(d["ended"])
        ledger.end_tails = dict(d["end_tails"])
        ledger.examples = {k: list(v) for k, v in d["examples"].items()}
        ledger.removed = IntervalSpans([list(s) for s in d.get("removed", [])])
        return ledger
