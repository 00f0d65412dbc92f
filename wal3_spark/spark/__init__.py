"""The wal3 PySpark data source (`format("wal3")`) and helpers for using it from Spark."""

from wal3_spark.spark.lag import LagLogger, SourceLag, offsets_behind, source_lags
from wal3_spark.spark.session import activate_session, ensure_worker_python, register

__all__ = ["LagLogger", "SourceLag", "activate_session", "ensure_worker_python", "offsets_behind",
           "register", "source_lags"]
