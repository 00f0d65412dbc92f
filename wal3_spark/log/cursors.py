"""Named cursors (docs/format.md section 8): positions that pin the log against garbage collection.

Each cursor is its own object, changed through the compare-and-swap primitive
(`wal3_spark.log.cas`), so that pinning the log never contends with appends on the manifest.

Every position set here is checked against the log (one manifest GET): never beyond the tail,
since GC would then drop records appended later that no consumer read, and not below the oldest
offset unless forced (a consumer restarting from data that is gone is usually a mistake).

A cursor object that cannot be read (bad JSON, a negative offset, a name that is not letters,
digits and underscores, e.g. `cursor/bad-name.json` written by hand), or that is beyond the tail
(written by hand or by an old version: GC would drop records no consumer read) is a
`BrokenCursor`: listed
and shown as broken, replaced by a forced `move`, removed by `delete`, and a reason for garbage
collection to refuse (it may be pinning data), but never a reason for anything else to fail.

A cursor records the incarnation of the log it was set in (docs/design/17-incarnations.md). One set
in an earlier incarnation (the log was deleted and created again since) is *stale*: listed as
such, replaced by the next `advance` or `move` without `--force` (its offset means nothing in
the new log), and counted by garbage collection as pinning the whole new log (its consumer has
read none of it), so it never wedges anything nor lets GC drop what its consumer has not read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from wal3_spark.clock import SYSTEM, Clock, micros
from wal3_spark.errors import (
    CorruptLog,
    CursorError,
    LogNotFound,
    LogRecreated,
    ObjectNotFound,
)
from wal3_spark.format.incarnation import UNRECORDED, describe
from wal3_spark.format.layout import (
    CURSOR_PREFIX,
    MANIFEST_KEY,
    Cursor,
    cursor_key,
    dumps,
    loads,
)
from wal3_spark.format.manifest import Manifest
from wal3_spark.log.cas import CasObject, Outcome, Versioned
from wal3_spark.log.manifest_reader import incarnations_agree, read_manifest
from wal3_spark.log.reader import LogReader
from wal3_spark.log.scan import LogScan
from wal3_spark.storage import StoreLike, resolve_store

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CursorState:
    name: str
    cursor: Cursor
    etag: str


@dataclass(frozen=True)
class BrokenCursor:
    """An object under `cursor/` that is not a readable cursor."""

    name: str
    key: str
    problem: str
    #: set in an earlier incarnation of the log: not broken, but its offset means nothing now
    stale: bool = False

    def fix(self, url: str) -> str:
        if self.stale:
            return (f"its consumer resets it at its next commit; or `wal3 cursor set {url} "
                    f"{self.name} OFFSET`, or `wal3 cursor delete {url} {self.name}`")
        return (
            f"`wal3 cursor delete {url} {self.name}`"
            + ("" if not _valid_name(self.name) else
               f", or `wal3 cursor set {url} {self.name} OFFSET --force`")
        )


def stale_problem(cursor: Cursor, manifest: Manifest) -> str | None:
    """Why `cursor` does not belong to the log `manifest` is the head of, or None when it does.
    A cursor set before incarnations belongs unless it is beyond the tail (reported as such)."""
    if cursor.incarnation is None or cursor.incarnation == manifest.incarnation:
        return None
    return (f"set at offset {cursor.offset} in an earlier incarnation of the log "
            f"({cursor.incarnation}; the log was deleted and created again since, its incarnation "
            f"is now {describe(manifest.incarnation)}): it pins the whole log until its consumer "
            "resets it")


def _valid_name(name: str) -> bool:
    try:
        cursor_key(name)
    except CursorError:
        return False
    return True


def _parse(key: str) -> Callable[[bytes], Cursor | BrokenCursor]:
    def parse(data: bytes) -> Cursor | BrokenCursor:
        try:
            return Cursor.from_dict(loads(data, key), key)
        except CorruptLog as exc:
            return BrokenCursor(key[len(CURSOR_PREFIX):-len(".json")], key, exc.problem)

    return parse


def _serialise(cursor: Cursor | BrokenCursor) -> bytes:
    assert isinstance(cursor, Cursor)
    return dumps(cursor.to_dict())


class CursorStore:
    """The cursors of one log."""

    def __init__(
        self, log: StoreLike, writer: str = "wal3-spark", *, options: Mapping[str, str] | None = None,
        clock: Clock = SYSTEM,
    ) -> None:
        self.store = resolve_store(log, options)
        self.writer = writer
        #: stamps each move (`Cursor.epoch_us`: lag says how long ago a consumer last moved)
        self.clock = clock

    @property
    def url(self) -> str:
        return self.store.url

    def _object(self, name: str) -> CasObject[Cursor | BrokenCursor]:
        key = cursor_key(name)
        return CasObject(self.store, key, parse=_parse(key), serialise=_serialise, gave_up=CursorError,
                         clock=self.clock)

    # -- reading ------------------------------------------------------------------------

    def get(self, name: str) -> CursorState | None:
        """The cursor, or None when there is none; CursorError when it is broken (unreadable,
        or beyond the tail: a consumer reading from there would wait for records it skipped)."""
        loaded = self._object(name).load()
        if loaded is None:
            return None
        if isinstance(loaded.value, BrokenCursor):
            raise self._broken(loaded.value)
        state = CursorState(name, loaded.value, loaded.etag)
        beyond = self._beyond_the_tail([state])
        if beyond:
            raise self._broken(beyond[name])
        return state

    def list_all(self) -> tuple[list[CursorState], list[BrokenCursor]]:
        """Every cursor, readable or broken (unreadable, beyond the tail, or stale: set in an
        earlier incarnation of the log, `BrokenCursor.stale`), in name order."""
        states, broken, _ = self.list_all_with_manifest()
        return states, broken

    def list_all_with_manifest(self) -> tuple[list[CursorState], list[BrokenCursor], Manifest | None]:
        """`list_all`, and the manifest it judged the cursors against, read after them (None when
        there were no readable cursors to judge, or no log): a caller measuring their lag
        needs no manifest GET of its own."""
        states: list[CursorState] = []
        broken: list[BrokenCursor] = []
        for meta in self.store.list(CURSOR_PREFIX):
            name = meta.key[len(CURSOR_PREFIX):]
            if not name.endswith(".json"):
                continue
            name = name[: -len(".json")]
            if not _valid_name(name):
                broken.append(BrokenCursor(name, meta.key, f"invalid cursor name {name!r}"))
                continue
            try:
                loaded = self._object(name).load()
            except ObjectNotFound:
                continue
            if loaded is None:
                continue  # deleted since the listing
            if isinstance(loaded.value, BrokenCursor):
                broken.append(loaded.value)
            else:
                states.append(CursorState(name, loaded.value, loaded.etag))
        manifest = self._manifest_after(states)
        beyond = self._beyond_the_tail(states, manifest)
        return [s for s in states if s.name not in beyond], sorted(
            broken + list(beyond.values()), key=lambda b: b.name
        ), manifest

    def _manifest_after(self, states: list[CursorState]) -> Manifest | None:
        """The manifest, read after the cursors `states` (None without any, or without a log).
        After: the tail only grows, and every cursor was at most the tail when it was set, so
        a cursor a consumer moves meanwhile is never mistaken for one beyond it."""
        if not states:
            return None
        try:
            return read_manifest(self.store)
        except LogNotFound:
            return None

    def _beyond_the_tail(self, states: list[CursorState],
                         manifest: Manifest | None = None) -> dict[str, BrokenCursor]:
        """The cursors past the log's tail, as broken ones, and those set in an earlier
        incarnation of the log, as stale ones, judged against `manifest` (default: read now,
        after the cursors: see `_manifest_after`)."""
        if manifest is None:
            manifest = self._manifest_after(states)
        if manifest is None or not states:
            return {}
        tail = manifest.next_offset
        found = {}
        for s in states:
            problem = stale_problem(s.cursor, manifest)
            if problem is not None:
                found[s.name] = BrokenCursor(s.name, cursor_key(s.name), problem, stale=True)
            elif s.cursor.offset > tail:
                found[s.name] = BrokenCursor(
                    s.name, cursor_key(s.name),
                    f"offset {s.cursor.offset} is beyond the tail (next offset {tail}): garbage "
                    "collection would drop records appended later that no consumer read",
                )
        return found

    def list(self) -> Iterator[CursorState]:
        """The readable cursors (see `list_all` for the broken ones too)."""
        yield from self.list_all()[0]

    def scan_from(self, name: str, *, start: int | None = None, max_records: int | None = None,
                  verify: bool = True, on_recreated_log: str = "fail") -> LogScan:
        """The records from cursor `name` to the tail (at most `max_records`), as a LogScan; a
        cursor that does not exist yet reads from `start` (default: the oldest offset), as a new
        Kafka consumer group does. Move the cursor to the scan's `position` once the records
        are processed (`advance(name, scan.position)`): only then may GC drop them.

        A stale cursor (the log was deleted and created again since it was set) raises
        LogRecreated, or with `on_recreated_log="restart"` reads the new log from its oldest
        offset (the next `advance` replaces the cursor), as a stream's `onRecreatedLog` does."""
        if on_recreated_log not in ("fail", "restart"):
            raise ValueError(f"on_recreated_log must be 'fail' or 'restart', not {on_recreated_log!r}")
        loaded = self._object(name).load()
        if loaded is None:
            return LogReader(self.store).scan(start, max_records=max_records, verify=verify)
        cursor = loaded.value
        if isinstance(cursor, BrokenCursor):
            raise self._broken(cursor)
        reader = LogReader(self.store)
        manifest = reader.manifest()
        begin = cursor.offset
        if stale_problem(cursor, manifest) is not None:
            # The setsum does not cover the incarnation: one damaged read must neither restart
            # the consumer at the oldest offset (its records delivered twice) nor fail it.
            self._confirm_incarnation(manifest)
            if on_recreated_log == "fail":
                raise LogRecreated(
                    self.url, cursor.offset, describe(cursor.incarnation), describe(manifest.incarnation),
                    f"Cursor {name!r} belongs to the earlier log; read the new one from its oldest "
                    "offset with scan_from(..., on_recreated_log=\"restart\"), or set the cursor "
                    f"(`wal3 cursor set {self.url} {name} OFFSET`)")
            logger.warning("%s: cursor %s was set in an earlier incarnation of the log; reading the "
                        "new log from its oldest offset %d", self.url, name, manifest.oldest_offset)
            begin = manifest.oldest_offset
        elif begin > manifest.next_offset:
            beyond = self._beyond_the_tail([CursorState(name, cursor, loaded.etag)])
            if name not in beyond:  # a second read disagrees: one of them was damaged or stale
                raise CorruptLog(
                    "a log's tail never moves back", MANIFEST_KEY,
                    f"one read of it put the tail at {manifest.next_offset}, before cursor {name!r} "
                    f"at {begin}, and the next did not (or found no log): read again")
            raise self._broken(beyond[name])
        return reader.scan(begin, max_records=max_records, verify=verify, manifest=manifest)

    def _confirm_incarnation(self, manifest: Manifest) -> None:
        incarnations_agree(manifest.incarnation, read_manifest(self.store).incarnation, "read again")

    def incarnation(self) -> str | None:
        """The log's incarnation now (what `advance` records by default); one manifest GET."""
        return read_manifest(self.store).incarnation

    def lowest(self) -> int | None:
        """The lowest cursor position: garbage collection keeps everything at or after it (a
        stale cursor pins the log from its oldest offset). CursorError when a cursor is broken
        (it may be the lowest)."""
        states, broken = self.list_all()
        if any(not b.stale for b in broken):
            raise self._broken(next(b for b in broken if not b.stale))
        if any(b.stale for b in broken):
            return read_manifest(self.store).oldest_offset
        return min((s.cursor.offset for s in states), default=None)

    # -- changing -----------------------------------------------------------------------

    def create(self, name: str, offset: int, *, force: bool = False) -> CursorState:
        """Create a cursor; fails if it exists (use `move` to change it)."""
        manifest = self._check_offset(name, offset, force)

        def decide(current: Cursor | BrokenCursor | None) -> Cursor:
            if current is not None:
                raise CursorError(f"cursor {name!r} already exists; move it instead")
            return Cursor(offset, micros(self.clock), self.writer, manifest.incarnation)

        return self._apply(name, offset, self._object(name), decide)

    def move(self, name: str, offset: int, *, expected: CursorState | None = None,
             allow_backwards: bool = False) -> CursorState:
        """Compare-and-swap the cursor to `offset`, creating it if absent.

        With `expected`, the swap fails (CursorError) if the cursor changed since it was read.
        Moving backwards, below the log's oldest offset, or over a broken cursor object needs
        `allow_backwards` (`--force`): GC may already have removed what lies behind. A stale
        cursor (set in an earlier incarnation of the log) is replaced without it.
        """
        manifest = self._check_offset(name, offset, allow_backwards)
        obj = self._object(name)
        if expected is not None:  # decide on the version the caller read
            obj.last = Versioned(expected.cursor, expected.etag, dumps(expected.cursor.to_dict()))
            obj.known = True

        def decide(current: Cursor | BrokenCursor | None) -> Cursor | None:
            if expected is not None and current != expected.cursor:
                raise CursorError(f"cursor {name!r} was moved by someone else since it was read")
            if isinstance(current, BrokenCursor) and not allow_backwards:
                raise self._broken(current)
            if isinstance(current, Cursor) and stale_problem(current, manifest) is not None:
                logger.warning("%s: replacing stale cursor %s (set in incarnation %s) at offset %d",
                            self.url, name, current.incarnation, offset)
            elif isinstance(current, Cursor):
                if offset < current.offset and not allow_backwards:
                    raise CursorError(
                        f"cursor {name!r} is at {current.offset}; refusing to move it back to "
                        f"{offset} (pass allow_backwards / --force if GC has not collected that "
                        "range)"
                    )
                if offset == current.offset and current.incarnation == manifest.incarnation:
                    return None
            return Cursor(offset, micros(self.clock), self.writer, manifest.incarnation)

        return self._apply(name, offset, obj, decide)

    def advance(self, name: str, offset: int, *, incarnation: object = UNRECORDED) -> CursorState:
        """Move the cursor forward to `offset` (never back), creating it if absent; a cursor
        already at or past `offset` is left alone, so concurrent advances never regress it.

        A broken object of that name is replaced: the consumer advancing it knows where it is
        (this is what a stream's `cursor` option does after each batch), so its stream is never
        wedged by it. So is a cursor of another incarnation than the one `offset` was read in
        (`incarnation`, default: the log's now): a stale one, or one set before incarnations
        (the consumer's own record is authoritative). LogRecreated when the log is not that
        incarnation any more: the consumer must first decide what to do about the new log."""
        manifest = read_manifest(self.store)
        if incarnation is not UNRECORDED and incarnation != manifest.incarnation:
            self._confirm_incarnation(manifest)
            raise LogRecreated(self.url, offset, describe(incarnation),
                               describe(manifest.incarnation),
                               f"Cursor {name!r} was not moved; the consumer decides first")
        self._check_offset(name, offset, False, manifest)
        current_incarnation = manifest.incarnation

        def decide(current: Cursor | BrokenCursor | None) -> Cursor | None:
            if isinstance(current, BrokenCursor):
                logger.warning("%s: replacing broken cursor %s (%s) at offset %d",
                            self.url, current.key, current.problem, offset)
            elif current is not None and current.incarnation != current_incarnation:
                logger.warning("%s: replacing cursor %s of incarnation %s (at offset %d) with offset "
                            "%d of incarnation %s", self.url, name, describe(current.incarnation),
                            current.offset, offset, describe(current_incarnation))
            elif current is not None and current.offset >= offset:
                return None
            return Cursor(offset, micros(self.clock), self.writer, current_incarnation)

        return self._apply(name, offset, self._object(name), decide)

    def delete(self, name: str) -> None:
        """Delete a cursor, broken ones included (an invalid name only if such an object is
        listed: that is how a hand-written `cursor/bad-name.json` is removed)."""
        if _valid_name(name):
            key = cursor_key(name)
            if not self.store.exists(key):
                raise CursorError(f"no cursor named {name!r}")
        else:
            key = f"{CURSOR_PREFIX}{name}.json"
            if key not in {m.key for m in self.store.list(CURSOR_PREFIX)}:
                cursor_key(name)  # raises: the name is invalid, and no such object exists
        self.store.delete(key)

    # -- helpers ------------------------------------------------------------------------

    def _check_offset(self, name: str, offset: int, force: bool,
                      manifest: Manifest | None = None) -> Manifest:
        """Check `offset` against the log (`manifest`, else read now); return the manifest it
        was checked against."""
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise CursorError(f"cursor {name!r}: the offset must be an integer, got {offset!r}")
        if offset < 0:
            raise CursorError(f"cursor {name!r}: offset {offset} is negative; offsets start at 1")
        cursor_key(name)
        manifest = manifest or read_manifest(self.store)
        oldest, tail = manifest.oldest_offset, manifest.next_offset
        if offset > tail:
            raise CursorError(
                f"cursor {name!r}: offset {offset} is beyond the tail of {self.url} (next offset "
                f"{tail}): garbage collection would drop records appended later that no consumer "
                f"read. Use an offset in [{oldest}, {tail}]"
            )
        if offset < oldest and not force:
            raise CursorError(
                f"cursor {name!r}: offset {offset} is below the oldest offset of {self.url} "
                f"({oldest}): the records before it were garbage-collected. Use an offset in "
                f"[{oldest}, {tail}], or --force (allow_backwards=True) to set it anyway"
            )
        return manifest

    def _apply(self, name: str, offset: int, obj: CasObject[Cursor | BrokenCursor],
               decide: Callable[[Cursor | BrokenCursor | None], Cursor | BrokenCursor | None]) -> CursorState:
        result = obj.apply(decide)
        if result.outcome is Outcome.UNKNOWN:
            raise CursorError(
                f"cursor {name!r}: could not establish whether it was set to {offset} (the store "
                f"kept failing until the deadline); `wal3 cursor get {self.url} {name}` shows it"
            )
        current = result.current
        if current is None or isinstance(current.value, BrokenCursor):
            raise CursorError(f"cursor {name!r}: unexpected state after the update (internal error)")
        return CursorState(name, current.value, current.etag)

    def _broken(self, broken: BrokenCursor) -> CursorError:
        if broken.stale:
            return CursorError(f"cursor {broken.name!r} ({broken.key}) is stale: {broken.problem}. "
                               f"Fix: {broken.fix(self.url)}")
        return CursorError(
            f"cursor {broken.name!r} ({broken.key}) is broken: {broken.problem}. Fix it with "
            f"{broken.fix(self.url)}"
        )

