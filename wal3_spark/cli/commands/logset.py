"""`wal3 ls` (and `wal3 info PREFIX`): the logs under a prefix, each summarised."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from wal3_spark.cli.arguments import url_arg
from wal3_spark.cli.commands import EXIT_FAIL, EXIT_OK, AddCommand, open_log_store
from wal3_spark.cli.output import Output
from wal3_spark.format.layout import MANIFEST_KEY
from wal3_spark.logset import info
from wal3_spark.logset.logs import LogSelection, LogSet
from wal3_spark.storage.base import ObjectStore


def log_set(store: ObjectStore, args: argparse.Namespace) -> LogSet:
    """The logs under `store` that `--logs` or `--pattern` select (all without either)."""
    return LogSet(store, LogSelection.parse(getattr(args, "logs", None), getattr(args, "pattern", None)))


def set_info(logs: LogSet) -> dict[str, Any]:
    """What `wal3 info PREFIX` shows of a log set."""
    return info.set_info(logs, info.summarise(logs))


def ls(args: argparse.Namespace, output: Output) -> int:
    store = open_log_store(args.url, args)
    summaries = info.summarise(log_set(store, args))
    if not summaries:
        _explain_empty(store)
    output.logs(summaries)
    return EXIT_FAIL if any(s.error for s in summaries) else EXIT_OK


def _explain_empty(store: ObjectStore) -> None:
    """An empty listing is a valid answer (a new prefix), but also what a mistyped prefix or a
    log's own URL gives: say so on stderr, and which command fits a log."""
    hint = (f" ({store.url} is a log itself: `wal3 info {store.url}` shows it)"
            if store.exists(MANIFEST_KEY) else "")
    sys.stderr.write(f"wal3 ls: no wal3 log directly under {store.url}{hint}\n")


def register(add: AddCommand) -> None:
    p = add("ls", ls, "list the logs under a prefix: records, bytes, tail, seal, cursor lag", json=("ls",))
    p.add_argument("url", type=url_arg, metavar="PREFIX")
    add_selection(p)


def add_selection(p: argparse.ArgumentParser) -> None:
    """`--logs` and `--pattern`, which pick the logs of a prefix (`log_set`)."""
    which = p.add_mutually_exclusive_group()
    which.add_argument("--logs", help="only these logs of a prefix (comma-separated names)")
    which.add_argument("--pattern", help="only the logs of a prefix whose names match this glob, e.g. 'tenant-*'")
