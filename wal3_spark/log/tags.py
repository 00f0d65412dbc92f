"""Tags (docs/design/26-branches-and-tags.md): a named offset of a log, `tag/<name>.json` beside its
cursors, so that a read of the tag returns the same records every time, as Delta's
`versionAsOf` does for a table.

A tag names the records [start, offset): `start` is the log's oldest offset when the tag was
made. A read of the tag returns exactly those, or fails with DataLost once garbage collection
removed some of them; a tag made with `hold` keeps them (garbage collection honours it as it
honours a cursor, `wal3_spark.log.holds`), so its reads never fail that way.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass

from wal3_spark.clock import SYSTEM, Clock, micros
from wal3_spark.errors import (
    DataLost,
    LogNotFound,
    ObjectNotFound,
    PreconditionFailed,
    TagError,
)
from wal3_spark.format.layout import name_of
from wal3_spark.format.manifest import Manifest
from wal3_spark.format.tag import TAG_PREFIX, Tag, tag_key
from wal3_spark.log.holds import settle
from wal3_spark.log.manifest_reader import read_manifest
from wal3_spark.storage import StoreLike, resolve_store

TAG_WRITER = "wal3-spark tag"


@dataclass(frozen=True)
class TagState:
    name: str
    tag: Tag

    def to_dict(self) -> dict:
        return {"name": self.name, **asdict(self.tag)}


class TagStore:
    """The tags of one log."""

    def __init__(self, log: StoreLike, *, options: Mapping[str, str] | None = None,
                 clock: Clock = SYSTEM) -> None:
        self.store = resolve_store(log, options)
        self.clock = clock

    @property
    def url(self) -> str:
        return self.store.url

    def _manifest(self) -> Manifest:
        try:
            return read_manifest(self.store)
        except LogNotFound:
            raise TagError(f"no wal3 log at {self.url} (manifest/MANIFEST is missing): check the "
                           "path; tags name offsets of an existing log") from None

    def create(self, name: str, *, at: int | None = None, hold: bool = False) -> TagState:
        """Name the log's records [oldest, `at`) (`at`: its tail by default). Refused when the
        name is taken (tags never move: delete it first) or `at` is outside the log."""
        key = tag_key(name)
        manifest = self._manifest()
        oldest, tail = manifest.oldest_offset, manifest.next_offset
        offset = tail if at is None else at
        if isinstance(offset, bool) or not isinstance(offset, int) or not oldest <= offset <= tail:
            raise TagError(
                f"cannot tag {self.url} at offset {offset!r}: it holds offsets [{oldest}, {tail}); "
                f"give --at within [{oldest}, {tail}] ({tail}, its tail, by default)"
            )
        tag = Tag(offset, oldest, hold, micros(self.clock), TAG_WRITER, manifest.incarnation)
        try:
            etag = self.store.put_if_absent(key, tag.to_bytes())
        except PreconditionFailed:
            raise TagError(f"tag {name!r} of {self.url} already exists (tags never move): "
                           f"`wal3 tag {self.url} {name} --delete` first, or choose another name") from None
        if hold:
            start = settle(self.store, oldest)
            if start > offset:
                self.store.delete(key)
                raise TagError(f"cannot tag {self.url} at offset {offset}: a garbage collection "
                               f"running at the same moment removes offsets below {start}")
            if start != oldest:
                tag = Tag(offset, start, hold, tag.created_us, TAG_WRITER, manifest.incarnation)
                self.store.put_if_match(key, tag.to_bytes(), etag)
        return TagState(name, tag)

    def get(self, name: str) -> TagState:
        """The tag; TagError naming the tags there are when there is no such tag."""
        key = tag_key(name)
        try:
            data = self.store.get(key).data
        except ObjectNotFound:
            known = [t.name for t in self.list()]
            raise TagError(
                f"no tag {name!r} in {self.url}; its tags: {', '.join(known) or 'none'} "
                f"(`wal3 tag {self.url} {name}` creates it)"
            ) from None
        return TagState(name, Tag.from_bytes(data, key))

    def list(self) -> Iterator[TagState]:
        for meta in sorted(self.store.list(TAG_PREFIX), key=lambda m: m.key):
            name = name_of(meta.key, TAG_PREFIX)
            if name is None:
                continue
            try:
                yield TagState(name, Tag.from_bytes(self.store.get(meta.key).data, meta.key))
            except ObjectNotFound:
                continue

    def delete(self, name: str) -> None:
        key = tag_key(name)
        if not self.store.exists(key):
            raise TagError(f"no tag {name!r} in {self.url} to delete")
        self.store.delete(key)

    def range(self, name: str, manifest: Manifest | None = None) -> tuple[int, int]:
        """The offsets [start, limit) the tag names, checked to be all there: DataLost when
        garbage collection removed some (a tag made without hold), TagError when the log was
        deleted and created again since."""
        state = self.get(name)
        manifest = manifest or self._manifest()
        tag = state.tag
        if tag.incarnation != manifest.incarnation:
            raise TagError(
                f"tag {name!r} was made in an earlier log at {self.url} (deleted and created again "
                f"since: incarnation then {tag.incarnation}, now {manifest.incarnation}); delete it"
            )
        if tag.start < min(tag.offset, manifest.oldest_offset):  # an empty range loses nothing
            raise DataLost(self.url, tag.start, manifest.oldest_offset, fix=(
                f"Tag {name!r} names [{tag.start}, {tag.offset}) and is not read in part; a tag "
                "made with hold (`wal3 tag LOG NAME --hold`) keeps its records from garbage collection"))
        return tag.start, tag.offset
