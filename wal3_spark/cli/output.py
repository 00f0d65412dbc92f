"""What `wal3` prints: every report as text for people or as JSON for programs.

`main` picks one `Output` for the run (`--json` or not) and hands it to the command; a command
gathers its figures and calls one method here, never `json.dumps` or a format string of its
own. So each report is written by one text method and one JSON method side by side, and
`--json` is decided in one place (the model is pyiceberg's `cli/output.py`).

The JSON each command prints is documented in its `--help` from `JSON_SHAPES`, which the CLI
tests compare with what the commands print.

Records (`tail`, `cat`) are JSON lines whatever the output: `_offset`, `_timestamp` (ISO
8601, UTC), then the payload. A raw log's `body` is a string when it is valid UTF-8, otherwise
`body_base64` holds it base64-encoded; structured logs give each column (binary values base64,
decimals and other non-JSON values as strings).
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import textwrap
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from wal3_spark.cli.progress import ProgressBar
from wal3_spark.log.cursor_lag import CursorLag
from wal3_spark.logset.info import LogSummary
from wal3_spark.ops.copy import CopyReport
from wal3_spark.ops.garbage_collector import GCReport, report_policy
from wal3_spark.ops.verify import VerifyReport


@dataclass(frozen=True)
class JsonShape:
    """What a command prints with `--json`: one object (or an array of objects) and its keys."""

    what: str
    keys: tuple[str, ...]


#: every `--json` report, by command (and by what the command was given); `--help` shows them
JSON_SHAPES: dict[str, JsonShape] = {
    "init": JsonShape("one object", ("url", "created", "raw", "schema", "next_offset")),
    "info": JsonShape("for a log, one object", (
        "url", "oldest_offset", "next_offset", "records", "fragments", "snapshots", "bytes",
        "acc_bytes", "setsum", "collected", "balanced", "balance_problem", "schema", "raw",
        "sealed", "retention", "retention_described", "cursors", "broken_cursors", "stale_cursors",
        "incarnation", "lag",
        "pending_garbage", "txns", "writer", "parent", "pins", "tags")),
    "info PREFIX": JsonShape("for a log set, one object", (
        "url", "logs", "records", "bytes", "sealed", "logs_with_cursors", "most_behind",
        "broken_cursors", "unreadable", "dirty_log")),
    "ls": JsonShape("an array with one object per log", (
        "name", "records", "bytes", "oldest_offset", "next_offset", "sealed", "cursors",
        "broken_cursors", "error", "fragments", "snapshots", "last_commit_us")),
    "verify": JsonShape("one object (`problems`: objects with kind, obj, detail)", (
        "url", "setsum", "oldest_offset", "next_offset", "fragments", "snapshots", "records",
        "bytes", "problems", "parent", "ok")),
    "verify PREFIX": JsonShape("for a log set, one object (`logs`: each log's `wal3 verify` object by "
                               "name; `failed`: the names of the logs with a problem)", (
        "url", "logs", "failed", "ok")),
    "cursor list": JsonShape("one object (`cursors`: objects with name, offset, records_behind, "
                             "bytes_behind, moved_epoch_us, moved_ago_s, lag_s)", (
        "url", "oldest_offset", "next_offset", "cursors", "broken_cursors")),
    "cursor get": JsonShape("one object", ("url", "name", "offset", "epoch_us", "writer")),
    "cursor set": JsonShape("one object (the cursor as set)", ("url", "name", "offset", "epoch_us", "writer")),
    "cursor delete": JsonShape("one object", ("url", "name", "deleted")),
    "gc": JsonShape("one object", (
        "url", "dry_run", "cursors", "holds", "pins_dropped", "cutoff", "oldest_offset",
        "next_offset", "steps", "first_to_keep", "records_dropped", "fragments_dropped",
        "snapshots_dropped", "deleted", "orphans_deleted", "orphan_horizon_us", "pending",
        "delete_after", "notes", "retention", "retention_cutoff", "cursors_overtaken",
        "retention_removed", "retention_held_back")),
    "retention": JsonShape("one object (`retention`: the bounds set, max_age_ms and max_bytes, or null)", (
        "url", "retention", "described", "previous", "changed", "oldest_offset", "next_offset")),
    "seal": JsonShape("one object", ("url", "sealed", "next_offset")),
    "branch": JsonShape("one object", ("branch", "parent", "offset", "start", "pin", "setsum")),
    "branch --delete": JsonShape("one object", ("log", "parent", "objects_removed", "objects_left", "resumed")),
    "compact": JsonShape("one object (`runs`: objects with start, limit, fragments, path)", (
        "url", "dry_run", "fragments_before", "fragments_after", "runs", "records_rewritten",
        "bytes_read", "bytes_written", "conflicts", "snapshots_lifted", "setsum", "notes")),
    "checkpoint": JsonShape("one object", (
        "log", "parent", "offset", "fragments_copied", "records_copied", "bytes_copied", "checkpointed")),
    "tag": JsonShape("one object (the tag as made)", (
        "url", "name", "offset", "start", "hold", "created_us", "writer", "incarnation")),
    "tag --list": JsonShape("one object (`tags`: objects with name, offset, start, hold, "
                            "created_us, writer, incarnation)", ("url", "tags")),
    "tag --delete": JsonShape("one object", ("url", "name", "deleted")),
    "copy": JsonShape("one object", (
        "source", "destination", "start", "limit", "fragments", "records", "bytes", "setsum",
        "source_sealed", "rewritten", "cursors", "verified")),
    "stress": JsonShape("at the end of the run, one object (its tables go to stderr)", (
        "url", "elapsed_s", "duration_s", "final", "appends", "records_acknowledged", "readers",
        "faults", "kills", "crashes", "gc", "errors", "examples", "verify_problems", "audit",
        "missing_fragments", "notes", "required", "violations", "verified", "ok")),
    "stress --logs": JsonShape("at the end of the run, one object", (
        "acknowledged", "acknowledged_pipelined", "unknown_outcome", "delivered",
        "delivered_unknown", "gone_with_deleted_log", "lost", "duplicated", "unacknowledged",
        "misplaced", "shortened", "recreations", "damaged_manifest_reads", "damage_refused",
        "damage_harmless", "verify_ok", "verify_problems", "examples", "ok")),
    "stress --branches": JsonShape("at the end of the run, one object", (
        "checks", "records_checked", "branches_seen", "kills", "restarts", "failures", "transient",
        "pins_at_end", "live_at_end", "verified_at_end", "operations", "ok")),
}
#: the JSON every command prints with `--json` when it fails (exit status 1 or 2), whatever it
#: prints when it succeeds; the message is on stderr too
ERROR_SHAPE = JsonShape("one object whose `error` holds", ("command", "type", "message"))


def json_help(*commands: str) -> str:
    """The `--help` epilog documenting these commands' `--json` output, failures included."""
    paragraphs = []
    for command in commands:
        shape = JSON_SHAPES[command]
        paragraphs.append(textwrap.fill(
            f"`wal3 {command} --json` prints {shape.what} with the keys: {', '.join(shape.keys)}.",
            width=92, break_on_hyphens=False,
        ))
    paragraphs.append(textwrap.fill(
        f"On a failure, `--json` prints {ERROR_SHAPE.what} the keys: {', '.join(ERROR_SHAPE.keys)} "
        "(and the message goes to stderr, as without --json).", width=92, break_on_hyphens=False))
    return "\n\n".join(paragraphs)


