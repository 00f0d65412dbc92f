"""The wal3 PySpark data source (`format("wal3")`) and helpers for using it from Spark."""

from wal3_spark.spark.session import activate_session, ensure_worker_python, register

__all__ = ["activate_session", "ensure_worker_python", "register"]
