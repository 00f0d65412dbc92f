"""`wal3`: operate a log from the command line.

    wal3 init URL [--schema "id: int64, name: string"]
    wal3 info URL [--json]                     (a log, or the log set under a prefix)
    wal3 ls PREFIX [--logs A,B | --pattern GLOB] [--json]
    wal3 tail URL [-n N]
    wal3 cat URL [--from OFFSET] [--to OFFSET]
    wal3 verify URL [--json] [--no-data]
    wal3 cursor list|get|set|delete URL [NAME [OFFSET]]
    wal3 gc URL [--dry-run] [--grace SECONDS] [--keep-from OFFSET] [--force] [--json]
    wal3 seal URL
    wal3 copy SOURCE DESTINATION [--from OFFSET] [--no-cursors]

URLs: `s3://bucket/prefix`, `file:///path` or a plain path, `memory://name` (useless here). S3
settings come from `--endpoint`/`--region` or the usual AWS_* environment variables.

Records (`tail`, `cat`) are JSON lines: `_offset`, `_timestamp` (ISO 8601, UTC), then the
payload. A raw log's `body` is a string when it is valid UTF-8, otherwise `body_base64` holds
it base64-encoded; structured logs give each column (binary values base64, decimals and other
non-JSON values as strings).

Long commands (verify, gc, copy, cat) draw a progress bar on stderr only when it is a terminal
(`cat` only when its records do not go to the terminal): see `wal3_spark.cli.progress`.

Exit status: 0 on success; 1 when the operation failed for an expected reason (the message goes
to stderr, never a traceback) or when `verify` finds a problem; 2 for usage errors: every
argument is checked (offsets are integers >= 1, durations finite and >= 0, shares within
[0, 1], URLs of a supported store, offsets within the log's range) and a bad one is named with
the values it may take.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import decimal
import json
import logging
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from wal3_spark.cli.progress import ProgressBar
from wal3_spark.errors import (
    CorruptLog,
    CursorError,
    InvalidLogName,
    InvalidOption,
    InvalidUrl,
    LogNotFound,
    Wal3Error,
)
from wal3_spark.format.garbage import load_garbage
from wal3_spark.format.layout import FIRST_OFFSET, MANIFEST_KEY
from wal3_spark.format.schema import parse_schema
from wal3_spark.log.committer import Committer
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.lag import CursorLag, cursor_lags
from wal3_spark.log.reader import LogReader, iter_fragments
from wal3_spark.logset.info import set_info, summarise
from wal3_spark.logset.logs import LogSelection, LogSet
from wal3_spark.ops.copy import copy_log
from wal3_spark.ops.gc import DEFAULT_GRACE_S, GarbageCollector, referenced
from wal3_spark.ops.verify import verify
from wal3_spark.storage import open_store
from wal3_spark.storage.common import split_url
from wal3_spark.storage.s3 import S3Settings
from wal3_spark.stress import command as stress_command

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


# ------------------------------------------------------------------------------ helpers


def _options(args: argparse.Namespace) -> dict[str, str]:
    options = {}
    if getattr(args, "endpoint", None):
        options["endpoint"] = args.endpoint
    if getattr(args, "region", None):
        options["region"] = args.region
    return options


def _store(url: str, args: argparse.Namespace):
    return open_store(url, _options(args))


# ------------------------------------------------------------------ argument types
# Each raises ArgumentTypeError naming the values it accepts: argparse then exits with status 2
# and the usage line, and no traceback.


def _bounded(text: str, parse: Callable[[str], Any], low: float, high: float, what: str) -> Any:
    """`parse(text)` if it is a finite number within [low, high], else the usage error `what`."""
    try:
        value = parse(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and low <= value <= high):
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
    return value


def offset_arg(text: str) -> int:
    """A log offset: an integer >= 1 (offsets start at 1, as in Chroma)."""
    return _bounded(text, int, FIRST_OFFSET, math.inf,
                    f"an offset: give an integer >= {FIRST_OFFSET} (offsets start at {FIRST_OFFSET})")


def count_arg(text: str) -> int:
    """A number of records: an integer >= 0."""
    return _bounded(text, int, 0, math.inf, "a count: give an integer >= 0")


def positive_arg(text: str) -> int:
    """A number of things there must be at least one of (partitions, records per batch)."""
    return _bounded(text, int, 1, math.inf, "a positive count: give an integer >= 1")


def seconds_arg(text: str) -> float:
    """A duration in seconds: a finite number >= 0 (`nan`, `inf` and negatives are refused)."""
    return _bounded(text, float, 0, math.inf, "a duration: give a number of seconds >= 0, e.g. 3600")


def share_arg(text: str) -> float:
    """A share of a whole: a number within [0, 1]."""
    return _bounded(text, float, 0, 1, "a share: give a number within [0, 1], e.g. 0.9")


def url_arg(text: str) -> str:
    """A log URL of a store the command line can reach (not `memory://`: it lives in one process)."""
    try:
        scheme, _, _ = split_url(text)
    except InvalidUrl as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if scheme == "memory":
        raise argparse.ArgumentTypeError(
            f"{text!r}: a memory:// log lives inside one process and is gone when `wal3` exits; "
            "use s3://bucket/prefix, file:///abs/path or a plain path"
        )
    return text


def endpoint_arg(text: str) -> str:
    """An S3 endpoint URL, checked as the S3 store checks it (also when the log is not on S3)."""
    try:
        S3Settings.from_options({"endpoint": text}, environ={})
    except InvalidOption as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def schema_arg(text: str) -> pa.Schema:
    """An Arrow schema written as `parse_schema` reads it."""
    try:
        return parse_schema(text)
    except Wal3Error as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _json_value(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.timezone.utc)
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


def describe_lag(lag: CursorLag) -> str:
    """One cursor's lag on one line (`wal3 info`)."""
    records = f"{lag.records_behind} record{'' if lag.records_behind == 1 else 's'}"
    return f"{lag.name} at {lag.offset}: {records}, {lag.bytes_behind} bytes behind; moved {ago(lag.moved_ago_s)} ago"


