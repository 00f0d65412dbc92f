"""The public API has one shape: where a log lives is the first parameter of every entry point
and is named the same everywhere (`log` for one log, `source` and `destination` for two,
`prefix` for a set of logs), so that a reader who learned one entry point knows them all."""

from __future__ import annotations

import inspect

import pytest

from wal3_spark.log.branches import branch
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.reader import LogReader
from wal3_spark.log.tags import TagStore
from wal3_spark.log.writer import LogWriter
from wal3_spark.logset.dirty import DirtyLog
from wal3_spark.logset.logs import LogSet
from wal3_spark.ops.checkpoint import checkpoint
from wal3_spark.ops.copy import copy_log
from wal3_spark.ops.gc import GarbageCollector, collect_garbage
from wal3_spark.ops.verify import verify

#: each entry point and the names of the parameters that say where its logs live
FIRST_PARAMETERS = {
    LogWriter: ["log"],
    LogReader: ["log"],
    CursorStore: ["log"],
    TagStore: ["log"],
    GarbageCollector: ["log"],
    verify: ["log"],
    checkpoint: ["log"],
    collect_garbage: ["log"],
    copy_log: ["source", "destination"],
    branch: ["source", "destination"],
    LogSet: ["prefix"],
    DirtyLog: ["prefix"],
}


def _parameters(entry) -> list[str]:
    target = entry.__init__ if inspect.isclass(entry) else entry
    names = [p.name for p in inspect.signature(target).parameters.values()]
    return names[1:] if inspect.isclass(entry) else names


@pytest.mark.parametrize("entry", FIRST_PARAMETERS, ids=lambda e: e.__name__)
def test_00_where_the_log_lives_is_the_first_parameter_and_named_alike(entry):
    expected = FIRST_PARAMETERS[entry]
    assert _parameters(entry)[: len(expected)] == expected
