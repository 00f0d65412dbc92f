"""One error hierarchy for the whole project.

Every error a user can hit derives from `Wal3Error` and says what broke and how to fix it, so
that callers (the Spark connector, the CLI) can print the message as is. Storage errors are
separate subclasses because the commit protocol reacts to them differently: a precondition
failure means "someone else won, rebase", an ambiguous write means "find out whether it landed".
"""

from __future__ import annotations

from typing import Any


def _unpickle(cls: type[Wal3Error], args: tuple[Any, ...]) -> Wal3Error:
    """The error with its message (`args`) as pickled, without calling `__init__` again: many
    constructors build the message from their arguments, so `cls(*args)` would not rebuild it
    (and fails where they take more than the message). `pickle` sets the attributes after."""
    return cls.__new__(cls, *args)


class Wal3Error(Exception):
    """Base class of every error raised on purpose by wal3-spark.

    Picklable with its message and attributes, whatever its constructor takes, so that it can
    cross a process boundary whole (process pools, `multiprocessing`, anything that pickles a
    result). A Spark Python worker sends the driver only an exception's text (a
    `PythonException`), so code on the driver matches a task's error by its message."""

    def __reduce__(self) -> tuple[Any, ...]:
        return _unpickle, (type(self), self.args), self.__dict__


# ----------------------------------------------------------------------------------- storage


class StorageError(Wal3Error):
    """The object store failed in a way that is not a precondition failure."""


class ObjectNotFound(StorageError):
    """The object does not exist."""

    def __init__(self, key: str, url: str = "") -> None:
        super().__init__(f"object {key!r} does not exist" + (f" under {url}" if url else ""))
        self.key = key


class PreconditionFailed(StorageError):
    """A conditional write lost: the object exists (create) or its ETag changed (CAS)."""

    def __init__(self, key: str, detail: str = "") -> None:
        super().__init__(f"conditional write of {key!r} failed" + (f": {detail}" if detail else ""))
        self.key = key


class AmbiguousWrite(StorageError):
    """A write may or may not have landed (timeout or 5xx after the request was sent).

    Never retried blindly: the caller must look at the store to decide.
    """

    def __init__(self, key: str, cause: BaseException | str) -> None:
        super().__init__(f"write of {key!r} may or may not have landed: {cause}")
        self.key = key


class TransientError(StorageError):
    """A failure known not to have changed anything (connection refused, throttling)."""


class AccessDenied(StorageError):
    """The store refused access to an object (file permissions, S3 credentials or policy).

    Separate from other storage errors because retrying never helps and the fix lies outside
    wal3-spark: the message names the object and says what to check.
    """


# ------------------------------------------------------------------------------------- usage


class InvalidOption(Wal3Error, ValueError):
    """An option is unknown or malformed."""


class InvalidUrl(Wal3Error, ValueError):
    """A log URL cannot be mapped to an object store."""


# --------------------------------------------------------------------------------------- log


class LogNotFound(Wal3Error):
    """The URL holds no wal3 log (no manifest). `message` replaces the default text where the
    caller knows better what was looked for (a log set's member, say)."""

    def __init__(self, url: str, create: str = "`wal3 init URL`, or append to it, which creates it",
                 *, message: str | None = None) -> None:
        super().__init__(
            message or f"no wal3 log at {url} (manifest/MANIFEST is missing): check the path, or "
            f"create the log first ({create})"
        )
        self.url = url


class LogSealed(Wal3Error):
    """The log is sealed and accepts no appends."""

    def __init__(self, url: str) -> None:
        super().__init__(
            f"the log at {url} is sealed and accepts no appends; append to the log it was "
            "migrated to instead (`wal3 info` on it shows its state)"
        )
        self.url = url


class SchemaMismatch(Wal3Error):
    """The data appended does not match the log's schema."""


class FilterError(Wal3Error, ValueError):
    """A stream filter cannot be used as asked: the column is not in the log's schema, its type
    cannot be filtered (strings, binaries and integers can), the log is raw, or a filter value is
    not of the column's type. The message names the column and what to give instead."""


class ScanUnsupported(Wal3Error):
    """The native scan (`Wal3Log.toDF`) cannot read this log in this session; `format("wal3")`
    can. The message names the columns and the fix."""