def lag_table(lags: Sequence[CursorLag], broken: Mapping[str, str]) -> str:
    """`wal3 cursor list`: one aligned row per cursor under a header, as Kafka's consumer-group
    tool prints lag, then the broken cursors with what is wrong; nothing when there are none."""
    if not lags and not broken:
        return ""
    rows = [("CURSOR", "OFFSET", "RECORDS_BEHIND", "BYTES_BEHIND", "MOVED")]
    rows += [(lag.name, str(lag.offset), str(lag.records_behind), str(lag.bytes_behind),
              f"{ago(lag.moved_ago_s)} ago") for lag in lags]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    widths[0] = max([widths[0], *map(len, broken)])
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    lines += [f"{name.ljust(widths[0])}  {problem}" for name, problem in sorted(broken.items())]
    return "".join(line + "\n" for line in lines)


def lag_report(url: str, manifest, lags: Sequence[CursorLag], broken: Mapping[str, str]) -> dict[str, Any]:
    """`wal3 cursor list --json`."""
    return {"url": url, "oldest_offset": manifest.oldest_offset, "next_offset": manifest.next_offset,
            "cursors": [lag.to_dict() for lag in lags], "broken_cursors": dict(sorted(broken.items()))}


def _print_records(store, manifest, start: int | None, limit: int | None, out) -> int:
    """Records [start, limit) as JSON lines, with a progress bar when the records go to a file
    or a pipe and stderr is a terminal (on a terminal, records and bar would garble each other)."""
    raw = manifest.is_raw
    scan = LogReader(store).scan(start, limit, manifest=manifest)
    n = 0
    with ProgressBar("reading", "records", show=not out.isatty()) as progress:
        for batch in scan.reader:
            for row in batch.to_pylist():
                out.write(json.dumps(record_json(row, raw), ensure_ascii=False) + "\n")
            n += batch.num_rows
            progress(n, scan.records)
    out.flush()
    return n


# ----------------------------------------------------------------------------- commands


def cmd_init(args, out) -> int:
    schema = args.schema
    committer = Committer(_store(args.url, args), writer="wal3 cli")
    existed = committer.load() is not None
    manifest, _ = committer.create(schema)
    if existed:
        if schema is not None and manifest.arrow_schema() != schema:
            raise Wal3Error(f"{args.url} already exists with another schema: {manifest.arrow_schema()}")
        out.write(f"{args.url} already exists (next offset {manifest.next_offset})\n")
    else:
        out.write(f"created {'structured' if schema else 'raw'} log at {args.url}\n")
    return EXIT_OK


def log_info(store) -> dict[str, Any]:
    """What `wal3 info` shows, as a dict."""
    manifest = LogReader(store).manifest()
    cursors, broken = CursorStore(store).scan()
    refs = list(iter_fragments(store, manifest, 0))
    try:
        manifest.scrub()
        balance = None
    except CorruptLog as exc:
        balance = str(exc)
    tree = referenced(store, manifest)
    garbage, etag = load_garbage(store)
    schema = manifest.arrow_schema()
    return {
        "url": store.url,
        "oldest_offset": manifest.oldest_offset,
        "next_offset": manifest.next_offset,
        "records": manifest.next_offset - manifest.oldest_offset,
        "fragments": len(refs),
        "snapshots": len(tree.snapshots),
        "bytes": sum(r.num_bytes for r in refs),
        "acc_bytes": manifest.acc_bytes,
        "setsum": manifest.setsum.hexdigest(),
        "collected": manifest.collected.hexdigest(),
        "balanced": balance is None,
        "balance_problem": balance,
        "schema": None if schema is None else [f"{f.name}: {f.type}{'' if f.nullable else ' not null'}" for f in schema],
        "raw": manifest.is_raw,
        "sealed": manifest.sealed,
        "cursors": {c.name: c.cursor.offset for c in cursors},
        "broken_cursors": {b.name: b.problem for b in broken},
        "lag": {lag.name: lag.to_dict() for lag in cursor_lags(store, manifest, cursors)},
        "pending_garbage": None if garbage.is_empty() else garbage.summary(),
        "txns": {app: t.version for app, t in manifest.txns.items()},
        "writer": manifest.writer,
    }


def cmd_info(args, out) -> int:
    store = _store(args.url, args)
    try:
        info = log_info(store)
    except LogNotFound:
        if not _log_set(store, args).names():
            raise
        return _set_info(store, args, out)
    if args.json:
        out.write(json.dumps(info, indent=2) + "\n")
        return EXIT_OK
    out.write(f"log            {info['url']}\n")
    out.write(f"offsets        [{info['oldest_offset']}, {info['next_offset']})  ({info['records']} records)\n")
    out.write(f"fragments      {info['fragments']}  snapshots {info['snapshots']}  bytes {info['bytes']}\n")
    out.write(f"setsum         {info['setsum']}\n")
    out.write(f"collected      {info['collected']}\n")
    out.write(f"balanced       {'yes' if info['balanced'] else 'NO: ' + str(info['balance_problem'])}\n")
    out.write(f"schema         {'raw (body: binary)' if info['raw'] else ', '.join(info['schema'])}\n")
    out.write(f"sealed         {'yes' if info['sealed'] else 'no'}\n")
    lines = [describe_lag(CursorLag(**lag)) for lag in info["lag"].values()]
    lines += [f"{k} (broken: {v})" for k, v in sorted(info["broken_cursors"].items())]
    out.write("cursors        " + ("\n" + " " * 15).join(lines or ["none"]) + "\n")
    pending = info["pending_garbage"]
    out.write(
        "garbage        "
        + ("none pending\n" if pending is None else f"pending below offset {pending['first_to_keep']}"
           f" ({'applied' if pending['applied_epoch_us'] else 'not yet applied'})\n")
    )
    return EXIT_OK


def _log_set(store, args):
    return LogSet(store, LogSelection.parse(getattr(args, "logs", None), getattr(args, "pattern", None)))


def _set_info(store, args, out) -> int:
    """`wal3 info PREFIX` when PREFIX holds no log but a log set."""
    logs = _log_set(store, args)
    info = set_info(logs, summarise(logs))
    if args.json:
        out.write(json.dumps(info, indent=2) + "\n")
        return EXIT_OK
    out.write(f"log set        {info['url']}  ({info['logs']} logs)\n")
    out.write(f"records        {info['records']}  bytes {info['bytes']}\n")
    out.write(f"sealed         {', '.join(info['sealed']) or 'none'}\n")
    worst = info["most_behind"]
    out.write(
        f"cursors        on {info['logs_with_cursors']} logs"
        + ("" if worst is None else f"; most behind: {worst['log']}/{describe_lag(_lag(worst))}")
        + "\n"
    )
    for name, broken in sorted(info["broken_cursors"].items()):
        out.write(f"broken cursor  {name}: {', '.join(sorted(broken))}\n")
    for name, error in sorted(info["unreadable"].items()):
        out.write(f"unreadable     {name}: {error}\n")
    dirty = info["dirty_log"]
    out.write(
        "dirty log      "
        + ("none\n" if dirty is None else
           f"offsets [{dirty['oldest_offset']}, {dirty['next_offset']}); gc cursor "
           f"{dirty['gc_cursor'] if dirty['gc_cursor'] is not None else 'none'}; rolled up to "
           f"{dirty['rolled_up_to'] if dirty['rolled_up_to'] is not None else 'never'}\n")
    )
    return EXIT_OK


