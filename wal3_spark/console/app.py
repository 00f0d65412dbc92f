"""The console's Flask application: one route per page, server-rendered templates, and the
Prometheus metrics of `wal3_spark.observe.metrics` at `/metrics`.

Every page is computed when it is asked for, from the log as it is then, except a log set's
overview, which is the console's `StatusModel` (refreshed at most every `OVERVIEW_TTL_S`). Errors become pages that
say what went wrong and what to do, with the status a browser and a script understand: 404 for a
log the console does not show, 400 for a bad parameter, 500 for a log that cannot be read.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import threading
from typing import Any

from flask import Flask, abort, redirect, render_template, request, url_for
from werkzeug.middleware.dispatcher import DispatcherMiddleware
from werkzeug.wrappers import Response

from wal3_spark.clock import SYSTEM, Clock, utc_text
from wal3_spark.console import charts, figures
from wal3_spark.console.target import Target
from wal3_spark.console.verify_runs import VerifyRuns
from wal3_spark.errors import InvalidOption, LogNotFound, Wal3Error
from wal3_spark.log.snapshots import SnapshotCache
from wal3_spark.logset.info import LogSummary, set_info
from wal3_spark.logset.logs import LogSet
from wal3_spark.observe.metrics import metrics_app, metrics_registry
from wal3_spark.observe.status import Status, StatusModel
from wal3_spark.storage.base import ObjectStore

#: how long the overview of a log set is reused before it is refreshed (from the dirty log, or
#: by reading every log: `wal3_spark.observe.status`)
OVERVIEW_TTL_S = 10.0


class _Overview:
    """The log set's summaries from the console's `StatusModel` (which the page and `/metrics`
    share: one refresh per TTL for both), with the set's totals computed once per refresh."""

    def __init__(self, model: StatusModel, logs: LogSet) -> None:
        self.model = model
        self.logs = logs
        self._lock = threading.Lock()
        self._totals: tuple[int, dict[str, Any]] | None = None

    def get(self) -> tuple[Status, list[LogSummary], dict[str, Any]]:
        status = self.model.status()
        summaries = list(status.logs)
        with self._lock:
            if self._totals is None or self._totals[0] != status.measured_us:
                self._totals = status.measured_us, set_info(self.logs, summaries)
            return status, summaries, self._totals[1]


#: the overview's orders: by name, or the furthest behind, most records or most bytes first
_ORDERS: dict[str, Any] = {
    "name": lambda s: s.name,
    "lag": lambda s: (-(s.most_behind.records_behind if s.most_behind else -1), s.name),
    "records": lambda s: (-s.records, s.name),
    "bytes": lambda s: (-s.bytes, s.name),
}


def _parse_time(text: str) -> dt.datetime:
    try:
        when = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidOption(f"time {text!r}: give an ISO 8601 time such as 2026-01-31T12:00:00Z") from None
    return when if when.tzinfo is not None else when.replace(tzinfo=dt.UTC)


def _int_arg(name: str, default: int | None) -> int | None:
    text = request.args.get(name, "").strip()
    if not text:
        return default
    try:
        return int(text)
    except ValueError:
        raise InvalidOption(f"{name}={text!r}: give a whole number") from None


