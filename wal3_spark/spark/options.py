"""The wal3 data source's options, parsed and validated once on the driver.

Spark hands a data source its options as a case-insensitive dict of strings. `parse` turns it,
for one role (batch write, batch read, stream read, stream write), into a small frozen
`Wal3Options` that is all the executors receive. An unknown or malformed option fails with the
list of valid options for that role. Store options (endpoint, credentials) are passed through to
`open_store` untouched, and never shown: `repr`, errors and the manifest's `writer` field mask
them.
"""

from __future__ import annotations

import datetime as _dt
import difflib
import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from wal3_spark.errors import InvalidOption
from wal3_spark.format.tag import tag_key
from wal3_spark.format.units import parse_duration_ms, parse_size
from wal3_spark.log.auto_compaction import DEFAULT_FRAGMENTS, AutoCompactOptions
from wal3_spark.log.compaction import DEFAULT_TARGET_BYTES
from wal3_spark.logset.logs import (
    ALL_LOGS,
    DEFAULT_FULL_SCAN_EVERY_S,
    LogSelection,
    LogSet,
    check_log_name,
)
from wal3_spark.storage import ObjectStore, open_store, store_option_names

WRITE, READ, STREAM_READ, STREAM_WRITE = "write", "read", "streamRead", "streamWrite"
ROLES = (WRITE, READ, STREAM_READ, STREAM_WRITE)
_ROLE_TEXT = {
    WRITE: "batch writes (df.write)",
    READ: "batch reads (spark.read)",
    STREAM_READ: "streaming reads (spark.readStream)",
    STREAM_WRITE: "streaming writes (df.writeStream)",
}

MB = 1 << 20
#: Kafka's default maxTriggerDelay (15 minutes)
DEFAULT_TRIGGER_DELAY_MS = 15 * 60 * 1000
#: the dirty log's full-scan interval (`wal3_spark.logset.logs.DEFAULT_FULL_SCAN_EVERY_S`)
DEFAULT_FULL_SCAN_MS = int(DEFAULT_FULL_SCAN_EVERY_S * 1000)

#: option name -> (roles it applies to, one-line description); docs/guide/options.md has the full table
OPTIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "path": (ROLES, "the log's URL (file:///..., s3://bucket/prefix, or a local path)"),
    "fragmentBytes": ((WRITE, STREAM_WRITE), "bytes per fragment before a task starts a new one"),
    "mergeSchema": ((WRITE, STREAM_WRITE), "allow appends that add nullable columns"),
    "writerId": ((WRITE, STREAM_WRITE), "stable id of an idempotent (exactly-once) writer"),
    "writerVersion": ((WRITE,), "with writerId: commit once per version (an integer >= 0)"),
    "checkpointLocation": ((STREAM_WRITE, STREAM_READ), "set by Spark from writeStream"),
    "startingOffsets": ((READ, STREAM_READ), "earliest | latest | an offset"),
    "endingOffsets": ((READ,), "latest | an offset (exclusive)"),
    "startingTimestamp": ((READ, STREAM_READ), "ms since the epoch or ISO-8601"),
    "endingTimestamp": ((READ,), "ms since the epoch or ISO-8601 (exclusive)"),
    "maxRecordsPerTrigger": ((STREAM_READ,), "admission control: records per micro-batch"),
    "maxBytesPerTrigger": ((STREAM_READ,), "admission control: fragment bytes per micro-batch"),
    "maxFragmentsPerTrigger": ((STREAM_READ,), "admission control: fragments per micro-batch"),
    "minRecordsPerTrigger": ((STREAM_READ,), "wait for this many new records per micro-batch"),
    "maxTriggerDelay": ((STREAM_READ,), "with minRecordsPerTrigger: the longest wait, e.g. 15m"),
    "cursor": ((STREAM_READ,), "wal3 cursor moved to each committed offset"),
    "tag": ((READ,), "read exactly the records of this tag (`wal3 tag`), the same rows every time"),
    "failOnDataLoss": ((READ, STREAM_READ), "fail when offsets were garbage-collected"),
    "onRecreatedLog": ((STREAM_READ,), "fail | restart: a log deleted and created again since "
                       "its offset was recorded fails the query, or is read from its oldest offset"),
    "maxPartitionBytes": ((READ, STREAM_READ), "fragment bytes bin-packed per input partition"),
    "minPartitions": ((READ, STREAM_READ), "split reads into at least this many partitions"),
    "verifyOnRead": ((READ, STREAM_READ), "true: check each fragment's digest (its setsum where it "
                     "has none) as it is read; records: recompute every record's setsum too; false: neither"),
    "logs": ((READ, STREAM_READ), "read the logs under path named by these names or globs (* = all)"),
    "newLogOffsets": ((STREAM_READ,), "with logs: earliest | latest, where logs created later start"),
    "fullScanInterval": ((STREAM_READ,), "with logs: how often every manifest is read, e.g. 10m"),
    "dirtyLog": ((WRITE, STREAM_WRITE), "record each commit in the prefix's dirty log"),
    "autoCompact": ((WRITE, STREAM_WRITE), "true: after a commit, compact the log in the background "
                    "once small fragments pile up (the commit never waits)"),
    "autoCompactFragments": ((WRITE, STREAM_WRITE), "with autoCompact: how many similar small "
                             "fragments start a compaction (default 16)"),
    "autoCompactTargetBytes": ((WRITE, STREAM_WRITE), "with autoCompact: fragments this large are "
                               "left alone, merged ones stay under it (default 64m)"),
    "logColumn": ((WRITE, STREAM_WRITE), "route each row to the log under path this column names"),
    "filterColumn": (ROLES, "writes: give each fragment a stream filter of this column's values; "
                     "reads: the column filterValues are of"),
    "filterValues": ((READ, STREAM_READ), "with filterColumn: read only the rows whose column "
                     "holds one of these values (a value, or a JSON array), skipping fragments "
                     "whose stream filter rules them out"),
}