def _lag(doc: Mapping[str, Any]) -> CursorLag:
    return CursorLag(**{k: v for k, v in doc.items() if k != "log"})


def cmd_ls(args, out) -> int:
    store = _store(args.url, args)
    summaries = summarise(_log_set(store, args))
    if not summaries:
        _explain_empty_ls(store)
    if args.json:
        out.write(json.dumps([s.to_dict() for s in summaries], indent=2) + "\n")
    else:
        out.write(ls_table(summaries))
    return EXIT_FAIL if any(s.error for s in summaries) else EXIT_OK


def _explain_empty_ls(store) -> None:
    """An empty listing is a valid answer (a new prefix), but also what a mistyped prefix or a
    log's own URL gives: say so on stderr, and which command fits a log."""
    hint = (f" ({store.url} is a log itself: `wal3 info {store.url}` shows it)"
            if store.exists(MANIFEST_KEY) else "")
    sys.stderr.write(f"wal3 ls: no wal3 log directly under {store.url}{hint}\n")


def ls_table(summaries) -> str:
    """`wal3 ls`: one aligned row per log; LAG is the cursor furthest behind the tail."""
    rows = [("LOG", "RECORDS", "BYTES", "OLDEST", "TAIL", "SEALED", "CURSORS", "LAG")]
    for s in summaries:
        if s.error is not None:
            rows.append((s.name, "error: " + s.error, "", "", "", "", "", ""))
            continue
        worst = s.most_behind
        lag = "-" if worst is None else f"{worst.records_behind} ({worst.name})"
        cursors = str(len(s.cursors)) + (f" +{len(s.broken_cursors)} broken" if s.broken_cursors else "")
        rows.append((s.name, str(s.records), str(s.bytes), str(s.oldest_offset), str(s.next_offset),
                     "yes" if s.sealed else "no", cursors, lag))
    widths = [max(len(row[i]) for row in rows if not row[1].startswith("error: ")) for i in range(len(rows[0]))]
    return "".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() + "\n" for row in rows)


def cmd_tail(args, out) -> int:
    store = _store(args.url, args)
    manifest = LogReader(store).manifest()
    start = max(manifest.oldest_offset, manifest.next_offset - args.n)
    _print_records(store, manifest, start, manifest.next_offset, out)
    return EXIT_OK


def cmd_cat(args, out) -> int:
    store = _store(args.url, args)
    manifest = LogReader(store).manifest()
    oldest, tail = manifest.oldest_offset, manifest.next_offset
    if args.to is not None and args.from_ is not None and args.to < args.from_:
        raise InvalidOption(f"--to {args.to} is below --from {args.from_}: give --to >= --from")
    if args.from_ is not None and args.from_ > tail:
        raise InvalidOption(
            f"--from {args.from_} is past the log's tail: it holds offsets [{oldest}, {tail}); "
            f"give --from within [{oldest}, {tail}]"
        )
    _print_records(store, manifest, args.from_, args.to, out)
    return EXIT_OK


def cmd_verify(args, out) -> int:
    with ProgressBar("verifying", "fragments") as progress:
        report = verify(_store(args.url, args), check_fragments=not args.no_data, progress=progress)
    if args.json:
        out.write(json.dumps(report.to_dict(), indent=2, default=str) + "\n")
    else:
        out.write(
            f"{report.url}: {'OK' if report.ok else 'FAILED'}: offsets [{report.oldest_offset}, "
            f"{report.next_offset}), {report.fragments} fragments, {report.snapshots} snapshots, "
            f"{report.records} records, {report.bytes} bytes\n"
        )
        for problem in report.problems:
            out.write(f"  {problem}\n")
    return EXIT_OK if report.ok else EXIT_FAIL


