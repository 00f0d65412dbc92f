"""The wal3 PySpark data source (`format("wal3")`) and helpers for using it from Spark.

`Wal3Log` (the native scan, `wal3_spark.spark.native_scan`) and the lag helpers (`wal3_spark.spark.query_lag`)
are imported on first use: every Python worker on an executor imports this package (its tasks'
classes live here), and these two pull in PySpark's DataFrame API, `functions` and the streaming
listener, which no task uses (measured: 0.15-0.25 s more per worker process on a loaded 2-core
machine). The data source's role modules are imported on first use too, for the streaming
source's runner process (`wal3_spark.spark.source`). There is no import circle to dodge.
"""

from __future__ import annotations

import importlib
from typing import Any

from wal3_spark.spark.session import activate_session, ensure_worker_python, register

_LAZY = {
    "Wal3Log": "wal3_spark.spark.native_scan",
    "LagLogger": "wal3_spark.spark.query_lag",
    "SourceBacklog": "wal3_spark.spark.query_lag",
    "SourceLag": "wal3_spark.spark.query_lag",
    "install_lag_listener": "wal3_spark.spark.query_lag",
    "offsets_behind": "wal3_spark.spark.query_lag",
    "source_backlogs": "wal3_spark.spark.query_lag",
    "source_lags": "wal3_spark.spark.query_lag",
}

__all__ = ["LagLogger", "SourceBacklog", "SourceLag", "Wal3Log", "activate_session",
           "ensure_worker_python", "install_lag_listener", "offsets_behind", "register",
           "source_backlogs", "source_lags"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'wal3_spark.spark' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
