"""`wal3 verify`, `gc`, `compact`, `retention` and `copy`: the operations on a whole log."""

from __future__ import annotations

import argparse

from wal3_spark.cli.arguments import (
    add_compaction_arguments,
    age_arg,
    offset_arg,
    seconds_arg,
    share_arg,
    size_arg,
    url_arg,
)
from wal3_spark.cli.commands import EXIT_FAIL, EXIT_OK, AddCommand, open_log_store
from wal3_spark.cli.commands.logset import add_selection, log_set
from wal3_spark.cli.output import Output
from wal3_spark.cli.progress import ProgressBar
from wal3_spark.errors import InvalidOption, LogNotFound
from wal3_spark.format.layout import MANIFEST_KEY
from wal3_spark.log.compaction import compact as compact_log
from wal3_spark.logset.logs import LogSet
from wal3_spark.ops.copy import copy_log
from wal3_spark.ops.garbage_collector import DEFAULT_GRACE_S, GarbageCollector, GCOptions
from wal3_spark.ops.retention import set_retention
from wal3_spark.ops.verify import verify as verify_log


def verify(args: argparse.Namespace, output: Output) -> int:
    """Verify the log at URL, or every log under it when URL holds no log but logs (as `info`
    does): an operator who gives the prefix of a log set means all of them. A URL with nothing
    stored under it is a mistyped path (LogNotFound), not a damaged log."""
    store = open_log_store(args.url, args)
    if not store.exists(MANIFEST_KEY):
        logs = log_set(store, args)
        names = logs.names()
        if names:
            return _verify_set(logs, names, args, output)
        if next(iter(store.list()), None) is None:
            raise LogNotFound(store.url)
    with ProgressBar("verifying", "fragments") as progress:
        report = verify_log(store, check_fragments=not args.no_data, progress=progress)
    output.verified(report)
    return EXIT_OK if report.ok else EXIT_FAIL


def _verify_set(logs: LogSet, names: list[str], args: argparse.Namespace, output: Output) -> int:
    """Each log in name order, one after the other (each verify already checks its fragments
    on threads); exit 1 when any log has a problem."""
    reports = []
    with ProgressBar("verifying", "logs") as progress:
        for done, name in enumerate(names, 1):
            reports.append(verify_log(logs.log_store(name), check_fragments=not args.no_data))
            progress(done, len(names))
    output.set_verified(logs.url, dict(zip(names, reports, strict=True)))
    return EXIT_OK if all(report.ok for report in reports) else EXIT_FAIL


def gc(args: argparse.Namespace, output: Output) -> int:
    with ProgressBar("deleting", "objects") as progress:
        collector = GarbageCollector(
            open_log_store(args.url, args),
            GCOptions(grace_s=DEFAULT_GRACE_S if args.grace is None else args.grace,
                      max_drop_share=args.max_drop_share, force=args.force, writer="wal3 gc"),
            progress=progress,
        )
        report = collector.run(keep_from=args.keep_from, dry_run=args.dry_run)
    output.collected(report)
    return EXIT_OK


def compact(args: argparse.Namespace, output: Output) -> int:
    report = compact_log(open_log_store(args.url, args), target_bytes=args.target_bytes,
                         min_fragments=args.min_fragments, dry_run=args.dry_run,
                         settle_s=args.settle,
                         allow_chroma_incompatible=args.allow_chroma_incompatible)
    output.report("compact", report.to_dict())
    return EXIT_OK


def retention(args: argparse.Namespace, output: Output) -> int:
    """Set (or clear) the log's retention policy; a bad combination is a usage error (exit 2)."""
    bounds = args.max_age is not None or args.max_bytes is not None
    if args.clear and bounds:
        raise InvalidOption("--clear removes the policy: give it alone, or --max-age and/or --max-bytes without it")
    if not args.clear and not bounds:
        raise InvalidOption("give --max-age DURATION and/or --max-bytes SIZE (e.g. --max-age 7d --max-bytes 10g), "
                            "or --clear to remove the policy")
    report = set_retention(open_log_store(args.url, args), clear=args.clear,
                           max_age_s=None if args.max_age is None else args.max_age / 1000,
                           max_bytes=args.max_bytes)
    output.report("retention", report.to_dict())
    return EXIT_OK


def copy(args: argparse.Namespace, output: Output) -> int:
    with ProgressBar("copying", "fragments") as progress:
        report = copy_log(
            open_log_store(args.source, args),
            open_log_store(args.destination, args),
            from_offset=args.from_,
            copy_cursors=not args.no_cursors,
            progress=progress,
        )
    output.copied(report)
    return EXIT_OK


def register(add: AddCommand) -> None:
    p = add("verify", verify, "check every invariant and fragment (of a log; of each log, for a prefix "
            "that holds logs); exit 1 on any problem", json=("verify", "verify PREFIX"))
    p.add_argument("url", type=url_arg)
    add_selection(p)
    p.add_argument("--no-data", action="store_true", help="check metadata only, not fragment bytes")

    p = add("gc", gc, "garbage-collect below the lowest cursor", json=("gc",))
    p.add_argument("url", type=url_arg)
    p.add_argument("--dry-run", action="store_true", help="report what would be collected")
    p.add_argument("--grace", type=seconds_arg, help=f"grace interval in seconds (default {DEFAULT_GRACE_S:.0f})")
    p.add_argument("--keep-from", type=offset_arg, help="keep offsets from here (may only lower the cutoff)")
    p.add_argument("--force", action="store_true", help="collect even beyond --max-drop-share")
    p.add_argument("--max-drop-share", type=share_arg, default=0.9,
                   help="refuse to drop more than this share of the log without --force (default 0.9)")

    p = add("compact", compact, "rewrite runs of small fragments into larger ones, every record "
            "and the setsum kept", json=("compact",))
    p.add_argument("url", type=url_arg)
    add_compaction_arguments(p)

    p = add("retention", retention, "record the log's retention policy, which every gc applies even below "
            "cursors (records past it go, whoever has not read them)", json=("retention",))
    p.add_argument("url", type=url_arg)
    p.add_argument("--max-age", type=age_arg, metavar="DURATION",
                   help="remove fragments whose newest record is older than this (7d, 12h, 30m, 90s, 500ms, 2w)")
    p.add_argument("--max-bytes", type=size_arg, metavar="SIZE",
                   help="remove the oldest fragments while the log holds more than this (10g, 512m, bytes); "
                        "at least the log's largest fragment")
    p.add_argument("--clear", action="store_true", help="remove the policy: only cursors release records")

    p = add("copy", copy, "copy a log (or its suffix) to a new location and verify it", json=("copy",))
    p.add_argument("source", type=url_arg)
    p.add_argument("destination", type=url_arg)
    p.add_argument("--from", dest="from_", type=offset_arg, help="copy from the fragment holding this offset")
    p.add_argument("--no-cursors", action="store_true", help="do not copy cursors")