class Output(ABC):
    """Where a command's report goes, as text or JSON (`TextOutput`, `JsonOutput`)."""

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def write(self, text: str) -> None:
        self.out.write(text)

    def records(self, scan: Any, raw: bool) -> int:
        """A scan's records as JSON lines (both outputs), with a progress bar when the records
        go to a file or a pipe and stderr is a terminal (on a terminal, records and bar would
        garble each other)."""
        n = 0
        with ProgressBar("reading", "records", show=not self.out.isatty()) as progress:
            for batch in scan.reader:
                for row in batch.to_pylist():
                    self.write(json.dumps(record_json(row, raw), ensure_ascii=False) + "\n")
                n += batch.num_rows
                progress(n, scan.records)
        self.out.flush()
        return n

    @abstractmethod
    def initialised(self, report: Mapping[str, Any]) -> None: ...

    @abstractmethod
    def log_info(self, info: Mapping[str, Any]) -> None: ...

    @abstractmethod
    def set_info(self, info: Mapping[str, Any]) -> None: ...

    @abstractmethod
    def logs(self, summaries: Sequence[LogSummary]) -> None: ...

    @abstractmethod
    def verified(self, report: VerifyReport) -> None: ...

    @abstractmethod
    def set_verified(self, url: str, reports: Mapping[str, VerifyReport]) -> None: ...

    @abstractmethod
    def cursors(self, report: Mapping[str, Any], lags: Sequence[CursorLag]) -> None: ...

    @abstractmethod
    def cursor(self, report: Mapping[str, Any], *, moved: bool) -> None: ...

    @abstractmethod
    def cursor_deleted(self, report: Mapping[str, Any]) -> None: ...

    @abstractmethod
    def collected(self, report: GCReport) -> None: ...

    @abstractmethod
    def sealed(self, report: Mapping[str, Any]) -> None: ...

    @abstractmethod
    def copied(self, report: CopyReport) -> None: ...

    @abstractmethod
    def report(self, command: str, doc: Mapping[str, Any]) -> None:
        """A report of one of `JSON_SHAPES`' shape for `command`, printed as it is."""

    @abstractmethod
    def failed(self, command: str, error: Exception) -> None:
        """The command failed with `error` (its message is on stderr already)."""


