"""The connector's options, parsed without Spark: names are case-insensitive, values are
checked, a bad one names the problem and lists the valid options, credentials never show."""

from __future__ import annotations

from dataclasses import fields

import pytest

from wal3_spark.errors import InvalidOption
from wal3_spark.spark import options as opts


def test_00_options_parse_case_insensitively_into_a_frozen_object():
    o = opts.parse({"path": "/tmp/x", "FRAGMENTBYTES": "8m", "mergeschema": "TRUE"}, opts.WRITE)
    assert (o.fragment_bytes, o.merge_schema) == (8 << 20, True)
    with pytest.raises(Exception):
        o.fragment_bytes = 1  # frozen
    r = opts.parse({"path": "/tmp/x", "startingOffsets": '{"offset": 42}', "endingoffsets": "50",
                    "verifyOnRead": "false", "failOnDataLoss": "false"}, opts.READ)
    assert r.starting == ("offset", 42) and r.ending == ("offset", 50)
    assert not r.verify_on_read and not r.fail_on_data_loss
    assert (r.verify_records, opts.parse({"path": "/x"}, opts.READ).verify_records) == (False, False)
    v = opts.parse({"path": "/tmp/x", "verifyOnRead": " Records"}, opts.STREAM_READ)
    assert v.verify_on_read and v.verify_records
    t = opts.parse({"path": "/tmp/x", "startingTimestamp": "1970-01-01T00:00:01Z"}, opts.STREAM_READ)
    assert t.starting == ("timestamp", 1_000_000)
    assert opts.parse({"path": "/x", "startingTimestamp": "1500"}, opts.READ).starting == ("timestamp", 1_500_000)


@pytest.mark.parametrize("options, match", [
    ({"nope": "1"}, "unknown option"),
    ({"maxPartitionBytes": "big"}, "expected a size"),
    ({"maxRecordsPerTrigger": "0"}, "does not apply"),
    ({"startingOffsets": "middle"}, "earliest or latest or an offset"),
    ({"startingOffsets": "0"}, "offsets start at 1"),
    ({"verifyOnRead": "maybe"}, "expected true, false or records"),
    ({"startingOffsets": "1", "startingTimestamp": "5"}, "not both"),
])
def test_01_bad_options_fail_with_the_valid_list(options, match):
    with pytest.raises(InvalidOption, match=match) as info:
        opts.parse({"path": "/tmp/x", **options}, opts.READ)
    assert "Valid options for batch reads" in str(info.value)
    assert "startingOffsets" in str(info.value) and "endpoint" in str(info.value)


def test_02_stream_read_cursor_name_is_checked():
    with pytest.raises(InvalidOption, match="letters, digits and underscores"):
        opts.parse({"path": "/tmp/x", "cursor": "bad name"}, opts.STREAM_READ)


def test_03_credentials_are_masked():
    o = opts.parse({"path": "s3://b/l", "secretAccessKey": "S3CR3T", "accessKeyId": "AKIA1",
                    "endpoint": "http://h:1"}, opts.READ)
    assert dict(o.store_options)["secretAccessKey"] == "S3CR3T"
    assert "S3CR3T" not in repr(o) and "AKIA1" not in repr(o) and "http://h:1" in repr(o)
    with pytest.raises(InvalidOption) as info:
        opts.parse({"path": "s3://b/l", "secretAccessKey": "S3CR3T", "x": "1"}, opts.READ)
    assert "S3CR3T" not in str(info.value)
    with pytest.raises(InvalidOption) as info:
        opts.parse({"path": "s3://b/l", "secretAccessKey": "S3CR3T", "writerId": "w"}, opts.WRITE)
    assert "S3CR3T" not in str(info.value)
    assert all(f"{f.name}=" in repr(o) for f in fields(o)), "repr shows every field"


@pytest.mark.parametrize("options, match", [
    ({"maxTriggerDelay": "1m"}, "applies only with minRecordsPerTrigger"),
    ({"minRecordsPerTrigger": "10", "maxTriggerDelay": "soon"}, "expected a duration"),
    ({"minRecordsPerTrigger": "0"}, "expected a positive integer"),
    ({"minRecordsPerTrigger": "100", "maxRecordsPerTrigger": "10"}, "larger than maxRecordsPerTrigger"),
])
def test_04_trigger_option_errors_name_the_problem_and_the_valid_options(options, match):
    with pytest.raises(InvalidOption, match=match) as info:
        opts.parse({"path": "/tmp/x", **options}, opts.STREAM_READ)
    assert "Valid options for streaming reads" in str(info.value)
    assert "minRecordsPerTrigger" in str(info.value) and "maxTriggerDelay" in str(info.value)


def test_05_trigger_delay_forms():
    parsed = [opts.parse({"path": "/x", "minRecordsPerTrigger": "5", "maxTriggerDelay": d},
                         opts.STREAM_READ).max_trigger_delay_ms for d in ("15m", "30s", "500ms", "2h", "750")]
    assert parsed == [900_000, 30_000, 500, 7_200_000, 750]
    assert opts.parse({"path": "/x", "minRecordsPerTrigger": "5"}, opts.STREAM_READ).max_trigger_delay_ms == 900_000


