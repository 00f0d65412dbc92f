"""Named cursors (FORMAT.md section 8): positions that pin the log against garbage collection.

Each cursor is its own object, moved by compare-and-swap on its ETag, so that pinning the log
never contends with appends on the manifest.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

from wal3_spark.errors import CursorError, ObjectNotFound, PreconditionFailed
from wal3_spark.format import CURSOR_PREFIX, Cursor, cursor_key, dumps, loads
from wal3_spark.committer import now_us
from wal3_spark.storage.base import ObjectStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CursorState:
    name: str
    cursor: Cursor
    etag: str


class CursorStore:
    """The cursors of one log."""

    def __init__(self, store: ObjectStore, writer: str = "wal3-spark") -> None:
        self.store = store
        self.writer = writer

    def get(self, name: str) -> CursorState | None:
        key = cursor_key(name)
        try:
            blob = self.store.get(key)
        except ObjectNotFound:
            return None
        return CursorState(name, Cursor.from_json(loads(blob.data, key), key), blob.etag)

    def create(self, name: str, offset: int) -> CursorState:
        """Create a cursor; fails if it exists (use `move` to change it)."""
        cursor = Cursor(offset, now_us(), self.writer)
        try:
            etag = self.store.put_if_absent(cursor_key(name), dumps(cursor.to_json()))
        except PreconditionFailed:
            raise CursorError(f"cursor {name!r} already exists; move it instead") from None
        return CursorState(name, cursor, etag)

    def move(self, name: str, offset: int, *, expected: CursorState | None = None,
             allow_backwards: bool = False) -> CursorState:
        """Compare-and-swap the cursor to `offset`.

        With `expected`, the swap fails (CursorError) if the cursor changed since it was read;
        without, it retries on races. Moving backwards is refused unless asked for, since GC may
        already have removed what lies behind the cursor.
        """
        for _ in range(100):
            current = expected or self.get(name)
            if current is None:
                try:
                    return self.create(name, offset)
                except CursorError:
                    continue
            if offset < current.cursor.offset and not allow_backwards:
                raise CursorError(
                    f"cursor {name!r} is at {current.cursor.offset}; refusing to move it back to "
                    f"{offset} (pass allow_backwards / --force if GC has not collected that range)"
                )
            if offset == current.cursor.offset:
                return current
            cursor = Cursor(offset, now_us(), self.writer)
            try:
                etag = self.store.put_if_match(cursor_key(name), dumps(cursor.to_json()), current.etag)
                return CursorState(name, cursor, etag)
            except PreconditionFailed:
                if expected is not None:
                    raise CursorError(
                        f"cursor {name!r} was moved by someone else since it was read"
                    ) from None
        raise CursorError(f"cursor {name!r}: too much contention moving it")

    def advance(self, name: str, offset: int) -> CursorState:
        """Move the cursor forward to `offset` (never back), creating it if absent; a cursor
        already at or past `offset` is left alone, so concurrent advances never regress it."""
        for _ in range(100):
            current = self.get(name)
            if current is None:
                try:
                    return self.create(name, offset)
                except CursorError:
                    continue
            if current.cursor.offset >= offset:
                return current
            try:
                return self.move(name, offset, expected=current)
            except CursorError:
                continue
        raise CursorError(f"cursor {name!r}: too much contention moving it")

    def list(self) -> Iterator[CursorState]:
        for meta in self.store.list(CURSOR_PREFIX):
            name = meta.key[len(CURSOR_PREFIX):]
            if not name.endswith(".json"):
                continue
            state = self.get(name[: -len(".json")])
            if state is not None:
                yield state

    def delete(self, name: str) -> None:
        if self.get(name) is None:
            raise CursorError(f"no cursor named {name!r}")
        self.store.delete(cursor_key(name))

    def lowest(self) -> int | None:
        """The lowest cursor position: garbage collection keeps everything at or after it."""
        offsets = [state.cursor.offset for state in self.list()]
        return min(offsets) if offsets else None