class JsonOutput(Output):
    """Each report as one indented JSON document (shapes: `JSON_SHAPES`)."""

    def emit(self, doc: Any) -> None:
        self.write(json.dumps(doc, indent=2, default=str) + "\n")

    def initialised(self, report: Mapping[str, Any]) -> None:
        self.emit(report)

    def log_info(self, info: Mapping[str, Any]) -> None:
        self.emit(info)

    def set_info(self, info: Mapping[str, Any]) -> None:
        self.emit(info)

    def logs(self, summaries: Sequence[LogSummary]) -> None:
        self.emit([s.to_dict() for s in summaries])

    def verified(self, report: VerifyReport) -> None:
        self.emit(report.to_dict())

    def set_verified(self, url: str, reports: Mapping[str, VerifyReport]) -> None:
        failed = [name for name, report in reports.items() if not report.ok]
        self.emit({"url": url, "logs": {name: report.to_dict() for name, report in reports.items()},
                   "failed": failed, "ok": not failed})

    def cursors(self, report: Mapping[str, Any], lags: Sequence[CursorLag]) -> None:
        self.emit(report)

    def cursor(self, report: Mapping[str, Any], *, moved: bool) -> None:
        self.emit(report)

    def cursor_deleted(self, report: Mapping[str, Any]) -> None:
        self.emit(report)

    def collected(self, report: GCReport) -> None:
        self.emit(report.to_dict())

    def sealed(self, report: Mapping[str, Any]) -> None:
        self.emit(report)

    def copied(self, report: CopyReport) -> None:
        self.emit(report.to_dict())

    def report(self, command: str, doc: Mapping[str, Any]) -> None:
        self.emit(dict(doc))

    def failed(self, command: str, error: Exception) -> None:
        """A failed command still prints JSON on stdout: `{"error": {...}}`, so a program
        reading it needs no second parser for stderr (the exit status says it failed)."""
        self.emit({"error": {"command": command, "type": type(error).__name__, "message": str(error)}})