@pytest.mark.parametrize("options, match", [
    ({"writerId": "nightly"}, "needs both writerId and writerVersion; add writerVersion"),
    ({"writerVersion": "3"}, "needs both writerId and writerVersion; add writerId"),
    ({"writerId": "nightly", "writerVersion": "-1"}, "expected an integer >= 0"),
    ({"writerId": "nightly", "writerVersion": "v2"}, "expected an integer >= 0"),
    ({"writerId": "nightly", "writerVersion": str(1 << 63)}, r"at most 9223372036854775807, a long"),
    ({"writerId": " ", "writerVersion": "1"}, "non-empty id"),
])
def test_06_idempotent_write_options_go_together(options, match):
    with pytest.raises(InvalidOption, match=match) as info:
        opts.parse({"path": "/tmp/x", **options}, opts.WRITE)
    assert "Valid options for batch writes" in str(info.value) and "writerVersion" in str(info.value)
    parsed = opts.parse({"path": "/tmp/x", "writerId": "nightly", "writerVersion": "42"}, opts.WRITE)
    assert (parsed.writer_id, parsed.writer_version) == ("nightly", 42)
    largest = opts.parse({"path": "/tmp/x", "writerId": "nightly", "writerVersion": str((1 << 63) - 1)},
                         opts.WRITE)
    assert largest.writer_version == (1 << 63) - 1
    with pytest.raises(InvalidOption, match="does not apply to streaming writes"):
        opts.parse({"path": "/x", "writerId": "w", "writerVersion": "1"}, opts.STREAM_WRITE)


@pytest.mark.parametrize("options, match", [
    ({"fragmentBytes": "8m\x00"}, "expected a size"),
    ({"fragmentBytes": "\uff18m"}, "expected a size"),  # a fullwidth 8: int() takes it, no other reader would
    ({"fragmentBytes": "\u0663"}, "expected a size"),  # an Arabic-Indic 3
    ({"writerId": "w", "writerVersion": "\u0663"}, "expected an integer"),
])
def test_07_sizes_and_numbers_are_ascii_digits_only(options, match):
    with pytest.raises(InvalidOption, match=match):
        opts.parse({"path": "/tmp/x", **options}, opts.WRITE)
    assert opts.parse({"path": "/tmp/x", "fragmentBytes": " 8m\n"}, opts.WRITE).fragment_bytes == 8 << 20


@pytest.mark.parametrize("text", ["\u0663s", "3s\x00", "1\u0663"])
def test_08_durations_and_timestamps_are_ascii_digits_only(text):
    with pytest.raises(ValueError):
        opts.parse_duration_ms(text)
    with pytest.raises(ValueError):
        opts.parse_timestamp_us(text.replace("s", ""))
    assert opts.parse_duration_ms("3s\n") == 3000


@pytest.mark.parametrize("char", ["\n", "\r", "\t", "\x00", "\x1b", "\u2028"])
def test_09_cursor_and_tag_options_refuse_control_characters(char):
    for name in (f"billing{char}", f"{char}billing"):
        with pytest.raises(InvalidOption, match="letters, digits and underscores"):
            opts.parse({"path": "/tmp/x", "cursor": name}, opts.STREAM_READ)
        with pytest.raises(InvalidOption, match="invalid tag name"):
            opts.parse({"path": "/tmp/x", "tag": name}, opts.READ)


def test_10_a_store_options_typo_is_refused_before_the_schema_read(monkeypatch):
    """Spark asks the source's schema() (which reads the manifest) before reader() checks the
    role's options: a typo of a store option (`endpont`) was dropped there, so the read went to
    the default endpoint (here a closed port). It is refused there too, naming the valid ones;
    wal3's own and Spark's options (path, checkpointLocation) are told apart from store options."""
    from pyspark_wal3 import DefaultSource

    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    both = r"Valid options for reads \(spark\.read, spark\.readStream\)"
    for options, listed in (({"endpont": "http://127.0.0.1:9"}, both),
                            ({"endpont": "x", "cursor": "c"}, "Valid options for streaming reads")):
        typo = r"wal3 option endpont='.*': unknown option \(did you mean endpoint\?\)\. "
        with pytest.raises(InvalidOption, match=typo + listed) as info:
            DefaultSource({"path": "s3://bucket/log", **options}).schema()
        assert "endpoint" in str(info.value) and "accessKeyId" in str(info.value)
    where = opts.location({"path": "s3://bucket/log", "ENDPOINT": "http://127.0.0.1:9", "checkpointLocation": "/c",
                           "maxRecordsPerTrigger": "5", "startingOffsets": "1", "region": "r"})
    assert dict(where.store_options) == {"endpoint": "http://127.0.0.1:9", "region": "r"}



@pytest.mark.parametrize("options", [
    {"filterColumn": "k", "filterValues": "[" * 5000},
    {"startingOffsets": "[" * 5000},
    {"logs": "*", "startingOffsets": '{"logs": ' + "[" * 5000},
    {"logs": "*", "startingOffsets": "[" * 5000},
])
def test_11_json_nested_deeper_than_the_parser_goes_is_a_clear_error(options):
    """`[[[[…` raised RecursionError out of the options' JSON parsing."""
    with pytest.raises(InvalidOption, match="expected"):
        opts.parse({"path": "/tmp/x", **options}, opts.READ)
