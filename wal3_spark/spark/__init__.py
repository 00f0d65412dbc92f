"""The wal3 PySpark data source (`format("wal3")`) and helpers for using it from Spark.

`Wal3Log` (the native scan, `wal3_spark.spark.scan`) and the lag helpers (`wal3_spark.spark.lag`)
are imported on first use: executors import this package for every task and need none of them.
"""

from __future__ import annotations

import importlib
from typing import Any

from wal3_spark.spark.session import activate_session, ensure_worker_python, register

_LAZY = {
    "Wal3Log": "wal3_spark.spark.scan",
    "LagLogger": "wal3_spark.spark.lag",
    "SourceLag": "wal3_spark.spark.lag",
    "offsets_behind": "wal3_spark.spark.lag",
    "source_lags": "wal3_spark.spark.lag",
}

__all__ = ["LagLogger", "SourceLag", "Wal3Log", "activate_session", "ensure_worker_python",
           "offsets_behind", "register", "source_lags"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'wal3_spark.spark' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
