"""The wal3 PySpark data source (`format("wal3")`) and helpers for using it from Spark.

`Wal3Log` (the native scan, `wal3_spark.spark.scan`) is imported on first use: executors import
this package for every task and need none of it.
"""

from __future__ import annotations

import importlib
from typing import Any

from wal3_spark.spark.session import activate_session, ensure_worker_python, register

__all__ = ["Wal3Log", "activate_session", "ensure_worker_python", "register"]


def __getattr__(name: str) -> Any:
    if name == "Wal3Log":
        return importlib.import_module("wal3_spark.spark.scan").Wal3Log
    raise AttributeError(f"module 'wal3_spark.spark' has no attribute {name!r}")
