"""Argument types for argparse: the `wal3` command's and the spark-submit jobs' (jobs/*.py).

Each type raises `ArgumentTypeError` naming the values it accepts, so argparse exits with
status 2, its usage line and one error line naming the argument, never a traceback. Every
number is bounded on both sides: an integer is compared as an integer (never converted to a
float, which overflows past ~1.8e308) and a value far past any sensible size is refused here
rather than by an `OverflowError` deep in the command.

This module imports no command and nothing that starts Spark or reaches a store, so that the
jobs, which are command lines too, share these rules with `wal3` without importing it.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable

import pyarrow as pa

from wal3_spark.errors import InvalidOption, InvalidUrl, Wal3Error
from wal3_spark.format.layout import FIRST_OFFSET, MAX_OFFSET, abbreviated
from wal3_spark.format.schema import parse_schema
from wal3_spark.format.units import parse_duration_ms, parse_size
from wal3_spark.log.auto_compaction import DEFAULT_FRAGMENTS
from wal3_spark.log.compaction import DEFAULT_MIN_FRAGMENTS, DEFAULT_TARGET_BYTES, SETTLE_S
from wal3_spark.storage.common import split_url
from wal3_spark.storage.s3 import S3Settings

#: the largest count a JVM `long` holds: what Spark and every counter downstream can take
MAX_COUNT = 2**63 - 1
#: the largest number of partitions or tasks (a JVM `int`: Spark's partition counts)
MAX_PARTITIONS = 2**31 - 1

_INTEGER = re.compile(r"-?[0-9]+")


def integer(low: int, high: int, what: str) -> Callable[[str], int]:
    """An argument type for an integer within [low, high], written in plain ASCII digits
    (`1_000`, `+8` and other scripts' digits are refused: what a shell script passes is
    compared exactly as typed); `what` names the value in the error."""
    allowed = f"give an integer >= {low} and <= {high}"

    def parse(text: str) -> int:
        # at most 1 + 20 digits: no int() of a huge string (slow, and refused past 4300 digits)
        if not (_INTEGER.fullmatch(text) and len(text) <= 21 and low <= int(text) <= high):
            raise argparse.ArgumentTypeError(f"{abbreviated(text, repr)} is not {what}: {allowed}")
        return int(text)

    return parse


def number(low: float, high: float, what: str, allowed: str) -> Callable[[str], float]:
    """An argument type for a finite number within [low, high]; `allowed` says which."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and low <= value <= high):
            raise argparse.ArgumentTypeError(f"{abbreviated(text, repr)} is not {what}: {allowed}")
        return value

    return parse


#: a log offset (offsets start at 1, as in Chroma, and are u64 on storage)
offset_arg = integer(FIRST_OFFSET, MAX_OFFSET, f"an offset (offsets start at {FIRST_OFFSET})")
#: a number of records: 0 or more
count_arg = integer(0, MAX_COUNT, "a count")
#: a number of things there must be at least one of (rows, records per batch or trigger)
positive_arg = integer(1, MAX_COUNT, "a positive count")
#: a number of partitions or tasks
partitions_arg = integer(1, MAX_PARTITIONS, "a number of partitions")
#: a TCP port to listen on (0: any free one)
port_arg = integer(0, 65535, "a port number (0: any free port)")


def seconds_arg(text: str) -> float:
    """A duration -> seconds: plain seconds (`3600`, `0.5`) or with a unit (`1h`, `30m`,
    `500ms`), within [0, 100 years] (`nan`, `inf` and negatives are refused)."""
    try:
        return parse_duration_ms(text, bare_unit="s") / 1000
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{abbreviated(text, repr)} is not a duration: give seconds or e.g. 90s, 30m, 1h, 7d; "
            "at most 100 years") from None


#: a share of a whole
share_arg = number(0, 1, "a share", "give a number within [0, 1], e.g. 0.9")


def url_arg(text: str) -> str:
    """A log URL of a store the command line can reach (not `memory://`: it lives in one process)."""
    try:
        scheme, _, _ = split_url(text)
    except InvalidUrl as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if scheme == "memory":
        raise argparse.ArgumentTypeError(
            f"{text!r}: a memory:// log lives inside one process and is gone when `wal3` exits; "
            "use s3://bucket/prefix, file:///abs/path or a plain path"
        )
    return text


def endpoint_arg(text: str) -> str:
    """An S3 endpoint URL, checked as the S3 store checks it (also when the log is not on S3)."""
    try:
        S3Settings.from_options({"endpoint": text}, environ={})
    except InvalidOption as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def schema_arg(text: str) -> pa.Schema:
    """An Arrow schema written as `parse_schema` reads it."""
    try:
        return parse_schema(text)
    except Wal3Error as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def size_arg(text: str) -> int:
    """A size in bytes > 0: `67108864`, `64m`, `64MiB`, `1g` (binary units)."""
    try:
        size = parse_size(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size: give bytes or 64k, 64m, 1g") from None
    if size <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give a size greater than 0")
    return size


def age_arg(text: str) -> int:
    """A retention age with its unit (`7d`, `12h`, `30m`, `90s`, `500ms`, `2w`) -> milliseconds."""
    from wal3_spark.format.retention import parse_age_ms

    try:
        return parse_age_ms(text)
    except InvalidOption as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def at_least_arg(low: int) -> Callable[[str], int]:
    """An integer >= `low` (an argparse type)."""

    def parse(text: str) -> int:
        if not re.fullmatch(r"[0-9]+", text.strip()) or int(text) < low:
            raise argparse.ArgumentTypeError(f"{text!r}: give an integer >= {low}")
        return int(text)

    return parse


def add_auto_compaction_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of automatic compaction (`wal3_spark.log.auto_compaction`) for a job that
    compacts the logs it visits when they are due, with the writers' defaults (the sinks'
    autoCompactFragments and autoCompactTargetBytes)."""
    parser.add_argument("--auto-compact", action="store_true",
                        help="compact each visited log that is due (as autoCompact on the writers)")
    parser.add_argument("--auto-compact-fragments", type=at_least_arg(2), default=DEFAULT_FRAGMENTS,
                        metavar="N", help=f"with --auto-compact: how many similar small fragments start a "
                                          f"compaction (default {DEFAULT_FRAGMENTS})")
    parser.add_argument("--auto-compact-target-bytes", type=size_arg, default=DEFAULT_TARGET_BYTES,
                        metavar="SIZE", help="with --auto-compact: the size to merge small fragments up to "
                                             "(default 64MiB; 64m, 1g, bytes; at least 1k)")


def add_compaction_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of a compaction, as `wal3 compact` and jobs/compact.py both take them (one
    definition, so that the two command lines cannot drift apart)."""
    parser.add_argument("--target-bytes", type=size_arg, default=DEFAULT_TARGET_BYTES, metavar="SIZE",
                        help="the size to merge small fragments up to (default 64MiB; 64m, 1g, bytes; at least 1k)")
    parser.add_argument("--min-fragments", type=at_least_arg(2), default=DEFAULT_MIN_FRAGMENTS, metavar="N",
                        help="merge runs of at least N fragments (default 2)")
    parser.add_argument("--settle", type=seconds_arg, default=SETTLE_S, metavar="SECONDS",
                        help="keep fragments younger than this (default 0; 900 on a log that Chroma or an "
                             "older wal3-spark appends to: they do not see through compaction)")
    parser.add_argument("--dry-run", action="store_true", help="report the runs that would be merged")
    parser.add_argument("--allow-chroma-incompatible", action="store_true",
                        help="compact raw logs too, which Chroma's wal3 then cannot read (refused without it)")
