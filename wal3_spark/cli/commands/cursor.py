"""`wal3 cursor list|get|set|delete`: a log's cursors, with how far each is behind."""

from __future__ import annotations

import argparse

from wal3_spark.cli.arguments import offset_arg, url_arg
from wal3_spark.cli.commands import EXIT_OK, AddCommand, Command, open_log_store
from wal3_spark.cli.output import Output
from wal3_spark.errors import CursorError, InvalidOption
from wal3_spark.log.cursor_lag import cursor_lags
from wal3_spark.log.cursors import CursorState, CursorStore
from wal3_spark.log.reader import LogReader


def list_cursors(args: argparse.Namespace, output: Output) -> int:
    if args.name is not None or args.force:
        raise InvalidOption("`wal3 cursor list URL` takes no NAME, OFFSET or --force: "
                            "`wal3 cursor get URL NAME` shows one cursor")
    cursors = _cursors(args)
    states, broken = cursors.list_all()
    manifest = LogReader(cursors.store).manifest()
    lags = cursor_lags(cursors.store, manifest, states)
    output.cursors({
        "url": cursors.url,
        "oldest_offset": manifest.oldest_offset,
        "next_offset": manifest.next_offset,
        "cursors": [lag.to_dict() for lag in lags],
        "broken_cursors": {b.name: f"{'stale' if b.stale else 'broken'}: {b.problem} "
                                   f"(fix: {b.fix(args.url)})"
                           for b in sorted(broken, key=lambda b: b.name)},
    }, lags)
    return EXIT_OK


def get_cursor(args: argparse.Namespace, output: Output) -> int:
    name = _name(args)
    cursors = _cursors(args)
    state = cursors.get(name)
    if state is None:
        raise CursorError(f"no cursor named {args.name!r}")
    output.cursor(_report(cursors, state), moved=False)
    return EXIT_OK


def set_cursor(args: argparse.Namespace, output: Output) -> int:
    name = _name(args)
    if args.offset is None:
        raise InvalidOption("`wal3 cursor set URL NAME OFFSET` needs an OFFSET")
    cursors = _cursors(args)
    state = cursors.move(name, args.offset, allow_backwards=args.force)
    output.cursor(_report(cursors, state), moved=True)
    return EXIT_OK


def delete_cursor(args: argparse.Namespace, output: Output) -> int:
    name = _name(args)
    cursors = _cursors(args)
    cursors.delete(name)
    output.cursor_deleted({"url": cursors.url, "name": name, "deleted": True})
    return EXIT_OK


ACTIONS: dict[str, Command] = {"list": list_cursors, "get": get_cursor, "set": set_cursor, "delete": delete_cursor}


def cursor(args: argparse.Namespace, output: Output) -> int:
    return ACTIONS[args.action](args, output)


def _cursors(args: argparse.Namespace) -> CursorStore:
    return CursorStore(open_log_store(args.url, args), writer="wal3 cli")


def _name(args: argparse.Namespace) -> str:
    """The NAME an action on one cursor needs, refusing (a usage error) what it would ignore: an
    OFFSET or --force given to another action than set."""
    if not args.name:
        raise InvalidOption(f"`wal3 cursor {args.action}` needs a cursor NAME")
    if args.action != "set" and (args.offset is not None or args.force):
        given = " ".join(x for x in (str(args.offset) if args.offset is not None else "",
                                     "--force" if args.force else "") if x)
        raise InvalidOption(f"`wal3 cursor {args.action}` takes no OFFSET or --force ({given}): "
                            f"only `wal3 cursor set URL NAME OFFSET [--force]` moves a cursor")
    return args.name


def _report(cursors: CursorStore, state: CursorState) -> dict[str, object]:
    return {"url": cursors.url, "name": state.name, "offset": state.cursor.offset,
            "epoch_us": state.cursor.epoch_us, "writer": state.cursor.writer}


def register(add: AddCommand) -> None:
    p = add("cursor", cursor, "list cursors with their lag, get, set or delete one",
            json=("cursor list", "cursor get", "cursor set", "cursor delete"))
    p.add_argument("action", choices=list(ACTIONS))
    p.add_argument("url", type=url_arg)
    p.add_argument("name", nargs="?")
    p.add_argument("offset", nargs="?", type=offset_arg)
    p.add_argument("--force", action="store_true",
                   help="allow moving a cursor backwards, below the oldest offset, or over a broken cursor")
