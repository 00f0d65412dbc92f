"""How far a streaming query is behind its wal3 logs, from the query's progress, with the
figures and names Kafka's source reports.

PySpark 4.3 lets a Python source report one thing beyond its offsets: `reportLatestOffset`,
which Spark shows as `latestOffset` in every progress (no Python source can report custom
metrics: that interface, `ReportsSourceMetrics`, is the JVM's). So the wal3 sources report the
log's tail there (per log for a log set), plus `bytes_behind`: the bytes of the fragments still
to read after the micro-batch just planned (read from the manifests the trigger read anyway: no
request). Where the last micro-batch ended is `endOffset`. This module turns the two into what
Kafka's source puts in its progress `metrics` (over its partitions; here over a log set's logs,
one "partition" for a single log):

- `minOffsetsBehindLatest`, `maxOffsetsBehindLatest`, `avgOffsetsBehindLatest`: records behind
  the tail after the last micro-batch, over the source's logs;
- `estimatedTotalBytesBehindLatest`: the bytes of the fragments those records are in.

`LagLogger` (a `StreamingQueryListener`, on the driver, reading nothing from storage) logs them
at every progress and, given a `prometheus_client` registry, publishes them as gauges, per
query and source and, for log sets, per log; `install_lag_listener(spark, registry)` adds one.

    listener = install_lag_listener(spark)          # logs each query's backlog at every progress
    listener.latest["orders_clean"][0].kafka_metrics() # {"minOffsetsBehindLatest": "0", ...}
    offsets_behind(query.lastProgress)                  # or ask a progress for the records behind
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener

from wal3_spark.format.layout import FIRST_OFFSET

logger = logging.getLogger(__name__)

#: the key of the bytes behind in a wal3 source's reported latest offset
BYTES_BEHIND = "bytes_behind"


@dataclass(frozen=True)
class SourceLag:
    """One wal3 source of a query: where its last micro-batch ended and where the log ends."""

    description: str
    end_offset: int
    latest_offset: int

    @property
    def behind(self) -> int:
        """Records in the log the query has not read yet."""
        return max(0, self.latest_offset - self.end_offset)


@dataclass(frozen=True)
class SourceBacklog:
    """One wal3 source of a query after a micro-batch, per log (`""` for a single log):
    `ends` where the batch ended, `latests` the logs' tails, `bytes_behind` the bytes left to
    read per log as the source reported them (None: it did not; a log set leaves out logs with
    nothing to read)."""

    index: int
    description: str
    is_log_set: bool
    ends: dict[str, int]
    latests: dict[str, int]
    bytes_behind: dict[str, int] | None

    @property
    def behind(self) -> dict[str, int]:
        """Records behind the tail per log (a log the stream has not read yet counts from its
        first offset)."""
        return {n: max(0, t - self.ends.get(n, FIRST_OFFSET)) for n, t in self.latests.items()}

    @property
    def lag(self) -> SourceLag:
        """The source's offsets summed over its logs."""
        return SourceLag(self.description, sum(self.ends.get(n, FIRST_OFFSET) for n in self.latests),
                         sum(self.latests.values()))

    @property
    def min_offsets_behind(self) -> int:
        return min(self.behind.values(), default=0)

    @property
    def max_offsets_behind(self) -> int:
        return max(self.behind.values(), default=0)

    @property
    def avg_offsets_behind(self) -> float:
        behind = self.behind
        return sum(behind.values()) / len(behind) if behind else 0.0

    @property
    def estimated_total_bytes_behind(self) -> int | None:
        return None if self.bytes_behind is None else sum(self.bytes_behind.values())

    def log_bytes_behind(self, name: str) -> int | None:
        return None if self.bytes_behind is None else self.bytes_behind.get(name, 0)

    def kafka_metrics(self) -> dict[str, str]:
        """The figures under Kafka's names, as strings, as Kafka's source reports them in a
        progress's `metrics` (`estimatedTotalBytesBehindLatest` only when known)."""
        figures = {
            "minOffsetsBehindLatest": str(self.min_offsets_behind),
            "maxOffsetsBehindLatest": str(self.max_offsets_behind),
            # as Kafka's source gives it (a Scala Double's toString: "700.0", "343.3333333333333")
            "avgOffsetsBehindLatest": repr(float(self.avg_offsets_behind)),
        }
        total = self.estimated_total_bytes_behind
        if total is not None:
            figures["estimatedTotalBytesBehindLatest"] = str(total)
        return figures


def _offset(value: Any) -> tuple[dict[str, int], bool, dict[str, int] | None] | None:
    """The positions in a wal3 stream offset (a dict or its JSON), whether it is a log set's,
    and the bytes behind it reports; None when it is not a wal3 offset. `{"offset": N}` (one
    log) gives `{"": N}`, `{"logs": {...}}` (a log set) its per-log offsets; the incarnations
    recorded beside them do not count."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if not isinstance(value, Mapping):
        return None
    reported = value.get(BYTES_BEHIND)
    if "offset" in value and set(value) <= {"offset", "incarnation", BYTES_BEHIND}:
        if isinstance(value["offset"], int):
            return {"": value["offset"]}, False, {"": reported} if isinstance(reported, int) else None
        return None
    logs = value.get("logs") if set(value) <= {"logs", "incarnations", BYTES_BEHIND} else None
    if isinstance(logs, Mapping) and all(isinstance(v, int) for v in logs.values()):
        bytes_behind = dict(reported) if isinstance(reported, Mapping) else None
        return dict(logs), True, bytes_behind
    return None


def source_backlogs(progress: Mapping[str, Any] | None) -> list[SourceBacklog]:
    """Every wal3 source's backlog in one `StreamingQueryProgress` (or its JSON as a dict)."""
    backlogs = []
    for index, source in enumerate((progress or {}).get("sources") or ()):
        end, latest = _offset(source.get("endOffset")), _offset(source.get("latestOffset"))
        if end is not None and latest is not None:
            backlogs.append(SourceBacklog(index, str(source.get("description", "")), latest[1],
                                          end[0], latest[0], latest[2]))
    return backlogs


