"""Compact a wal3 log, or every log of a log set: runs of small fragments rewritten on executors,
each log committed by the driver with one manifest compare-and-swap.

    spark-submit jobs/compact.py --log s3://wal3/orders [--target-bytes 64m] [--min-fragments 2]
    spark-submit jobs/compact.py --prefix s3://wal3/tenants [--pattern 'tenant-*'] [--dry-run] [--json]
    python jobs/compact.py --prefix /data/logs --driver-only        # threads, no Spark

The driver plans every log (one manifest read each, `wal3_spark.log.compaction.plan`), one Spark
task rewrites each run (reads and verifies its fragments, uploads the merged fragment and its
`compacted/` record), and the driver commits each log's rewritten runs with one compare-and-swap.
A log whose run could not be rewritten (a damaged fragment, named) is not committed at all: the
runs rewritten for it are orphans for garbage collection, the log is as it was. A run that
another process changed while the job ran (a compaction, a collection) is a conflict of that log
only. One line per log (`--json`: one JSON object, the report of `wal3 compact --json` with `ok`
and `error`), then a summary on stderr; the exit status is 1 if any log failed.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from wal3_spark.cli.arguments import add_compaction_arguments
from wal3_spark.jobs import common
from wal3_spark.log.compaction import (
    CompactionPlan,
    CompactOptions,
    Rewritten,
    Run,
)


@dataclass(frozen=True)
class Planned:
    """One log's plan, or why it has none (`error`)."""

    url: str
    plan: CompactionPlan | None = None
    error: str | None = None


@dataclass(frozen=True)
class RewriteTask:
    """One run of one log, as an executor gets it."""

    log: int
    url: str
    run: Run


@dataclass(frozen=True)
class RewriteOutcome:
    """What an executor sends back: the run rewritten, or the error that stopped it."""

    log: int
    rewritten: Rewritten | None = None
    error: str | None = None


def plan_logs(urls: Sequence[str], settings: CompactOptions, options: dict[str, str]) -> list[Planned]:
    """Each log's plan, read on threads (one manifest read and one pin listing each)."""
    from concurrent.futures import ThreadPoolExecutor

    from wal3_spark.errors import Wal3Error
    from wal3_spark.log.compaction import plan
    from wal3_spark.storage import resolve_store

    def one(url: str) -> Planned:
        try:
            return Planned(url, plan(resolve_store(url, options), settings))
        except Wal3Error as exc:
            return Planned(url, error=str(exc))

    with ThreadPoolExecutor(16, thread_name_prefix="wal3-compact") as pool:
        return list(pool.map(one, urls))


def tasks_of(planned: Sequence[Planned]) -> list[RewriteTask]:
    """Every run of every planned log, one task each."""
    return [RewriteTask(i, p.url, run) for i, p in enumerate(planned) if p.plan is not None
            for run in p.plan.runs]


def rewrite_task(task: RewriteTask, options: dict[str, str]) -> RewriteOutcome:
    """Rewrite one run (on an executor); never raises: what stopped it is the outcome, so that
    the other logs of the job still commit."""
    from wal3_spark.log.compaction import rewrite
    from wal3_spark.storage import resolve_store

    try:
        return RewriteOutcome(task.log, rewrite(resolve_store(task.url, options), task.run))
    except Exception as exc:  # noqa: BLE001 (a damaged fragment, a store failure: this log's)
        return RewriteOutcome(task.log, error=f"{type(exc).__name__}: {exc}")


def commit_logs(planned: Sequence[Planned], outcomes: Sequence[RewriteOutcome],
                options: dict[str, str], dry_run: bool = False) -> list[dict]:
    """Commit each log whose runs were all rewritten (one compare-and-swap each, on threads);
    one result per log, in the order of `planned`."""
    from concurrent.futures import ThreadPoolExecutor

    from wal3_spark.errors import Wal3Error
    from wal3_spark.log.compaction import commit
    from wal3_spark.storage import resolve_store

    by_log: dict[int, list[RewriteOutcome]] = {}
    for outcome in outcomes:
        by_log.setdefault(outcome.log, []).append(outcome)

    def one(i: int) -> dict:
        log = planned[i]
        if log.plan is None:
            return {"url": log.url, "ok": False, "error": log.error}
        if dry_run or not log.plan.runs:
            return {**log.plan.report(dry_run).to_dict(), "ok": True, "error": None}
        done = by_log.get(i, [])
        errors = [o.error for o in done if o.error is not None]
        if errors or len(done) != len(log.plan.runs):
            orphans = [o.rewritten.fragment.path for o in done if o.rewritten is not None]
            return {**log.plan.report().to_dict(), "ok": False, "orphans": orphans,
                    "error": "; ".join(errors) or "a run's task did not report"}
        try:
            report = commit(resolve_store(log.url, options), log.plan,
                            [o.rewritten for o in done if o.rewritten is not None])
        except Wal3Error as exc:
            return {**log.plan.report().to_dict(), "ok": False, "error": str(exc)}
        return {**report.to_dict(), "ok": True, "error": None}

    with ThreadPoolExecutor(16, thread_name_prefix="wal3-compact") as pool:
        return list(pool.map(one, range(len(planned))))


