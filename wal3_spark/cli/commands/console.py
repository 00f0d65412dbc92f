"""`wal3 console`: serve the read-only web console for a log or a log set (docs/console.md)."""

from __future__ import annotations

import argparse

from wal3_spark.cli.arguments import url_arg
from wal3_spark.cli.commands import AddCommand, add_listen_options, open_log_store, serve
from wal3_spark.cli.output import Output
from wal3_spark.errors import Wal3Error


def console(args: argparse.Namespace, output: Output) -> int:
    try:
        from wal3_spark.console.app import create_app
        from wal3_spark.console.target import Target
    except ImportError as exc:  # the optional extra is not installed
        raise Wal3Error(f"the console needs the optional web dependencies ({exc.name} is missing): "
                        "pip install 'wal3-spark[console]'") from None
    target = Target.open(open_log_store(args.url, args))
    what = "the log set" if target.is_set else "the log"
    return serve("console", create_app(target), args, f"{what} {target.url}", note="read-only; ",
                 exposed="read the records (there is no login)")


def register(add: AddCommand) -> None:
    from wal3_spark.console.server import DEFAULT_PORT

    p = add("console", console, "serve a read-only web console for a log, or for the logs under a prefix")
    p.add_argument("url", type=url_arg, metavar="URL_OR_PREFIX")
    add_listen_options(p, DEFAULT_PORT)
