"""The Spark sink hashes setsum items as the log's manifest says (`item_hash`): the driver reads
it and hands it to the tasks. New logs get BLAKE3 items, older logs keep SHA3 items, and reads
with verifyOnRead and the distributed scrub check both."""

from __future__ import annotations

import pytest

from tests.format.test_03_item_hash import SCHEMA, legacy_log
from tests.spark.test_08_batch import append, read
from wal3_spark.format.chunk_encoding import BLAKE3
from wal3_spark.log.reader import LogReader
from wal3_spark.spark.distributed_verify import verify_on_spark
from wal3_spark.storage import open_store

pytestmark = pytest.mark.timeout(300)


def frame(spark, start: int, n: int, extra: bool = False):
    columns = ["id", "concat('n', id) AS name"] + (["id % 2 = 0 AS extra"] if extra else [])
    return spark.range(start, start + n, numPartitions=2).selectExpr(*columns)


@pytest.mark.parametrize("legacy", [False, True], ids=["new-log", "old-log"])
def test_00_spark_appends_keep_the_logs_item_hash(spark, log_url, legacy):
    store = open_store(log_url)
    if legacy:
        legacy_log(store, SCHEMA)
    append(frame(spark, 0, 300), log_url)
    append(frame(spark, 300, 100, extra=True), log_url, mergeSchema="true")
    manifest = LogReader(store).manifest()
    assert manifest.item_hash == (None if legacy else BLAKE3)
    assert manifest.arrow_schema().names == ["id", "name", "extra"]
    rows = read(spark, log_url).orderBy("_offset").collect()  # verifyOnRead is on by default
    assert [r.id for r in rows] == list(range(400))
    assert [r.extra for r in rows[299:302]] == [None, True, False]
    report = verify_on_spark(spark, log_url)
    assert report.ok and report.records == 400, report.problems