def source_lags(progress: Mapping[str, Any] | None) -> list[SourceLag]:
    """The lag of every wal3 source in one progress, its offsets summed over its logs."""
    return [backlog.lag for backlog in source_backlogs(progress)]


def offsets_behind(progress: Mapping[str, Any] | None) -> int | None:
    """Records the query still has to read from its wal3 logs (summed over its wal3 sources);
    None when the progress has no wal3 source with offsets yet (no batch planned)."""
    lags = source_lags(progress)
    return sum(lag.behind for lag in lags) if lags else None


class LagLogger(StreamingQueryListener):
    """At every progress of a query with wal3 sources: each source's backlog, logged (logger
    `wal3_spark.spark.query_lag`) and, with `registry` (a `prometheus_client.CollectorRegistry`),
    published as gauges. `latest` maps each running query (its name, else its id) to its
    sources' last `SourceBacklog`s. Runs on the driver; reads nothing from storage."""

    def __init__(self, logger: logging.Logger = logger, level: int = logging.INFO,
                 registry: Any | None = None) -> None:
        self.logger = logger
        self.level = level
        self.latest: dict[str, list[SourceBacklog]] = {}
        self._names: dict[str, str] = {}  # query id -> the key in `latest`
        self._lock = threading.Lock()
        if registry is not None:
            registry.register(_collector(self))

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        backlogs = source_backlogs(progress)
        if not backlogs:
            return
        query = str(progress["name"] or progress["id"])
        with self._lock:
            self.latest[query] = backlogs
            self._names[str(progress["id"])] = query
        for backlog in backlogs:
            lag = backlog.lag
            self.logger.log(
                self.level, "query %s (%s): %d records behind the log's tail (read up to offset %d "
                "of %d); %s", query, lag.description, lag.behind, lag.end_offset, lag.latest_offset,
                ", ".join(f"{k} {v}" for k, v in backlog.kafka_metrics().items()),
            )

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        with self._lock:
            query = self._names.pop(str(event.id), None)
            if query is not None:
                self.latest.pop(query, None)

    def snapshot(self) -> dict[str, list[SourceBacklog]]:
        with self._lock:
            return dict(self.latest)


def _collector(listener: LagLogger) -> Any:
    """A `prometheus_client` collector of `listener`'s figures (imported here: the library is
    the optional extra `[metrics]`)."""
    from prometheus_client.core import GaugeMetricFamily
    from prometheus_client.registry import Collector

    per_source = (
        ("wal3_spark_min_offsets_behind_latest", "Kafka's minOffsetsBehindLatest: the fewest records "
         "behind the tail of a log of the source after the last micro-batch.", lambda b: b.min_offsets_behind),
        ("wal3_spark_max_offsets_behind_latest", "Kafka's maxOffsetsBehindLatest: the most records "
         "behind the tail of a log of the source.", lambda b: b.max_offsets_behind),
        ("wal3_spark_avg_offsets_behind_latest", "Kafka's avgOffsetsBehindLatest: records behind the "
         "tail, averaged over the source's logs.", lambda b: b.avg_offsets_behind),
        ("wal3_spark_estimated_total_bytes_behind_latest", "Kafka's estimatedTotalBytesBehindLatest: "
         "bytes of the fragments the source still has to read.", lambda b: b.estimated_total_bytes_behind),
    )

    class BacklogCollector(Collector):
        def collect(self) -> Iterator[Any]:
            latest = listener.snapshot()
            for name, help_, figure in per_source:
                family = GaugeMetricFamily(name, help_, labels=["query", "source"])
                for query, backlogs in latest.items():
                    for b in backlogs:
                        if (value := figure(b)) is not None:
                            family.add_metric([query, str(b.index)], value)
                yield family
            records = GaugeMetricFamily("wal3_spark_log_offsets_behind_latest", "Records behind the "
                                        "tail of one log of a log-set source.",
                                        labels=["query", "source", "log"])
            size = GaugeMetricFamily("wal3_spark_log_bytes_behind_latest", "Bytes of the fragments "
                                     "one log of a log-set source still has to read.",
                                     labels=["query", "source", "log"])
            for query, backlogs in latest.items():
                for b in (b for b in backlogs if b.is_log_set):
                    for log_name, behind in b.behind.items():
                        records.add_metric([query, str(b.index), log_name], behind)
                        if (known := b.log_bytes_behind(log_name)) is not None:
                            size.add_metric([query, str(b.index), log_name], known)
            yield records
            yield size

    return BacklogCollector()


def install_lag_listener(spark: Any, registry: Any | None = None, *, logger: logging.Logger = logger,
                         level: int = logging.INFO) -> LagLogger:
    """Add a `LagLogger` to `spark`'s streaming queries (publishing to `registry` too, when
    given) and return it; `spark.streams.removeListener(listener)` removes it."""
    listener = LagLogger(logger, level, registry)
    spark.streams.addListener(listener)
    return listener
