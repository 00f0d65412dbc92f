"""Property-based tests over what a user types: names (log, cursor, tag), offsets, counts,
durations, sizes and filter values of every type and encoding. Each input either works as
documented or fails with a clear wal3 error (or, on the command line, a usage error), never
another exception, and a refused input changes nothing. No Spark in these loops: they run in
seconds (the example count is the session profile's, tests/conftest.py)."""

from __future__ import annotations

import argparse
import math

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from wal3_spark.cli.arguments import count_arg, offset_arg, seconds_arg
from wal3_spark.errors import FilterError, Wal3Error
from wal3_spark.format.layout import cursor_key
from wal3_spark.format.tag import tag_key
from wal3_spark.log.reader import LogReader
from wal3_spark.log.writer import LogWriter, LogWriterOptions
from wal3_spark.logset.logs import check_log_name
from wal3_spark.spark import options as opts
from wal3_spark.storage.memory import MemoryStore

#: text as a user or a program could hand it over: lone surrogates, control characters, NUL,
#: newlines, other scripts' digits, and the separators names must not hold
TEXT = st.text(st.characters(codec=None, categories=None), max_size=40) | st.sampled_from(
    ["", "a", "a\n", "\na", "a/b", "..", ".", "a\x00", "\ud800", "８", "٣", "a b", "-", "_dirty"])
INTEGERS = st.integers(min_value=-(1 << 70), max_value=1 << 70)


@given(TEXT)
def test_00_a_name_is_accepted_whole_or_refused_with_a_wal3_error(text: str) -> None:
    for check in (check_log_name, cursor_key, tag_key):
        try:
            check(text)
        except Wal3Error as exc:
            assert str(exc)  # says what is wrong
            continue
        assert text and text == text.strip() and "/" not in text, (check.__name__, text)
        assert all(c.isprintable() for c in text), (check.__name__, text)


@given(TEXT | INTEGERS.map(str))
def test_01_offsets_counts_and_durations_parse_exactly_or_are_usage_errors(text: str) -> None:
    for parse in (offset_arg, count_arg):
        try:
            value = parse(text)
        except argparse.ArgumentTypeError as exc:
            assert repr(text)[:20] in str(exc) or "…" in str(exc)
            continue
        assert text.isascii() and value == int(text) and value >= 0
    try:
        seconds = seconds_arg(text)
    except argparse.ArgumentTypeError:
        return
    assert math.isfinite(seconds) and seconds >= 0


@given(TEXT, st.sampled_from(["fragmentBytes", "maxBytesPerTrigger", "maxTriggerDelay",
                              "maxRecordsPerTrigger", "startingOffsets", "endingOffsets",
                              "cursor", "tag", "filterColumn"]))
def test_02_a_spark_option_value_parses_or_is_an_invalid_option(text: str, name: str) -> None:
    role = opts.WRITE if name == "fragmentBytes" else opts.STREAM_READ
    try:
        opts.parse({"path": "memory://props/log", name: text}, role)
    except Wal3Error as exc:
        assert str(exc)


FILTER_VALUES = st.one_of(
    st.none(), st.booleans(), INTEGERS, st.sampled_from([0, (1 << 63) - 1, 1 << 63, (1 << 64) - 1, 1 << 64, -1]),
    st.floats(allow_nan=True, allow_infinity=True), TEXT, st.binary(max_size=8),
)
COLUMNS = {
    "i64": pa.array([-(1 << 63), -1, 0, 7, (1 << 63) - 1], pa.int64()),
    "u64": pa.array([0, 7, (1 << 63) - 1, 1 << 63, (1 << 64) - 1], pa.uint64()),
    "i8": pa.array([-128, -1, 0, 7, 127], pa.int8()),
    "s": pa.array(["", "a", "a\n", "\x00", "é"], pa.string()),
    "b": pa.array([b"", b"a", b"\xff", b"\x00", "é".encode()], pa.binary()),
}


@pytest.fixture(scope="module")
def filtered_logs() -> dict[str, MemoryStore]:
    """One log per column type, its fragments with a stream filter of that column."""
    stores = {}
    for name, values in COLUMNS.items():
        store = MemoryStore(f"props-{name}")
        with LogWriter(store, writer_options=LogWriterOptions(filter_column="k")) as writer:
            for value in values.to_pylist():  # one fragment per value
                writer.append(pa.table({"k": pa.array([value], values.type)}))
        stores[name] = store
    return stores


@given(st.sampled_from(sorted(COLUMNS)), st.lists(FILTER_VALUES, min_size=1, max_size=3))
def test_03_a_filtered_read_returns_exactly_the_equal_rows_or_a_filter_error(
        filtered_logs: dict[str, MemoryStore], column: str, values: list) -> None:
    store = filtered_logs[column]
    before = {m.key: m.etag for m in store.list()}
    try:
        table = LogReader(store).read_table(filter_column="k", filter_values=values)
    except FilterError as exc:
        assert str(exc)
    else:
        every = COLUMNS[column].to_pylist()
        wanted = [v for v in every if any(_equal(v, x) for x in values)]
        assert sorted(table.column("k").to_pylist(), key=repr) == sorted(wanted, key=repr), values
    assert {m.key: m.etag for m in store.list()} == before  # a read never writes


def _equal(stored: object, given_value: object) -> bool:
    """Whether a filter value names a stored value: the same number (bools are not numbers),
    the same text, the same bytes (a string names the bytes of its UTF-8)."""
    if isinstance(given_value, bool) or given_value is None:
        return False
    if isinstance(stored, bytes):
        return given_value == stored or (isinstance(given_value, str) and _utf8(given_value) == stored)
    if isinstance(stored, str):
        return isinstance(given_value, str) and given_value == stored
    return isinstance(given_value, int | float) and given_value == stored


def _utf8(text: str) -> bytes | None:
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return None


_RETENTION_LOG = MemoryStore("retention-properties")
with LogWriter(_RETENTION_LOG) as _writer:
    _writer.append([b"x" * 64])


@given(TEXT | st.sampled_from(["7d", "12h", "1.5h", "500ms", "0s", "-1d", "1e3s", "2w", "9" * 30 + "d"]),
       st.one_of(st.none(), INTEGERS, st.floats(allow_nan=True), st.booleans(), TEXT))
def test_15_a_retention_age_or_size_works_or_is_refused_and_changes_nothing(age: str, size: object) -> None:
    from wal3_spark.cli.arguments import age_arg
    from wal3_spark.errors import InvalidOption
    from wal3_spark.format.retention import MAX_AGE_MS
    from wal3_spark.ops.retention import set_retention

    try:
        ms = age_arg(age)
        assert 1 <= ms <= MAX_AGE_MS
    except argparse.ArgumentTypeError as exc:
        assert "not a retention age" in str(exc)
    before = _RETENTION_LOG.get("manifest/MANIFEST")
    try:
        report = set_retention(_RETENTION_LOG, max_bytes=size)  # type: ignore[arg-type]
    except InvalidOption as exc:
        assert str(exc) and _RETENTION_LOG.get("manifest/MANIFEST") == before
        return
    assert isinstance(size, int) and not isinstance(size, bool) and size >= 1
    assert report.retention == {"max_bytes": size}
