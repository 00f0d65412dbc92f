"""`wal3 console`: pages in a real headless browser (Debian's Chromium through Selenium), their
numbers against `wal3 info --json`, the record browser's paging, verify's result, and that the
console never writes (every page is also served through a store that fails any write).

One log set for the module (three logs on the local store, one with a corrupt fragment), one
console server and one browser. The browser tests skip, naming what is missing, only where
Chromium or its driver is not installed (./dev installs both).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tests.support.browser import chromium, follow, verify_result
from wal3_spark.console.app import create_app
from wal3_spark.console.server import ConsoleServer, serving
from wal3_spark.console.target import Target
from wal3_spark.errors import AccessDenied, InvalidOption, LogNotFound
from wal3_spark.format.manifest import SnapshotOptions
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.reader import LogReader, iter_fragments
from wal3_spark.log.writer import LogWriter, LogWriterOptions
from wal3_spark.storage import open_store
from wal3_spark.storage.base import Blob, ObjectStore
from wal3_spark.storage.common import file_url
from wal3_spark.storage.forwarding import ForwardingStore
from wal3_spark.storage.readonly import ReadOnlyStore

BATCH = 40  # records per append: one fragment each


class WriteFailingStore(ForwardingStore):
    """Counts GETs by key and fails (and records) any write: the console must never make one."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.writes: list[str] = []
        self.gets: list[str] = []

    def get(self, key: str) -> Blob:
        self.gets.append(key)
        return super().get(key)

    def get_range(self, key: str, start: int, length: int) -> bytes:
        self.gets.append(key)
        return super().get_range(key, start, length)

    def put_if_absent(self, key: str, data: bytes) -> str:
        self.writes.append(key)
        raise AssertionError(f"the console wrote {key}")

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        self.writes.append(key)
        raise AssertionError(f"the console overwrote {key}")

    def delete(self, key: str) -> None:
        self.writes.append(key)
        raise AssertionError(f"the console deleted {key}")


def _append(url: str, batches: int, **writer: object) -> None:
    with LogWriter(url, LogWriterOptions(snapshot_options=SnapshotOptions(4, 4), **writer)) as log:
        for i in range(batches):
            log.append(pa.table({"id": pa.array(range(i * BATCH, (i + 1) * BATCH), pa.int64()),
                                 "name": pa.array([f"row {n}" for n in range(i * BATCH, (i + 1) * BATCH)])}))


@pytest.fixture(scope="module")
def prefix(tmp_path_factory: pytest.TempPathFactory) -> str:
    """orders (structured, 12 fragments, snapshots, two cursors), events (raw, a broken cursor),
    damaged (a fragment overwritten: verify fails)."""
    root = tmp_path_factory.mktemp("console") / "set"
    url = file_url(str(root))
    _append(f"{url}/orders", 12)
    cursors = CursorStore(open_store(f"{url}/orders"))
    cursors.create("billing", 1 + 3 * BATCH + 7)
    cursors.create("audit", 1 + 12 * BATCH)
    with LogWriter(f"{url}/events") as log:
        log.append([b"alpha", b"beta", bytes([0xFF, 0x00]), b"x" * 5000])
    (root / "events" / "cursor").mkdir()
    (root / "events" / "cursor" / "bad-name.json").write_text("{}")  # a broken cursor
    _append(f"{url}/damaged", 3)
    store = open_store(f"{url}/damaged")
    victim = next(iter(iter_fragments(store, LogReader(store).manifest()))).path
    (root / "damaged" / victim).write_bytes(b"not a parquet file")
    return url


@pytest.fixture(scope="module")
def watched(prefix: str) -> WriteFailingStore:
    return WriteFailingStore(open_store(prefix))


@pytest.fixture(scope="module")
def server(watched: WriteFailingStore) -> Iterator[ConsoleServer]:
    with serving(create_app(Target.open(watched))) as running:
        yield running


@pytest.fixture(scope="module")
def client(watched: WriteFailingStore):  # noqa: ANN201 - a Flask test client
    return create_app(Target.open(watched)).test_client()