#: Kafka's and Delta's option names that mean exactly a wal3 option: accepted as that option
#: (docs/from-kafka-and-delta.md maps every option of theirs, defaults included)
ALIASES: dict[str, str] = {
    "maxOffsetsPerTrigger": "maxRecordsPerTrigger",  # Kafka: one offset is one record, here too
    "minOffsetsPerTrigger": "minRecordsPerTrigger",  # Kafka, with maxTriggerDelay as here
    "maxFilesPerTrigger": "maxFragmentsPerTrigger",  # Delta: a fragment is one of the log's files
    "txnAppId": "writerId",  # Delta's idempotent writes: skip a version already committed
    "txnVersion": "writerVersion",
}

_APPEND_ONLY = "a wal3 log is append-only (no record is ever deleted or changed): drop the option"
_NO_PARTITIONS = "a wal3 log has no partitions"
_CURSOR = "a consumer's committed position is a wal3 cursor: set cursor=<name>"

#: Kafka's and Delta's options without a wal3 option of the same meaning: whose, and what to use
#: instead (any other `kafka.*` option: `_foreign`)
FOREIGN: dict[str, tuple[str, str]] = {
    "subscribe": ("Kafka", "a wal3 read names its log in load(url); to read several logs under one "
                           "prefix as one, load(prefix) with logs=a,b,c"),
    "subscribePattern": ("Kafka", "to read the logs under a prefix whose names match, load(prefix) "
                                  "with logs=<glob> (a glob such as tenant-*, not a regular expression)"),
    "assign": ("Kafka", f"{_NO_PARTITIONS}: startingOffsets/endingOffsets take one offset"),
    "topic": ("Kafka", "write to a log with save(url); to route each row to the log a column "
                       "names, save(prefix) with logColumn=<column>"),
    "startingOffsetsByTimestamp": ("Kafka", f"{_NO_PARTITIONS}: use startingTimestamp (ms since the "
                                            "epoch or ISO-8601)"),
    "endingOffsetsByTimestamp": ("Kafka", f"{_NO_PARTITIONS}: use endingTimestamp (ms since the epoch "
                                          "or ISO-8601)"),
    "startingOffsetsByTimestampStrategy": ("Kafka", "startingTimestamp starts at the first fragment "
                                                    "written at or after that time; use it alone"),
    "groupIdPrefix": ("Kafka", _CURSOR),
    "includeHeaders": ("Kafka", "wal3 records have no headers: carry them in columns"),
    "maxRecordsPerPartition": ("Kafka", "set minPartitions or maxPartitionBytes to split a read"),
    "startingVersion": ("Delta", "a wal3 log has no table versions: start from a record offset "
                                 "(startingOffsets) or a time (startingTimestamp)"),
    "ignoreDeletes": ("Delta", _APPEND_ONLY),
    "ignoreChanges": ("Delta", _APPEND_ONLY),
    "skipChangeCommits": ("Delta", _APPEND_ONLY),
    "ignoreFileDeletion": ("Delta", _APPEND_ONLY),
    "readChangeFeed": ("Delta", "a wal3 log is a feed of appended records already: read it with "
                                "spark.readStream (every record is an insert)"),
    "excludeRegex": ("Delta", "all of a log's fragments hold its records: there are no files to "
                              "exclude"),
    "overwriteSchema": ("Delta", "a log's schema only gains nullable columns (mergeSchema=true); "
                                 "write to a new log for another schema"),
    "replaceWhere": ("Delta", _APPEND_ONLY),
    "partitionOverwriteMode": ("Spark's file sources", _APPEND_ONLY),
}


