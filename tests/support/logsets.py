"""Log sets in memory for the log-set connector's unit tests: a fresh prefix, appends to one of
its logs, and the stream source over the whole set, driven without Spark."""

from __future__ import annotations

import uuid

import pyarrow as pa

from wal3_spark.log.writer import LogWriter
from wal3_spark.spark import options as opts
from wal3_spark.spark.logset_reader import logset_schema
from wal3_spark.spark.logset_stream import LogSetStreamReader
from wal3_spark.storage import open_store


def prefix_url() -> str:
    return f"memory://logset-{uuid.uuid4().hex[:8]}/tenants"


def append(prefix: str, name: str, n: int, start: int = 0) -> None:
    with LogWriter(open_store(f"{prefix}/{name}")) as writer:
        writer.append(pa.table({"id": pa.array(range(start, start + n), pa.int64())}))


def stream_reader(prefix: str, **options) -> LogSetStreamReader:
    parsed = opts.parse({"path": prefix, "logs": "*", **options}, opts.STREAM_READ)
    return LogSetStreamReader(parsed, logset_schema(parsed))
