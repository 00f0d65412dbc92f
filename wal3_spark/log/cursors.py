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
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from wal3_spark.clock import SYSTEM, Clock, micros
from wal3_spark.errors import CorruptLog, CursorError, LogNotFound, ObjectNotFound
from wal3_spark.format.layout import CURSOR_PREFIX, Cursor, cursor_key, dumps, loads
from wal3_spark.log.cas import CasObject, Outcome, Versioned
from wal3_spark.log.reader import LogReader
from wal3_spark.log.scan import LogScan
from wal3_spark.storage import StoreLike, resolve_store

log = logging.getLogger(__name__)


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

    def fix(self, url: str) -> str:
        return (
            f"`wal3 cursor delete {url} {self.name}`"
            + ("" if not _valid_name(self.name) else
               f", or `wal3 cursor set {url} {self.name} OFFSET --force`")
        )


def _valid_name(name: str) -> bool:
    try:
        cursor_key(name)
    except CursorError:
        return False
    return True


def _parse(key: str):
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
        self, store: StoreLike, writer: str = "wal3-spark", *, options: Mapping[str, str] | None = None,
        clock: Clock = SYSTEM,
    ) -> None:
        self.store = resolve_store(store, options)
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

    def scan(self) -> tuple[list[CursorState], list[BrokenCursor]]:
        """Every cursor, readable or broken (unreadable, or beyond the tail), in name order."""
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
        beyond = self._beyond_the_tail(states)
        return [s for s in states if s.name not in beyond], sorted(
            broken + list(beyond.values()), key=lambda b: b.name
        )

    def _beyond_the_tail(self, states: list[CursorState]) -> dict[str, BrokenCursor]:
        """The cursors past the log's tail, as broken ones. The tail is read after the cursors:
        it only grows, and every cursor was at most the tail when it was set, so a cursor a
        consumer moves meanwhile is never mistaken for one beyond it."""
        if not states:
            return {}
        try:
            _, tail = LogReader(self.store).bounds()
        except LogNotFound:
            return {}
        return {
            s.name: BrokenCursor(
                s.name, cursor_key(s.name),
                f"offset {s.cursor.offset} is beyond the tail (next offset {tail}): garbage "
                "collection would drop records appended later that no consumer read",
            )
            for s in states if s.cursor.offset > tail
        }

    def list(self) -> Iterator[CursorState]:
        """The readable cursors (see `scan` for the broken ones too)."""
        yield from self.scan()[0]

    def scan_from(self, name: str, *, start: int | None = None, max_records: int | None = None,
                  verify: bool = True) -> LogScan:
        """The records from cursor `name` to the tail (at most `max_records`), as a LogScan; a
        cursor that does not exist yet reads from `start` (default: the oldest offset), as a new
        Kafka consumer group does. Move the cursor to the scan's `position` once the records
        are processed (`advance(name, scan.position)`): only then may GC drop them."""
        state = self.get(name)
        begin = start if state is None else state.cursor.offset
        return LogReader(self.store).scan(begin, max_records=max_records, verify=verify)

    def lowest(self) -> int | None:
        """The lowest cursor position: garbage collection keeps everything at or after it.
        CursorError when a cursor is broken (it may be the lowest)."""
        states, broken = self.scan()
        if broken:
            raise self._broken(broken[0])
        return min((s.cursor.offset for s in states), default=None)

    # -- changing -----------------------------------------------------------------------

    def create(self, name: str, offset: int, *, force: bool = False) -> CursorState:
        """Create a cursor; fails if it exists (use `move` to change it)."""
        self._check_offset(name, offset, force)

        def decide(current: Cursor | BrokenCursor | None) -> Cursor:
            if current is not None:
                raise CursorError(f"cursor {name!r} already exists; move it instead")
            return Cursor(offset, micros(self.clock), self.writer)

        return self._apply(name, offset, self._object(name), decide)

    def move(self, name: str, offset: int, *, expected: CursorState | None = None,
             allow_backwards: bool = False) -> CursorState:
        """Compare-and-swap the cursor to `offset`, creating it if absent.

        With `expected`, the swap fails (CursorError) if the cursor changed since it was read.
        Moving backwards, below the log's oldest offset, or over a broken cursor object needs
        `allow_backwards` (`--force`): GC may already have removed what lies behind.
        """
        self._check_offset(name, offset, allow_backwards)
        obj = self._object(name)
        if expected is not None:  # decide on the version the caller read
            obj.last = Versioned(expected.cursor, expected.etag, dumps(expected.cursor.to_dict()))
            obj.known = True

        def decide(current: Cursor | BrokenCursor | None) -> Cursor | None:
            if expected is not None and current != expected.cursor:
                raise CursorError(f"cursor {name!r} was moved by someone else since it was read")
            if isinstance(current, BrokenCursor) and not allow_backwards:
                raise self._broken(current)
            if isinstance(current, Cursor):
                if offset < current.offset and not allow_backwards:
                    raise CursorError(
                        f"cursor {name!r} is at {current.offset}; refusing to move it back to "
                        f"{offset} (pass allow_backwards / --force if GC has not collected that "
                        "range)"
                    )
                if offset == current.offset:
                    return None
            return Cursor(offset, micros(self.clock), self.writer)

        return self._apply(name, offset, obj, decide)

    def advance(self, name: str, offset: int) -> CursorState:
        """Move the cursor forward to `offset` (never back), creating it if absent; a cursor
        already at or past `offset` is left alone, so concurrent advances never regress it.

        A broken object of that name is replaced: the consumer advancing it knows where it is
        (this is what a stream's `cursor` option does after each batch), so its stream is never
        wedged by it."""
        self._check_offset(name, offset, False)

        def decide(current: Cursor | BrokenCursor | None) -> Cursor | None:
            if isinstance(current, BrokenCursor):
                log.warning("%s: replacing broken cursor %s (%s) at offset %d",
                            self.url, current.key, current.problem, offset)
            elif current is not None and current.offset >= offset:
                return None
            return Cursor(offset, micros(self.clock), self.writer)

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

    def _check_offset(self, name: str, offset: int, force: bool) -> None:
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise CursorError(f"cursor {name!r}: the offset must be an integer, got {offset!r}")
        if offset < 0:
            raise CursorError(f"cursor {name!r}: offset {offset} is negative; offsets start at 1")
        cursor_key(name)
        oldest, tail = LogReader(self.store).bounds()
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

    def _apply(self, name: str, offset: int, obj: CasObject, decide) -> CursorState:
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
        return CursorError(
            f"cursor {broken.name!r} ({broken.key}) is broken: {broken.problem}. Fix it with "
            f"{broken.fix(self.url)}"
        )

