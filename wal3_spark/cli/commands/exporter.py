"""`wal3 exporter`: serve a log's or a log set's figures as Prometheus metrics at /metrics, and
nothing else, for deployments that only scrape (docs/operations.md, "Metrics")."""

from __future__ import annotations

import argparse
import sys

from wal3_spark.cli.arguments import seconds_arg, url_arg
from wal3_spark.cli.commands import AddCommand, add_listen_options, open_log_store, serve
from wal3_spark.cli.commands.logset import add_selection, log_set
from wal3_spark.cli.output import Output
from wal3_spark.errors import Wal3Error
from wal3_spark.observe.status import (
    DEFAULT_CURSORS_EVERY_S,
    DEFAULT_FULL_SCAN_EVERY_S,
    DEFAULT_TTL_S,
    StatusModel,
)
from wal3_spark.storage.readonly import ReadOnlyStore

DEFAULT_PORT = 9340


def exporter(args: argparse.Namespace, output: Output) -> int:
    try:
        from wal3_spark.observe.metrics import exporter_app, metrics_registry
    except ImportError as exc:  # the optional extra is not installed
        raise Wal3Error(f"the exporter needs prometheus-client ({exc.name} is missing): "
                        "pip install 'wal3-spark[metrics]'") from None
    # a scrape must never change what it measures: every store it reads through refuses writes
    store = ReadOnlyStore(open_log_store(args.url, args), "the wal3 exporter")
    model = StatusModel(store, selection=log_set(store, args).selection, ttl_s=args.ttl,
                        full_scan_every_s=args.full_scan_every, cursors_every_s=args.cursors_every)
    what = "the log set" if model.is_log_set else "the log"
    status = model.status()  # fail now on a store that cannot be read, not at the first scrape
    if status.error is not None:
        raise Wal3Error(f"cannot read {model.url}: {status.error}")
    if model.is_log_set and not status.logs:
        sys.stderr.write(f"wal3 exporter: note: no log under {model.url} yet (a mistyped URL? "
                         "check it, and --endpoint for S3); serving its metrics as logs appear\n")
    return serve("exporter", exporter_app(metrics_registry(model)), args, f"{what} {model.url}",
                 path="metrics", exposed="read the names and figures of the logs and their cursors")


def register(add: AddCommand) -> None:
    p = add("exporter", exporter, "serve Prometheus metrics of a log, or of the logs under a prefix, at /metrics")
    p.add_argument("url", type=url_arg, metavar="URL_OR_PREFIX")
    add_listen_options(p, DEFAULT_PORT)
    add_selection(p)
    p.add_argument("--ttl", type=seconds_arg, default=DEFAULT_TTL_S,
                   help=f"serve the figures from memory this long before reading again (default {DEFAULT_TTL_S:.0f} s)")
    p.add_argument("--full-scan-every", type=seconds_arg, default=DEFAULT_FULL_SCAN_EVERY_S,
                   help="read every log of a prefix this often, whatever its dirty log says "
                        f"(default {DEFAULT_FULL_SCAN_EVERY_S:.0f} s)")
    p.add_argument("--cursors-every", type=seconds_arg, default=DEFAULT_CURSORS_EVERY_S,
                   help="re-read the cursors of a log nothing is appended to this often while they "
                        f"trail its tail (default {DEFAULT_CURSORS_EVERY_S:.0f} s)")
