"""`wal3 init`, `info`, `tail`, `cat` and `seal`: one log, created, described, read or sealed."""

from __future__ import annotations

import argparse

from wal3_spark.cli.arguments import count_arg, offset_arg, schema_arg, url_arg
from wal3_spark.cli.commands import EXIT_OK, AddCommand, open_log_store
from wal3_spark.cli.commands.logset import log_set, set_info
from wal3_spark.cli.output import Output
from wal3_spark.errors import InvalidOption, LogNotFound, Wal3Error
from wal3_spark.log.committer import Committer
from wal3_spark.log.reader import LogReader
from wal3_spark.observe.log_info import log_info, schema_lines


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