class TextOutput(Output):
    """Each report as aligned lines for a person at a terminal."""

    def initialised(self, report: Mapping[str, Any]) -> None:
        if report["created"]:
            self.write(f"created {'raw' if report['raw'] else 'structured'} log at {report['url']}\n")
        else:
            self.write(f"{report['url']} already exists (next offset {report['next_offset']})\n")

    def log_info(self, info: Mapping[str, Any]) -> None:
        self.write(f"log            {info['url']}\n")
        self.write(f"offsets        [{info['oldest_offset']}, {info['next_offset']})  ({info['records']} records)\n")
        self.write(f"fragments      {info['fragments']}  snapshots {info['snapshots']}  bytes {info['bytes']}\n")
        self.write(f"setsum         {info['setsum']}\n")
        self.write(f"collected      {info['collected']}\n")
        self.write(f"balanced       {'yes' if info['balanced'] else 'NO: ' + str(info['balance_problem'])}\n")
        self.write(f"schema         {'raw (body: binary)' if info['raw'] else ', '.join(info['schema'])}\n")
        self.write(f"sealed         {'yes' if info['sealed'] else 'no'}\n")
        self.write(f"retention      {info['retention_described'] or 'none (only cursors release records)'}\n")
        self.write(f"incarnation    {info['incarnation'] or 'none (created before incarnations)'}\n")
        parent = info.get("parent")
        if parent is not None:
            self.write(f"parent         {parent['log']} below offset {parent['offset']['offset']} (reads "
                       f"[{parent['start']['offset']}, {parent['offset']['offset']}) through pin {parent['pin']})\n")
        for pin in info.get("pins", []):
            self.write(f"pinned by      {pin['branch']} from offset {pin['start']} (pin {pin['name']})\n")
        for name, tag in sorted(info.get("tags", {}).items()):
            self.write(f"tag            {name}: [{tag['start']}, {tag['offset']})"
                       + (" held" if tag["hold"] else "") + "\n")
        lines = [describe_lag(CursorLag(**lag)) for lag in info["lag"].values()]
        lines += [f"{k} ({'stale' if k in info['stale_cursors'] else 'broken'}: {v})"
                  for k, v in sorted(info["broken_cursors"].items())]
        self.write("cursors        " + ("\n" + " " * 15).join(lines or ["none"]) + "\n")
        pending = info["pending_garbage"]
        self.write(
            "garbage        "
            + ("none pending\n" if pending is None else f"pending below offset {pending['first_to_keep']}"
               f" ({'applied' if pending['applied_epoch_us'] else 'not yet applied'})\n")
        )

    def set_info(self, info: Mapping[str, Any]) -> None:
        self.write(f"log set        {info['url']}  ({info['logs']} logs)\n")
        self.write(f"records        {info['records']}  bytes {info['bytes']}\n")
        self.write(f"sealed         {', '.join(info['sealed']) or 'none'}\n")
        worst = info["most_behind"]
        self.write(
            f"cursors        on {info['logs_with_cursors']} logs"
            + ("" if worst is None else f"; most behind: {worst['log']}/{describe_lag(_lag(worst))}")
            + "\n"
        )
        for name, broken in sorted(info["broken_cursors"].items()):
            self.write(f"broken cursor  {name}: {', '.join(sorted(broken))}\n")
        for name, error in sorted(info["unreadable"].items()):
            self.write(f"unreadable     {name}: {error}\n")
        dirty = info["dirty_log"]
        self.write(
            "dirty log      "
            + ("none\n" if dirty is None else
               f"offsets [{dirty['oldest_offset']}, {dirty['next_offset']}); gc cursor "
               f"{dirty['gc_cursor'] if dirty['gc_cursor'] is not None else 'none'}; rolled up to "
               f"{dirty['rolled_up_to'] if dirty['rolled_up_to'] is not None else 'never'}\n")
        )

    def logs(self, summaries: Sequence[LogSummary]) -> None:
        """One aligned row per log; LAG is the cursor furthest behind the tail."""
        rows: list[tuple[str, ...]] = [("LOG", "RECORDS", "BYTES", "OLDEST", "TAIL", "SEALED", "CURSORS", "LAG")]
        for s in summaries:
            if s.error is not None:
                rows.append((s.name, "error: " + s.error))
                continue
            worst = s.most_behind
            lag = "-" if worst is None else f"{worst.records_behind} ({worst.name})"
            cursors = str(len(s.cursors)) + (f" +{len(s.broken_cursors)} broken" if s.broken_cursors else "")
            rows.append((s.name, str(s.records), str(s.bytes), str(s.oldest_offset), str(s.next_offset),
                         "yes" if s.sealed else "no", cursors, lag))
        self.write(table(rows))

    def verified(self, report: VerifyReport) -> None:
        self.write(
            f"{report.url}: {'OK' if report.ok else 'FAILED'}: offsets [{report.oldest_offset}, "
            f"{report.next_offset}), {report.fragments} fragments, {report.snapshots} snapshots, "
            f"{report.records} records, {report.bytes} bytes\n"
        )
        for problem in report.problems:
            self.write(f"  {problem}\n")

    def set_verified(self, url: str, reports: Mapping[str, VerifyReport]) -> None:
        """Each log's line and problems as `wal3 verify` prints them, then one line for the set."""
        for report in reports.values():
            self.verified(report)
        failed = [name for name, report in reports.items() if not report.ok]
        self.write(f"log set {url}: {len(reports)} logs, "
                   + (f"FAILED: {', '.join(failed)}\n" if failed else "all OK\n"))

    def cursors(self, report: Mapping[str, Any], lags: Sequence[CursorLag]) -> None:
        """One aligned row per cursor under a header, as Kafka's consumer-group tool prints lag,
        then the broken cursors with what is wrong; nothing when there are none."""
        broken = report["broken_cursors"]
        if not lags and not broken:
            return
        rows = [("CURSOR", "OFFSET", "RECORDS_BEHIND", "BYTES_BEHIND", "MOVED")]
        rows += [(lag.name, str(lag.offset), str(lag.records_behind), str(lag.bytes_behind),
                  f"{ago(lag.moved_ago_s)} ago") for lag in lags]
        self.write(table(rows + sorted(broken.items())))

    def cursor(self, report: Mapping[str, Any], *, moved: bool) -> None:
        self.write(f"{report['name']}\t{report['offset']}\n" if moved else f"{report['offset']}\n")

    def cursor_deleted(self, report: Mapping[str, Any]) -> None:
        pass  # silent, as `rm` is

    def collected(self, report: GCReport) -> None:
        prefix = "dry run: would " if report.dry_run else ""
        if report.cutoff is None:
            self.write(f"{report.url}: no cursors and no retention policy that removes anything: nothing is "
                       "known to be consumed, nothing to collect\n")
        elif report.first_to_keep is not None:
            self.write(
                f"{report.url}: cutoff {report.cutoff}: {prefix}drop {report.records_dropped} records "
                f"({report.fragments_dropped} fragments, {report.snapshots_dropped} snapshots) below "
                f"offset {report.first_to_keep}\n"
            )
        else:
            self.write(f"{report.url}: cutoff {report.cutoff}: nothing new to collect\n")
        if report.steps:
            self.write(f"steps: {', '.join(report.steps)}\n")
        deleted = f"{prefix}delete{'' if report.dry_run else 'd'}"
        if report.deleted:
            self.write(f"{deleted} {len(report.deleted)} objects\n")
        if report.orphans_deleted:
            self.write(f"{deleted} {len(report.orphans_deleted)} orphans (unreferenced fragments and snapshots)\n")
        for key, start in sorted(report.holds.items()):
            self.write(f"held from offset {start} by {key} (a branch's pin or a held tag)\n")
        if report.retention is not None:
            policy = report_policy(report)
            self.write(f"retention {policy}: keeps offsets from {report.retention_cutoff}\n"
                       if report.retention_cutoff is not None else f"retention {policy}: removes nothing now\n")
        removed = report.retention_removed
        if removed is not None:
            self.write(f"{prefix}remove by the retention policy {removed['records']} records no cursor had "
                       f"read, offsets [{removed['start']}, {removed['limit']})\n")
        for name, at in report.cursors_overtaken.items():
            self.write(f"cursor {name} at {at} {'would be' if report.dry_run else 'was'} overtaken by the "
                       "retention policy\n")
        if report.pins_dropped:
            self.write(f"{'dry run: would drop' if report.dry_run else 'dropped'} {len(report.pins_dropped)} "
                       "pins whose branch does not read through them\n")
        for note in report.notes:
            self.write(f"note: {note}\n")
        self.write(f"log now holds offsets [{report.oldest_offset}, {report.next_offset})\n")

    def sealed(self, report: Mapping[str, Any]) -> None:
        self.write(f"{report['url']} is sealed at offset {report['next_offset']}\n")

    def copied(self, report: CopyReport) -> None:
        self.write(
            f"copied offsets [{report.start}, {report.limit}) ({report.records} records, "
            f"{report.fragments} fragments, {report.bytes} bytes) to {report.destination}; verified\n"
        )
        if not report.source_sealed:
            self.write("note: the source is not sealed: appends made after the copy began are not in it\n")

    def report(self, command: str, doc: Mapping[str, Any]) -> None:
        if command == "branch":
            self.write(f"{doc['branch']} is a branch of {doc['parent']} at offset {doc['offset']}: it "
                       f"reads [{doc['start']}, {doc['offset']}) from it (pin {doc['pin']}) and "
                       f"continues from {doc['offset']}\n")
        elif command == "compact":
            verb = "would rewrite" if doc["dry_run"] else "rewrote"
            self.write(f"{doc['url']}: {verb} {len(doc['runs'])} run(s) of small fragments "
                       f"({doc['records_rewritten']} records, {doc['bytes_read']} bytes): "
                       f"{doc['fragments_before']} -> {doc['fragments_after']} fragments, setsum "
                       f"{doc['setsum']} unchanged\n"
                       + (f"{doc['conflicts']} run(s) changed meanwhile and were left as they were\n"
                          if doc["conflicts"] else "")
                       + ("the youngest snapshot's fragments were merged: its pointer is replaced by them\n"
                          if doc["snapshots_lifted"] else "")
                       + "".join(f"note: {note}\n" for note in doc["notes"]))
        elif command == "retention":
            self.write(f"{doc['url']}: retention {doc['described']}"
                       + ("" if doc["changed"] else " (unchanged)") + "\n")
        elif command == "checkpoint":
            self.write(f"{doc['log']} is not a branch: nothing to do\n" if not doc["checkpointed"] else
                       (f"{doc['log']} is standalone: {doc['records_copied']} records "
                       f"({doc['fragments_copied']} fragments) copied from {doc['parent']}, pin released\n"))
        elif command == "branch --delete":
            self.write(f"deleted {doc['log']}: {doc['objects_removed']} object(s) removed"
                       + (f", its pin in {doc['parent']} released" if doc["parent"] else "")
                       + (" (finishing an earlier deletion)" if doc["resumed"] else "") + "\n")
            if doc["objects_left"]:
                self.write(f"left {doc['objects_left']} object(s) there that are not this log's "
                           "(another log below it, or files of no log)\n")
        elif command == "tag --list":
            rows = [["name", "offset", "start", "hold"]] + [
                [t["name"], str(t["offset"]), str(t["start"]), "yes" if t["hold"] else "no"]
                for t in doc["tags"]]
            self.write(table(rows) + "\n" if doc["tags"] else f"no tags in {doc['url']}\n")
        elif command == "tag":
            self.write(f"tag {doc['name']} of {doc['url']}: records [{doc['start']}, {doc['offset']})"
                       + (", held from garbage collection" if doc["hold"] else "") + "\n")
        else:
            width = max((len(key) for key in doc), default=0) + 1
            self.write("".join(f"{key:<{max(15, width)}}{value}\n" for key, value in doc.items()))

    def failed(self, command: str, error: Exception) -> None:
        pass  # the message is on stderr, the status says the rest