def cmd_cursor(args, out) -> int:
    cursors = CursorStore(_store(args.url, args), writer="wal3 cli")
    if args.action == "list":
        states, broken = cursors.scan()
        manifest = LogReader(cursors.store).manifest()
        lags = cursor_lags(cursors.store, manifest, states)
        problems = {b.name: f"broken: {b.problem} (fix: {b.fix(args.url)})" for b in broken}
        if args.json:
            out.write(json.dumps(lag_report(cursors.store.url, manifest, lags, problems), indent=2) + "\n")
        else:
            out.write(lag_table(lags, problems))
        return EXIT_OK
    if not args.name:
        raise Wal3Error(f"`wal3 cursor {args.action}` needs a cursor NAME")
    if args.action == "get":
        state = cursors.get(args.name)
        if state is None:
            raise CursorError(f"no cursor named {args.name!r}")
        out.write(f"{state.cursor.offset}\n")
    elif args.action == "set":
        if args.offset is None:
            raise Wal3Error("`wal3 cursor set URL NAME OFFSET` needs an OFFSET")
        state = cursors.move(args.name, args.offset, allow_backwards=args.force)
        out.write(f"{state.name}\t{state.cursor.offset}\n")
    elif args.action == "delete":
        cursors.delete(args.name)
    return EXIT_OK


def cmd_gc(args, out) -> int:
    with ProgressBar("deleting", "objects") as progress:
        collector = GarbageCollector(
            _store(args.url, args),
            grace_s=DEFAULT_GRACE_S if args.grace is None else args.grace,
            max_drop_share=args.max_drop_share,
            force=args.force,
            writer="wal3 gc",
            progress=progress,
        )
        report = collector.run(keep_from=args.keep_from, dry_run=args.dry_run)
    if args.json:
        out.write(json.dumps(report.to_dict(), indent=2) + "\n")
        return EXIT_OK
    prefix = "dry run: would " if args.dry_run else ""
    if report.cutoff is None:
        out.write(f"{report.url}: no cursors: nothing is known to be consumed, nothing to collect\n")
    elif report.first_to_keep is not None:
        out.write(
            f"{report.url}: cutoff {report.cutoff}: {prefix}drop {report.records_dropped} records "
            f"({report.fragments_dropped} fragments, {report.snapshots_dropped} snapshots) below "
            f"offset {report.first_to_keep}\n"
        )
    else:
        out.write(f"{report.url}: cutoff {report.cutoff}: nothing new to collect\n")
    if report.steps:
        out.write(f"steps: {', '.join(report.steps)}\n")
    if report.deleted:
        out.write(f"{prefix}delete{'d' if not args.dry_run else ''} {len(report.deleted)} objects\n")
    if report.orphans_deleted:
        out.write(f"{prefix}delete{'d' if not args.dry_run else ''} {len(report.orphans_deleted)} orphans (unreferenced fragments and snapshots)\n")
    for note in report.notes:
        out.write(f"note: {note}\n")
    out.write(f"log now holds offsets [{report.oldest_offset}, {report.next_offset})\n")
    return EXIT_OK


def cmd_seal(args, out) -> int:
    manifest = Committer(_store(args.url, args), writer="wal3 seal").seal()
    out.write(f"{args.url} is sealed at offset {manifest.next_offset}\n")
    return EXIT_OK


def cmd_copy(args, out) -> int:
    with ProgressBar("copying", "fragments") as progress:
        report = copy_log(
            _store(args.source, args),
            _store(args.destination, args),
            from_offset=args.from_,
            copy_cursors=not args.no_cursors,
            progress=progress,
        )
    out.write(
        f"copied offsets [{report.start}, {report.limit}) ({report.records} records, "
        f"{report.fragments} fragments, {report.bytes} bytes) to {report.destination}; verified\n"
    )
    if not report.source_sealed:
        out.write("note: the source is not sealed: appends made after the copy began are not in it\n")
    return EXIT_OK


def cmd_stress(args, out) -> int:
    return stress_command.main(args, out, _options(args))


