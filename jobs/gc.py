"""Garbage-collect every wal3 log under a prefix.

    spark-submit jobs/gc.py --prefix s3://bucket/logs [--grace 3600] [--dry-run] [--force]
    python jobs/gc.py --prefix /data/logs --driver-only      # no Spark at all

A log is any directory under the prefix holding `manifest/MANIFEST`. By default each log is
collected by one Spark task (logs are independent, and each collection is safe to run
concurrently with writers and with another collector); `--driver-only` iterates them in this
process instead. One JSON line per log is printed; the exit status is 1 if any log failed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
try:
    import wal3_spark  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from wal3_spark.cli import endpoint_arg, seconds_arg, share_arg  # noqa: E402 (after the path set-up)

MANIFEST_SUFFIX = "manifest/MANIFEST"


def find_logs(prefix: str, options: dict[str, str]) -> list[str]:
    """Every log root under `prefix` (including the prefix itself), in key order."""
    from wal3_spark.storage import open_store
    from wal3_spark.storage.common import join_url

    store = open_store(prefix, options)
    roots = []
    for meta in store.list(""):
        if meta.key == MANIFEST_SUFFIX or meta.key.endswith("/" + MANIFEST_SUFFIX):
            roots.append(join_url(store.url, meta.key[: -len(MANIFEST_SUFFIX)]))
    return roots


def collect_one(url: str, settings: dict) -> dict:
    """Collect one log; never raises (the error goes into the result)."""
    from wal3_spark.errors import Wal3Error
    from wal3_spark.gc import collect_garbage

    try:
        report = collect_garbage(
            url,
            options=settings["options"],
            dry_run=settings["dry_run"],
            grace_s=settings["grace_s"],
            max_drop_share=settings["max_drop_share"],
            force=settings["force"],
            writer="wal3 gc job",
        )
    except Wal3Error as exc:
        return {"url": url, "ok": False, "error": str(exc)}
    doc = report.to_dict()
    return {
        "url": url,
        "ok": True,
        "cutoff": doc["cutoff"],
        "first_to_keep": doc["first_to_keep"],
        "steps": doc["steps"],
        "deleted": len(doc["deleted"]),
        "orphans_deleted": len(doc["orphans_deleted"]),
        "oldest_offset": doc["oldest_offset"],
        "next_offset": doc["next_offset"],
        "pending": doc["pending"] is not None,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="jobs/gc.py", description="Garbage-collect every wal3 log under a prefix."
    )
    parser.add_argument("--prefix", required=True, help="s3://bucket/prefix or a local directory")
    parser.add_argument("--grace", type=seconds_arg, default=3600.0, help="grace interval in seconds (default 3600)")
    parser.add_argument("--dry-run", action="store_true", help="report what would be collected")
    parser.add_argument("--force", action="store_true", help="allow collecting beyond --max-drop-share")
    parser.add_argument("--max-drop-share", type=share_arg, default=0.9,
                        help="refuse to drop more than this share of a log without --force (default 0.9)")
    parser.add_argument("--endpoint", type=endpoint_arg, help="S3 endpoint URL (default: AWS_ENDPOINT_URL_S3)")
    parser.add_argument("--driver-only", action="store_true", help="run in this process, without Spark")
    parser.add_argument("--master", help="Spark master when not given by spark-submit")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    options = {"endpoint": args.endpoint} if args.endpoint else {}
    settings = {
        "options": options,
        "dry_run": args.dry_run,
        "grace_s": args.grace,
        "max_drop_share": args.max_drop_share,
        "force": args.force,
    }
    from wal3_spark.errors import Wal3Error

    try:
        logs = find_logs(args.prefix, options)
    except Wal3Error as exc:
        print(f"jobs/gc.py: error: {exc}", file=sys.stderr)
        return 1
    if args.driver_only or not logs:
        results = [collect_one(url, settings) for url in logs]
    else:
        from _common import session

        spark = session("wal3-gc", master=args.master)
        try:
            results = (
                spark.sparkContext.parallelize(logs, len(logs))
                .map(lambda url: collect_one(url, settings))
                .collect()
            )
        finally:
            spark.stop()
    for result in results:
        print(json.dumps(result))
    failed = [r for r in results if not r["ok"]]
    print(f"{len(results)} logs, {len(failed)} failed", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
