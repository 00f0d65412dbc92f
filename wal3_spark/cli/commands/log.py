"""`wal3 init`, `info`, `tail`, `cat` and `seal`: one log, created, described, read or sealed."""

from __future__ import annotations

import argparse
from typing import Any

from wal3_spark.cli.arguments import count_arg, offset_arg, schema_arg, url_arg
from wal3_spark.cli.commands import EXIT_OK, AddCommand, open_log_store
from wal3_spark.cli.commands.logset import log_set, set_info
from wal3_spark.cli.output import Output
from wal3_spark.errors import CorruptLog, InvalidOption, LogNotFound, Wal3Error
from wal3_spark.format.garbage import load_garbage
from wal3_spark.format.manifest import Manifest
from wal3_spark.log.committer import Committer
from wal3_spark.log.cursor_lag import cursor_lags
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.holds import list_pins
from wal3_spark.log.reader import LogReader, iter_fragments
from wal3_spark.log.tags import TagStore
from wal3_spark.ops.garbage_collector import referenced
from wal3_spark.storage.base import ObjectStore


def init(args: argparse.Namespace, output: Output) -> int:
    schema = args.schema
    store = open_log_store(args.url, args)
    committer = Committer(store, writer="wal3 cli")
    existed = committer.load() is not None
    manifest, _ = committer.create(schema)
    if existed and schema is not None and manifest.arrow_schema() != schema:
        raise Wal3Error(f"{store.url} already exists with another schema: {manifest.arrow_schema()}")
    output.initialised({"url": store.url, "created": not existed, "raw": manifest.is_raw,
                        "schema": schema_lines(manifest), "next_offset": manifest.next_offset})
    return EXIT_OK


def schema_lines(manifest: Manifest) -> list[str] | None:
    """A structured log's columns as `name: type [not null]`; None for a raw log."""
    schema = manifest.arrow_schema()
    if schema is None:
        return None
    return [f"{f.name}: {f.type}{'' if f.nullable else ' not null'}" for f in schema]


def log_info(store: ObjectStore) -> dict[str, Any]:
    """What `wal3 info` shows of a log."""
    manifest = LogReader(store).manifest()
    cursors, broken = CursorStore(store).list_all()
    refs = list(iter_fragments(store, manifest, 0))
    try:
        manifest.scrub()
        balance = None
    except CorruptLog as exc:
        balance = str(exc)
    tree = referenced(store, manifest)
    garbage, _ = load_garbage(store)
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
        "schema": schema_lines(manifest),
        "raw": manifest.is_raw,
        "sealed": manifest.sealed,
        "cursors": {c.name: c.cursor.offset for c in cursors},
        "broken_cursors": {b.name: b.problem for b in broken},
        "stale_cursors": sorted(b.name for b in broken if b.stale),
        "incarnation": manifest.incarnation,
        "lag": {lag.name: lag.to_dict() for lag in cursor_lags(store, manifest, cursors)},
        "pending_garbage": None if garbage.is_empty() else garbage.summary(),
        "txns": {app: t.version for app, t in manifest.txns.items()},
        "writer": manifest.writer,
        "parent": manifest.parent.to_dict() if manifest.parent is not None else None,
        "pins": [{"name": name, "branch": pin.branch, "start": pin.start, "offset": pin.offset}
                 for name, (pin, _) in sorted(list_pins(store).items())],
        "tags": {t.name: {"offset": t.tag.offset, "start": t.tag.start, "hold": t.tag.hold}
                 for t in TagStore(store).list()},
    }


def info(args: argparse.Namespace, output: Output) -> int:
    """A log's figures, or a log set's when the URL holds no log but logs under it."""
    store = open_log_store(args.url, args)
    try:
        figures = log_info(store)
    except LogNotFound:
        logs = log_set(store, args)
        if not logs.names():
            raise
        output.set_info(set_info(logs))
        return EXIT_OK
    output.log_info(figures)
    return EXIT_OK


def tail(args: argparse.Namespace, output: Output) -> int:
    store = open_log_store(args.url, args)
    manifest = LogReader(store).manifest()
    start = max(manifest.oldest_offset, manifest.next_offset - args.n)
    output.records(LogReader(store).scan(start, manifest.next_offset, manifest=manifest), manifest.is_raw)
    return EXIT_OK


def cat(args: argparse.Namespace, output: Output) -> int:
    store = open_log_store(args.url, args)
    manifest = LogReader(store).manifest()
    oldest, next_offset = manifest.oldest_offset, manifest.next_offset
    if args.to is not None and args.from_ is not None and args.to < args.from_:
        raise InvalidOption(f"--to {args.to} is below --from {args.from_}: give --to >= --from")
    if args.from_ is not None and args.from_ > next_offset:
        raise InvalidOption(
            f"--from {args.from_} is past the log's tail: it holds offsets [{oldest}, {next_offset}); "
            f"give --from within [{oldest}, {next_offset}]"
        )
    column, values = _filter(args.filter)
    scan = LogReader(store).scan(args.from_, args.to, manifest=manifest, filter_column=column,
                                 filter_values=values)
    output.records(scan, manifest.is_raw)
    return EXIT_OK


def _filter(specs: list[str] | None) -> tuple[str | None, list[str] | None]:
    """`--filter COLUMN=VALUE` (repeatable, one column): the records whose column holds one of
    the values (stream filters skip the fragments without them)."""
    if not specs:
        return None, None
    pairs = [spec.partition("=") for spec in specs]
    columns = {column for column, _, _ in pairs}
    if any(not sep or not column for column, sep, _ in pairs) or len(columns) != 1:
        raise InvalidOption(f"--filter {' '.join(specs)}: give COLUMN=VALUE, repeated for more "
                            "values of the same column (e.g. --filter tenant=acme --filter "
                            "tenant=globex)")
    return pairs[0][0], [value for _, _, value in pairs]


def seal(args: argparse.Namespace, output: Output) -> int:
    store = open_log_store(args.url, args)
    manifest = Committer(store, writer="wal3 seal").seal()
    output.sealed({"url": store.url, "sealed": manifest.sealed, "next_offset": manifest.next_offset})
    return EXIT_OK


def register(add: AddCommand) -> None:
    p = add("init", init, "create a log (raw, or structured with --schema)", json=("init",))
    p.add_argument("url", type=url_arg)
    p.add_argument("--schema", type=schema_arg,
                   help='columns with Arrow or Spark SQL types, e.g. "id: int64, name: string not null" '
                        'or "id BIGINT, name STRING"')

    p = add("info", info, "show offsets, counts, setsum balance, schema, cursors, seal, garbage "
            "(of a log; of the log set, for a prefix that holds logs)", json=("info", "info PREFIX"))
    p.add_argument("url", type=url_arg)

    p = add("tail", tail, "print the last N records as JSON lines")
    p.add_argument("url", type=url_arg)
    p.add_argument("-n", type=count_arg, default=10, help="how many records (default 10)")

    p = add("cat", cat, "print records [--from, --to) as JSON lines")
    p.add_argument("url", type=url_arg)
    p.add_argument("--from", dest="from_", type=offset_arg, help="first offset (default: the oldest)")
    p.add_argument("--to", type=offset_arg, help="offset to stop before (default: the tail)")
    p.add_argument("--filter", action="append", metavar="COLUMN=VALUE",
                   help="only records whose COLUMN holds VALUE; repeat for more values of the same "
                        "column (fragments whose stream filter rules them out are not read)")

    p = add("seal", seal, "seal the log: later appends fail, reads keep working", json=("seal",))
    p.add_argument("url", type=url_arg)
