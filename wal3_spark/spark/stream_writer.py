"""Streaming sink: `df.writeStream.format("wal3").option("checkpointLocation", c).start(url)`.

Exactly-once across restarts and retried batches: every micro-batch commits with the manifest's
`txns` under a stable writer id (option `writerId`, else derived from `checkpointLocation`) and
version = batchId, in the same manifest write as its fragments. A batch that Spark replays after
a failure (its commit landed but the checkpoint did not record it) finds its version already in
`txns`: the commit is skipped and the replay's fragments are deleted.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter
from pyspark.sql.types import StructType

from wal3_spark.spark.batch_writer import (
    Wal3CommitMessage,
    check_not_overwrite,
    prepare,
    task_context,
    writer_name,
)
from wal3_spark.spark.options import Wal3Options


class Wal3StreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: Wal3Options, target: pa.Schema | None, since: int) -> None:
        self.options = options
        self.target = target
        self.since = since

    @classmethod
    def create(cls, options: Wal3Options, schema: StructType, overwrite: bool) -> Wal3StreamWriter:
        check_not_overwrite(overwrite, options.url)
        target, since = prepare(options, schema)
        return cls(options, target, since)

    def write(self, iterator):
        from wal3_spark.spark.tasks import write_partition

        partition, attempt = task_context()
        files = write_partition(
            self.options.open_store(), iterator, self.target, self.options.fragment_bytes
        )
        return Wal3CommitMessage(tuple(files), partition, attempt)

    def commit(self, messages, batchId: int) -> None:
        from wal3_spark.spark.tasks import commit_files

        files = [f for m in messages if m is not None for f in m.files]
        commit_files(
            self.options.open_store(),
            files,
            target=self.target,
            merge_schema=self.options.merge_schema,
            writer=writer_name(self.options),
            since=self.since,
            app_id=self.options.writer_id,
            version=int(batchId),
        )

    def abort(self, messages, batchId: int) -> None:
        from wal3_spark.spark.tasks import delete_files

        files = [f for m in messages if m is not None for f in m.files]
        delete_files(self.options.open_store(), files, self.since)
