"""What a Prometheus scrape of a log set costs: requests to the store per scrape of
`wal3 exporter`'s /metrics, on a log set on SeaweedFS with appenders and consumers running.
docs/design/61-scrape-cost.md records its output.

    ./dev python benchmarks/scrape_cost.py [--logs 1000] [--active 20] [--scrapes 12] [--every 5]

1. set-up: `--logs` logs under one prefix of a fresh SeaweedFS, each with one append of 20
   records, every fourth with a cursor `billing` at its tail;
2. load: `--active` of them get appends from writers kept open (one `DirtyLog` for the prefix,
   as a log-set deployment runs) and consumers move their `billing` cursor to somewhere behind
   the tail, for as long as the load runs;
3. the exporter's app serves the prefix through a request-counting store (TTL 0: every scrape
   refreshes; the exporter's default TTL only lowers the cost), and /metrics is scraped over
   HTTP: once cold (the first refresh reads every log), then `--scrapes` times every `--every`
   seconds under load, then again with the load stopped (idle);
4. for comparison, what reading every log costs (`wal3 ls PREFIX`: `logset.info.summarise`);
5. checks: the last scrape's cursor metrics equal `wal3 cursor list --json` of the active logs
   and of an idle one, and a warm scrape never reads more logs than were appended to, lag, or
   a full scan reads. Any failed check ends the run with status 1.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from benchmarks.logset_load import CONSUMERS, Load, populate, spread  # noqa: E402
from tests.support.fakes import CountingStore  # noqa: E402
from tests.support.seaweed import running_seaweed  # noqa: E402
from wal3_spark.console.server import serving  # noqa: E402
from wal3_spark.logset.info import summarise  # noqa: E402
from wal3_spark.logset.logs import LogSet  # noqa: E402
from wal3_spark.observe.metrics import exporter_app, metrics_registry  # noqa: E402
from wal3_spark.observe.status import StatusModel  # noqa: E402
from wal3_spark.storage import open_store  # noqa: E402


def row(name: str, value: str, note: str = "") -> None:
    print(f"{name:<34} {value:>12}  {note}", flush=True)


def check(ok: bool, what: str) -> None:
    if not ok:
        raise SystemExit(f"FAILED: {what}")


def ops(counts: Counter[str]) -> str:
    return ", ".join(f"{op} {n}" for op, n in sorted(counts.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--logs", type=int, default=1000)
    parser.add_argument("--active", type=int, default=20, help="logs with appenders and consumers")
    parser.add_argument("--scrapes", type=int, default=12, help="warm scrapes under load")
    parser.add_argument("--every", type=float, default=5.0, help="seconds between scrapes")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp, running_seaweed(Path(tmp) / "seaweed") as seaweed:
        url = seaweed.new_url("scrape")
        prefix = open_store(url, seaweed.options)
        logs = LogSet(prefix)
        names = [f"tenant-{i:04d}" for i in range(args.logs)]

        began = populate(logs, names, lambda name, start, n: [b"r%d" % i for i in range(start, start + n)])
        row("set-up", f"{began:.1f} s", f"{args.logs} logs of 20 records")

        active = spread(names, args.active)
        load = Load(prefix, active, lambda name, start, n: [b"x" * 100] * n, pause_s=0.05)
        stop = load.stopping

        counting = CountingStore(prefix)
        model = StatusModel(counting, ttl_s=0)
        try:
            with serving(exporter_app(metrics_registry(model))) as server:
                metrics_url = server.url + "metrics"

                def scrape(label: str) -> tuple[int, dict]:
                    counting.counts.clear()
                    began = time.perf_counter()
                    with urllib.request.urlopen(metrics_url, timeout=300) as response:
                        text = response.read().decode()
                    elapsed = time.perf_counter() - began
                    n = counting.requests()
                    touched = counting.logs_touched() - {"_dirty", ""}
                    row(label, f"{n} requests", f"{elapsed:.2f} s; {len(touched)} logs read; "
                        f"{ops(counting.by_operation())}")
                    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                               for family in text_string_to_metric_families(text) for s in family.samples}
                    return n, {"touched": touched, "samples": samples, "status": model.status()}

                stop.wait(2)
                cold, _ = scrape("cold scrape (every log)")
                warm = []
                for i in range(args.scrapes):
                    stop.wait(args.every)
                    n, seen = scrape(f"warm scrape {i + 1} (under load)")
                    check(seen["status"].incremental and seen["status"].error is None,
                          "a warm scrape reads the dirty log, not every log")
                    check(len(seen["touched"]) <= args.active, f"scrape {i + 1} read only active logs")
                    warm.append(n)
                load.stop()
                row("commits during the load", str(load.commits),
                    f"on {args.active} logs, with {CONSUMERS} consumers")
                # The load stopped: the next scrape reads what changed since; the one after it
                # only the dirty log's manifest (and cursors that trail an idle tail, once per
                # cursors_every_s).
                scrape("first scrape after the load")
                idle, _ = scrape("idle scrape")
                # Cursors trailing an idle tail are re-read once per cursors_every_s: now, for
                # a comparison with `wal3 cursor list` that no consumer move can have outrun.
                model.cursors_every_s = 0
                trailing, seen = scrape("idle, trailing cursors re-read")
                counting.counts.clear()
                began = time.perf_counter()
                summarise(LogSet(counting))
                full = counting.requests()
                row("reading every log (wal3 ls)", f"{full} requests",
                    f"{time.perf_counter() - began:.2f} s; {ops(counting.by_operation())}")
                row("warm scrapes under load", f"median {statistics.median(warm):.0f}",
                    f"min {min(warm)}, max {max(warm)} requests ({args.scrapes} scrapes every {args.every:.0f} s)")
                row("cold / idle / trailing re-read", f"{cold} / {idle} / {trailing}", f"requests; every log read: {full}")

                # The metrics agree with `wal3 cursor list --json`.
                env = {**os.environ, **seaweed.env, "PYTHONPATH": str(ROOT)}
                samples = seen["samples"]
                compared = 0
                for name in [*active[:5], names[0]]:
                    listed = json.loads(subprocess.run(
                        [sys.executable, "-m", "wal3_spark.cli.main", "cursor", "list", logs.log_url(name), "--json"],
                        env=env, cwd=ROOT, capture_output=True, text=True, check=True, timeout=120).stdout)
                    for cursor in listed["cursors"]:
                        labels = tuple(sorted({"log": name, "cursor": cursor["name"]}.items()))
                        for metric, key in (("wal3_cursor_offset", "offset"),
                                            ("wal3_cursor_records_behind", "records_behind"),
                                            ("wal3_cursor_bytes_behind", "bytes_behind")):
                            check(samples.get((metric, labels)) == cursor[key],
                                  f"{metric} of {name}: {samples.get((metric, labels))} != {cursor[key]}")
                        compared += 1
                row("cursor metrics = cursor list", f"{compared} cursors", "offset, records and bytes behind")
        finally:
            stop.set()


if __name__ == "__main__":
    main()
