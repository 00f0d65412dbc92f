"""The store of a log another log names: a branch's parent (docs/design/26-branches-and-tags.md).

A branch records its parent's URL; its readers (on the driver and on every executor) reach the
parent's fragments with the branch store's own settings (`open_like`), one store per parent per
process, so that its client and connection pool are made once.
"""

from __future__ import annotations

import threading

from wal3_spark.storage import open_like
from wal3_spark.storage.base import ObjectStore
from wal3_spark.storage.readonly import read_only_of

_LIMIT = 256
_stores: dict[tuple[str, str, bool], ObjectStore] = {}
_lock = threading.Lock()


def parent_store(store: ObjectStore, url: str) -> ObjectStore:
    """The store of the log at `url`, opened like `store` (itself when `url` is its URL)."""
    if url == store.url:
        return store
    key = (store.url, url, read_only_of(store) is not None)  # a read-only store's parent is read-only too
    with _lock:
        cached = _stores.get(key)
    if cached is not None:
        return cached
    opened = open_like(store, url)
    with _lock:
        if len(_stores) >= _LIMIT:
            _stores.clear()
        return _stores.setdefault(key, opened)
