"""Log sets: the logs directly under a prefix (`<prefix>/<name>/manifest/MANIFEST`), read as one.

Chroma runs thousands of wal3 logs in one bucket, one per collection ("Multiple wal3 Instances");
Kafka users know the shape as a topic's partitions. A `LogSet` names which of those logs it
holds (all, an explicit list, or a glob) and reads their manifests in parallel. This module is
the contract the log-set Spark source and the routing sink build on:

- **Names** (`check_log_name`): 1 to 200 characters of ASCII letters, digits, `.`, `-`, `_`
  and `@`, not starting with `.` or `_`. That keeps a name one path segment that every store
  holds as is and that survives URLs (file URLs percent-decode, Hadoop paths reject `:`), and
  leaves no room for `..`, `/`, control characters or glob metacharacters. Names starting with
  `_` are reserved for wal3's own logs under the prefix (the dirty log, `_dirty`): no selection
  ever lists them, and no writer of a log set may create one.
- **Listing** costs O(logs): one delimiter listing of the prefix (`ObjectStore.list_children`,
  a request per 1000 logs), never a walk of every fragment. A child directory without
  `manifest/MANIFEST` is not a log (reading its manifest says so). An explicit list of names
  needs no listing at all.
- **Reading manifests** runs `max_workers` GETs at a time. A log's failure (a corrupt
  manifest, a store error) is reported for that log only; the others are still read.

Design: docs/design/40-log-sets-and-the-dirty-log.md.
"""

from __future__ import annotations

import fnmatch
import logging
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

from wal3_spark.errors import InvalidLogName, LogNotFound, Wal3Error
from wal3_spark.format.manifest import Manifest
from wal3_spark.log.reader import LogReader
from wal3_spark.storage import StoreLike, resolve_store
from wal3_spark.storage.base import ObjectStore
from wal3_spark.storage.common import join_url
from wal3_spark.storage.prefixed import PrefixedStore

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: names starting with this are wal3's own logs under a prefix, never a user's
RESERVED_PREFIX = "_"
MAX_NAME_LENGTH = 200
#: manifest GETs in flight at once (at most the S3 store's connection pool, `storage.s3.POOL_SIZE`):
#: reading thousands of manifests is bound by request latency, not CPU (docs/benchmarks.md)
DEFAULT_WORKERS = 64
#: how often a reader of a log set reads every manifest even though a dirty log exists
#: (`wal3_spark.logset.dirty`): the longest a change whose dirty record was lost (or never written)
#: stays unnoticed
DEFAULT_FULL_SCAN_EVERY_S = 600.0

_NAME = re.compile(r"[A-Za-z0-9._@-]+")
_NAME_RULE = (
    f"a log name is 1 to {MAX_NAME_LENGTH} characters of ASCII letters, digits, '.', '-', '_' "
    "and '@', and does not start with '.' or '_' (names starting with '_' are reserved for "
    "wal3's own logs, such as the dirty log '_dirty')"
)


def check_log_name(name: object) -> str:
    """Return `name` if it may name a log of a log set, else raise `InvalidLogName` naming the
    value, what is wrong with it, and the rule (the routing sink's error for a bad key too)."""
    problem = _name_problem(name)
    if problem is not None:
        raise InvalidLogName(
            f"invalid log name {name!r}: {problem}; {_NAME_RULE}. Map keys that do not fit to "
            "names that do first (for example with regexp_replace, or a hash of the key)"
        )
    assert isinstance(name, str)
    return name


def is_log_name(name: object) -> bool:
    """Whether `check_log_name` accepts `name`."""
    return _name_problem(name) is None


def _name_problem(name: object) -> str | None:
    if not isinstance(name, str):
        return f"it is a {type(name).__name__}, not a string"
    if not name:
        return "it is empty"
    if len(name) > MAX_NAME_LENGTH:
        return f"it is {len(name)} characters long"
    if name.startswith(RESERVED_PREFIX):
        return f"names starting with {RESERVED_PREFIX!r} are reserved"
    if name.startswith("."):
        return "it starts with '.'"
    if not _NAME.fullmatch(name):
        bad = sorted({c for c in name if not _NAME.fullmatch(c)})
        return "it contains " + ", ".join(repr(c) for c in bad)
    return None


@dataclass(frozen=True)
class LogSelection:
    """Which logs under a prefix a log set holds: every log (the default), the logs named in
    `names`, or the logs whose names match the glob `pattern` (`fnmatch`: `*`, `?`, `[...]`,
    case-sensitive). Reserved names (`_...`) are never selected."""

    names: tuple[str, ...] | None = None
    pattern: str | None = None

    def __post_init__(self) -> None:
        if self.names is not None and self.pattern is not None:
            raise ValueError("select logs by names or by a pattern, not both")
        if self.names is not None:
            if not self.names:
                raise InvalidLogName("an explicit list of logs must name at least one log")
            for name in self.names:
                check_log_name(name)
            object.__setattr__(self, "names", tuple(sorted(set(self.names))))
        if self.pattern is not None and not self.pattern:
            raise InvalidLogName("a log name pattern must not be empty (use '*' for every log)")

    @classmethod
    def of(cls, names: Iterable[str]) -> LogSelection:
        return cls(names=tuple(names))

    @classmethod
    def parse(cls, names: str | None = None, pattern: str | None = None) -> LogSelection:
        """The selection of a command line or an option: `names` comma-separated (`"a,b"`),
        or a glob `pattern`, or neither (every log)."""
        if names is not None and pattern is not None:
            raise InvalidLogName("select logs by names or by a pattern, not both")
        if names is not None:
            return cls.of(n.strip() for n in names.split(",") if n.strip())
        return ALL_LOGS if pattern is None else cls.matching(pattern)

    @classmethod
    def matching(cls, pattern: str) -> LogSelection:
        return cls(pattern=pattern)

    @property
    def is_explicit(self) -> bool:
        return self.names is not None

    def matches(self, name: str) -> bool:
        if not is_log_name(name):
            return False
        if self.names is not None:
            return name in self.names
        return self.pattern is None or fnmatch.fnmatchcase(name, self.pattern)

    def describe(self) -> str:
        if self.names is not None:
            return f"{len(self.names)} named logs"
        return "every log" if self.pattern is None else f"logs matching {self.pattern!r}"


