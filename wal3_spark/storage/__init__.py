"""Object stores the wal3 protocol runs on, chosen by URL.

- `s3://bucket/prefix` (also `s3a://`, `s3n://`): S3 or an S3-compatible server, via boto3;
- `file:///abs/path` or a plain path (relative paths are made absolute): the local filesystem;
- `memory://name[/prefix]`: in-process, shared by name within one process (unit tests).

See `wal3_spark.storage.base` for the interface and its error contract.
"""

from __future__ import annotations

from collections.abc import Mapping

from wal3_spark.errors import InvalidUrl
from wal3_spark.storage.base import Blob, ObjectMeta, ObjectStore
from wal3_spark.storage.common import join_url, split_url
from wal3_spark.storage.faults import FaultyStore, LateLandingStore
from wal3_spark.storage.local import LocalStore
from wal3_spark.storage.memory import MemoryStore
from wal3_spark.storage.s3 import STORE_OPTIONS, S3Settings, S3Store

__all__ = [
    "STORE_OPTIONS",
    "Blob",
    "FaultyStore",
    "LateLandingStore",
    "LocalStore",
    "MemoryStore",
    "ObjectMeta",
    "ObjectStore",
    "S3Settings",
    "S3Store",
    "join_url",
    "open_store",
]

_S3_SCHEMES = ("s3", "s3a", "s3n")


def open_store(url: str, options: Mapping[str, str] | None = None) -> ObjectStore:
    """The store rooted at `url`.

    `options` (names case-insensitive, see `STORE_OPTIONS`) configure S3: `endpoint` (alias
    `endpointUrl`), `region`, `accessKeyId`, `secretAccessKey`, `sessionToken`, `pathStyle`.
    Each falls back to the usual AWS environment variable. Other backends ignore them.
    """
    scheme, authority, path = split_url(url)
    if scheme in _S3_SCHEMES:
        if not authority:
            raise InvalidUrl(f"S3 URL {url!r} names no bucket; use s3://bucket/prefix")
        return S3Store(authority, path, S3Settings.from_options(options))
    if scheme == "file":
        return LocalStore(path)
    if scheme == "memory":
        if not authority:
            raise InvalidUrl(f"memory URL {url!r} names no store; use memory://name")
        return MemoryStore(authority, path)
    raise InvalidUrl(
        f"unsupported store URL {url!r}: use s3://bucket/prefix, file:///abs/path (or a plain "
        "path), or memory://name"
    )