class CorruptLog(Wal3Error):
    """An invariant of the log's metadata or data does not hold.

    The message names the object and says what is wrong with it ("log/Uuid=….parquet: content
    does not match its setsum in the manifest (recomputed …, manifest …)"), so that an operator
    knows what to look at without reading code. `invariant` names the rule broken, for code that
    classifies problems (verify tells missing objects from corrupt ones by it); `problem` is the
    message after the object's name.
    """

    def __init__(self, invariant: str, obj: str, problem: str) -> None:
        super().__init__(f"{obj}: {problem}")
        self.invariant = invariant
        self.obj = obj
        self.problem = problem


class DataLost(Wal3Error):
    """A read asked for offsets that garbage collection already removed."""

    def __init__(self, url: str, start: int, oldest: int, fix: str | None = None, *,
                 retention: str | None = None) -> None:
        policy = "" if retention is None else (
            f" The log's retention policy ({retention}) removes records past it whoever has not "
            "read them, cursors included: read faster than it, or widen it (`wal3 retention`).")
        super().__init__(
            f"offsets [{start}, {oldest}) of {url} were garbage-collected; the oldest offset still "
            f"in the log is {oldest}.{policy} " + (fix or (
                f"Start from {oldest} (or set failOnDataLoss=false to skip ahead with a warning)"
                + ("" if retention else ", and keep a cursor on logs you consume so GC keeps your data")))
        )
        self.url = url
        self.start = start
        self.oldest = oldest
        #: the log's retention policy when it has one (`RetentionPolicy.describe`)
        self.retention = retention


class LogRecreated(Wal3Error):
    """A log was deleted and created again under the same URL since a consumer recorded an
    offset in it: the offset belongs to the earlier log (docs/design/17-incarnations.md)."""

    def __init__(self, url: str, offset: int, recorded: str, current: str, fix: str) -> None:
        super().__init__(
            f"{url} was deleted and created again since offset {offset} was recorded in it "
            f"(incarnation then: {recorded}; now: {current}): that offset belongs to the earlier "
            f"log, and the new log starts again from its own first offset. {fix}"
        )
        self.url = url
        self.offset = offset


class CommitFailed(Wal3Error):
    """A commit failed definitely: nothing it wrote is (or can later become) part of the log."""

    @classmethod
    def nothing_written(cls, url: str, exc: BaseException) -> CommitFailed:
        """What an append that failed before any manifest write that may land says, whatever
        failed it (a store's refusal, a damaged manifest read, retries exhausted): the caller
        learns only the outcome's kind from the type, the cause from the message."""
        failed = cls(f"the append to {url} was not committed ({type(exc).__name__}: {exc}). "
                     "Nothing was written; retrying the append is safe (it fails again while the "
                     "cause lasts)")
        failed.__cause__ = exc
        return failed


class PartlyCommitted(Wal3Error, ValueError):
    """A commit's fragments are in the log only in part, so the list was never committed as one
    (`Committer.commit` refuses it; nothing was written or deleted). A pipelined writer
    (`wal3_spark.log.chain`) that committed several links' fragments together commits them one
    link at a time instead: each link's fragments landed all together or not at all."""


class PastOrphanHorizon(CommitFailed):
    """A commit refused because some of its fragments were written before the manifest's orphan
    horizon: garbage collection may have deleted them as orphans (docs/design/32-orphan-horizon.md).
    Nothing was committed; a distinct type so that callers (and `wal3 stress`) can tell an
    append that lost the race with GC's orphan sweep from one that ran out of attempts."""


class AlreadyCollected(Wal3Error):
    """A commit refused because its fragments were (most likely) placed by an earlier commit and
    garbage collection has since collected them (docs/design/20-committing.md): the pending garbage
    lists them (`pending`), or their files are gone. Nothing was written; appending them again
    would deliver their records twice or reference a deleted file. Not a `CommitFailed`: the
    caller must not delete them (readers of older manifests may still read pending garbage) and
    must not rerun the append."""

    def __init__(self, message: str, *, pending: bool) -> None:
        super().__init__(message)
        self.pending = pending


