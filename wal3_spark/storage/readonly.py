"""A store that refuses every write: what the console reads logs through.

A viewer must never change what it shows. Wrapping its store makes that a property of the code
path rather than of each page's care: a page that ended up calling something which writes (a
garbage collection's dry run that turned into a real one, a cursor moved by a read helper) fails
with `AccessDenied` naming the object, and the log is untouched.
"""

from __future__ import annotations

from wal3_spark.errors import AccessDenied
from wal3_spark.storage.base import ObjectStore
from wal3_spark.storage.forwarding import ForwardingStore


class ReadOnlyStore(ForwardingStore):
    """`inner` for reads; every create, compare-and-swap and delete raises `AccessDenied`."""

    def __init__(self, inner: ObjectStore, who: str = "this reader") -> None:
        super().__init__(inner)
        self.who = who

    def put_if_absent(self, key: str, data: bytes) -> str:
        raise self._refused("create", key)

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        raise self._refused("overwrite", key)

    def delete(self, key: str) -> None:
        raise self._refused("delete", key)

    def _refused(self, what: str, key: str) -> AccessDenied:
        return AccessDenied(f"{self.url}: {self.who} is read-only and refused to {what} {key!r}; "
                            "use the `wal3` commands that change a log (gc, seal, cursor set) instead")


def read_only_of(store: ObjectStore) -> ReadOnlyStore | None:
    """The read-only wrapper `store` is or wraps (through other wrappers, a log set's prefix
    included), or None when it may write. A store opened from it for another URL (a branch's
    parent) must be read-only too: see `wal3_spark.storage.open_like`."""
    inner: ObjectStore | None = store
    while inner is not None:
        if isinstance(inner, ReadOnlyStore):
            return inner
        inner = getattr(inner, "inner", None)
    return None
