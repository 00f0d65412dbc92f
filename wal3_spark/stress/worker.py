"""One process of a stress run: `python -m wal3_spark.stress.worker RUN_DIR ROLE NAME [--slot S]`.

The supervisor starts these, kills them with SIGKILL at random moments and starts them again.
SIGTERM stops one cleanly (a writer closes its `LogWriter`, so every append gets an outcome, and
journals that it exited). A worker whose parent died stops too, so an interrupted run leaves no
processes behind. Every second, and when it stops, a worker writes its counters (faults
injected, its role's own included, errors, GC steps) to its stats file.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from wal3_spark.clock import SYSTEM
from wal3_spark.stress.collector import StressCollector
from wal3_spark.stress.compactor import StressCompactor
from wal3_spark.stress.config import StressConfig
from wal3_spark.stress.fault_store import fault_store
from wal3_spark.stress.journal import Journal
from wal3_spark.stress.reader import StressReader
from wal3_spark.stress.rundir import RunDir, write_json
from wal3_spark.stress.writer import StressWriter, open_writer

ROLES = ("writer", "reader", "collector", "compactor")
STATS_EVERY_S = 1.0


def _watch(stop: threading.Event, write_stats: Callable[[], None]) -> None:
    parent = os.getppid()
    while not stop.wait(STATS_EVERY_S):
        write_stats()
        if os.getppid() != parent:
            logging.getLogger(__name__).warning("the supervisor is gone; stopping")
            stop.set()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m wal3_spark.stress.worker")
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("role", choices=ROLES)
    parser.add_argument("name", help="this incarnation's name, unique in the run")
    parser.add_argument("--slot", help="the reader slot whose state and cursor to use")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    run = RunDir(args.run_dir)
    config = StressConfig.load(run.config)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor stops us on Ctrl-C
    store, fault_counts = fault_store(config, args.name, stop, damage_manifests=args.role == "reader")

    def write_stats() -> None:
        stats: dict[str, Any] = {"name": args.name, "role": args.role,
                                 "faults": {**fault_counts(), **role.faults()},
                                 "counters": role.counters()}
        write_json(run.stats(args.name), stats)

    role: StressWriter | StressReader | StressCollector | StressCompactor
    if args.role == "writer":
        role = StressWriter(config, args.name, open_writer(config, args.name, store),
                            Journal(run.journal(args.name)), SYSTEM)
    elif args.role == "reader":
        role = StressReader(run, config.seed, args.slot or args.name, store, config.read_chunk,
                            config.read_cycle_s)
    elif args.role == "collector":
        role = StressCollector(config, args.name, store, after_run=write_stats)
    else:
        role = StressCompactor(config, args.name, store, after_run=write_stats)
    write_stats()  # also tells the supervisor that this process is up
    threading.Thread(target=_watch, args=(stop, write_stats), name="stress-watch", daemon=True).start()
    try:
        role.run(stop)
    finally:
        write_stats()
    return 0


if __name__ == "__main__":
    sys.exit(main())
