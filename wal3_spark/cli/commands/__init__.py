"""The `wal3` commands, one function each, grouped by what they act on: one log (`log`), its
cursors (`cursor`), whole-log operations (`ops`) and the logs under a prefix (`logset`).

A command takes the parsed arguments and the run's `Output`, does its work through the core,
hands its report to the output and returns the exit status. Each module's `register` adds its
commands' arguments to the parser (`wal3_spark.cli.main`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Protocol

from wal3_spark.cli.output import Output
from wal3_spark.storage import open_store
from wal3_spark.storage.base import ObjectStore

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2

#: a command: the parsed arguments and the run's output in, the exit status out
Command = Callable[[argparse.Namespace, Output], int]


class AddCommand(Protocol):
    """`main`'s way to add a command: its parser comes back, with the options every command
    takes and, for `json` (names in `output.JSON_SHAPES`), `--json` and its documentation."""

    def __call__(self, name: str, fn: Command, help_: str, *, json: tuple[str, ...] = ()) -> argparse.ArgumentParser: ...


def store_options(args: argparse.Namespace) -> dict[str, str]:
    """The store options given on the command line (`--endpoint`, `--region`)."""
    return {name: value for name in ("endpoint", "region") if (value := getattr(args, name, None))}


def open_log_store(url: str, args: argparse.Namespace) -> ObjectStore:
    return open_store(url, store_options(args))
