"""What the cloud stores (S3, GCS, Azure) share: a client opened lazily in each process (a store
pickles small, as Spark ships it to executors), keys under a prefix, and bounded retries.

Design: docs/design/02-gcs-and-azure.md."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from wal3_spark.errors import TransientError
from wal3_spark.storage.base import ObjectStore
from wal3_spark.storage.common import check_key, join_url
from wal3_spark.storage.retry import retry

T = TypeVar("T")


class ClientStore(ObjectStore):
    """A store whose objects live under `prefix` of a bucket or container, reached through a
    client that `_new_client` creates on first use in each process and `close` releases."""

    # class attributes so tests can make retries fast on one instance
    retry_attempts = 6
    retry_base_s = 0.2
    retry_cap_s = 4.0
    list_page_size = 1000

    def __init__(self, scheme: str, bucket: str, prefix: str, url: str | None = None) -> None:
        """`url`: how users name the store when not `scheme://bucket/prefix` (Azure's abfs form)."""
        self.prefix = prefix.strip("/")
        self.url = url or f"{scheme}://{bucket}" + (f"/{self.prefix}" if self.prefix else "")
        self._root = f"{self.prefix}/" if self.prefix else ""
        self._client: Any = None
        self._client_lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_client"] = None
        del state["_client_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._client_lock = threading.Lock()

    def close(self) -> None:
        with self._client_lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def _new_client(self) -> Any:
        raise NotImplementedError

    def _connection(self) -> Any:
        client = self._client
        if client is None:
            with self._client_lock:
                if self._client is None:
                    self._client = self._new_client()
                client = self._client
        return client

    def _full(self, key: str) -> str:
        return self._root + check_key(key)

    def _where(self, key: str) -> str:
        return join_url(self.url, key)

    def _retry(self, fn: Callable[[], T], what: str) -> T:
        """`fn()`, retrying `TransientError` with backoff; once retries are exhausted, the last
        error says so."""
        try:
            return retry(
                fn, attempts=self.retry_attempts, base=self.retry_base_s, cap=self.retry_cap_s, what=what
            )
        except TransientError as exc:
            if not self._wrap_exhausted(exc):
                raise
            raise TransientError(
                f"{exc}; still failing after {self.retry_attempts} attempts: the store is "
                "unreachable or overloaded (a temporary failure: try again later)"
            ) from exc

    def _wrap_exhausted(self, exc: TransientError) -> bool:
        """Whether `_retry` reports `exc` as retries exhausted (a store may keep some as they are)."""
        return True
