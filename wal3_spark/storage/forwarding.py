"""A store that passes every call to another one: the base of wrappers that change a few calls
(latency, hedging, test gates) and must stay usable wherever an `ObjectStore` is expected."""

from __future__ import annotations

from collections.abc import Iterator

from wal3_spark.storage.base import Blob, ObjectMeta, ObjectStore


class ForwardingStore(ObjectStore):
    """`inner`, unchanged; subclasses override what they wrap."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.url = inner.url

    @property
    def md5_etags(self) -> bool:  # type: ignore[override]
        return self.inner.md5_etags

    def get(self, key: str) -> Blob:
        return self.inner.get(key)

    def get_range(self, key: str, start: int, length: int) -> bytes:
        return self.inner.get_range(key, start, length)

    def head(self, key: str) -> ObjectMeta:
        return self.inner.head(key)

    def put_if_absent(self, key: str, data: bytes) -> str:
        return self.inner.put_if_absent(key, data)

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        return self.inner.put_if_match(key, data, etag)

    def list(self, prefix: str = "") -> Iterator[ObjectMeta]:
        return self.inner.list(prefix)

    def list_children(self, prefix: str = "") -> Iterator[str]:
        return self.inner.list_children(prefix)

    def delete(self, key: str) -> None:
        self.inner.delete(key)

    def close(self) -> None:
        self.inner.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"
