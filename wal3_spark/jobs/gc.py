"""Garbage-collect the wal3 logs under a prefix (a log set) and its dirty log.

    spark-submit jobs/gc.py --prefix s3://bucket/logs [--grace 3600] [--dry-run] [--force]
    spark-submit jobs/gc.py --prefix gs://bucket/logs        # or az://container/logs
    python jobs/gc.py --prefix /data/logs --driver-only      # no Spark at all

The logs are those directly under the prefix (`<prefix>/<name>/manifest/MANIFEST`). When the
prefix has a dirty log (`<prefix>/_dirty`), a run collects only the logs recorded there since
the previous run (`wal3_spark.logset.prefix_gc`), then rolls the dirty log up and collects it;
`--full-scan` collects every log (also the first run, and any run without a dirty log).
`--recursive` instead collects every log at any depth under the prefix (listing every object;
no dirty log). By default each log is collected by one Spark task (logs are independent, and
each collection is safe to run concurrently with writers and with another collector);
`--driver-only` runs them on threads in this process. One JSON line per log (and one for the
dirty log) is printed; the exit status is 1 if any failed.

`--auto-compact` (with `--auto-compact-fragments N` and `--auto-compact-target-bytes SIZE`, the
defaults of the writers' autoCompact) also compacts each visited log that is due
(`wal3_spark.log.auto_compaction.due`: a run of similar small fragments), by its size tiers, in
the same task (or thread) right after its collection; the compaction's report is the
`compaction` member of the log's JSON line. After, not before: the collection first drops what
is past the cursors and the retention policy, so the compaction does not rewrite records that
are about to go, and the fragments the compaction replaces cannot be deleted by this run
anyway (its compaction record, `compacted/<uuid>.json` in log/replaced.py, keeps them for the
orphan grace so that readers which planned on the older manifest finish). A later run deletes
them: the job records each log it compacted in the dirty log again, so that the next run visits
it even if nothing is appended (a run sooner than the orphan grace leaves them to the log's next
write or a `--full-scan`). With a dirty log the job visits only the logs written since the
previous run, which are exactly those that can have become due. A compaction that fails is
reported in its log's line (`ok` false in its `compaction`), does not undo or stop the collection or the
other logs, records its log for the next run too, and makes the exit status 1; a log whose
collection failed is not compacted. With `--dry-run` the line says whether the log is due.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from wal3_spark.cli.arguments import add_auto_compaction_arguments, endpoint_arg, seconds_arg, share_arg
from wal3_spark.jobs import common

if TYPE_CHECKING:
    from wal3_spark.log.auto_compaction import AutoCompactOptions
    from wal3_spark.storage.base import ObjectStore

MANIFEST_SUFFIX = "manifest/MANIFEST"


def find_logs_recursive(prefix: str, options: dict[str, str]) -> list[str]:
    """Every log root under `prefix` at any depth (including the prefix itself), in key order."""
    from wal3_spark.storage import open_store
    from wal3_spark.storage.common import join_url

    store = open_store(prefix, options)
    roots = []
    for meta in store.list(""):
        if meta.key == MANIFEST_SUFFIX or meta.key.endswith("/" + MANIFEST_SUFFIX):
            roots.append(join_url(store.url, meta.key[: -len(MANIFEST_SUFFIX)]))
    return roots


@dataclass(frozen=True)
class JobSettings:
    """What every log's collection (and automatic compaction) in one run of the job is given:
    one value, pickled to the executors, so that a caller who leaves a setting out fails at
    type-check time, not with a KeyError on an executor."""

    #: store options (credentials, endpoint), as `open_store` takes them
    options: dict[str, str]
    dry_run: bool
    grace_s: float
    max_drop_share: float
    force: bool
    #: compact each collected log that is due (`--auto-compact`); None: do not
    auto_compact: AutoCompactOptions | None = None


def collect_one(target: str | ObjectStore, settings: JobSettings) -> dict:
    """Collect one log (a URL or a store); never raises (the error goes into the result). The
    log's store is opened once, for the collection and the compaction."""
    from wal3_spark.errors import LogNotFound, Wal3Error
    from wal3_spark.ops.garbage_collector import GCOptions, collect_garbage
    from wal3_spark.storage import open_store

    url = target if isinstance(target, str) else target.url
    try:
        store = open_store(target, settings.options) if isinstance(target, str) else target
        report = collect_garbage(
            store,
            GCOptions(
                grace_s=settings.grace_s,
                max_drop_share=settings.max_drop_share,
                force=settings.force,
                writer="wal3 gc job",
                orphans_without_log=True,  # a name a failed job wrote to but never created
            ),
            dry_run=settings.dry_run,
        )
    except LogNotFound:
        return {"url": url, "ok": True, "skipped": "no log here"}  # a listed directory, not a log
    except Wal3Error as exc:
        return {"url": url, "ok": False, "error": str(exc)}
    doc = report.to_dict()
    result = {
        "url": url,
        "ok": True,
        "cutoff": doc["cutoff"],
        "first_to_keep": doc["first_to_keep"],
        "steps": doc["steps"],
        "deleted": len(doc["deleted"]),
        "orphans_deleted": len(doc["orphans_deleted"]),
        "oldest_offset": doc["oldest_offset"],
        "retention": doc["retention"],
        "cursors_overtaken": doc["cursors_overtaken"],
        "retention_removed": doc["retention_removed"],
        "retention_held_back": doc["retention_held_back"],
        "next_offset": doc["next_offset"],
        "pending": doc["pending"] is not None,
    }
    if settings.auto_compact is not None:
        result["compaction"] = compact_one(store, settings.auto_compact, settings.dry_run)
    return result


