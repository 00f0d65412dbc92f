"""What operators watch: the status of a log or a log set (`status`), and the same figures as
Prometheus metrics (`metrics`). Core: no Spark here (the Spark listener is `wal3_spark.spark`)."""