def _foreign(name: str) -> str | None:
    """Why an option of Kafka's or Delta's is refused, and what wal3 takes instead."""
    low = name.lower()
    found = next((v for n, v in FOREIGN.items() if n.lower() == low), None)
    if found is None and low == "kafka.group.id":
        found = ("Kafka", _CURSOR)
    elif found is None and low.startswith("kafka."):
        found = ("Kafka", "wal3 has no broker: the log lives at the URL given to load()/save(), "
                          "and its object store takes its own options (endpoint, region, "
                          "accessKeyId, ...)")
    return f"{found[0]}'s option, not wal3's: {found[1]}" if found else None


_SECRET_WORDS = (
    "secret", "password", "token", "session", "credential", "key", "jaas", "sasl",
    "connectionstring", "sas",
)  # fmt: skip
_PUBLIC = ("endpoint", "region", "url", "profile", "addressing", "path_style", "pathstyle")


def is_secret(name: str) -> bool:
    """Whether an option's value must never be shown (credentials)."""
    low = name.lower()
    if any(p in low for p in _PUBLIC) and "key" not in low and "secret" not in low:
        return False
    return any(w in low for w in _SECRET_WORDS)


def valid_options(role: str) -> list[str]:
    names = [n for n, (roles, _) in OPTIONS.items() if role in roles]
    return names + sorted(store_option_names(), key=str.lower)


@dataclass(frozen=True)
class Wal3Options:
    """Everything a wal3 reader or writer needs; picklable, credentials masked in repr."""

    role: str
    url: str
    store_options: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    fragment_bytes: int = 64 * MB
    merge_schema: bool = False
    writer_id: str | None = None
    writer_version: int | None = None
    starting: tuple[str, int] = ("earliest", 0)  # ("earliest"|"latest"|"offset"|"timestamp", v)
    ending: tuple[str, int] = ("latest", 0)
    max_records: int | None = None
    max_bytes: int | None = None
    max_fragments: int | None = None
    min_records: int | None = None
    max_trigger_delay_ms: int = DEFAULT_TRIGGER_DELAY_MS
    cursor: str | None = None
    #: a batch read of exactly the records a tag names (`wal3_spark.log.tags`)
    tag: str | None = None
    fail_on_data_loss: bool = True
    #: what a stream does with a log deleted and created again under the same name since it
    #: recorded an offset in it: "fail" (naming the log) or "restart" (read it from its oldest
    #: offset); docs/design/17-incarnations.md
    on_recreated_log: str = "fail"
    max_partition_bytes: int = 128 * MB
    min_partitions: int | None = None
    verify_on_read: bool = True
    #: verifyOnRead=records: recompute every fragment's setsum from its records as it is read,
    #: even where the digest of its bytes matched (docs/format.md section 7)
    verify_records: bool = False
    #: a log set: which logs under `url` (a prefix) it holds; None: `url` is one log
    logs: LogSelection | None = None
    #: a log set's per-log positions when `starting`/`ending` is ("logs", 0)
    starting_logs: tuple[tuple[str, int], ...] = ()
    ending_logs: tuple[tuple[str, int], ...] = ()
    #: where a log set's logs created while a stream runs start: "earliest" or "latest"
    new_log_offsets: str = "earliest"
    #: how often a log-set stream reads every manifest although a dirty log says what changed
    full_scan_interval_ms: int = DEFAULT_FULL_SCAN_MS
    #: a sink: record each commit in the dirty log of the log's prefix (`wal3_spark.logset.dirty`)
    dirty_log: bool = False
    #: sinks: compact the log in the background after commits (`wal3_spark.log.auto_compaction`)
    auto_compact: AutoCompactOptions | None = None
    #: a routing sink: the column naming each row's log under `url` (a prefix)
    log_column: str | None = None
    #: writes: the column each fragment gets a stream filter of; reads: the column of
    #: `filter_values` (docs/design/16-stream-filters.md)
    filter_column: str | None = None
    #: reads: only the rows whose `filter_column` holds one of these (as given: strings, or
    #: JSON numbers), filtered exactly
    filter_values: tuple[Any, ...] | None = None

    def __repr__(self) -> str:
        """Every field, so that a new one is never missing; credentials masked (`is_secret`)."""
        return f"Wal3Options({', '.join(f'{f.name}={self._shown(f.name)}' for f in fields(self))})"

    def _shown(self, name: str) -> str:
        if name != "store_options":
            return str(getattr(self, name))
        return "[" + ", ".join(f"{k}={'***' if is_secret(k) else v}" for k, v in self.store_options) + "]"

    __str__ = __repr__

    def open_store(self) -> ObjectStore:
        """The log's object store (opened lazily; call on executors, not at pickling time)."""
        return open_store(self.url, dict(self.store_options) or None)

    def log_set(self) -> LogSet:
        """The log set under `url` (every log for a routing sink, which names its own)."""
        return LogSet(self.open_store(), self.logs or ALL_LOGS)


