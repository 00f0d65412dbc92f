"""The `wal3` commands, one function each, grouped by what they act on: one log (`log`), its
cursors (`cursor`), whole-log operations (`ops`) and the logs under a prefix (`logset`).

A command takes the parsed arguments and the run's `Output`, does its work through the core,
hands its report to the output and returns the exit status. Each module's `register` adds its
commands' arguments to the parser (`wal3_spark.cli.main`).
"""

from __future__ import annotations

import argparse
import ipaddress
import socket
import sys
from collections.abc import Callable
from typing import Any, Protocol

from wal3_spark.cli.arguments import port_arg
from wal3_spark.cli.output import Output
from wal3_spark.storage import open_store
from wal3_spark.storage.base import ObjectStore

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2

#: a command: the parsed arguments and the run's output in, the exit status out
Command = Callable[[argparse.Namespace, Output], int]


class AddCommand(Protocol):
    """`main`'s way to add a command: its parser comes back, with the options every command
    takes and, for `json` (names in `output.JSON_SHAPES`), `--json` and its documentation."""

    def __call__(
        self, name: str, fn: Command, help_: str, *, json: tuple[str, ...] = ()
    ) -> argparse.ArgumentParser: ...


def store_options(args: argparse.Namespace) -> dict[str, str]:
    """The store options given on the command line (`--endpoint`, `--region`)."""
    return {name: value for name in ("endpoint", "region") if (value := getattr(args, name, None))}


def open_log_store(url: str, args: argparse.Namespace) -> ObjectStore:
    return open_store(url, store_options(args))


#: where `wal3 console` and `wal3 exporter` listen unless told: this machine only
DEFAULT_HOST = "127.0.0.1"


def add_listen_options(p: argparse.ArgumentParser, default_port: int) -> None:
    """`--host` and `--port` of a command that serves HTTP."""
    p.add_argument("--host", default=DEFAULT_HOST,
                   help=f"address to listen on (default {DEFAULT_HOST}: this machine only)")
    p.add_argument("--port", type=port_arg, default=default_port,
                   help=f"port to listen on (default {default_port}; 0: any free port)")


def serve(command: str, app: Callable[..., Any], args: argparse.Namespace, what: str, *,
          exposed: str, path: str = "", note: str = "") -> int:
    """Serve the WSGI `app` where `--host` and `--port` say until interrupted, having said on
    stderr what is served where (scripts read the URL from that line) and, when the address is
    not this machine's loopback, what anyone who reaches it can do (`exposed`)."""
    from wal3_spark.console.server import ConsoleServer

    server = ConsoleServer(app, args.host, args.port)
    sys.stderr.write(f"wal3 {command}: {what} at {server.url}{path} ({note}Ctrl-C stops)\n")
    if not ipaddress.ip_address(socket.gethostbyname(args.host)).is_loopback:
        sys.stderr.write(f"wal3 {command}: warning: listening on {args.host}, not only on this machine: "
                         f"anyone who reaches it can {exposed}\n")
    sys.stderr.flush()
    server.serve_forever()
    return EXIT_OK
