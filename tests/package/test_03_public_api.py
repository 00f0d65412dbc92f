"""The public API has one shape: where a log lives is the first parameter of every entry point
and is named the same everywhere (`log` for one log, `source` and `destination` for two,
`prefix` for a set of logs), so that a reader who learned one entry point knows them all."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from wal3_spark.log.branches import branch, delete_branch
from wal3_spark.log.cursors import CursorStore
from wal3_spark.log.reader import LogReader
from wal3_spark.log.tags import TagStore
from wal3_spark.log.writer import LogWriter, LogWriterOptions
from wal3_spark.logset.dirty import DirtyLog
from wal3_spark.logset.logs import LogSet
from wal3_spark.ops.checkpoint import checkpoint
from wal3_spark.ops.copy import copy_log
from wal3_spark.ops.garbage_collector import GarbageCollector, GCOptions, collect_garbage
from wal3_spark.ops.retention import set_retention
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
    delete_branch: ["log"],
    collect_garbage: ["log"],
    set_retention: ["log"],
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


#: the operations on whole logs, each importable from the package and returning a report
OPERATIONS = {
    "verify": "VerifyReport",
    "copy_log": "CopyReport",
    "collect_garbage": "GCReport",
    "branch": "BranchReport",
    "checkpoint": "CheckpointReport",
    "delete_branch": "DeletionReport",
    "set_retention": "RetentionReport",
}
#: what the package hands out besides the operations and their reports
ENTRY_CLASSES = ["CursorStore", "DirtyLog", "LogReader", "LogSelection", "LogSet", "LogWriter",
                 "LogWriterOptions", "GCOptions", "TagStore", "open_store"]
#: machinery under the public API: importable from its module, not from the package
INTERNAL = ["Committer", "CasObject", "GarbageCollector", "resolve_store"]


def test_01_the_operations_and_their_reports_are_exported():
    import wal3_spark

    for name, report in OPERATIONS.items():
        operation = getattr(wal3_spark, name)
        assert inspect.signature(operation).return_annotation in (report, getattr(wal3_spark, report))
        assert dataclasses.is_dataclass(getattr(wal3_spark, report)), report
        assert name in wal3_spark.__all__ and report in wal3_spark.__all__
    for name in ENTRY_CLASSES:
        assert name in wal3_spark.__all__, name


def test_02_every_export_resolves_and_no_internal_is_exported():
    import wal3_spark

    for name in wal3_spark.__all__:
        assert getattr(wal3_spark, name) is not None, name
    for name in INTERNAL:
        assert name not in wal3_spark.__all__, name
        with pytest.raises(AttributeError):
            getattr(wal3_spark, name)


#: the most parameters a public constructor takes; more go into an options dataclass
HANDFUL = 5


def test_03_constructors_take_a_handful_of_parameters_and_options_in_a_dataclass():
    for entry in (LogWriter, LogReader, CursorStore, TagStore, GarbageCollector):
        assert len(_parameters(entry)) <= HANDFUL, (entry.__name__, _parameters(entry))
    assert dataclasses.is_dataclass(LogWriterOptions) and dataclasses.is_dataclass(GCOptions)
    with pytest.raises(ValueError, match="max_uploads >= 1"):
        LogWriterOptions(max_uploads=0)


#: seams for tests and wal3 stress (wal3_spark.testing.hooks), never a public parameter
TEST_HOOKS = {"after_step", "orphan_clock"}


def test_04_test_hooks_are_no_public_parameter():
    for entry in (GarbageCollector, collect_garbage, branch, delete_branch, checkpoint):
        assert not TEST_HOOKS & set(_parameters(entry)), entry.__name__
    assert "kwargs" not in _parameters(collect_garbage), "collect_garbage names its options"
