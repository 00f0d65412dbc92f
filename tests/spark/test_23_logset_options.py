"""A log set's options, parsed without Spark: which logs (`logs`), where each starts
(`startingOffsets`, `newLogOffsets`) and the routing sink's `logColumn`; bad values named."""

from __future__ import annotations

import pytest

from wal3_spark.errors import InvalidOption
from wal3_spark.logset.logs import ALL_LOGS, LogSelection
from wal3_spark.spark import options as opts


def test_00_log_set_options_parse():
    o = opts.parse({"path": "/p", "logs": "b, a"}, opts.STREAM_READ)
    assert o.logs == LogSelection.of(["a", "b"]) and o.new_log_offsets == "earliest"
    assert opts.parse({"path": "/p", "logs": "tenant-*"}, opts.READ).logs.pattern == "tenant-*"
    assert opts.parse({"path": "/p", "logs": "*"}, opts.READ).logs == ALL_LOGS
    s = opts.parse({"path": "/p", "logs": "*", "startingOffsets": '{"logs": {"a": 17, "b": 3}}',
                    "newLogOffsets": "LATEST"}, opts.STREAM_READ)
    assert s.starting == ("logs", 0) and s.starting_logs == (("a", 17), ("b", 3))
    assert s.new_log_offsets == "latest"
    w = opts.parse({"path": "/p", "logColumn": "tenant"}, opts.WRITE)
    assert w.log_column == "tenant" and w.logs is None


@pytest.mark.parametrize("options, match", [
    ({"logs": " , "}, "expected \\* \\(every log\\)"),
    ({"logs": "a/b"}, "invalid log name 'a/b'"),
    ({"logs": "a,t-*"}, "give one glob, or a list of log names"),
    ({"logs": "*", "startingOffsets": '{"logs": {"_dirty": 1}}'}, "reserved"),
    ({"logs": "*", "startingOffsets": "42"}, "per-log offsets"),
    ({"logs": "*", "startingOffsets": '{"logs": {"a": 0}}'}, "offsets start at 1"),
    ({"logs": "*", "startingOffsets": '{"offset": 3}'}, "per-log offsets"),
    ({"newLogOffsets": "latest"}, "applies only to a log set"),
    ({"startingOffsets": '{"logs": {"a": 3}}'}, "per-log offsets read a log set: set logs too"),
    ({"logs": "*", "newLogOffsets": "soon"}, "expected earliest or latest"),
])
def test_01_bad_log_set_options_name_the_problem(options, match):
    with pytest.raises(InvalidOption, match=match):
        opts.parse({"path": "/p", **options}, opts.STREAM_READ)