def _ago(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.1f} s"


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def create_app(target: Target, *, overview_ttl_s: float = OVERVIEW_TTL_S, clock: Clock = SYSTEM) -> Flask:
    """The console for `target` (opened read-only by `Target.open`); a log set's overview is
    reused for `overview_ttl_s` seconds (by `clock`)."""
    app = Flask(__name__)
    runs = VerifyRuns(clock)
    model = StatusModel(target.store, ttl_s=overview_ttl_s, clock=clock)
    overview = _Overview(model, target.logs) if target.logs is not None else None
    snapshots = SnapshotCache()  # immutable: shared by every page and log

    app.jinja_env.filters.update(
        utc=lambda us: "-" if us is None else utc_text(us / 1e6),
        ago=_ago,
        size=_size,
    )

    @app.context_processor
    def _common() -> dict[str, Any]:
        return {"target": target, "log_name": request.view_args.get("name") if request.view_args else None}

    def store_of(name: str) -> ObjectStore:
        try:
            return target.log_store(name)
        except LogNotFound as exc:
            abort(404, description=str(exc))

    @app.errorhandler(404)
    def _not_found(exc: Any) -> tuple[str, int]:
        return render_template("error.html", title="Not found", message=exc.description), 404

    @app.errorhandler(InvalidOption)
    def _bad_request(exc: InvalidOption) -> tuple[str, int]:
        return render_template("error.html", title="Bad request", message=str(exc)), 400

    @app.errorhandler(LogNotFound)
    def _log_gone(exc: LogNotFound) -> tuple[str, int]:
        return render_template("error.html", title="No such log", message=str(exc)), 404

    @app.errorhandler(Wal3Error)
    def _failed(exc: Wal3Error) -> tuple[str, int]:
        return render_template("error.html", title="The log could not be read", message=str(exc)), 500

    @app.get("/")
    def index() -> str | Response:
        if overview is None:
            return redirect(url_for("log_page", name=target.single_name))
        status, summaries, totals = overview.get()
        pattern = request.args.get("pattern", "").strip()
        if pattern:
            summaries = [s for s in summaries if fnmatch.fnmatchcase(s.name, pattern)]
        order = request.args.get("sort", "name")
        if order not in _ORDERS:
            raise InvalidOption(f"sort={order!r}: give one of {', '.join(_ORDERS)}")
        summaries = sorted(summaries, key=_ORDERS[order])
        return render_template("index.html", status=status, summaries=summaries, totals=totals,
                               pattern=pattern, order=order, ttl_s=overview_ttl_s)

    @app.get("/favicon.ico")
    def favicon() -> Response:
        # the pages declare none; a browser asks anyway on /metrics (plain text), and a 404 is
        # an error in its console
        return Response(status=204)

    @app.get("/log/<name>")
    def log_page(name: str) -> str:
        page = figures.log_page(store_of(name), snapshots)
        labels = [f"-{b['minutes_ago']}m" for b in page["rate"]]
        return render_template("log.html", page=page, info=page["info"],
                               rate_chart=charts.bars([b["records"] for b in page["rate"]], labels))

    @app.get("/log/<name>/records")
    def records(name: str) -> str:
        store = store_of(name)
        at_text = request.args.get("time", "").strip()
        at = _parse_time(at_text) if at_text else None
        start = None if at is not None else _int_arg("start", None)
        size = _int_arg("size", figures.PAGE_SIZE)
        assert size is not None
        page = figures.records_page(store, start, at, size)
        return render_template("records.html", page=page, time_text=at_text)

    @app.get("/log/<name>/fragments")
    def fragments(name: str) -> str:
        points = figures.fragments(store_of(name), snapshots)
        return render_template("fragments.html", points=points, chart=charts.timeline(points),
                               newest=list(reversed(points[-50:])), max_points=charts.MAX_POINTS)

    @app.get("/log/<name>/gc")
    def gc(name: str) -> str:
        return render_template("gc.html", state=figures.gc_state(store_of(name)))

    @app.get("/log/<name>/verify")
    def verify_page(name: str) -> str:
        store_of(name)
        return render_template("verify.html", run=runs.get(name))

    @app.post("/log/<name>/verify")
    def verify_start(name: str) -> Response:
        runs.start(name, store_of(name))
        return redirect(url_for("verify_page", name=name), code=303)

    # /metrics: the Prometheus exposition of the same status model (what `wal3 exporter` serves)
    app.wsgi_app = DispatcherMiddleware(app.wsgi_app, {"/metrics": metrics_app(metrics_registry(model))})  # type: ignore[method-assign]
    return app
