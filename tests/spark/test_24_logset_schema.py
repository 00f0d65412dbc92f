"""The schema of a log-set read, without Spark: the union of its logs' schemas plus `_log`,
and the logs that cannot be read as one."""

from __future__ import annotations

import pyarrow as pa
import pytest

from tests.support.logsets import prefix_url
from wal3_spark.log.reader import LogReader
from wal3_spark.log.writer import LogWriter
from wal3_spark.spark import options as opts
from wal3_spark.spark.logset_reader import logset_schema, union_payload
from wal3_spark.storage import open_store


def test_00_union_schema_across_logs():
    prefix = prefix_url()
    with LogWriter(open_store(f"{prefix}/a")) as w:
        w.append(pa.table({"id": pa.array([1], pa.int64()), "x": pa.array(["s"])},
                          schema=pa.schema([pa.field("id", pa.int64(), False), ("x", pa.string())])))
    with LogWriter(open_store(f"{prefix}/b")) as w:
        w.append(pa.table({"id": pa.array([2], pa.int64()), "y": pa.array([1.5])},
                          schema=pa.schema([pa.field("id", pa.int64(), False), ("y", pa.float64())])))
    options = opts.parse({"path": prefix, "logs": "*"}, opts.READ)
    schema = logset_schema(options)
    assert [(f.name, f.nullable) for f in schema.fields] == [
        ("id", False), ("x", True), ("y", True), ("_log", False), ("_offset", False),
        ("_timestamp", False)]
    with LogWriter(open_store(f"{prefix}/c")) as w:
        w.append(pa.table({"id": pa.array(["text"])}))
    with pytest.raises(Exception, match=r"log c disagrees with the logs before it \(from a on\)"):
        logset_schema(options)
    with LogWriter(open_store(f"{prefix}/r")) as w:
        w.append([b"raw"])
    with pytest.raises(Exception, match="mixes raw logs"):
        union_payload({n: LogReader(open_store(f"{prefix}/{n}")).manifest() for n in "ar"})
    with LogWriter(open_store(f"{prefix}/own")) as w:
        w.append(pa.table({"_log": ["kept from elsewhere"]}))
    with pytest.raises(Exception, match="log own has a column named _log, which a log-set read"):
        union_payload({n: LogReader(open_store(f"{prefix}/{n}")).manifest() for n in ("a", "own")})
