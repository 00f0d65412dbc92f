"""Object stores the wal3 protocol runs on, chosen by URL.

- `s3://bucket/prefix` (also `s3a://`, `s3n://`): S3 or an S3-compatible server, via boto3;
- `gs://bucket/prefix`: Google Cloud Storage (or fake-gcs-server), over its JSON API;
- `az://container/prefix` and `abfs[s]://container@account.dfs.core.windows.net/prefix`: Azure
  Blob Storage (or Azurite), via azure-storage-blob;
- `file:///abs/path` or a plain path (relative paths are made absolute): the local filesystem;
- `memory://name[/prefix]`: in-process, shared by name within one process (unit tests).

See `wal3_spark.storage.base` for the interface and its error contract.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TypeGuard

from wal3_spark.errors import InvalidOption, InvalidUrl
from wal3_spark.storage.azure import AZURE_OPTIONS, AzureSettings, AzureStore, parse_abfs_authority
from wal3_spark.storage.base import Blob, ObjectMeta, ObjectStore
from wal3_spark.storage.common import join_url, split_url
from wal3_spark.storage.gcs import GCS_OPTIONS, GCSSettings, GCSStore
from wal3_spark.storage.local import LocalStore
from wal3_spark.storage.memory import MemoryStore
from wal3_spark.storage.readonly import ReadOnlyStore, read_only_of
from wal3_spark.storage.s3 import S3_OPTIONS, S3Settings, S3Store

__all__ = [
    "STORE_OPTIONS",
    "AzureSettings",
    "AzureStore",
    "Blob",
    "GCSSettings",
    "GCSStore",
    "LocalStore",
    "MemoryStore",
    "ObjectMeta",
    "ObjectStore",
    "S3Settings",
    "S3Store",
    "StoreLike",
    "check_store_options",
    "join_url",
    "open_like",
    "open_store",
    "resolve_store",
    "store_option_names",
]

_S3_SCHEMES = ("s3", "s3a", "s3n")
_ABFS_SCHEMES = ("abfs", "abfss")

#: Option names `open_store` understands, lower-cased (matched case-insensitively): each store
#: reads its own and ignores the others', so one set of options may name several stores' (a copy
#: from S3 to a local path opens both with the same options); a name of none is refused
STORE_OPTIONS = S3_OPTIONS | GCS_OPTIONS | AZURE_OPTIONS

#: how the store options (`STORE_OPTIONS`, lower-cased) are spelled in docs and messages
_DISPLAY = {
    "endpoint": "endpoint",
    "endpointurl": "endpointUrl",
    "region": "region",
    "accesskeyid": "accessKeyId",
    "secretaccesskey": "secretAccessKey",
    "sessiontoken": "sessionToken",
    "pathstyle": "pathStyle",
    "serviceaccountfile": "serviceAccountFile",
    "project": "project",
    "accountname": "accountName",
    "accountkey": "accountKey",
    "sastoken": "sasToken",
    "connectionstring": "connectionString",
}


def store_option_names(names: frozenset[str] = STORE_OPTIONS) -> tuple[str, ...]:
    """The store options (endpoint, region, credentials) `open_store` accepts, as spelled in
    docs and messages; `names`: those of one kind of store."""
    return tuple(sorted((_DISPLAY[n] for n in names), key=str.lower))


def check_store_options(url: str, options: Mapping[str, str] | None) -> None:
    """Refuse an option name no store knows, naming it and the known ones: a typo (`endpont=`)
    ignored would send every request to the cloud's default endpoint (or fail later, naming
    the credentials). Another store's option is allowed (see `STORE_OPTIONS`)."""
    unknown = sorted(str(k) for k in options or {} if not isinstance(k, str) or k.lower() not in STORE_OPTIONS)
    if not unknown:
        return
    scheme = split_url(url)[0]
    own = (S3_OPTIONS if scheme in _S3_SCHEMES else GCS_OPTIONS if scheme == "gs"
           else AZURE_OPTIONS if scheme in ("az", *_ABFS_SCHEMES) else frozenset())
    reads = (f"{url} reads {', '.join(store_option_names(own))}" if own
             else f"a {scheme} store reads none")
    raise InvalidOption(
        f"unknown store option{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} for "
        f"{url}: check the spelling; {reads} (the store options are {', '.join(store_option_names())}, "
        "any case)"
    )

#: where a log (or a log set) lives, as every public entry point takes it: a URL (or a plain
#: path) opened with the entry point's `options`, or a store already open (wrapped, shared)
StoreLike = str | os.PathLike[str] | ObjectStore