ALL_LOGS = LogSelection()


@dataclass(frozen=True)
class LogTail:
    """Where one log stands: offsets [oldest_offset, next_offset) are readable."""

    name: str
    oldest_offset: int
    next_offset: int
    sealed: bool
    #: the log's incarnation (`Manifest.incarnation`): tells a log created again under the same
    #: name from the one a reader knew
    incarnation: str | None = field(default=None, compare=False)

    @classmethod
    def of(cls, name: str, manifest: Manifest) -> LogTail:
        return cls(name, manifest.oldest_offset, manifest.next_offset, manifest.sealed,
                   manifest.incarnation)


@dataclass(frozen=True)
class LoadedLog:
    """One log's manifest as a scan found it: `manifest` None means no log there (no manifest),
    unless `error` says why it could not be read."""

    name: str
    manifest: Manifest | None
    error: Wal3Error | None = None


@dataclass(frozen=True)
class LogSetTails:
    """The tails of the logs `LogSet.tails` found; `failed` names the logs whose manifest could not be
    read, and why. Logs that do not exist are in neither."""

    tails: dict[str, LogTail] = field(default_factory=dict)
    failed: dict[str, Wal3Error] = field(default_factory=dict)
    #: the manifests the tails were read from, for a caller that needs more than the tail
    manifests: dict[str, Manifest] = field(default_factory=dict, compare=False, repr=False)


class LogSet:
    """The logs of `selection` under `prefix`. Cheap, picklable (it holds only the store)."""

    def __init__(
        self,
        prefix: StoreLike,
        selection: LogSelection = ALL_LOGS,
        *,
        options: Mapping[str, str] | None = None,
        max_workers: int = DEFAULT_WORKERS,
    ) -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers must be >= 1, got {max_workers}")
        self.store = resolve_store(prefix, options)
        self.selection = selection
        self.max_workers = max_workers

    @property
    def url(self) -> str:
        return self.store.url

    def __repr__(self) -> str:
        return f"LogSet({self.url!r}, {self.selection.describe()})"

    def log_store(self, name: str) -> ObjectStore:
        """The store of log `name` (sharing the prefix store's client)."""
        return PrefixedStore(self.store, check_log_name(name))

    def log_url(self, name: str) -> str:
        return join_url(self.url, check_log_name(name))

    def names(self) -> list[str]:
        """The selected names, sorted: the explicit list as given (no request; some may not
        exist yet), else the prefix's children that match, from one delimiter listing (they
        are logs once they hold a manifest). Directories whose names are not log names are
        skipped with a warning, reserved ones silently."""
        if self.selection.names is not None:
            return list(self.selection.names)
        found = []
        for name in self.store.list_children(""):
            if name.startswith(RESERVED_PREFIX):
                continue
            if not is_log_name(name):
                logger.warning("%s: skipping %r: not a valid log name (%s)", self.url, name, _name_problem(name))
                continue
            if self.selection.matches(name):
                found.append(name)
        return found

    def map(self, fn: Callable[[str], T], names: Iterable[str] | None = None) -> Iterator[T]:
        """`fn(name)` for each log of `names` (default: `names()`), in that order, run
        `max_workers` at a time on threads (per-log reads are I/O-bound)."""
        todo = self.names() if names is None else [check_log_name(n) for n in names]
        if len(todo) <= 1:
            return iter([fn(name) for name in todo])
        return _ordered_map(fn, todo, self.max_workers)

    def manifests(self, names: Iterable[str] | None = None) -> Iterator[LoadedLog]:
        """Each log's manifest, in the order of `names` (default: `names()`), read
        `max_workers` at a time."""
        return self.map(self._load, names)

    def tails(self, names: Iterable[str] | None = None) -> LogSetTails:
        """The tail of every selected log (or of `names`), from one manifest GET per log."""
        result = LogSetTails()
        for loaded in self.manifests(names):
            if loaded.error is not None:
                result.failed[loaded.name] = loaded.error
            elif loaded.manifest is not None:
                result.tails[loaded.name] = LogTail.of(loaded.name, loaded.manifest)
                result.manifests[loaded.name] = loaded.manifest
        return result

    def _load(self, name: str) -> LoadedLog:
        try:
            return LoadedLog(name, LogReader(self.log_store(name)).manifest())
        except LogNotFound:
            return LoadedLog(name, None)
        except Wal3Error as exc:
            logger.warning("%s: cannot read the manifest of log %r: %s", self.url, name, exc)
            return LoadedLog(name, None, exc)


def _ordered_map(fn: Callable[[str], T], items: list[str], workers: int) -> Iterator[T]:
    """`map(fn, items)` on a bounded thread pool; the pool lives as long as the iteration."""
    with ThreadPoolExecutor(min(workers, len(items)), thread_name_prefix="wal3-logset") as pool:
        yield from pool.map(fn, items)
