"""wal3-spark: Chroma's wal3 log on object storage, in plain Python, with a PySpark data source.

The public API is re-exported here lazily (PEP 562), so that importing one core module does not
import them all, and executors pay only for what they use.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "CommitResult": "wal3_spark.log.committer",
    "Committer": "wal3_spark.log.committer",
    "CursorStore": "wal3_spark.log.cursors",
    "DirtyLog": "wal3_spark.logset.dirty",
    "LogReader": "wal3_spark.log.reader",
    "LogSelection": "wal3_spark.logset.logs",
    "LogSet": "wal3_spark.logset.logs",
    "LogWriter": "wal3_spark.log.writer",
    "Manifest": "wal3_spark.format.manifest",
    "Setsum": "wal3_spark.format.setsum",
    "SnapshotOptions": "wal3_spark.format.manifest",
    "VerifyReport": "wal3_spark.ops.verify",
    "Wal3Error": "wal3_spark.errors",
    "open_store": "wal3_spark.storage",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'wal3_spark' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
