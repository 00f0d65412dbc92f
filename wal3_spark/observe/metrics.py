"""The status of a log or a log set as Prometheus metrics (the `prometheus-client` library's
collector and exposition), for `wal3 exporter` and the console's `/metrics`.

Every metric is a gauge computed at scrape time from a `StatusModel`, so a scrape costs what a
`status()` costs: nothing within the model's TTL, else one refresh (docs/design/61-scrape-cost.md).
Labels: `log` (the log's name: its last URL segment for a single log) and, per cursor,
`cursor`. A figure that is not known (the last commit's time of a log whose fragments carry no
write time, a broken cursor's offset) is left out rather than reported as 0.

    registry = metrics_registry(StatusModel("s3://bucket/logs"))
    app = metrics_app(registry)          # a WSGI app; mount it at /metrics
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from wal3_spark.log.cursor_lag import CursorLag
from wal3_spark.logset.info import LogSummary
from wal3_spark.observe.status import Status, StatusModel

#: (name, help, the figure of a log) for every per-log gauge
LOG_GAUGES: tuple[tuple[str, str, Callable[[LogSummary], float | None]], ...] = (
    ("wal3_log_next_offset", "The offset the next record appended gets (the log's tail).",
     lambda s: s.next_offset),
    ("wal3_log_oldest_offset", "The oldest offset still readable (garbage collection drops below it).",
     lambda s: s.oldest_offset),
    ("wal3_log_records", "Records in the log: next offset minus oldest offset.", lambda s: s.records),
    ("wal3_log_bytes", "Bytes of the log's fragments holding readable offsets.", lambda s: s.bytes),
    ("wal3_log_fragments", "Fragments holding readable offsets.", lambda s: s.fragments),
    ("wal3_log_snapshots", "Snapshots of the log's manifest tree.", lambda s: s.snapshots),
    ("wal3_log_sealed", "1 when the log is sealed (appends fail), else 0.", lambda s: int(s.sealed)),
    ("wal3_log_last_commit_timestamp_seconds",
     "When the log's newest fragment was written (its UUIDv7 name), seconds since the epoch.",
     lambda s: None if s.last_commit_us is None else s.last_commit_us / 1e6),
)
#: (name, help, the figure of a cursor) for every per-cursor gauge of a readable cursor
CURSOR_GAUGES: tuple[tuple[str, str, Callable[[CursorLag], float | None]], ...] = (
    ("wal3_cursor_offset", "The cursor's offset: the next record its consumer reads.", lambda c: c.offset),
    ("wal3_cursor_records_behind", "Records between the cursor and the log's tail.",
     lambda c: c.records_behind),
    ("wal3_cursor_bytes_behind", "Bytes of the fragments the cursor's consumer still has to read.",
     lambda c: c.bytes_behind),
    ("wal3_cursor_lag_seconds",
     "Age of the oldest record the cursor has not read (0 at the tail).", lambda c: c.lag_s),
    ("wal3_cursor_last_moved_timestamp_seconds", "When the cursor last moved, seconds since the epoch.",
     lambda c: c.moved_epoch_us / 1e6),
)


class StatusCollector(Collector):
    """Gauges of `model`'s status, computed at each scrape."""

    def __init__(self, model: StatusModel) -> None:
        self.model = model

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield from families(self.model.status())


def families(status: Status) -> Iterator[GaugeMetricFamily]:
    """The metric families of one status."""
    readable = [s for s in status.logs if s.error is None]
    for name, help_, figure in LOG_GAUGES:
        yield _gauge(name, help_, ["log"], (([s.name], figure(s)) for s in readable))
    for name, help_, cursor_figure in CURSOR_GAUGES:
        yield _gauge(name, help_, ["log", "cursor"],
                     (([s.name, c.name], cursor_figure(c)) for s in readable for c in s.cursors))
    yield _gauge("wal3_cursor_broken",
                 "1 for a cursor that cannot be used as it is (unreadable, beyond the tail, or stale: "
                 "set before the log was created again), else 0; `wal3 cursor list` says why.",
                 ["log", "cursor"],
                 [([s.name, c.name], 0) for s in readable for c in s.cursors]
                 + [([s.name, c], 1) for s in readable for c in s.broken_cursors])
    yield _gauge("wal3_log_readable", "1 when the log's manifest and cursors could be read, else 0.",
                 ["log"], (([s.name], int(s.error is None)) for s in status.logs))
    yield _gauge("wal3_logs", "Logs watched (1 for a single log).", [], [([], len(status.logs))])
    yield _gauge("wal3_status_timestamp_seconds",
                 "When the figures were measured (they are cached for the exporter's TTL).", [],
                 [([], status.measured_us / 1e6)])
    yield _gauge("wal3_status_full_scan_timestamp_seconds",
                 "When every log was last read (between full scans a log set is refreshed from its "
                 "dirty log).", [], [([], status.full_scan_us / 1e6)])
    yield _gauge("wal3_status_refresh_failed",
                 "1 when the last refresh failed (the figures are then the refresh's before).", [],
                 [([], int(status.error is not None))])


def _gauge(name: str, help_: str, labels: list[str],
           samples: Iterable[tuple[list[str], float | None]]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, help_, labels=labels)
    for values, value in samples:
        if value is not None:
            family.add_metric(values, value)
    return family


def metrics_registry(model: StatusModel) -> CollectorRegistry:
    """A registry holding `model`'s gauges only (not the process's default metrics), to serve
    or to add other collectors to (the Spark lag listener's, say)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StatusCollector(model))
    return registry


def metrics_app(registry: CollectorRegistry) -> Callable[..., Any]:
    """A WSGI app answering every request with `registry`'s metrics (mount it at /metrics)."""
    return make_wsgi_app(registry)


def exporter_app(registry: CollectorRegistry) -> Callable[..., Any]:
    """What `wal3 exporter` serves: the metrics at /metrics, 404 anywhere else."""
    metrics = metrics_app(registry)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == "/metrics":
            return metrics(environ, start_response)
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [b"the wal3 exporter serves /metrics only\n"]

    return app