# ----------------------------------------------------------------------------- parsing


def _fail(name: str, value: str | None, why: str, role: str) -> InvalidOption:
    shown = "***" if is_secret(name) else repr(value)
    return InvalidOption(
        f"wal3 option {name}={shown}: {why}. Valid options for {_ROLE_TEXT[role]}: "
        + ", ".join(valid_options(role))
    )


def parse_bool(text: str) -> bool:
    low = text.strip().lower()
    if low in ("true", "1", "yes"):
        return True
    if low in ("false", "0", "no"):
        return False
    raise ValueError("expected true or false")


#: verifyOnRead's third value: recompute every record's setsum item, as `wal3 verify` does
VERIFY_RECORDS = "records"


def parse_verify(text: str) -> bool | str:
    """verifyOnRead: true, false or `VERIFY_RECORDS`."""
    if text.strip().lower() == VERIFY_RECORDS:
        return VERIFY_RECORDS
    try:
        return parse_bool(text)
    except ValueError:
        raise ValueError(f"expected true, false or {VERIFY_RECORDS}") from None


def parse_positive(text: str) -> int:
    return _integer_at_least(text, 1, "expected a positive integer")


#: the largest writerVersion: a version is a long wherever it is read (Spark's batch ids,
#: Delta's txnVersion, Chroma's and other readers' manifest parsers)
MAX_WRITER_VERSION = (1 << 63) - 1


def parse_writer_version(text: str) -> int:
    """An idempotent write's version: a long >= 0 (a larger one would make the manifest's `txns`
    unreadable to readers that parse it as one)."""
    expected = f"expected an integer >= 0 (at most {MAX_WRITER_VERSION}, a long)"
    value = _integer_at_least(text, 0, expected)
    if value > MAX_WRITER_VERSION:
        raise ValueError(expected)
    return value


#: an integer option: plain ASCII digits (Python's int() also takes "1_0", "+8" and other
#: scripts' digits such as "٣٣", which no other reader of the option would)
_DIGITS = re.compile(r"[0-9]+")


def _integer_at_least(text: str, low: int, expected: str) -> int:
    digits = text.strip()
    if not _DIGITS.fullmatch(digits):
        raise ValueError(expected)
    value = int(digits)
    if value < low:
        raise ValueError(expected)
    return value


def parse_timestamp_us(text: str) -> int:
    """Milliseconds since the epoch, or ISO-8601 (naive means UTC) -> microseconds."""
    t = text.strip()
    if re.fullmatch(r"-?[0-9]+", t):
        return int(t) * 1000
    try:
        ts = _dt.datetime.fromisoformat(t.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError("expected milliseconds since the epoch or an ISO-8601 timestamp") from None
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=_dt.UTC)
    delta = ts - _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _parse_position(text: str, allowed: tuple[str, ...]) -> tuple[str, int]:
    low = text.strip().lower()
    if low in allowed:
        return (low, 0)
    try:
        offset = int(low)
    except ValueError:
        offset = None
    if offset is None:
        try:  # JSON such as {"offset": 42}
            doc = json.loads(text)
            offset = int(doc["offset"])
        except (ValueError, KeyError, TypeError, RecursionError):
            raise ValueError(
                f"expected {' or '.join(allowed)} or an offset (an integer >= 1)"
                + _position_hint(text)) from None
    if offset < 1:
        raise ValueError("offsets start at 1")
    return ("offset", offset)