# ------------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    def common_options(default: Any) -> argparse.ArgumentParser:
        # Accepted before and after the command; a subcommand's unset option must not
        # overwrite the value given before it, hence SUPPRESS there.
        common = argparse.ArgumentParser(add_help=False)
        common.add_argument("--endpoint", type=endpoint_arg, default=default,
                            help="S3 endpoint URL (default: AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL)")
        common.add_argument("--region", default=default, help="S3 region (default: AWS_REGION)")
        common.add_argument("-v", "--verbose", action="store_true", default=default or False,
                            help="log progress to stderr")
        return common

    parser = argparse.ArgumentParser(
        prog="wal3", description="Operate a wal3 log on object storage.", parents=[common_options(None)]
    )
    common = common_options(argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, fn: Callable, help_: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_, description=help_, parents=[common])
        p.set_defaults(fn=fn)
        return p

    p = add("init", cmd_init, "create a log (raw, or structured with --schema)")
    p.add_argument("url", type=url_arg)
    p.add_argument("--schema", type=schema_arg, help='columns with Arrow or Spark SQL types, e.g. "id: int64, name: string not null" or "id BIGINT, name STRING"')

    p = add("info", cmd_info, "show offsets, counts, setsum balance, schema, cursors, seal, garbage "
            "(of a log; of the log set, for a prefix that holds logs)")
    p.add_argument("url", type=url_arg)
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = add("ls", cmd_ls, "list the logs under a prefix: records, bytes, tail, seal, cursor lag")
    p.add_argument("url", type=url_arg, metavar="PREFIX")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--logs", help="only these logs (comma-separated names)")
    which.add_argument("--pattern", help="only the logs whose names match this glob, e.g. 'tenant-*'")
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = add("tail", cmd_tail, "print the last N records as JSON lines")
    p.add_argument("url", type=url_arg)
    p.add_argument("-n", type=count_arg, default=10, help="how many records (default 10)")

    p = add("cat", cmd_cat, "print records [--from, --to) as JSON lines")
    p.add_argument("url", type=url_arg)
    p.add_argument("--from", dest="from_", type=offset_arg, help="first offset (default: the oldest)")
    p.add_argument("--to", type=offset_arg, help="offset to stop before (default: the tail)")

    p = add("verify", cmd_verify, "check every invariant and fragment; exit 1 on any problem")
    p.add_argument("url", type=url_arg)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--no-data", action="store_true", help="check metadata only, not fragment bytes")

    p = add("cursor", cmd_cursor, "list cursors with their lag, get, set or delete one")
    p.add_argument("action", choices=["list", "get", "set", "delete"])
    p.add_argument("url", type=url_arg)
    p.add_argument("name", nargs="?")
    p.add_argument("offset", nargs="?", type=offset_arg)
    p.add_argument("--force", action="store_true",
                   help="allow moving a cursor backwards, below the oldest offset, or over a broken cursor")
    p.add_argument("--json", action="store_true", help="list: machine-readable output")

    p = add("gc", cmd_gc, "garbage-collect below the lowest cursor")
    p.add_argument("url", type=url_arg)
    p.add_argument("--dry-run", action="store_true", help="report what would be collected")
    p.add_argument("--grace", type=seconds_arg, help="grace interval in seconds (default 3600)")
    p.add_argument("--keep-from", type=offset_arg, help="keep offsets from here (may only lower the cutoff)")
    p.add_argument("--force", action="store_true", help="collect even beyond --max-drop-share")
    p.add_argument("--max-drop-share", type=share_arg, default=0.9,
                   help="refuse to drop more than this share of the log without --force (default 0.9)")
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = add("seal", cmd_seal, "seal the log: later appends fail, reads keep working")
    p.add_argument("url", type=url_arg)

    p = add("copy", cmd_copy, "copy a log (or its suffix) to a new location and verify it")
    p.add_argument("source", type=url_arg)
    p.add_argument("destination", type=url_arg)
    p.add_argument("--from", dest="from_", type=offset_arg, help="copy from the fragment holding this offset")
    p.add_argument("--no-cursors", action="store_true", help="do not copy cursors")

    stress_command.add_arguments(add("stress", cmd_stress, "run the end-to-end verification stress test"))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.verbose:
        logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    try:
        return args.fn(args, sys.stdout)
    except (InvalidOption, InvalidUrl, InvalidLogName) as exc:  # arguments only the store or the log can judge
        sys.stderr.write(f"wal3 {args.command}: error: {exc}\n")
        return EXIT_USAGE
    except Wal3Error as exc:
        sys.stderr.write(f"wal3 {args.command}: error: {exc}\n")
        return EXIT_FAIL
    except BrokenPipeError:  # `wal3 cat ... | head`
        try:
            sys.stdout.close()
        except OSError:
            pass
        return EXIT_OK
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130


if __name__ == "__main__":
    sys.exit(main())