def open_store(url: str, options: Mapping[str, str] | None = None) -> ObjectStore:
    """The store rooted at `url`.

    `options` (names case-insensitive, see `STORE_OPTIONS`) configure the cloud stores:
    `endpoint` (alias `endpointUrl`) for each; S3: `region`, `accessKeyId`, `secretAccessKey`,
    `sessionToken`, `pathStyle`; GCS: `serviceAccountFile`, `project`; Azure: `accountName`,
    `accountKey`, `sasToken`, `connectionString`. Each falls back to its cloud's usual
    environment variables and credential chain. Local and memory stores ignore them, as each
    store ignores another's; a name no store knows is an `InvalidOption` naming the known ones.
    """
    scheme, authority, path = split_url(url)
    check_store_options(url, options)
    if scheme in _S3_SCHEMES:
        if not authority:
            raise InvalidUrl(f"S3 URL {url!r} names no bucket; use s3://bucket/prefix")
        return S3Store(authority, path, S3Settings.from_options(options))
    if scheme == "gs":
        if not authority:
            raise InvalidUrl(f"GCS URL {url!r} names no bucket; use gs://bucket/prefix")
        return GCSStore(authority, path, GCSSettings.from_options(options))
    if scheme == "az":
        if not authority:
            raise InvalidUrl(f"Azure URL {url!r} names no container; use az://container/prefix")
        return AzureStore(authority, path, AzureSettings.from_options(options))
    if scheme in _ABFS_SCHEMES:
        container, account, endpoint = parse_abfs_authority(url, authority)
        settings = AzureSettings.from_options(options, account=account, endpoint=endpoint)
        root = f"{scheme}://{authority}" + (f"/{path}" if path else "")
        return AzureStore(container, path, settings, url=root)
    if scheme == "file":
        return LocalStore(path)
    if scheme == "memory":
        if not authority:
            raise InvalidUrl(f"memory URL {url!r} names no store; use memory://name")
        return MemoryStore(authority, path)
    raise InvalidUrl(
        f"unsupported store URL {url!r}: use s3://bucket/prefix, gs://bucket/prefix, "
        "az://container/prefix, abfss://container@account.dfs.core.windows.net/prefix, "
        "file:///abs/path (or a plain path), or memory://name"
    )


def open_like(store: ObjectStore, url: str) -> ObjectStore:
    """The store rooted at `url`, opened with `store`'s settings (endpoint, credentials) when
    both are the same kind of cloud store: how a log reaches another log it names (a branch its
    parent) with the options it was itself opened with. `store` itself when `url` is its own.

    A read-only `store` (the console's) gives a read-only store: unwrapping it to reach its
    client must not make the other log writable."""
    if url == store.url:
        return store
    opened = _open_with_settings(store, url)
    readonly = read_only_of(store)
    return opened if readonly is None else ReadOnlyStore(opened, readonly.who)


def _open_with_settings(store: ObjectStore, url: str) -> ObjectStore:
    inner = store
    # a wrapper (retries, hedging, a log set's prefix) has its client's store as `inner`
    while not isinstance(inner, (S3Store, GCSStore, AzureStore)) and (wrapped := getattr(inner, "inner", None)):
        inner = wrapped
    scheme, authority, path = split_url(url)
    if isinstance(inner, S3Store) and scheme in _S3_SCHEMES:
        return S3Store(authority, path, inner.settings)
    if isinstance(inner, GCSStore) and scheme == "gs":
        return GCSStore(authority, path, inner.settings)
    if isinstance(inner, AzureStore) and scheme == "az":
        return AzureStore(authority, path, inner.settings)
    return open_store(url)


def resolve_store(target: StoreLike, options: Mapping[str, str] | None = None) -> ObjectStore:
    """The store of an entry point's `target`: a store is used as it is (its wrappers and
    clients kept), a URL or path is opened with `options` (`open_store`), as delta-rs's
    `DeltaTable(uri, storage_options)` takes either. Options given with an open store would be
    ignored silently, so they are refused: they belong to the `open_store` call that made it."""
    if isinstance(target, ObjectStore) or _is_store(target):
        if options:
            raise InvalidOption(
                f"store options ({', '.join(sorted(options))}) were given with a store already "
                f"open ({target.url}): pass them to open_store(url, options), or pass the URL here"
            )
        return target
    if isinstance(target, os.PathLike):
        target = os.fspath(target)
    if not isinstance(target, str):
        raise InvalidUrl(
            f"expected a log URL, a path or an ObjectStore, got {type(target).__name__} {target!r}"
        )
    return open_store(target, options)


def _is_store(target: object) -> TypeGuard[ObjectStore]:
    """Whether `target` is used as a store without subclassing `ObjectStore` (a wrapper that
    forwards what it does not override): it has the two conditional writes and a URL."""
    return all(callable(getattr(target, name, None)) for name in ("get", "put_if_absent", "put_if_match")) and (
        isinstance(getattr(target, "url", None), str)
    )
