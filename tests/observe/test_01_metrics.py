"""Prometheus metrics of a log or a log set (`wal3 exporter`, the console's /metrics): scraped
over HTTP, they agree with `wal3 cursor list --json` and `wal3 info --json`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.cli.test_00_cli import ROOT, ok
from wal3_spark.console.server import serving
from wal3_spark.format.layout import Cursor, cursor_key, dumps
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.writer import LogWriter
from wal3_spark.logset.logs import LogSet
from wal3_spark.observe.metrics import exporter_app, metrics_registry
from wal3_spark.observe.status import StatusModel
from wal3_spark.storage import open_store

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture(scope="module")
def prefix(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Three logs on the local filesystem: `orders` with a cursor at the tail and one behind,
    `users` with a cursor behind and a broken one, `empty` with nothing appended."""
    url = str(tmp_path_factory.mktemp("metrics") / "logs")
    logs = LogSet(url)
    for name, batches in (("orders", 3), ("users", 2)):
        with LogWriter(logs.log_store(name)) as writer:
            for i in range(batches):
                writer.append([b"%s-%d-%d" % (name.encode(), i, j) for j in range(10)])
    CursorStore(logs.log_store("orders")).advance("billing", 31)
    CursorStore(logs.log_store("orders")).advance("audit", 12)
    CursorStore(logs.log_store("users")).advance("billing", 5)
    logs.log_store("users").put_if_absent(cursor_key("ahead"), dumps(Cursor(99, 1, "by hand").to_dict()))
    ok("init", logs.log_url("empty"))
    return url


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=30) as response:
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


@pytest.fixture(scope="module")
def exported(prefix: str) -> Iterator[str]:
    """The metrics URL of an exporter app over `prefix`, served on a thread."""
    with serving(exporter_app(metrics_registry(StatusModel(prefix)))) as server:
        yield server.url + "metrics"


def test_00_cursor_metrics_agree_with_wal3_cursor_list(prefix: str, exported: str) -> None:
    samples = scrape(exported)
    seen = 0
    for name in ("orders", "users", "empty"):
        listed = json.loads(ok("cursor", "list", LogSet(prefix).log_url(name), "--json"))
        for cursor in listed["cursors"]:
            labels = {"log": name, "cursor": cursor["name"]}
            assert value(samples, "wal3_cursor_offset", **labels) == cursor["offset"]
            assert value(samples, "wal3_cursor_records_behind", **labels) == cursor["records_behind"]
            assert value(samples, "wal3_cursor_bytes_behind", **labels) == cursor["bytes_behind"]
            assert value(samples, "wal3_cursor_last_moved_timestamp_seconds", **labels) == cursor["moved_epoch_us"] / 1e6
            assert value(samples, "wal3_cursor_broken", **labels) == 0
            lag = value(samples, "wal3_cursor_lag_seconds", **labels)
            assert (lag == 0) == (cursor["records_behind"] == 0) and lag >= 0
            seen += 1
        for broken in listed["broken_cursors"]:
            labels = {"log": name, "cursor": broken}
            assert value(samples, "wal3_cursor_broken", **labels) == 1
            assert value(samples, "wal3_cursor_offset", **labels) is None
            seen += 1
    assert seen == 4
    assert value(samples, "wal3_cursor_records_behind", log="orders", cursor="audit") == 19


def test_01_log_metrics_agree_with_wal3_info(prefix: str, exported: str) -> None:
    samples = scrape(exported)
    for name in ("orders", "users", "empty"):
        info = json.loads(ok("info", LogSet(prefix).log_url(name), "--json"))
        assert value(samples, "wal3_log_next_offset", log=name) == info["next_offset"]
        assert value(samples, "wal3_log_oldest_offset", log=name) == info["oldest_offset"]
        assert value(samples, "wal3_log_records", log=name) == info["records"]
        assert value(samples, "wal3_log_bytes", log=name) == info["bytes"]
        assert value(samples, "wal3_log_fragments", log=name) == info["fragments"]
        assert value(samples, "wal3_log_snapshots", log=name) == info["snapshots"]
        assert value(samples, "wal3_log_sealed", log=name) == int(info["sealed"])
        assert value(samples, "wal3_log_readable", log=name) == 1
    assert value(samples, "wal3_logs") == 3
    assert value(samples, "wal3_status_refresh_failed") == 0
    # the last commit's time is the newest fragment's; an empty log has none
    assert value(samples, "wal3_log_last_commit_timestamp_seconds", log="empty") is None
    last = value(samples, "wal3_log_last_commit_timestamp_seconds", log="orders")
    assert 0 < last <= value(samples, "wal3_status_timestamp_seconds")


def test_02_the_exporter_serves_metrics_only(exported: str) -> None:
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(exported.removesuffix("metrics"), timeout=30)
    assert caught.value.code == 404


def test_03_a_single_log_is_labelled_with_its_name(prefix: str) -> None:
    store = open_store(LogSet(prefix).log_store("orders").url)
    with serving(exporter_app(metrics_registry(StatusModel(store)))) as server:
        samples = scrape(server.url + "metrics")
    assert value(samples, "wal3_logs") == 1
    assert value(samples, "wal3_log_next_offset", log="orders") == 31
    assert value(samples, "wal3_cursor_offset", log="orders", cursor="audit") == 12


