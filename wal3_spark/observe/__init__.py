"""What operators watch: the status of a log or a log set (`status`), the same figures as
Prometheus metrics (`metrics`), and what `wal3 info` and the console show of one log
(`log_info`). Core: no Spark here (the Spark listener is `wal3_spark.spark`)."""
