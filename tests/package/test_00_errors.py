"""Errors survive pickling with their message and attributes, so that they can cross a process
boundary whole; a class whose constructor builds its message (or takes keyword-only arguments)
does not rebuild from its message alone."""

from __future__ import annotations

import inspect
import pickle

import pytest

from wal3_spark import errors

#: representative constructor arguments (positional, keyword) of every error class
SAMPLES: dict[type[errors.Wal3Error], tuple[tuple, dict]] = {
    errors.Wal3Error: (("something broke",), {}),
    errors.StorageError: (("the store failed",), {}),
    errors.ObjectNotFound: (("manifest/MANIFEST", "s3://bucket/log"), {}),
    errors.PreconditionFailed: (("manifest/MANIFEST", "the ETag changed"), {}),
    errors.AmbiguousWrite: (("log/Uuid=1.parquet", TimeoutError("read timed out")), {}),
    errors.TransientError: (("connection refused",), {}),
    errors.AccessDenied: (("access denied to manifest/MANIFEST",), {}),
    errors.InvalidOption: (("unknown option 'fragmentBytez'",), {}),
    errors.InvalidUrl: (("no store for ftp://x",), {}),
    errors.LogNotFound: (("s3://bucket/log",), {"create": "append to it"}),
    errors.LogSealed: (("s3://bucket/log",), {}),
    errors.SchemaMismatch: (("column 'id' is string, the log's is long",), {}),
    errors.FilterError: (("filter column 'tenant' is not a column of the log",), {}),
    errors.ScanUnsupported: (("columns ['ID', 'id'] differ only in case",), {}),
    errors.CorruptLog: (("setsum", "log/Uuid=1.parquet", "content does not match its setsum"), {}),
    errors.DataLost: (("s3://bucket/log", 10, 250), {}),
    errors.CommitFailed: (("ran out of attempts",), {}),
    errors.PartlyCommitted: (("2 of 3 fragments are in the log",), {}),
    errors.PastOrphanHorizon: (("written before the orphan horizon",), {}),
    errors.AlreadyCollected: (("the pending garbage lists them",), {"pending": True}),
    errors.CommitOutcomeUnknown: (("the store kept timing out",), {}),
    errors.AppendsUnsupported: (("s3://bucket/chroma-log",), {}),
    errors.CursorError: (("no cursor 'billing'",), {}),
    errors.InvalidCursorName: (("invalid cursor name 'bad-name!'",), {}),
    errors.InvalidLogName: (("'a/b' contains '/'",), {}),
    errors.RoutedCommitFailed: (
        ("s3://bucket/logs/", 2, {"a": errors.LogSealed("s3://bucket/logs/a"),
                                  "b": errors.DataLost("s3://bucket/logs/b", 0, 5)}, True), {},
    ),
    errors.GarbageError: (("gc/GARBAGE is malformed",), {}),
    errors.GarbageStale: (("the garbage no longer applies",), {}),
    errors.GCRefused: (("a cursor cannot be read",), {}),
    errors.CompactionRefused: (("s3://bucket/log is a raw log",), {}),
    errors.CopyError: (("the copy did not verify",), {}),
    errors.BranchError: (("cannot branch s3://bucket/log at offset 99",), {}),
    errors.TagError: (("no tag 'q3-close' in s3://bucket/log",), {}),
    errors.LogRecreated: (("s3://bucket/log", 12, "0192-a", "0193-b", "restart the query"), {}),
    errors.SparkSetupError: (("./env/bin/python does not exist on the driver",), {}),
}


def _state(error: BaseException) -> tuple:
    """What must survive: type, message, args and attributes (nested errors by their state)."""
    attributes = {
        name: {k: _state(v) for k, v in value.items()} if name == "failed" else value
        for name, value in vars(error).items()
    }
    return type(error), str(error), repr(error.args), attributes


def test_00_every_error_class_has_a_sample():
    classes = {
        cls for _, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, BaseException) and cls.__module__ == errors.__name__
    }
    assert classes == set(SAMPLES)


@pytest.mark.parametrize("cls", list(SAMPLES), ids=lambda cls: cls.__name__)
def test_01_error_survives_pickling(cls):
    args, kwargs = SAMPLES[cls]
    error = cls(*args, **kwargs)
    copy = pickle.loads(pickle.dumps(error))
    assert _state(copy) == _state(error)
    with pytest.raises(cls, match="."):
        raise copy