def test_04_wal3_exporter_serves_a_prefix(prefix: str) -> None:
    """The command itself: it reads the prefix before listening, says where it listens, and
    serves what `wal3 cursor list` shows."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen([sys.executable, "-m", "wal3_spark.cli.main", "exporter", prefix, "--port", "0",
                             "--pattern", "o*"], cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        assert line.startswith("wal3 exporter: the log set"), line
        url = line.split(" at ")[1].split()[0]
        samples = scrape(url)
        assert value(samples, "wal3_logs") == 1  # --pattern o*: orders only
        assert value(samples, "wal3_cursor_offset", log="orders", cursor="billing") == 31
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        proc.stderr.close()


def test_05_bad_arguments_are_usage_errors(tmp_path) -> None:
    from tests.cli.test_00_cli import usage_error

    usage_error("exporter", str(tmp_path), "--port", "70000", match="port")
    usage_error("exporter", str(tmp_path), "--ttl", "-1", match="duration")


def test_06_on_s3_a_warm_scrape_reads_the_dirty_log_and_the_logs_appended_to(seaweed) -> None:
    """30 logs on SeaweedFS written through a dirty log: the first scrape reads every log, a
    scrape after appends to two of them reads the dirty log and those two only (with their
    cursors), an idle one the dirty log's manifest alone; the metrics follow the appends and
    equal `wal3 cursor list --json`."""
    from tests.support.fakes import CountingStore
    from wal3_spark.logset.dirty import DirtyLog

    prefix = open_store(seaweed.new_url("scrape"), seaweed.options)
    logs = LogSet(prefix)
    names = [f"t{i:02d}" for i in range(30)]
    with DirtyLog(prefix) as dirty:
        for name in names:
            with LogWriter(logs.log_store(name), dirty_log=dirty) as writer:
                writer.append([b"x"] * 5)
        CursorStore(logs.log_store("t01")).advance("billing", 6)
        counting = CountingStore(prefix)
        with serving(exporter_app(metrics_registry(StatusModel(counting, ttl_s=0)))) as server:
            url = server.url + "metrics"
            scrape(url)
            assert counting.logs_touched() >= set(names)
            for name in ("t01", "t02"):
                with LogWriter(logs.log_store(name), dirty_log=dirty) as writer:
                    writer.append([b"y"] * 3)
            dirty.flush()
            counting.counts.clear()
            samples = scrape(url)
            assert counting.logs_touched() - {"_dirty"} == {"t01", "t02"}
            # per log: its cursor listing, its cursors, its manifest; and the dirty log
            assert counting.requests() <= 1 + 2 + 2 * 3, counting.counts
            counting.counts.clear()
            idle = scrape(url)
            assert counting.requests() == 1
            # the same figures; ages measured now: the unread record is older than it was
            moving = {"wal3_status_timestamp_seconds", "wal3_cursor_lag_seconds"}
            assert {k: v for k, v in idle.items() if k[0] not in moving} == {
                k: v for k, v in samples.items() if k[0] not in moving}
            lag = ("wal3_cursor_lag_seconds", (("cursor", "billing"), ("log", "t01")))
            assert idle[lag] - samples[lag] == pytest.approx(
                idle[("wal3_status_timestamp_seconds", ())] - samples[("wal3_status_timestamp_seconds", ())], abs=1e-3)
    assert value(samples, "wal3_log_next_offset", log="t01") == 9
    listed = json.loads(ok("cursor", "list", logs.log_url("t01"), "--json", env=seaweed.env))["cursors"]
    assert [(c["offset"], c["records_behind"], c["bytes_behind"]) for c in listed] == [(
        value(samples, "wal3_cursor_offset", log="t01", cursor="billing"),
        value(samples, "wal3_cursor_records_behind", log="t01", cursor="billing"),
        value(samples, "wal3_cursor_bytes_behind", log="t01", cursor="billing"))] == [(6, 3, listed[0]["bytes_behind"])]


def test_09_wal3_exporter_reads_through_a_store_that_refuses_writes(prefix: str, monkeypatch) -> None:  # noqa: ANN001
    """The console reads through a read-only store; the exporter read through a writable one
    (a scrape that ended up writing would have changed the log). Every store it holds, each
    log's of the set included, refuses writes; it serves as before."""
    from wal3_spark.cli.commands import exporter as command
    from wal3_spark.cli.main import main
    from wal3_spark.errors import AccessDenied

    models: list[StatusModel] = []

    class Recorded(StatusModel):
        def __init__(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
            super().__init__(*args, **kwargs)
            models.append(self)

    monkeypatch.setattr(command, "StatusModel", Recorded)
    monkeypatch.setattr(command, "serve", lambda *args, **kwargs: 0)
    assert main(["exporter", prefix]) == 0
    (model,) = models
    with serving(exporter_app(metrics_registry(model))) as server:
        with urllib.request.urlopen(server.url + "metrics", timeout=60) as response:
            assert 'wal3_log_next_offset{log="orders"}' in response.read().decode()
    for store in (model.store, LogSet(model.store).log_store("orders")):
        with pytest.raises(AccessDenied, match="the wal3 exporter is read-only"):
            store.put_if_absent("x", b"")
