"""What the console looks at: one log, or every log under a prefix, opened read-only.

Which of the two a URL is gets decided once, at start-up, the way `wal3 info` decides: a URL that
holds a manifest is a log; otherwise it is a prefix, which must hold at least one log (a mistyped
URL must fail with a message at start-up, not serve empty pages).
"""

from __future__ import annotations

from dataclasses import dataclass

from wal3_spark.errors import InvalidLogName, LogNotFound
from wal3_spark.format.layout import MANIFEST_KEY
from wal3_spark.logset.logs import LogSet, check_log_name
from wal3_spark.storage.base import ObjectStore
from wal3_spark.storage.readonly import ReadOnlyStore

CONSOLE = "the wal3 console"


@dataclass(frozen=True)
class Target:
    """The console's logs: `logs` is set for a prefix, else `store` is the one log's store."""

    url: str
    store: ObjectStore
    logs: LogSet | None
    #: the single log's name (the last segment of its URL); None for a prefix
    single_name: str | None

    @classmethod
    def open(cls, store: ObjectStore) -> Target:
        """The log or log set at `store`, read-only; LogNotFound when there is neither."""
        readonly = ReadOnlyStore(store, CONSOLE)
        if readonly.exists(MANIFEST_KEY):
            name = store.url.rstrip("/").rsplit("/", 1)[-1] or store.url
            return cls(store.url, readonly, None, name)
        logs = LogSet(readonly)
        if not logs.names():
            raise LogNotFound(store.url, message=(
                f"{store.url} is neither a wal3 log (no {MANIFEST_KEY}) nor a prefix with logs "
                "under it: check the URL (and --endpoint for S3), or create a log with `wal3 init`"
            ))
        return cls(store.url, readonly, logs, None)

    @property
    def is_set(self) -> bool:
        return self.logs is not None

    def names(self) -> list[str]:
        """The logs the console shows, in name order (listed again each time for a prefix)."""
        if self.logs is None:
            assert self.single_name is not None
            return [self.single_name]
        return self.logs.names()

    def log_store(self, name: str) -> ObjectStore:
        """Log `name`'s read-only store; LogNotFound for a name the console does not show."""
        if self.logs is None:
            if name != self.single_name:
                raise LogNotFound(name, message=f"the console shows the log {self.single_name!r} only, not {name!r}")
            return self.store
        try:
            check_log_name(name)
        except InvalidLogName as exc:
            raise LogNotFound(name, message=f"no log {name!r} under {self.url}: {exc}") from None
        store = self.logs.log_store(name)
        if not store.exists(MANIFEST_KEY):
            raise LogNotFound(self.logs.log_url(name),
                              message=f"no log {name!r} under {self.url} (it has no {MANIFEST_KEY})")
        return store
