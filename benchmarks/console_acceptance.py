"""The console's acceptance run: a log set on SeaweedFS with appenders and consumers running,
the console served over it, and a real browser (Chromium through Selenium) on every page.
Prints a table (docs/console.md records its output) and, with --screenshots, saves each page.

    ./dev python benchmarks/console_acceptance.py [--logs 1000] [--active 20] [--screenshots docs/img]

1. set-up: `--logs` logs under one prefix of a fresh SeaweedFS, each with one append of 20
   records (a structured schema), every fourth with a cursor `billing` at its tail;
2. load: `--active` of them get appends from writers kept open (one `DirtyLog` for the prefix,
   as a log-set deployment runs), and consumer threads move each active log's `billing` cursor
   to somewhere behind the tail, for as long as the run lasts;
3. the console serves the prefix (through a request-counting store, so each page's requests
   are counted) and the browser opens each page: the overview (every log listed), an active
   log's page, three record pages in a row (contiguous offsets), the fragment timeline, the
   GC page and verify (to its result), and verify of an idle log whose fragment was damaged
   (it must fail, naming the fragment); the browser's console must show no error on any page;
4. the load stops; the overview (refreshed) must equal `wal3 info PREFIX --json`, and a scrape of
   the console's /metrics must agree with `wal3 ls PREFIX --json` (every log's next offset and
   records, the cursors of the logs without a consumer running).
Any check that fails ends the run with status 1.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from benchmarks.logset_load import Load, populate, spread  # noqa: E402
from tests.support.browser import chromium  # noqa: E402
from tests.support.browser import follow as browser_follow  # noqa: E402
from tests.support.browser import verify_result  # noqa: E402
from tests.support.fakes import CountingStore  # noqa: E402
from tests.support.seaweed import running_seaweed  # noqa: E402
from wal3_spark.console.app import create_app  # noqa: E402
from wal3_spark.console.server import serving  # noqa: E402
from wal3_spark.console.target import Target  # noqa: E402
from wal3_spark.log.reader import LogReader  # noqa: E402
from wal3_spark.logset.logs import LogSet  # noqa: E402
from wal3_spark.storage import open_store  # noqa: E402

#: the overview's refresh interval here (10 s by default): short, so that the second overview,
#: after the load stopped, is a fresh refresh
TTL_S = 1.0
SCHEMA = pa.schema([("id", pa.int64()), ("tenant", pa.string()), ("amount", pa.float64())])


def rows(name: str, start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()),
                     "tenant": pa.array([name] * n),
                     "amount": pa.array([round(i * 1.25, 2) for i in range(start, start + n)])}, schema=SCHEMA)


def row(name: str, value: str, note: str = "") -> None:
    print(f"{name:<44} {value:>14}  {note}", flush=True)


def check(ok: bool, what: str) -> None:
    if not ok:
        raise SystemExit(f"FAILED: {what}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--logs", type=int, default=1000)
    parser.add_argument("--active", type=int, default=20, help="logs with appenders and consumers")
    parser.add_argument("--screenshots", type=Path, help="save each page as console-<page>.png here")
    args = parser.parse_args()
    from selenium.webdriver.common.by import By

    with tempfile.TemporaryDirectory() as tmp, running_seaweed(Path(tmp) / "seaweed") as seaweed:
        url = seaweed.new_url("console")
        prefix = open_store(url, seaweed.options)
        names = [f"tenant-{i:04d}" for i in range(args.logs)]
        logs = LogSet(prefix)

        began = populate(logs, names, rows)
        row("set-up", f"{began:.1f} s", f"{args.logs} logs of 20 records")

        active = spread(names, args.active)
        load = Load(prefix, active, rows)
        stop = load.stopping

        # one idle log gets a damaged fragment (its bytes replaced): verify must name it
        damaged = names[2]
        damaged_store = logs.log_store(damaged)
        damaged_path = next(iter(LogReader(damaged_store).plan())).ref.path
        damaged_store.put_if_match(damaged_path, b"not a parquet file", damaged_store.head(damaged_path).etag)

        counting = CountingStore(prefix)
        driver = chromium("1280,900", "--hide-scrollbars")

        def follow(element) -> None:  # noqa: ANN001 - a link or button: click, wait for the next page
            browser_follow(driver, element)

        try:
            with serving(create_app(Target.open(counting), overview_ttl_s=TTL_S)) as server:
                def page(label: str, path: str, after: Callable[[], None] | None = None) -> None:
                    counting.counts.clear()
                    began = time.perf_counter()
                    driver.get(server.url + path)
                    elapsed = time.perf_counter() - began
                    errors = [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
                    check(not errors, f"the browser's console on {path}: {errors}")
                    if after is not None:
                        after()
                    row(f"page {label}", f"{elapsed:.2f} s", f"{counting.requests()} requests")
                    if args.screenshots is not None:
                        args.screenshots.mkdir(parents=True, exist_ok=True)
                        driver.save_screenshot(str(args.screenshots / f"console-{label}.png"))

                stop.wait(5)  # some appends and cursor moves before the first page
                page("overview", "", lambda: check(
                    len(driver.find_elements(By.CSS_SELECTOR, "#logs tbody tr")) == args.logs,
                    "every log is listed"))
                name = active[0]
                page("log", f"log/{name}", lambda: check(
                    int(driver.find_element(By.CSS_SELECTOR, '[data-figure="records"]').text) > 20,
                    "the active log has grown"))

                def offsets() -> list[int]:
                    return [int(tr.find_element(By.CSS_SELECTOR, "td").text)
                            for tr in driver.find_elements(By.CSS_SELECTOR, "#records tbody tr")]

                page("records", f"log/{name}/records?start=1&size=50",
                     lambda: check(offsets() == list(range(1, 51)), "the first page"))
                for _ in range(2):
                    first = offsets()[-1] + 1
                    follow(driver.find_element(By.ID, "page-next"))
                    check(offsets() == list(range(first, first + 50)), "the next page follows on")
                page("fragments", f"log/{name}/fragments")
                page("gc", f"log/{name}/gc", lambda: check(
                    "billing" in driver.find_element(By.CSS_SELECTOR, '[data-figure="holder"]').text,
                    "the cursor holding GC back"))

                def verified() -> None:
                    follow(driver.find_element(By.ID, "verify-start"))
                    state, text = verify_result(driver, 120)
                    check(state == "ok", f"verify: {text}")

                page("verify", f"log/{name}/verify", verified)

                def verify_fails() -> None:
                    follow(driver.find_element(By.ID, "verify-start"))
                    state, text = verify_result(driver, 120)
                    check(state == "failed", f"verify of the damaged log: {text}")
                    problems = driver.find_element(By.ID, "verify-problems").text
                    check("corrupt" in problems and damaged_path in problems, f"the damage is named: {problems}")

                page("verify-failed", f"log/{damaged}/verify", verify_fails)
                load.stop()
                row("records appended during the run", str(load.records))
                done = subprocess.run([sys.executable, "-m", "wal3_spark.cli", "info", url, "--json"],
                                      capture_output=True, text=True, env={**os.environ, **seaweed.env}, timeout=300)
                check(done.returncode == 0, f"wal3 info: {done.stderr}")
                expected = json.loads(done.stdout)

                def totals() -> None:
                    shown = {td.get_attribute("data-figure"): td.text for td in
                             driver.find_elements(By.CSS_SELECTOR, "#set-figures td[data-figure]")}
                    for key in ("logs", "records", "bytes"):
                        check(int(shown[key]) == expected[key], f"overview {key} {shown[key]} != wal3 info's {expected[key]}")

                time.sleep(TTL_S)  # the overview's figures are older than its TTL: it refreshes
                page("overview-after", "", totals)
                row("overview equals wal3 info --json", "yes", f"logs, records, bytes: "
                    f"{expected['logs']}, {expected['records']}, {expected['bytes']}")
                page("metrics", "metrics")  # in the browser: no console error
                time.sleep(TTL_S)
                counting.counts.clear()
                began = time.perf_counter()
                with urllib.request.urlopen(server.url + "metrics", timeout=300) as response:
                    text = response.read().decode()
                row("a /metrics scrape (a refresh due)", f"{time.perf_counter() - began:.2f} s",
                    f"{counting.requests()} requests, {len(text)} bytes")
                samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                           for family in text_string_to_metric_families(text) for s in family.samples}
                done = subprocess.run([sys.executable, "-m", "wal3_spark.cli", "ls", url, "--json"],
                                      capture_output=True, text=True, env={**os.environ, **seaweed.env}, timeout=300)
                check(done.returncode == 0, f"wal3 ls: {done.stderr}")
                listed = json.loads(done.stdout)
                compared = 0
                for entry in listed:
                    log_labels = (("log", entry["name"]),)
                    check(samples[("wal3_log_next_offset", log_labels)] == entry["next_offset"],
                          f"{entry['name']}: next offset in /metrics and wal3 ls")
                    check(samples[("wal3_log_records", log_labels)] == entry["records"], f"{entry['name']}: records")
                    if entry["name"] in active:
                        continue  # its consumer's last moves are re-read within the model's cursor interval
                    for cursor in entry["cursors"]:
                        labels = (("cursor", cursor["name"]), ("log", entry["name"]))
                        check(samples[("wal3_cursor_records_behind", labels)] == cursor["records_behind"],
                              f"{entry['name']}/{cursor['name']}: records behind")
                        compared += 1
                row("/metrics equals wal3 ls --json", "yes", f"{len(listed)} logs' next offset and records, "
                    f"{compared} idle logs' cursors")
        finally:
            stop.set()
            driver.quit()


if __name__ == "__main__":
    main()
