"""How far a streaming query is behind its wal3 logs, from the query's progress.

The wal3 stream source reports the log's tail as `latestOffset` in every progress; `endOffset` is
where the last micro-batch ended (per log for a log set, whose lag is summed over its logs). Their difference is the consumer lag Kafka users watch: records
in the log that the query has not read yet. Python sources cannot publish custom source metrics
(PySpark 4.3), so the lag is derived from progress, on the driver:

    spark.streams.addListener(LagLogger())          # logs each query's lag at every progress
    offsets_behind(query.lastProgress)               # or ask for it
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener

from wal3_spark.format.layout import FIRST_OFFSET

log = logging.getLogger(__name__)


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


def _positions(value: Any) -> dict[str, int] | None:
    """The positions in a wal3 stream offset, as a dict or its JSON: `{"offset": N}` (one log)
    as `{"": N}`, `{"logs": {...}}` (a log set) as its per-log offsets; else None. The
    incarnations recorded beside them (`"incarnation"`, `"incarnations"`) do not count."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if not isinstance(value, Mapping):
        return None
    if "offset" in value and set(value) <= {"offset", "incarnation"} and isinstance(value["offset"], int):
        return {"": value["offset"]}
    logs = value.get("logs") if set(value) <= {"logs", "incarnations"} else None
    if isinstance(logs, Mapping) and all(isinstance(v, int) for v in logs.values()):
        return dict(logs)
    return None


def source_lags(progress: Mapping[str, Any] | None) -> list[SourceLag]:
    """The lag of every wal3 source in one `StreamingQueryProgress` (or its JSON as a dict).
    A log-set source's offsets are summed over its logs (a log not read yet counts from its
    first offset)."""
    lags = []
    for source in (progress or {}).get("sources") or ():
        end, latest = _positions(source.get("endOffset")), _positions(source.get("latestOffset"))
        if end is not None and latest is not None:
            ends = sum(end.get(name, FIRST_OFFSET) for name in latest)
            lags.append(SourceLag(str(source.get("description", "")), ends, sum(latest.values())))
    return lags


def offsets_behind(progress: Mapping[str, Any] | None) -> int | None:
    """Records the query still has to read from its wal3 logs (summed over its wal3 sources);
    None when the progress has no wal3 source with offsets yet (no batch planned)."""
    lags = source_lags(progress)
    return sum(lag.behind for lag in lags) if lags else None


class LagLogger(StreamingQueryListener):
    """Logs each wal3 source's lag at every query progress (logger `wal3_spark.spark.lag`).

    `spark.streams.addListener(LagLogger())`; it runs on the driver and reads nothing from
    storage (the progress already holds both offsets).
    """

    def __init__(self, logger: logging.Logger = log, level: int = logging.INFO) -> None:
        self.logger = logger
        self.level = level

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        for lag in source_lags(progress):
            self.logger.log(
                self.level, "query %s (%s): %d records behind the log's tail (read up to offset %d "
                "of %d)", progress["name"] or progress["id"], lag.description, lag.behind,
                lag.end_offset, lag.latest_offset,
            )

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass
