"""A store seen from one of its sub-directories: the store of one log of a log set.

Opening each log of a prefix with `open_store(url)` would give every log its own S3 client and
connection pool (thousands of them for a large log set); a `PrefixedStore` shares the parent's
client, and a wrapper around the parent (request counting, fault injection) sees every log's
requests. Its URL is the sub-directory's own, so caches keyed by URL (snapshots) stay per log.
"""

from __future__ import annotations

from collections.abc import Iterator

from wal3_spark.storage.base import Blob, ObjectMeta, ObjectStore
from wal3_spark.storage.common import check_children_prefix, check_key, join_url


class PrefixedStore(ObjectStore):
    """The keys of `inner` under `directory/`, with that part of the key removed."""

    def __init__(self, inner: ObjectStore, directory: str) -> None:
        self.inner = inner
        self.directory = check_key(directory.strip("/"))
        self.url = join_url(inner.url, self.directory)
        self._root = self.directory + "/"

    @property
    def md5_etags(self) -> bool:  # type: ignore[override]
        return self.inner.md5_etags

    def _full(self, key: str) -> str:
        return self._root + check_key(key)

    def get(self, key: str) -> Blob:
        return self.inner.get(self._full(key))

    def get_buffer(self, key: str) -> bytes | memoryview:
        return self.inner.get_buffer(self._full(key))

    def get_range(self, key: str, start: int, length: int) -> bytes:
        return self.inner.get_range(self._full(key), start, length)

    def head(self, key: str) -> ObjectMeta:
        meta = self.inner.head(self._full(key))
        return ObjectMeta(key, meta.size, meta.etag, meta.last_modified)

    def put_if_absent(self, key: str, data: bytes) -> str:
        return self.inner.put_if_absent(self._full(key), data)

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        return self.inner.put_if_match(self._full(key), data, etag)

    def list(self, prefix: str = "") -> Iterator[ObjectMeta]:
        n = len(self._root)
        for meta in self.inner.list(self._root + prefix):
            yield _Relative(meta, meta.key[n:])

    def list_children(self, prefix: str = "") -> Iterator[str]:
        return self.inner.list_children(self._root + check_children_prefix(prefix))

    def delete(self, key: str) -> None:
        self.inner.delete(self._full(key))

    def close(self) -> None:
        """Nothing to release: the client belongs to `inner`, which other logs share."""

    def __repr__(self) -> str:
        return f"PrefixedStore({self.inner!r}, {self.directory!r})"


class _Relative(ObjectMeta):
    """A listed object under its relative key; its ETag is asked of the inner listing only when
    used (the local store computes it by reading the file)."""

    def __init__(self, meta: ObjectMeta, key: str) -> None:
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "size", meta.size)
        object.__setattr__(self, "last_modified", meta.last_modified)
        object.__setattr__(self, "_meta", meta)

    def __getattr__(self, name: str) -> str:
        if name != "etag":
            raise AttributeError(name)
        etag = self._meta.etag  # type: ignore[attr-defined]
        object.__setattr__(self, "etag", etag)
        return etag
