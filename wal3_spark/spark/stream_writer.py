"""Streaming sink: `df.writeStream.format("wal3").option("checkpointLocation", c).start(url)`.

Exactly-once across restarts and retried batches: every micro-batch commits with the manifest's
`txns` under a stable writer id (option `writerId`, else derived from `checkpointLocation`) and
version = batchId, in the same manifest write as its fragments. A batch that Spark replays after
a failure (its commit landed but the checkpoint did not record it) finds its version already in
`txns`: the commit is skipped and the replay's fragments are deleted.
"""

from __future__ import annotations

from typing import cast

from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from wal3_spark.spark.batch_writer import FragmentSink, Wal3CommitMessage


class Wal3StreamWriter(FragmentSink, DataSourceStreamArrowWriter):
    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        mine = cast("list[Wal3CommitMessage | None]", messages)  # what write returned
        self.commit_messages(mine, app_id=self.options.writer_id, version=int(batchId))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self.abort_messages(cast("list[Wal3CommitMessage | None]", messages))
