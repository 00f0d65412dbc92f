"""The `wal3` PySpark data source: `Wal3DataSource`, registered under the name "wal3".

    df.write.format("wal3").mode("append").save(url)          # batch sink
    spark.read.format("wal3").load(url)                        # batch source
    spark.readStream.format("wal3").load(url)                  # streaming source
    df.writeStream.format("wal3").option("checkpointLocation", ckpt).start(url)   # streaming sink
    CREATE TABLE t USING wal3 OPTIONS (path 's3://…')                         # SQL catalog table

This class only parses options (once, on the driver) and hands out the reader and writer
classes; see the sibling modules for each role, and `table` for how a catalog table finds its
log.

Each role's module is imported where it is handed out (a log set's only for a log set), not
here. A streaming query
runs its source in a fresh Python process (Spark's `PythonStreamingSourceRunner`, one per query,
not forked from a warm daemon) that imports this module to unpickle the data source and then
asks only for `streamReader`, before the query's first trigger. With the writers, the log-set
readers, the batch reader, the committer and fragment decoding (`reader`) all imported there,
the connector's import cost that process 0.23 s of CPU per query, and 0.09 s without them
(docs/benchmarks.md, "AvailableNow: the source runner's start-up"). There is no import cycle
behind this: the role modules do not import this one.
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from wal3_spark.spark import options as opts, table


class Wal3DataSource(DataSource):
    """wal3 logs on object storage as a Spark source and sink (batch and streaming)."""

    @classmethod
    def name(cls) -> str:
        return "wal3"

    def _parse(self, role: str, schema: StructType | None = None) -> opts.Wal3Options:
        """The role's options; a catalog table's reads and INSERTs name no path, and find their
        log in the table's schema (`table`)."""
        return opts.parse(table.with_table_location(self.options, schema), role)

    def schema(self) -> StructType:
        from wal3_spark.log.reader import LogReader
        from wal3_spark.spark.schemas import payload_to_spark

        if table.is_table_definition(self.options):  # CREATE TABLE … USING wal3
            log = table.table_definition(self.options)
            return table.table_schema(payload_to_spark(table.table_manifest(log).arrow_schema()), log)
        # Called for batch and streaming reads alike: the role's own options are checked by
        # reader()/streamReader(); here only the location matters.
        where = opts.location(self.options)
        if where.logs is not None:
            from wal3_spark.spark.logset_reader import logset_schema

            return logset_schema(where)
        manifest = LogReader(where.open_store()).manifest()
        return payload_to_spark(manifest.arrow_schema())

    # -- batch --------------------------------------------------------------------------

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        options = self._parse(opts.WRITE, schema)
        if options.log_column is not None:
            from wal3_spark.spark.routing_writer import RoutingBatchWriter

            return RoutingBatchWriter.create(options, schema, overwrite)
        from wal3_spark.spark.batch_writer import Wal3BatchWriter

        log = table.table_log(schema)
        if log is not None and options.url == log.url:
            # an INSERT into a catalog table: its rows come with the table's _offset/_timestamp
            return Wal3BatchWriter.create(options, table.payload_schema(schema), overwrite,
                                          system_columns=True)
        return Wal3BatchWriter.create(options, schema, overwrite)

    def reader(self, schema: StructType) -> DataSourceReader:
        from wal3_spark.spark.batch_reader import reader_class

        options = self._parse(opts.READ, schema)
        if options.logs is not None:
            from wal3_spark.spark.logset_reader import (
                LogSetBatchReader,
                LogSetPushdownReader,
            )

            return reader_class(LogSetBatchReader, LogSetPushdownReader)(options, schema)
        return reader_class()(options, schema)

    # -- streaming ----------------------------------------------------------------------

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = self._parse(opts.STREAM_READ, schema)
        if options.logs is not None:
            from wal3_spark.spark.logset_stream import LogSetStreamReader

            return LogSetStreamReader(options, schema)
        from wal3_spark.spark.stream_reader import Wal3StreamReader

        return Wal3StreamReader(options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        options = self._parse(opts.STREAM_WRITE)
        if options.log_column is not None:
            from wal3_spark.spark.routing_writer import RoutingStreamWriter

            return RoutingStreamWriter.create(options, schema, overwrite)
        from wal3_spark.spark.stream_writer import Wal3StreamWriter

        return Wal3StreamWriter.create(options, schema, overwrite)