def _wal3(*args: str) -> Any:
    """What `wal3 ARGS --json` prints (it must succeed)."""
    done = subprocess.run([sys.executable, "-m", "wal3_spark.cli", *args, "--json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


# -- the browser ------------------------------------------------------------------------


def _missing_browser() -> str | None:
    for program in ("chromium", "chromedriver"):
        if shutil.which(program) is None:
            return (f"{program} is not installed: ./dev setup installs it (Debian: apt-get install -y "
                    "chromium chromium-driver)")
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed: ./dev setup installs it (the test extra)"
    return None


@pytest.fixture(scope="module")
def browser():  # noqa: ANN201 - a selenium WebDriver
    reason = _missing_browser()
    if reason is not None:
        pytest.skip(reason)
    driver = chromium()
    try:
        yield driver
    finally:
        driver.quit()


def _open(browser, url: str) -> None:  # noqa: ANN001
    browser.get(url)
    errors = [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
    assert not errors, f"the browser's console shows errors on {url}: {errors}"


def _follow(browser, element) -> None:  # noqa: ANN001
    follow(browser, element)


def _figures(browser, container: str) -> dict[str, str]:  # noqa: ANN001
    from selenium.webdriver.common.by import By

    table = browser.find_element(By.ID, container)
    return {td.get_attribute("data-figure"): td.text for td in table.find_elements(By.CSS_SELECTOR, "td[data-figure]")}


def test_01_overview_matches_wal3_info(server: ConsoleServer, browser, prefix: str) -> None:  # noqa: ANN001
    from selenium.webdriver.common.by import By

    _open(browser, server.url)
    expected = _wal3("info", prefix)
    shown = _figures(browser, "set-figures")
    assert int(shown["logs"]) == expected["logs"] == 3
    assert int(shown["records"]) == expected["records"]
    assert int(shown["bytes"]) == expected["bytes"]
    listed = {entry["name"]: entry for entry in _wal3("ls", prefix)}
    for row in browser.find_elements(By.CSS_SELECTOR, "#logs tbody tr"):
        entry = listed[row.get_attribute("data-log")]
        cells = {td.get_attribute("data-figure"): td.text for td in row.find_elements(By.CSS_SELECTOR, "td[data-figure]")}
        for name in ("oldest_offset", "next_offset", "records", "bytes", "fragments"):
            assert int(cells[name]) == entry[name], (entry["name"], name)

    def names() -> list[str]:
        return [row.get_attribute("data-log") for row in browser.find_elements(By.CSS_SELECTOR, "#logs tbody tr")]

    assert names() == ["damaged", "events", "orders"]
    from selenium.webdriver.support.ui import Select

    Select(browser.find_element(By.ID, "sort")).select_by_value("records")
    _follow(browser, browser.find_element(By.CSS_SELECTOR, "form.inline button"))
    assert names() == ["orders", "damaged", "events"]  # 480, 120, 4 records
    browser.find_element(By.NAME, "pattern").send_keys("*s")
    _follow(browser, browser.find_element(By.CSS_SELECTOR, "form.inline button"))
    assert names() == ["orders", "events"]


def test_02_log_page_matches_wal3_info(server: ConsoleServer, browser, prefix: str) -> None:  # noqa: ANN001
    from selenium.webdriver.common.by import By

    _open(browser, server.url)
    _follow(browser, browser.find_element(By.LINK_TEXT, "orders"))
    assert browser.current_url.endswith("/log/orders")
    expected = _wal3("info", f"{prefix}/orders")
    shown = _figures(browser, "log-figures")
    for name in ("oldest_offset", "next_offset", "records", "bytes", "fragments", "snapshots"):
        assert int(shown[name]) == expected[name], name
    assert expected["snapshots"] > 0 and expected["fragments"] == 12
    assert shown["sealed"] == "no"
    assert shown["last_commit"].startswith("20")
    rate = float(shown["rate_per_s"].split()[0])
    assert rate == pytest.approx(12 * BATCH / 300, abs=0.01)  # everything was appended just now
    for name, lag in expected["lag"].items():
        row = browser.find_element(By.CSS_SELECTOR, f'#cursors tr[data-cursor="{name}"]')
        cells = {td.get_attribute("data-figure"): td.text for td in row.find_elements(By.CSS_SELECTOR, "td[data-figure]")}
        assert int(cells["offset"]) == lag["offset"]
        assert int(cells["records_behind"]) == lag["records_behind"]
        assert int(cells["bytes_behind"]) == lag["bytes_behind"]
    billing = browser.find_element(By.CSS_SELECTOR, '#cursors tr[data-cursor="billing"] td[data-figure="lag_s"]')
    assert billing.text.endswith(" old")  # the age of its oldest unread record
    assert len(browser.find_elements(By.CSS_SELECTOR, "#rate-chart rect.mark")) == 10
    _open(browser, browser.current_url)  # again, to collect any console error of the page


def test_03_record_browser_pages(server: ConsoleServer, browser) -> None:  # noqa: ANN001
    from selenium.webdriver.common.by import By

    def offsets() -> list[int]:
        return [int(tr.find_element(By.CSS_SELECTOR, "td").text)
                for tr in browser.find_elements(By.CSS_SELECTOR, "#records tbody tr")]

    _open(browser, f"{server.url}log/orders/records?start=1&size=30")
    assert offsets() == list(range(1, 31))
    _follow(browser, browser.find_element(By.ID, "page-next"))
    assert offsets() == list(range(31, 61))
    _follow(browser, browser.find_element(By.ID, "page-previous"))
    assert offsets() == list(range(1, 31))
    _follow(browser, browser.find_element(By.ID, "page-last"))
    assert offsets() == list(range(12 * BATCH + 1 - 30, 12 * BATCH + 1))
    assert not browser.find_elements(By.ID, "page-next")
    headers = [th.text for th in browser.find_elements(By.CSS_SELECTOR, "#records thead th")]
    assert headers == ["_offset", "_timestamp", "id", "name"]
    first_row = browser.find_element(By.CSS_SELECTOR, "#records tbody tr").text
    assert f"row {12 * BATCH - 30}" in first_row
    # by offset, through the form
    field = browser.find_element(By.CSS_SELECTOR, "#goto-offset input[name=start]")
    field.clear()
    field.send_keys("100")
    _follow(browser, browser.find_element(By.CSS_SELECTOR, "#goto-offset button"))
    assert offsets() == list(range(100, 130))
    _open(browser, browser.current_url)


def test_04_record_browser_by_time(server: ConsoleServer, browser, prefix: str) -> None:  # noqa: ANN001
    from selenium.webdriver.common.by import By

    from wal3_spark.format.uuid7 import uuid7_timestamp_us

    store = open_store(f"{prefix}/orders")
    refs = list(iter_fragments(store, LogReader(store).manifest()))
    fifth = refs[4]
    written = uuid7_timestamp_us(fifth.seq_no)
    import datetime as dt

    at = dt.datetime.fromtimestamp(written / 1e6, dt.timezone.utc).isoformat()
    _open(browser, f"{server.url}log/orders/records?size=5&time={at.replace('+', '%2B')}")
    first = int(browser.find_element(By.CSS_SELECTOR, "#records tbody tr td").text)
    assert first == fifth.start


def test_05_raw_records(server: ConsoleServer, browser) -> None:  # noqa: ANN001
    from selenium.webdriver.common.by import By

    _open(browser, f"{server.url}log/events/records")
    rows = [tr.text for tr in browser.find_elements(By.CSS_SELECTOR, "#records tbody tr")]
    assert len(rows) == 4 and "alpha" in rows[0] and "/wA=" in rows[2]  # not UTF-8: base64
    assert "x… (5000 characters)" in rows[3] and len(rows[3]) < 1100  # a long value is cut


def test_06_fragments_and_gc(server: ConsoleServer, browser, prefix: str) -> None:  # noqa: ANN001
    from selenium.webdriver.common.by import By

    _open(browser, f"{server.url}log/orders/fragments")
    assert browser.find_element(By.ID, "fragment-count").text == "12"
    assert len(browser.find_elements(By.CSS_SELECTOR, "#timeline rect.mark")) == 12
    _open(browser, f"{server.url}log/orders/gc")
    expected = _wal3("gc", f"{prefix}/orders", "--dry-run", "--force")
    shown = _figures(browser, "next-gc")
    assert "billing" in shown["holder"] and str(1 + 3 * BATCH + 7) in shown["holder"]
    assert int(shown["records_dropped"]) == expected["records_dropped"] == 3 * BATCH
    assert int(shown["fragments_dropped"]) == expected["fragments_dropped"] == 3
    assert browser.find_element(By.ID, "pending-garbage").text.startswith("Empty")
    _open(browser, f"{server.url}log/events/gc")  # a broken cursor: the collection is refused
    assert "broken" in browser.find_element(By.ID, "gc-refused").text
    _open(browser, f"{server.url}log/events")
    row = browser.find_element(By.CSS_SELECTOR, '#cursors tr[data-cursor="bad-name"]').text
    assert "broken" in row


def test_07_verify_shows_its_result(server: ConsoleServer, browser) -> None:  # noqa: ANN001
    from selenium.webdriver.common.by import By

    def no_refresh() -> bool:
        return not browser.find_elements(By.CSS_SELECTOR, 'meta[http-equiv="refresh"]')

    _open(browser, f"{server.url}log/orders/verify")
    _follow(browser, browser.find_element(By.ID, "verify-start"))
    state, text = verify_result(browser)  # the result, once the self-reloading page shows it
    assert state == "ok" and "12 fragments" in text
    assert no_refresh()

    _open(browser, f"{server.url}log/damaged/verify")
    _follow(browser, browser.find_element(By.ID, "verify-start"))
    assert verify_result(browser)[0] == "failed"
    assert no_refresh()
    problems = browser.find_element(By.ID, "verify-problems").text
    assert "corrupt" in problems and "log/Uuid=" in problems
    _open(browser, browser.current_url)


# -- without a browser ------------------------------------------------------------------


def test_08_never_writes(client, watched: WriteFailingStore) -> None:  # noqa: ANN001
    """Every page, verify included, through a store that fails any write."""
    for path in ["/", "/?pattern=ord*", "/metrics"] + [f"/log/{name}{page}" for name in ("orders", "events", "damaged")
                                          for page in ("", "/records", "/fragments", "/gc", "/verify")]:
        response = client.get(path)
        assert response.status_code == 200, (path, response.text)
    # verify runs on a thread after the POST: wait for its result (a write it tried would be
    # refused by the console's read-only store and end the run in "error", not "ok"/"failed")
    for name, result in (("orders", "ok"), ("events", "ok"), ("damaged", "failed")):
        assert client.post(f"/log/{name}/verify").status_code == 303
        _until(lambda name=name: 'data-state="running"' not in client.get(f"/log/{name}/verify").text,
               f"verify of {name}")
        assert f'data-state="{result}"' in client.get(f"/log/{name}/verify").text, name
    assert watched.writes == []


def test_09_a_page_reads_only_its_fragments(prefix: str) -> None:
    counting = WriteFailingStore(open_store(prefix))
    client = create_app(Target.open(counting)).test_client()
    counting.gets.clear()
    response = client.get("/log/orders/records?start=95&size=10")  # offsets 95..104, all in the third fragment [81, 121)
    assert response.status_code == 200
    fragments = {key for key in counting.gets if "/log/Uuid=" in key}
    assert len(fragments) == 1, fragments


def test_10_errors_are_explained(client, tmp_path: Path, prefix: str) -> None:  # noqa: ANN001
    missing = client.get("/log/nosuch")
    assert missing.status_code == 404 and "no log &#39;nosuch&#39;" in missing.text
    assert "no wal3 log at" not in missing.text  # one message, not wrapped in LogNotFound's default
    invalid = client.get("/log/..")
    assert invalid.status_code == 404 and "invalid log name" in invalid.text and "no wal3 log at" not in invalid.text
    assert client.get("/?sort=size").status_code == 400
    bad = client.get("/log/orders/records?start=abc")
    assert bad.status_code == 400 and "give a whole number" in bad.text
    past = client.get("/log/orders/records?start=99999")
    assert past.status_code == 400 and "past the tail" in past.text
    with pytest.raises(LogNotFound, match="neither a wal3 log"):
        Target.open(open_store(file_url(str(tmp_path / "nothing"))))
    with serving(create_app(Target.open(open_store(prefix)))) as running:
        port = int(running.url.rsplit(":", 1)[1].strip("/"))
        with pytest.raises(InvalidOption, match=f"port {port} on 127.0.0.1 is in use"):
            ConsoleServer(create_app(Target.open(open_store(prefix))), "127.0.0.1", port)
        taken = subprocess.run([sys.executable, "-m", "wal3_spark.cli", "console", prefix, "--port", str(port)],
                               capture_output=True, text=True, timeout=60)
        assert taken.returncode == 2 and f"port {port} on 127.0.0.1 is in use" in taken.stderr
        assert "--port" in taken.stderr and "Traceback" not in taken.stderr
    done = subprocess.run([sys.executable, "-m", "wal3_spark.cli", "console", file_url(str(tmp_path / "nothing"))],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "neither a wal3 log" in done.stderr and "Traceback" not in done.stderr
    assert "no wal3 log at" not in done.stderr


def test_11_one_log(prefix: str) -> None:
    """A log's own URL: the console shows that log, and no other."""
    client = create_app(Target.open(open_store(f"{prefix}/orders"))).test_client()
    assert client.get("/").headers["Location"].endswith("/log/orders")
    assert client.get("/log/orders").status_code == 200
    assert client.get("/log/events").status_code == 404
    metrics = client.get("/metrics").text
    assert 'wal3_log_next_offset{log="orders"} 481.0' in metrics and "wal3_logs 1.0" in metrics


def test_12_read_only_store_refuses_writes(prefix: str) -> None:
    store = ReadOnlyStore(open_store(prefix), "the test")
    for write in (lambda: store.put_if_absent("x", b""), lambda: store.put_if_match("x", b"", "e"),
                  lambda: store.delete("x")):
        with pytest.raises(AccessDenied, match="the test is read-only"):
            write()


def test_13_the_command_serves(prefix: str) -> None:
    """`wal3 console PREFIX --port 0` prints where it serves, and serves there."""
    import urllib.request

    process = subprocess.Popen([sys.executable, "-m", "wal3_spark.cli", "console", prefix, "--port", "0"],
                               stderr=subprocess.PIPE, text=True)
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        assert "read-only" in line, line
        address = line.split(" at ", 1)[1].split()[0]
        with urllib.request.urlopen(address + "log/orders", timeout=60) as response:
            assert response.status == 200 and b'data-figure="records">480<' in response.read()
    finally:
        process.terminate()
        process.wait(timeout=30)


class GatedStore(ForwardingStore):
    """Lets the first fragment GET through and holds the others until `release` is set."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.release = threading.Event()
        self._first = threading.Lock()
        self._passed = False

    def get(self, key: str) -> Blob:
        if key.startswith("log/Uuid=") or "/log/Uuid=" in key:  # a log's store or its prefix's
            with self._first:
                first, self._passed = not self._passed, True
            if not first:
                assert self.release.wait(60), "the test never released the fragments"
        return super().get(key)


def _until(condition, what: str) -> None:  # noqa: ANN001 - a callable returning a truth value
    """Poll `condition` (the page under test changes as a background thread works) for 60 s."""
    deadline = threading.Event()
    for _ in range(1200):
        if condition():
            return
        deadline.wait(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_14_verify_shows_progress(prefix: str) -> None:
    gated = GatedStore(open_store(prefix))
    client = create_app(Target.open(gated)).test_client()
    try:
        assert client.post("/log/orders/verify").status_code == 303
        _until(lambda: "Verifying: 1 of 12 fragments" in client.get("/log/orders/verify").text, "1 of 12")
        page = client.get("/log/orders/verify").text
        assert 'data-state="running"' in page and '<meta http-equiv="refresh"' in page
        assert 'max="12" value="1"' in page
        assert client.post("/log/orders/verify").status_code == 303  # a second start joins the run
    finally:
        gated.release.set()
    _until(lambda: 'data-state="ok"' in client.get("/log/orders/verify").text, "the result")
    assert "refresh" not in client.get("/log/orders/verify").text


def test_15_metrics(server: ConsoleServer, browser, prefix: str) -> None:  # noqa: ANN001
    """The console's /metrics: the status model's Prometheus metrics, agreeing with
    `wal3 cursor list --json`, linked from every page."""
    from prometheus_client.parser import text_string_to_metric_families
    from selenium.webdriver.common.by import By

    _open(browser, server.url)
    _follow(browser, browser.find_element(By.ID, "nav-metrics"))
    assert browser.current_url == server.url + "metrics"
    _open(browser, browser.current_url)
    import urllib.request

    with urllib.request.urlopen(server.url + "metrics", timeout=60) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    assert samples[("wal3_log_next_offset", (("log", "orders"),))] == 12 * BATCH + 1
    assert samples[("wal3_logs", ())] == 3
    cursors = _wal3("cursor", "list", f"{prefix}/orders")
    for cursor in cursors["cursors"]:
        labels = (("cursor", cursor["name"]), ("log", "orders"))
        assert samples[("wal3_cursor_offset", labels)] == cursor["offset"]
        assert samples[("wal3_cursor_records_behind", labels)] == cursor["records_behind"]
        assert samples[("wal3_cursor_bytes_behind", labels)] == cursor["bytes_behind"]
    assert samples[("wal3_cursor_broken", (("cursor", "bad-name"), ("log", "events")))] == 1


def test_16_a_page_renders_a_copy_of_the_run(prefix: str) -> None:
    """The verify page reads its run twice (whether to refresh itself, in the head, and what to
    show): a run finishing between the two made a page that showed the result and still
    reloaded itself a second later. A page gets a copy that does not change under it."""
    from wal3_spark.console.verify_runs import VerifyRuns

    gated = GatedStore(open_store(f"{prefix}/orders"))
    runs = VerifyRuns()
    try:
        runs.start("orders", gated)
        _until(lambda: getattr(runs.get("orders"), "done", 0) == 1, "the first fragment")
        seen = runs.get("orders")
        assert seen is not None and seen.running and seen.report is None
    finally:
        gated.release.set()
    _until(lambda: not runs.get("orders").running, "the end of the run")  # type: ignore[union-attr]
    assert seen.running and seen.report is None and seen.finished is None  # the copy did not change
    done = runs.get("orders")
    assert done is not None and done.report is not None and done.report.ok and done.done == done.total == 12


def test_17_another_sites_page_cannot_use_the_console(prefix: str) -> None:
    """Bound to the loopback, the console is still reachable from any page the operator's
    browser opens: a name of another site that resolves to 127.0.0.1 (DNS rebinding) must not
    read the logs, and another site's form must not start a verify. Its own pages work, also
    through a tunnel's other port."""
    import http.client

    with serving(create_app(Target.open(open_store(prefix)))) as running:
        port = int(running.url.rsplit(":", 1)[1].strip("/"))

        def request(method: str, path: str, headers: dict[str, str]) -> tuple[int, str]:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            try:
                connection.request(method, path, headers=headers)
                response = connection.getresponse()
                return response.status, response.read().decode()
            finally:
                connection.close()

        for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost:9999", f"[::1]:{port}"):
            assert request("GET", "/log/orders/records", {"Host": host})[0] == 200, host
        status, text = request("GET", "/log/orders/records", {"Host": f"rebound.example:{port}"})
        assert status == 403 and "is not this machine" in text and "row 1" not in text
        assert request("GET", "/metrics", {"Host": f"rebound.example:{port}"})[0] == 403
        for foreign in ({"Origin": "https://evil.example"}, {"Origin": "null"}, {"Origin": f"file://127.0.0.1:{port}"},
                        {"Origin": f"http://127.0.0.1:{port}", "Sec-Fetch-Site": "cross-site"},
                        {"Sec-Fetch-Site": "same-site"}):
            status, text = request("POST", "/log/orders/verify", {"Host": f"127.0.0.1:{port}", **foreign})
            assert status == 403 and "refused" in text, foreign
        status, text = request("PUT", "/log/orders/verify", {"Host": f"127.0.0.1:{port}", "Origin": "null"})
        assert status == 403 and "a PUT from the page of null is refused" in text
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        for path in ("/", "/log/orders", "/log/orders/verify", "/metrics", "/log/nosuch"):
            connection.request("GET", path, headers={"Host": f"127.0.0.1:{port}"})
            response = connection.getresponse()
            response.read()
            assert response.getheader("X-Frame-Options") == "DENY", path  # no site may frame it
            assert response.getheader("Content-Security-Policy") == "frame-ancestors 'none'", path
        connection.close()
        for own in ({"Origin": f"http://127.0.0.1:{port}", "Sec-Fetch-Site": "same-origin"},
                    {"Origin": f"http://LOCALHOST:{port}", "Host": f"localhost:{port}"}, {}):
            assert request("POST", "/log/orders/verify", {"Host": f"127.0.0.1:{port}", **own})[0] == 303, own
        own = {"Host": f"127.0.0.1:{port}", "Origin": f"http://127.0.0.1:{port}"}
        assert request("POST", "/log/orders/verify", own)[0] == 303
    # bound to every address, any Host may ask (the command warns that anyone can read)
    with serving(create_app(Target.open(open_store(prefix))), "0.0.0.0") as everywhere:
        port = int(everywhere.url.rsplit(":", 1)[1].strip("/"))
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        connection.request("GET", "/", headers={"Host": "console.internal"})
        assert connection.getresponse().status in (200, 302)
        connection.close()


def test_18_a_sandboxed_frame_of_another_site_cannot_start_a_verify(prefix: str, browser) -> None:  # noqa: ANN001
    """A sandboxed frame's POST carries `Origin: null`, which the console let through: a page of
    another site (here another port) made the operator's browser start a verify. Such frames,
    and the other site's plain form, are refused; the console's own verify form still works."""
    import http.server

    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    with serving(create_app(Target.open(open_store(prefix)))) as console:
        form = (f"<form method='post' action='{console.url}log/orders/verify'></form>"
                "<script>document.forms[0].submit()</script>")
        page = (f'<iframe id="sandboxed" sandbox="allow-forms allow-scripts" srcdoc="{form}"></iframe>'
                f'<iframe id="plain" srcdoc="{form}"></iframe>'
                f'<iframe id="framed" src="{console.url}log/orders/verify"></iframe>').encode()  # to click

        class Attacker(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the base class's name
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.end_headers()
                self.wfile.write(page)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        attacker = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Attacker)
        thread = threading.Thread(target=attacker.serve_forever, daemon=True)
        thread.start()
        try:
            browser.get(f"http://127.0.0.1:{attacker.server_address[1]}/")
            for frame in ("sandboxed", "plain"):
                browser.switch_to.default_content()
                browser.switch_to.frame(frame)
                WebDriverWait(browser, 60, poll_frequency=0.05).until(lambda d: d.execute_script(
                    "return document.readyState == 'complete' && location.href.startsWith(arguments[0])",
                    console.url))
                assert "refused" in browser.find_element(By.TAG_NAME, "body").text, frame
            # the console's own page in another site's frame (its button under a decoy: its form
            # would post with the console's Origin) is not shown
            browser.switch_to.default_content()
            WebDriverWait(browser, 60, poll_frequency=0.05).until(
                lambda d: d.execute_script("return document.readyState") == "complete")
            browser.switch_to.frame("framed")
            assert not browser.find_elements(By.ID, "verify-start"), "another site framed the console"
        finally:
            browser.switch_to.default_content()
            attacker.shutdown()
            attacker.server_close()
            thread.join(timeout=30)
        browser.get(f"{console.url}log/orders/verify")
        assert not browser.find_elements(By.ID, "verify-state"), "another site's page started a verify"
        follow(browser, browser.find_element(By.ID, "verify-start"))  # the console's own form
        assert verify_result(browser)[0] == "ok"


def test_19_every_store_the_console_opens_refuses_writes(tmp_path: Path) -> None:
    """The console reaches a branch's parent through `open_like`, which unwrapped its read-only
    store to reuse the client and so handed back a writable one (also from the cache a writable
    branch store had filled in the same process). Every page of a branch works, and a write
    through any store the console holds, the parent's included, is refused."""
    from wal3_spark.log.branches import branch
    from wal3_spark.log.parents import parent_store

    root = file_url(str(tmp_path / "set"))
    _append(f"{root}/parent", 3)
    branch(f"{root}/parent", f"{root}/child", at=1 + 2 * BATCH)  # fills the parent-store cache, writable
    _append(f"{root}/child", 1)
    before = sorted((m.key, m.etag) for m in open_store(root).list())
    for target in (Target.open(open_store(root)), Target.open(open_store(f"{root}/child"))):
        client = create_app(target).test_client()
        for page in ("", "/records?start=1&size=200", "/fragments", "/gc", "/verify"):
            response = client.get(f"/log/child{page}")
            assert response.status_code == 200, (page, response.text)
        assert 'data-figure="records">120<' in client.get("/log/child").text
        assert client.post("/log/child/verify").status_code == 303
        _until(lambda client=client: 'data-state="running"' not in client.get("/log/child/verify").text, "verify")
        assert 'data-state="ok"' in client.get("/log/child/verify").text
        child = target.log_store("child")
        for store in (child, parent_store(child, f"{root}/parent")):
            for write in (lambda: store.put_if_absent("x", b""), lambda: store.put_if_match("manifest/MANIFEST", b"", "e"),
                          lambda: store.delete("manifest/MANIFEST")):
                with pytest.raises(AccessDenied, match="the wal3 console is read-only"):
                    write()
    assert sorted((m.key, m.etag) for m in open_store(root).list()) == before