def _position_hint(text: str) -> str:
    """Why a JSON position of another form does not fit one log, and what does."""
    if '"logs"' in text:  # a log set's form, given to a read of one log
        return "; per-log offsets read a log set: set logs too (e.g. logs=*), with the prefix as the path"
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return ""
    if isinstance(doc, dict) and doc and all(isinstance(v, dict) for v in doc.values()):
        return ('; this is Kafka\'s per-topic, per-partition form: a wal3 log is one sequence of '
                'offsets from 1, so give one offset (e.g. 42 or {"offset": 42}); to read several '
                'logs, load their prefix with logs=a,b and per-log offsets {"logs": {"a": 42}}')
    return ""


def writer_id_from_checkpoint(location: str) -> str:
    """A stable writer id for a checkpoint location (same location, same id)."""
    digest = hashlib.sha256(location.rstrip("/").encode()).hexdigest()[:24]
    return f"ckpt-{digest}"


def parse(options: Mapping[str, str], role: str) -> Wal3Options:
    """Validate `options` for `role` and return the frozen result."""
    canonical = {n.lower(): n for n in OPTIONS}
    aliases = {a.lower(): (a, n) for a, n in ALIASES.items()}
    stores = {n.lower(): n for n in store_option_names()}
    values: dict[str, str] = {}
    spelled: dict[str, str] = {}  # wal3 option -> the name it was given as (an alias)
    store: list[tuple[str, str]] = []
    for key, value in dict(options).items():
        low = key.lower()
        if low in stores:
            store.append((stores[low], value))
            continue
        alias, name = aliases.get(low, (None, canonical.get(low)))
        if name is None:
            raise _fail(key, value, _foreign(key) or "unknown option", role)
        label = f"{alias} (wal3's {name})" if alias else name
        if role not in OPTIONS[name][0]:
            raise _fail(label, value, f"does not apply to {_ROLE_TEXT[role]}", role)
        if name in values:
            raise _fail(label, value, f"{spelled.get(name, name)} is set too: they are the same "
                        "option, set one", role)
        values[name] = value
        if alias:
            spelled[name] = label

    url = values.pop("path", None)
    if not url or not url.strip():
        raise InvalidOption(
            "no log URL: pass it to load()/save()/start(), e.g. "
            "spark.read.format(\"wal3\").load(\"s3://bucket/logs/orders\"). Spark hands a "
            "Python data source neither a catalog table's path nor its options: a wal3 table "
            "finds its log in the schema wal3 gave it, so create it with CREATE TABLE t USING "
            "wal3 OPTIONS (path '…') without a column list or AS SELECT (for a new, empty log "
            "declare the columns as an option: OPTIONS (path '…', schema 'id BIGINT, name "
            "STRING')), and give writeStream.toTable(t) the log too: .option(\"path\", url)"
        )
    kw: dict = {}

    def take(name: str, conv: Callable[[str], Any]) -> None:
        if name in values:
            raw = values[name]
            try:
                kw[_FIELD[name]] = conv(raw)
            except (ValueError, TypeError) as exc:
                raise _fail(spelled.get(name, name), raw, str(exc), role) from None

    take("fragmentBytes", lambda v: _at_least(parse_size(v), 1024, "fragmentBytes"))
    take("mergeSchema", parse_bool)
    take("maxRecordsPerTrigger", parse_positive)
    take("maxBytesPerTrigger", lambda v: _at_least(parse_size(v), 1, "maxBytesPerTrigger"))
    take("maxFragmentsPerTrigger", parse_positive)
    take("minRecordsPerTrigger", parse_positive)
    take("maxTriggerDelay", parse_duration_ms)
    take("writerVersion", parse_writer_version)
    take("failOnDataLoss", parse_bool)
    take("onRecreatedLog", lambda v: _one_of(v, ("fail", "restart")))
    take("maxPartitionBytes", lambda v: _at_least(parse_size(v), 1, "maxPartitionBytes"))
    take("minPartitions", parse_positive)
    take("verifyOnRead", parse_verify)
    if kw.get("verify_on_read") == VERIFY_RECORDS:
        kw["verify_on_read"], kw["verify_records"] = True, True
    take("cursor", _cursor_name)
    take("tag", _tag_name)
    take("writerId", _writer_id)
    if "startingOffsets" in values and "startingTimestamp" in values:
        raise _fail("startingTimestamp", values["startingTimestamp"],
                    "set startingOffsets or startingTimestamp, not both", role)
    if "endingOffsets" in values and "endingTimestamp" in values:
        raise _fail("endingTimestamp", values["endingTimestamp"],
                    "set endingOffsets or endingTimestamp, not both", role)
    take("logs", parse_log_selection)
    take("newLogOffsets", lambda v: _one_of(v, ("earliest", "latest")))
    take("fullScanInterval", parse_duration_ms)
    take("dirtyLog", parse_bool)
    _take_auto_compact(values, spelled, kw, role)
    take("logColumn", _column_name)
    take("filterColumn", _column_name)
    take("filterValues", parse_filter_values)
    if "logs" in values:
        take("startingOffsets", lambda v: _parse_log_positions(v, ("earliest", "latest")))
        take("endingOffsets", lambda v: _parse_log_positions(v, ("latest",)))
        for name, key in (("starting", "starting_logs"), ("ending", "ending_logs")):
            if isinstance(kw.get(name), dict):
                kw[key] = tuple(sorted(kw[name].items()))
                kw[name] = ("logs", 0)
    else:
        take("startingOffsets", lambda v: _parse_position(v, ("earliest", "latest")))
        take("endingOffsets", lambda v: _parse_position(v, ("latest",)))
    take("startingTimestamp", lambda v: ("timestamp", parse_timestamp_us(v)))
    take("endingTimestamp", lambda v: ("timestamp", parse_timestamp_us(v)))
    _check_combinations(values, kw, role)
    if role == STREAM_WRITE and "writer_id" not in kw:
        location = values.get("checkpointLocation")
        if not location:
            raise InvalidOption(
                "the wal3 streaming sink needs a stable writer id for exactly-once commits: set "
                ".option(\"checkpointLocation\", \"/path/to/checkpoint\") on the writeStream (the "
                "id is derived from it) or .option(\"writerId\", \"my_pipeline\")"
            )
        kw["writer_id"] = writer_id_from_checkpoint(location)
    return Wal3Options(role=role, url=url.strip(), store_options=tuple(store), **kw)