def rewrite_on_threads(tasks: Sequence[RewriteTask], options: dict[str, str]) -> list[RewriteOutcome]:
    """`--driver-only`: the rewrites on threads of this process."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(4, thread_name_prefix="wal3-compact") as pool:
        return list(pool.map(lambda task: rewrite_task(task, options), tasks))


def rewrite_on_spark(master: str | None, logs: list[str]) -> Callable[[Sequence[RewriteTask], dict[str, str]],
                                                                        list[RewriteOutcome]]:
    """The rewrites as one Spark task per run."""

    def run(tasks: Sequence[RewriteTask], options: dict[str, str]) -> list[RewriteOutcome]:
        spark = common.session("wal3-compact", master=master, logs=logs)
        try:
            return (spark.sparkContext.parallelize(list(tasks), len(tasks))
                    .map(lambda task: rewrite_task(task, options)).collect())
        finally:
            spark.stop()

    return run


def compact_logs(urls: Sequence[str], settings: CompactOptions, options: dict[str, str], *,
                 dry_run: bool = False,
                 rewrite_all: Callable[[Sequence[RewriteTask], dict[str, str]], list[RewriteOutcome]]
                 = rewrite_on_threads) -> list[dict]:
    """Plan, rewrite (with `rewrite_all`; nothing in a dry run) and commit every log."""
    planned = plan_logs(urls, settings, options)
    tasks = [] if dry_run else tasks_of(planned)
    outcomes = rewrite_all(tasks, options) if tasks else []
    return commit_logs(planned, outcomes, options, dry_run=dry_run)


def log_urls(args: argparse.Namespace, options: dict[str, str]) -> list[str]:
    """`--log`'s URL, or the URLs of the log set's selected logs that exist (`--logs` names a
    missing one: it is planned, and fails as a missing log)."""
    if args.log:
        return [args.log]
    from wal3_spark.logset.logs import LogSelection, LogSet

    selection = LogSelection.parse(args.logs, args.pattern)
    logs = LogSet(args.prefix, selection, options=options)
    if selection.names is not None:
        return [logs.log_url(name) for name in selection.names]
    scan = logs.tails()
    return [logs.log_url(name) for name in sorted([*scan.tails, *scan.failed])]


def describe(result: dict) -> str:
    """One result as a line of text."""
    if result.get("error") and "runs" not in result:
        return f"{result['url']}: FAILED: {result['error']}"
    merged = sum(run["fragments"] for run in result["runs"])
    line = (f"{result['url']}: {result['fragments_before']} -> {result['fragments_after']} fragments "
            f"({len(result['runs'])} runs of {merged}{', dry run' if result['dry_run'] else ''})")
    if result["snapshots_lifted"]:
        line += ", the youngest snapshot's fragments among them"
    if result["conflicts"]:
        line += f", {result['conflicts']} runs changed meanwhile (their fragments are orphans)"
    if not result["ok"]:
        line += f": FAILED, nothing committed: {result['error']}"
    return "\n  ".join([line, *result["notes"]])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    common.add_log_or_set(p, "compact every log of the log set under this prefix")
    add_compaction_arguments(p)
    p.add_argument("--json", action="store_true", help="one JSON object per log")
    p.add_argument("--driver-only", action="store_true", help="rewrite on threads in this process, no Spark")
    p.add_argument("--option", action="append", metavar="KEY=VALUE", help="store option; repeatable")
    p.add_argument("--master", help="Spark master when not given by spark-submit")
    args = p.parse_args(argv)
    if args.log and (args.logs or args.pattern):
        p.error("--logs and --pattern go with --prefix")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from wal3_spark.errors import Wal3Error

    try:
        settings = CompactOptions(args.target_bytes, args.min_fragments, args.allow_chroma_incompatible,
                                  args.settle)
        options = common.store_options(args.option)
        urls = log_urls(args, options)
    except Wal3Error as exc:
        common.error(str(exc))
        return 2 if isinstance(exc, ValueError) else 1
    rewrite_all = rewrite_on_threads if args.driver_only else rewrite_on_spark(
        args.master, [args.log or args.prefix])
    results = compact_logs(urls, settings, options, dry_run=args.dry_run, rewrite_all=rewrite_all)
    for result in results:
        print(json.dumps(result) if args.json else describe(result))
    failed = [r for r in results if not r["ok"]]
    print(f"{len(results)} logs, {sum(len(r.get('runs', [])) for r in results)} runs, "
          f"{sum(r.get('conflicts', 0) for r in results)} conflicts, {len(failed)} failed", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
