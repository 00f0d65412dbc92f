"""Every Spark path refuses a damaged manifest with CorruptLog naming it: `format("wal3")` batch
and stream, and the native scan, never a shorter DataFrame, never pyarrow's raw OSError. And
the idempotent write's version option takes plain ASCII digits only."""

from __future__ import annotations

import pytest

from tests.log.test_09_checked_reads import (
    damaged_schema,
    drop_last_fragment,
    edit,
    last_limit_below_start,
    last_limit_lowered,
    nine_rows,
    non_utf8_name,
    renamed_column,
)
from wal3_spark.errors import CorruptLog
from wal3_spark.format.layout import MANIFEST_KEY
from wal3_spark.spark import Wal3Log
from wal3_spark.spark.options import parse_writer_version

pytestmark = pytest.mark.timeout(300)


def batch(spark, url, tmp_path):
    return spark.read.format("wal3").load(url).collect()


def stream(spark, url, tmp_path):
    query = (
        spark.readStream.format("wal3").load(url).writeStream.format("parquet")
        .option("checkpointLocation", str(tmp_path / "ckpt")).option("path", str(tmp_path / "out"))
        .trigger(availableNow=True).start()
    )
    query.awaitTermination(240)
    if query.exception():
        raise query.exception()
    return spark.read.parquet(str(tmp_path / "out")).collect()


def native(spark, url, tmp_path):
    return Wal3Log.forPath(spark, url).toDF().collect()


@pytest.mark.parametrize("damage", [last_limit_below_start, drop_last_fragment, damaged_schema, renamed_column,
                                    non_utf8_name],
                         ids=lambda d: d.__name__)
def test_00_every_spark_reader_refuses_a_damaged_manifest(spark, tmp_path, damage):
    url = (tmp_path / "log").as_uri()
    store = nine_rows(url)
    assert len(batch(spark, url, tmp_path)) == 9
    edit(store, damage)
    for read in (batch, stream, native):
        with pytest.raises(Exception) as info:
            rows = read(spark, url, tmp_path / read.__name__)
            pytest.fail(f"{read.__name__} read {len(rows)} of 9 rows from a damaged manifest")
        text = str(info.value)
        # the native scan plans in this process (the error itself); the data source in Spark's
        # Python workers (its text, in Spark's exception)
        assert isinstance(info.value, CorruptLog) or "CorruptLog" in text, (read.__name__, text[:2000])
        assert MANIFEST_KEY in text, (read.__name__, text[:2000])
        assert "Invalid flatbuffers" not in text or "Arrow IPC" in text, text[:2000]


def test_04_the_native_scan_of_a_range_checks_its_fragments_columns(spark, tmp_path):
    """A scan short of the log's last fragment reads no footer of the log's ends: the first and
    last fragment it does read still show a renamed column."""
    url = (tmp_path / "log").as_uri()
    store = nine_rows(url)
    assert len(Wal3Log.forPath(spark, url).toDF(endingOffsets=5).collect()) == 4
    edit(store, renamed_column)
    with pytest.raises(CorruptLog, match="that the manifest's schema"):
        Wal3Log.forPath(spark, url).toDF(endingOffsets=5).collect()


def last_limit_raised(doc: dict) -> None:
    doc["fragments"][-1]["limit"]["offset"] += 1


@pytest.mark.parametrize("damage", [last_limit_lowered, last_limit_raised], ids=lambda d: d.__name__)
def test_03_the_native_scan_checks_the_last_fragments_count(spark, tmp_path, damage):
    """The manifest balances, and this scan decodes nothing: the last fragment's Parquet footer
    gives its count away (format("wal3") finds it decoding the fragment)."""
    url = (tmp_path / "log").as_uri()
    store = nine_rows(url)
    assert len(native(spark, url, tmp_path)) == 9
    edit(store, damage)
    with pytest.raises(CorruptLog, match="holds 3 records, the manifest"):
        native(spark, url, tmp_path)
    with pytest.raises(Exception, match="holds 3 records, the manifest says"):
        batch(spark, url, tmp_path)


@pytest.mark.parametrize("text", ["1_0", "٣٣", "+8", "7x", "", "-1", "1.0", "9223372036854775808"])
def test_01_the_spark_writer_version_option_takes_plain_ascii_digits_only(text):
    with pytest.raises(ValueError, match="expected an integer >= 0"):
        parse_writer_version(text)


def test_02_a_plain_writer_version_is_read_as_it_is_written():
    assert [parse_writer_version(t) for t in ("0", "42", " 7 ", "007", "9223372036854775807")] == [
        0, 42, 7, 7, 2**63 - 1]