_FIELD = {
    "fragmentBytes": "fragment_bytes",
    "mergeSchema": "merge_schema",
    "writerId": "writer_id",
    "startingOffsets": "starting",
    "endingOffsets": "ending",
    "startingTimestamp": "starting",
    "endingTimestamp": "ending",
    "maxRecordsPerTrigger": "max_records",
    "maxBytesPerTrigger": "max_bytes",
    "maxFragmentsPerTrigger": "max_fragments",
    "minRecordsPerTrigger": "min_records",
    "maxTriggerDelay": "max_trigger_delay_ms",
    "writerVersion": "writer_version",
    "cursor": "cursor",
    "tag": "tag",
    "failOnDataLoss": "fail_on_data_loss",
    "onRecreatedLog": "on_recreated_log",
    "maxPartitionBytes": "max_partition_bytes",
    "minPartitions": "min_partitions",
    "verifyOnRead": "verify_on_read",
    "logs": "logs",
    "newLogOffsets": "new_log_offsets",
    "fullScanInterval": "full_scan_interval_ms",
    "dirtyLog": "dirty_log",
    "logColumn": "log_column",
    "filterColumn": "filter_column",
    "filterValues": "filter_values",
}


def _take_auto_compact(values: dict[str, str], spelled: Mapping[str, str], kw: dict, role: str) -> None:
    """autoCompact and its two settings, which apply only with it."""
    enabled = False
    if "autoCompact" in values:
        try:
            enabled = parse_bool(values["autoCompact"])
        except ValueError as exc:
            raise _fail(spelled.get("autoCompact", "autoCompact"), values["autoCompact"], str(exc), role) from None
    settings: dict[str, int] = {}
    for name, key, parse in (("autoCompactFragments", "fragments", parse_positive),
                             ("autoCompactTargetBytes", "target_bytes", parse_size)):
        if name not in values:
            continue
        shown = spelled.get(name, name)
        if not enabled:
            raise _fail(shown, values[name], "applies only with autoCompact=true; set it too", role)
        try:
            settings[key] = parse(values[name])
            _auto_compact(settings)
        except (ValueError, TypeError, InvalidOption) as exc:
            raise _fail(shown, values[name], str(exc), role) from None
    if enabled and "logColumn" in values:
        raise _fail(spelled.get("autoCompact", "autoCompact"), values["autoCompact"],
                    "a routing sink (logColumn) writes many logs, which it does not compact: "
                    "compact them with `wal3 compact`, or drop autoCompact", role)
    if enabled:
        kw["auto_compact"] = _auto_compact(settings)