def table(rows: Sequence[Sequence[str]]) -> str:
    """Rows under the header `rows[0]` as left-aligned columns. A shorter row (a name, then an
    error or a problem) is aligned on its first column only, so a long message does not widen
    the table."""
    aligned = [row for row in rows if len(row) == len(rows[0])]
    widths = [max(len(row[i]) for row in aligned) for i in range(len(rows[0]))]
    widths[0] = max(len(row[0]) for row in rows)
    return "".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)).rstrip() + "\n" for row in rows)


def ago(seconds: float) -> str:
    """A duration as people read an age: 45s, 2m05s, 3h02m, 4d03h."""
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def _lag(doc: Mapping[str, Any]) -> CursorLag:
    return CursorLag(**{k: v for k, v in doc.items() if k != "log"})


def describe_lag(lag: CursorLag) -> str:
    """One cursor's lag on one line (`wal3 info`)."""
    records = f"{lag.records_behind} record{'' if lag.records_behind == 1 else 's'}"
    return f"{lag.name} at {lag.offset}: {records}, {lag.bytes_behind} bytes behind; moved {ago(lag.moved_ago_s)} ago"


def _json_value(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return value.isoformat()
    if isinstance(value, (dt.date, dt.time, dt.timedelta, decimal.Decimal)):
        return value.isoformat() if hasattr(value, "isoformat") else str(value)
    if isinstance(value, dict):
        return {k: _json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return str(value)
    return value


def record_json(row: dict[str, Any], raw: bool) -> dict[str, Any]:
    """One record as a JSON-ready dict (see the module docstring for the encoding)."""
    out: dict[str, Any] = {"_offset": row["_offset"], "_timestamp": _json_value(row["_timestamp"])}
    if raw:
        body = row["body"]
        try:
            out["body"] = body.decode("utf-8")
        except UnicodeDecodeError:
            out["body_base64"] = base64.b64encode(body).decode()
        return out
    for name, value in row.items():
        if name not in ("_offset", "_timestamp"):
            out[name] = _json_value(value)
    return out