def compact_one(store: ObjectStore, options: AutoCompactOptions, dry_run: bool) -> dict:
    """The automatic compaction of one collected log, when it is due; never raises (a failure is
    `{"ok": False, "error": ...}`, so that it stops neither the collection nor the other logs)."""
    from wal3_spark.errors import Wal3Error
    from wal3_spark.log import auto_compaction
    from wal3_spark.log.reader import LogReader

    try:
        if not auto_compaction.due(LogReader(store).manifest(), options):
            return {"ok": True, "due": False}
        if dry_run:
            return {"ok": True, "due": True}
        report = auto_compaction.compact_tiers(store, options).to_dict()
    except Wal3Error as exc:
        return {"ok": False, "due": True, "error": str(exc)}
    return {"ok": True, "due": True, **report}


def compacted(result: dict) -> bool:
    """Whether a log's line says its compaction committed a merge or failed: either way the next
    run must visit the log (to delete the replaced fragments, or to try again)."""
    compaction = result.get("compaction")
    return compaction is not None and (not compaction["ok"] or bool(compaction.get("runs")))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Garbage-collect every wal3 log under a prefix."
    )
    parser.add_argument("--prefix", required=True,
                        help="s3://, gs:// or az:// bucket/prefix (abfss:// too), or a local directory")
    parser.add_argument("--grace", type=seconds_arg, default=3600.0, help="grace interval in seconds (default 3600)")
    parser.add_argument("--dry-run", action="store_true", help="report what would be collected")
    parser.add_argument("--force", action="store_true", help="allow collecting beyond --max-drop-share")
    parser.add_argument("--max-drop-share", type=share_arg, default=0.9,
                        help="refuse to drop more than this share of a log without --force (default 0.9)")
    parser.add_argument("--endpoint", type=endpoint_arg,
                        help="the store's endpoint URL (default: AWS_ENDPOINT_URL_S3 for S3, "
                             "STORAGE_EMULATOR_HOST for GCS)")
    parser.add_argument("--option", action="append", metavar="KEY=VALUE",
                        help="store option, as the other jobs take them; repeatable")
    parser.add_argument("--full-scan", action="store_true",
                        help="collect every log, not only those the dirty log recorded since the last run")
    parser.add_argument("--recursive", action="store_true",
                        help="collect every log at any depth under the prefix (lists every object; no dirty log)")
    parser.add_argument("--driver-only", action="store_true", help="run in this process (threads), without Spark")
    parser.add_argument("--master", help="Spark master when not given by spark-submit")
    add_auto_compaction_arguments(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    options = common.store_options(args.option)
    if args.endpoint:
        options["endpoint"] = args.endpoint
    from wal3_spark.errors import Wal3Error
    from wal3_spark.log.auto_compaction import AutoCompactOptions

    auto_compact = None
    if args.auto_compact:
        try:
            auto_compact = AutoCompactOptions(args.auto_compact_fragments, args.auto_compact_target_bytes)
        except Wal3Error as exc:
            common.error(str(exc))
            return 2
    settings = JobSettings(options=options, dry_run=args.dry_run, grace_s=args.grace,
                           max_drop_share=args.max_drop_share, force=args.force, auto_compact=auto_compact)
    from wal3_spark.logset import prefix_gc
    from wal3_spark.logset.dirty import dirty_store
    from wal3_spark.logset.logs import LogSet
    from wal3_spark.storage import open_store

    try:
        targets: Sequence[str | ObjectStore]
        if args.recursive:
            prefix, run = None, None
            targets = find_logs_recursive(args.prefix, options)
        else:
            prefix = open_store(args.prefix, options)
            run = prefix_gc.plan(prefix, full_scan=args.full_scan)
            logs = LogSet(prefix)
            targets = [logs.log_store(name) for name in run.names]
    except Wal3Error as exc:
        common.error(str(exc))
        return 1
    if args.driver_only or not targets:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(16, thread_name_prefix="wal3-gc") as pool:
            results = list(pool.map(lambda target: collect_one(target, settings), targets))
    else:
        urls = [t if isinstance(t, str) else t.url for t in targets]
        spark = common.session("wal3-gc", master=args.master, logs=[args.prefix])
        try:
            results = (
                spark.sparkContext.parallelize(urls, len(urls))
                .map(lambda url: collect_one(url, settings))
                .collect()
            )
        finally:
            spark.stop()
    labels = run.names if run is not None else targets
    collected = [(label, r) for label, r in zip(labels, results, strict=True) if "skipped" not in r]
    results = [r for _, r in collected]
    for result in results:
        print(json.dumps(result))
    failed = [r for r in results if not r["ok"]]
    failed_compactions = [r for r in results if "compaction" in r and not r["compaction"]["ok"]]
    how = "every log" if run is None or run.full_scan else "the logs changed since the last run"
    print(f"{len(results)} logs ({how}), {len(failed)} failed"
          + (f", {len(failed_compactions)} compactions failed" if settings.auto_compact else ""),
          file=sys.stderr)
    if run is not None and prefix is not None and not args.dry_run:
        names = [label for label, r in collected if (not r["ok"] or compacted(r)) and isinstance(label, str)]
        try:
            dirty = prefix_gc.finish(prefix, run, names, grace_s=args.grace, writer="wal3 gc job")
        except Wal3Error as exc:
            common.error(f"the dirty log: {exc}")
            return 1
        if dirty is not None:
            print(json.dumps({"url": dirty_store(prefix).url, "ok": dirty.error is None,
                              "dirty": dirty.to_dict()}))
            if dirty.error is not None:
                return 1
    return 1 if failed or failed_compactions else 0


if __name__ == "__main__":
    sys.exit(main())