def _auto_compact(settings: Mapping[str, int]) -> AutoCompactOptions:
    return AutoCompactOptions(settings.get("fragments", DEFAULT_FRAGMENTS),
                              settings.get("target_bytes", DEFAULT_TARGET_BYTES))


def _check_combinations(values: dict[str, str], kw: dict, role: str) -> None:
    """Options that only make sense together (checked after each parsed on its own)."""
    if role == WRITE and ("writerId" in values) != ("writerVersion" in values):
        given, missing = ("writerId", "writerVersion") if "writerId" in values else (
            "writerVersion", "writerId")
        raise _fail(given, values[given],
                    f"an idempotent batch write needs both writerId and writerVersion; add "
                    f"{missing} (or drop {given} for an ordinary append)", role)
    if "maxTriggerDelay" in values and "minRecordsPerTrigger" not in values:
        raise _fail("maxTriggerDelay", values["maxTriggerDelay"],
                    "applies only with minRecordsPerTrigger (how long to wait for that many "
                    "records); set minRecordsPerTrigger too", role)
    if "tag" in values:
        for name in ("startingOffsets", "endingOffsets", "startingTimestamp", "endingTimestamp", "logs"):
            if name in values:
                raise _fail(name, values[name], f"a tag names its records itself (tag="
                            f"{values['tag']}): drop {name}, or drop tag", role)
        if kw.get("fail_on_data_loss") is False:
            raise _fail("failOnDataLoss", values["failOnDataLoss"], f"a tag reads exactly its "
                        f"records (tag={values['tag']}), all of them or none: a read that skipped "
                        "what garbage collection removed would return fewer rows; drop "
                        "failOnDataLoss (tag with --hold to keep the records)", role)
    for name in ("newLogOffsets", "fullScanInterval"):
        if name in values and "logs" not in values:
            raise _fail(name, values[name], "applies only to a log set; set logs too (e.g. "
                        "logs=*)", role)
    if role in (READ, STREAM_READ) and ("filterColumn" in values) != ("filterValues" in values):
        given, missing = ("filterColumn", "filterValues") if "filterColumn" in values else (
            "filterValues", "filterColumn")
        raise _fail(given, values[given], f"a filtered read needs filterColumn and filterValues; "
                    f"add {missing} (the column, and the values of it to read)", role)
    low, high = kw.get("min_records"), kw.get("max_records")
    if low is not None and high is not None and low > high:
        raise _fail("minRecordsPerTrigger", values["minRecordsPerTrigger"],
                    f"is larger than maxRecordsPerTrigger={high}; a micro-batch cannot hold "
                    "both", role)


def parse_log_selection(text: str) -> LogSelection:
    """`*` (every log), a glob such as `tenant-*`, or a comma-separated list of log names."""
    items = [i.strip() for i in text.split(",") if i.strip()]
    if not items:
        raise ValueError("expected * (every log), a glob such as tenant-*, or log names a,b,c")
    if items == ["*"]:
        return ALL_LOGS
    globs = [i for i in items if any(c in i for c in "*?[")]
    if globs and len(items) > 1:
        raise ValueError(f"{globs[0]!r} is a glob: give one glob, or a list of log names")
    return LogSelection.matching(items[0]) if globs else LogSelection.of(items)


def _parse_log_positions(text: str, allowed: tuple[str, ...]) -> tuple[str, int] | dict[str, int]:
    """A log set's position: one of `allowed`, or per-log offsets `{"logs": {"a": 17}}`."""
    low = text.strip().lower()
    if low in allowed:
        return (low, 0)
    expected = (f"expected {' or '.join(allowed)}, or per-log offsets such as "
                '{"logs": {"tenant_a": 17, "tenant_b": 1}} (offsets start at 1)')
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
        raise ValueError(expected) from None
    logs = doc.get("logs") if isinstance(doc, dict) else None
    if not isinstance(logs, dict) or set(doc) != {"logs"}:
        raise ValueError(expected)
    for name, offset in logs.items():
        check_log_name(name)
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 1:
            raise ValueError(f"log {name!r}: offset {offset!r}: {expected}")
    return dict(logs)


