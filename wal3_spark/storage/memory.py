"""In-process object store for unit tests: `memory://name[/prefix]`.

Stores with the same name share their objects within one process (so a test can open the
"same log" twice); a store unpickled in another process sees that process's namespace, which
starts empty. ETags are hex MD5s, as on S3, so code cannot tell this store from a real one.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from wal3_spark.clock import SYSTEM, Clock
from wal3_spark.errors import ObjectNotFound, PreconditionFailed
from wal3_spark.storage.base import Blob, ObjectMeta, ObjectStore
from wal3_spark.storage.common import check_children_prefix, check_key, md5_etag


@dataclass
class _Namespace:
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: full key -> (data, etag, last_modified)
    objects: dict[str, tuple[bytes, str, float]] = field(default_factory=dict)


_namespaces: dict[str, _Namespace] = {}
_namespaces_lock = threading.Lock()


def _namespace(name: str) -> _Namespace:
    with _namespaces_lock:
        return _namespaces.setdefault(name, _Namespace())


class MemoryStore(ObjectStore):
    """Objects in a process-wide dict, guarded by one lock per namespace."""

    md5_etags = True

    def __init__(self, name: str, prefix: str = "", *, clock: Clock = SYSTEM) -> None:
        """`clock` stamps each write's `last_modified`, as a real store's own clock does (a
        copy unpickled elsewhere uses the system's)."""
        self.name = name
        self.clock = clock
        self.prefix = prefix.strip("/")
        self.url = f"memory://{name}" + (f"/{self.prefix}" if self.prefix else "")
        self._root = f"{self.prefix}/" if self.prefix else ""
        self._ns = _namespace(name)

    def __getstate__(self) -> dict[str, str]:
        return {"name": self.name, "prefix": self.prefix}

    def __setstate__(self, state: dict[str, str]) -> None:
        self.__init__(state["name"], state["prefix"])  # type: ignore[misc]

    def _full(self, key: str) -> str:
        return self._root + check_key(key)

    def get(self, key: str) -> Blob:
        with self._ns.lock:
            entry = self._ns.objects.get(self._full(key))
        if entry is None:
            raise ObjectNotFound(key, self.url)
        return Blob(entry[0], entry[1])

    def head(self, key: str) -> ObjectMeta:
        with self._ns.lock:
            entry = self._ns.objects.get(self._full(key))
        if entry is None:
            raise ObjectNotFound(key, self.url)
        return ObjectMeta(key, len(entry[0]), entry[1], entry[2])

    def put_if_absent(self, key: str, data: bytes) -> str:
        full, data = self._full(key), bytes(data)
        etag = md5_etag(data)
        with self._ns.lock:
            if full in self._ns.objects:
                raise PreconditionFailed(key, "the object already exists")
            self._ns.objects[full] = (data, etag, self.clock.now())
        return etag

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        full, data, expected = self._full(key), bytes(data), etag.strip('"')
        new_etag = md5_etag(data)
        with self._ns.lock:
            entry = self._ns.objects.get(full)
            if entry is None:
                raise PreconditionFailed(key, "the object does not exist")
            if entry[1] != expected:
                raise PreconditionFailed(key, f"its ETag is {entry[1]}, not {expected}")
            self._ns.objects[full] = (data, new_etag, self.clock.now())
        return new_etag

    def list(self, prefix: str = "") -> Iterator[ObjectMeta]:
        full_prefix = self._root + prefix
        with self._ns.lock:
            entries = sorted(
                (k, v) for k, v in self._ns.objects.items() if k.startswith(full_prefix)
            )
        for full, (data, etag, modified) in entries:
            yield ObjectMeta(full[len(self._root) :], len(data), etag, modified)

    def list_children(self, prefix: str = "") -> Iterator[str]:
        full_prefix = self._root + check_children_prefix(prefix)
        with self._ns.lock:
            names = {
                rest.partition("/")[0]
                for k in self._ns.objects
                if k.startswith(full_prefix) and "/" in (rest := k[len(full_prefix) :])
            }
        return iter(sorted(names))

    def delete(self, key: str) -> None:
        full = self._full(key)
        with self._ns.lock:
            self._ns.objects.pop(full, None)
