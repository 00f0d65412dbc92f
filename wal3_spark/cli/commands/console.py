"""`wal3 console`: serve the read-only web console for a log or a log set (docs/console.md)."""

from __future__ import annotations

import argparse
import ipaddress
import socket
import sys

from wal3_spark.cli.arguments import url_arg
from wal3_spark.cli.commands import EXIT_OK, AddCommand, open_log_store
from wal3_spark.cli.output import Output
from wal3_spark.errors import Wal3Error


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number: give one within [0, 65535]") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port number: give one within [0, 65535] (0: any free port)")
    return port


def console(args: argparse.Namespace, output: Output) -> int:
    try:
        from wal3_spark.console.app import create_app
        from wal3_spark.console.server import ConsoleServer
        from wal3_spark.console.target import Target
    except ImportError as exc:  # the optional extra is not installed
        raise Wal3Error(f"the console needs the optional web dependencies ({exc.name} is missing): "
                        "pip install 'wal3-spark[console]'") from None
    target = Target.open(open_log_store(args.url, args))
    server = ConsoleServer(create_app(target), args.host, args.port)
    what = "the log set" if target.is_set else "the log"
    sys.stderr.write(f"wal3 console: {what} {target.url} at {server.url} (read-only; Ctrl-C stops)\n")
    if not ipaddress.ip_address(socket.gethostbyname(args.host)).is_loopback:
        sys.stderr.write(f"wal3 console: warning: listening on {args.host}, not only on this machine: anyone "
                         "who reaches it can read the records (there is no login)\n")
    sys.stderr.flush()
    server.serve_forever()
    return EXIT_OK


def register(add: AddCommand) -> None:
    from wal3_spark.console.server import DEFAULT_HOST, DEFAULT_PORT

    p = add("console", console, "serve a read-only web console for a log, or for the logs under a prefix")
    p.add_argument("url", type=url_arg, metavar="URL_OR_PREFIX")
    p.add_argument("--host", default=DEFAULT_HOST,
                   help=f"address to listen on (default {DEFAULT_HOST}: this machine only)")
    p.add_argument("--port", type=_port, default=DEFAULT_PORT,
                   help=f"port to listen on (default {DEFAULT_PORT}; 0: any free port)")