def parse_filter_values(text: str) -> tuple[Any, ...]:
    """One value (`acme`), or a JSON array of strings and integers (`["acme", "globex"]`,
    `[7, 9]`): values containing commas need no escaping."""
    stripped = text.strip()
    if not stripped.startswith("["):
        return (text,)
    try:
        values = json.loads(stripped)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
        raise ValueError('expected one value, or a JSON array such as ["acme", "globex"]') from None
    if not isinstance(values, list) or not all(
            isinstance(v, str) or (isinstance(v, int) and not isinstance(v, bool)) for v in values):
        raise ValueError("expected a JSON array of strings or integers")
    return tuple(values)


def _one_of(text: str, allowed: tuple[str, ...]) -> str:
    low = text.strip().lower()
    if low not in allowed:
        raise ValueError(f"expected {' or '.join(allowed)}")
    return low


def _column_name(text: str) -> str:
    if not text.strip():
        raise ValueError("expected the name of a column")
    return text.strip()


def _at_least(value: int, low: int, name: str) -> int:
    if value < low:
        raise ValueError(f"{name} must be at least {low}")
    return value


def _tag_name(text: str) -> str:
    tag_key(text)  # raises InvalidOption naming the rule
    return text


def _cursor_name(text: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_]+", text):
        raise ValueError("cursor names use letters, digits and underscores only")
    return text


def _writer_id(text: str) -> str:
    text = text.strip()
    if not text or len(text) > 200:
        raise ValueError("expected a non-empty id of at most 200 characters")
    return text


def location(options: Mapping[str, str]) -> Wal3Options:
    """Only the log's URL and store options (for `DataSource.schema()`, which Spark calls for
    reads before `reader()` checks the role's options). A name that is neither a wal3 option nor
    a store option is refused here already: a store option's typo (`endpont`) would otherwise
    send the schema's manifest read to the cloud's default endpoint."""
    stores = {n.lower(): n for n in store_option_names()}
    known = {n.lower() for n in OPTIONS} | {a.lower() for a in ALIASES} | set(stores)
    for key, value in dict(options).items():
        if key.lower() not in known:
            # Spark calls schema() for batch and streaming reads alike: a stream-only option
            # given says which this is; else name the options of both, and the closest one
            given = {k.lower() for k in options}
            streaming = any(READ not in roles for n, (roles, _) in OPTIONS.items() if n.lower() in given)
            roles_shown = (STREAM_READ,) if streaming else (READ, STREAM_READ)
            reads = [n for n, (roles, _) in OPTIONS.items() if any(r in roles for r in roles_shown)]
            valid = reads + sorted(stores.values(), key=str.lower)
            close = difflib.get_close_matches(key.lower(), [n.lower() for n in valid], n=1, cutoff=0.7)
            hint = next((f"unknown option (did you mean {n}?)" for n in valid if close and n.lower() == close[0]),
                        "unknown option")
            shown = "***" if is_secret(key) else repr(value)
            which = _ROLE_TEXT[STREAM_READ] if streaming else "reads (spark.read, spark.readStream)"
            raise InvalidOption(f"wal3 option {key}={shown}: {_foreign(key) or hint}. Valid options for "
                                f"{which}: " + ", ".join(valid))
    url = next((v for k, v in dict(options).items() if k.lower() == "path"), None)
    if not url or not url.strip():
        raise InvalidOption(
            "no log URL: pass it to load(), e.g. spark.read.format(\"wal3\").load(\"s3://bucket/logs/x\")"
        )
    store = tuple((stores[k.lower()], v) for k, v in dict(options).items() if k.lower() in stores)
    selection = next((v for k, v in dict(options).items() if k.lower() == "logs"), None)
    if selection is None:
        return Wal3Options(role=READ, url=url.strip(), store_options=store)
    try:
        logs = parse_log_selection(selection)
    except ValueError as exc:
        raise _fail("logs", selection, str(exc), READ) from None
    return Wal3Options(role=READ, url=url.strip(), store_options=store, logs=logs)