class CommitOutcomeUnknown(Wal3Error):
    """A write was sent and may still land, and whether it did could not be established before
    the deadline (the store kept timing out). Callers delete nothing: the fragments may be data.

    Distinct from `CommitFailed` (pyiceberg's `CommitStateUnknownException`, Chroma's
    `LogContentionDurable`): retrying blindly could append the same records twice.
    """


class AppendsUnsupported(Wal3Error):
    """The log is one wal3-spark reads and verifies but does not append to: Chroma's S3 backend
    wrote it with sequence-numbered fragments, whose next number only Chroma's writer assigns."""

    def __init__(self, url: str) -> None:
        super().__init__(
            f"{url} was written by Chroma's S3 backend (sequence-numbered fragments); "
            "wal3-spark can read and verify it but appends only to UUID-fragment logs. "
            "Copy it to a new log (`wal3 copy`) and append there"
        )
        self.url = url


class CursorError(Wal3Error):
    """A cursor operation failed (missing cursor, lost race, invalid name or move)."""


class InvalidCursorName(CursorError, InvalidOption):
    """A cursor name breaks the naming rule: an argument error (the command exits 2, as for an
    invalid tag name), and still a `CursorError` for callers that catch those."""


class InvalidLogName(Wal3Error, ValueError):
    """A name cannot be the name of a log in a log set (see `wal3_spark.logset.logs.check_log_name`)."""


class RoutedCommitFailed(Wal3Error):
    """A write routed to many logs committed to some and failed on others (each log's commit is
    atomic, the write's is not). `failed` maps each log name to its error."""

    def __init__(self, prefix: str, committed: int, failed: dict[str, Exception],
                 idempotent: bool) -> None:
        shown = "; ".join(f"{name}: {exc}" for name, exc in sorted(failed.items())[:3])
        more = f" (and {len(failed) - 3} more)" if len(failed) > 3 else ""
        rerun = (
            "rerun the write with the same writerId and writerVersion (a stream: restart it): "
            "logs that have that version skip, the others commit, so nothing is duplicated"
            if idempotent else
            "a rerun would append again to the logs that committed; set writerId and "
            "writerVersion to make a rerun complete the write without duplicates"
        )
        super().__init__(
            f"the write to logs under {prefix} committed to {committed} log(s) and failed on "
            f"{len(failed)}: {shown}{more}. Each log's commit is atomic, the write's is not: "
            f"{rerun}"
        )
        self.prefix = prefix
        self.committed = committed
        self.failed = failed


# ------------------------------------------------------------------------ garbage collection


class GarbageError(Wal3Error):
    """The garbage record (`gc/GARBAGE`) is malformed or cannot be computed."""


class GarbageStale(GarbageError):
    """The garbage no longer applies to the manifest (a writer rolled the fragments it names
    into a snapshot in the meantime): reset it and compute it again."""


class GCRefused(Wal3Error):
    """A safety check refused to collect: too much of the log would go (`force` overrides), a
    cursor cannot be read (it may be pinning data: repair or delete it first), or the garbage to
    delete is still in the manifest."""


# ---------------------------------------------------------------------------- branches, tags


class BranchError(Wal3Error):
    """A branch cannot be created, read, checkpointed or deleted as asked (an offset outside the
    parent's range, a destination that already holds a log, a parent that is gone); the message
    names the log and the fix."""


class TagError(Wal3Error):
    """A tag cannot be created, read or deleted as asked (an unknown tag, an offset outside the
    log, a name already taken); the message names the log and the fix."""


# -------------------------------------------------------------------------------- compaction


class CompactionRefused(Wal3Error):
    """A compaction refused before it wrote anything because its result would break a reader
    the log may have: a raw log, whose compacted fragments Chroma's wal3 rejects, compacted
    without the opt-in (`allow_chroma_incompatible`). The message names the fix."""


# -------------------------------------------------------------------------------------- copy


class CopyError(Wal3Error):
    """The copy could not be made or did not verify."""


# ------------------------------------------------------------------------------------- spark


class SparkSetupError(Wal3Error):
    """Spark is set up so that the wal3 data source cannot run: e.g. the Python interpreter the
    executors are told to use does not exist on the driver, which runs the data source's
    driver-side steps with the same interpreter (docs/deploy.md)."""
