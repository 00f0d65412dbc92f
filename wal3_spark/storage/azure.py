"""Azure Blob Storage object store (azure-storage-blob), for Azure and Azurite.

The two conditional writes are one Put Blob each: create with `If-None-Match: *`, compare-and-
swap with `If-Match: <etag>`. Both are atomic on Azure and on Azurite. Writes up to
`MAX_SINGLE_PUT` bytes are one request (a larger one is a block list committed under the same
condition, also atomic).

Retries are ours: the SDK's retry policy is off (`retry_total=0`), because it retries a PUT that
timed out, and a conditional PUT that had landed would then report a false precondition failure.
Reads, lists and deletes retry every failure that may be transient; a write retries only when
the connection was never made or Azure throttled it (429); a timeout, a dropped connection or a
5xx after sending is `AmbiguousWrite`.

Credentials, in order: the store options (`connectionString`, `accountKey`, `sasToken`), then
`AZURE_STORAGE_CONNECTION_STRING`, `AZURE_STORAGE_KEY`, `AZURE_STORAGE_SAS_TOKEN`, then
azure-identity's `DefaultAzureCredential` (workload identity, managed identity, the Azure CLI)
when that package is installed. Azurite is reached with a connection string naming its
`BlobEndpoint`. Neither `repr()`, errors nor logs include a credential.

Design: docs/design/02-gcs-and-azure.md.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from wal3_spark.errors import (
    AccessDenied,
    AmbiguousWrite,
    InvalidOption,
    InvalidUrl,
    ObjectNotFound,
    PreconditionFailed,
    StorageError,
    TransientError,
)
from wal3_spark.storage.base import Blob, ObjectMeta
from wal3_spark.storage.client import ClientStore
from wal3_spark.storage.common import (
    check_children_prefix,
    connection_not_made,
    redact,
    redact_http_logs,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: option names (lower-cased) the Azure store reads
AZURE_OPTIONS = frozenset(
    {"endpoint", "endpointurl", "accountname", "accountkey", "sastoken", "connectionstring"}
)

CONNECT_TIMEOUT_S = 5
READ_TIMEOUT_S = 30
MAX_SINGLE_PUT = 256 * 1024 * 1024
_CREDENTIALS_HINT = (
    "check the credentials (the connectionString, accountKey or sasToken option, "
    "AZURE_STORAGE_CONNECTION_STRING, or the identity DefaultAzureCredential finds) and its "
    "role on the container (Storage Blob Data Contributor)"
)


@dataclass(frozen=True)
class AzureSettings:
    """How to reach the container. Credential fields are left out of `repr()`."""

    account_name: str | None = None
    endpoint: str | None = None
    account_key: str | None = field(default=None, repr=False)
    sas_token: str | None = field(default=None, repr=False)
    connection_string: str | None = field(default=None, repr=False)

    @classmethod
    def from_options(
        cls,
        options: Mapping[str, str] | None = None,
        environ: Mapping[str, str] = os.environ,
        *,
        account: str | None = None,
        endpoint: str | None = None,
    ) -> AzureSettings:
        """Settings from store options (any case), then the AZURE_STORAGE_* variables; `account`
        and `endpoint` come from an `abfs[s]://container@account.dfs.core.windows.net` URL."""
        opts = {k.lower(): str(v) for k, v in (options or {}).items() if v not in (None, "")}
        explicit = opts.get("endpoint") or opts.get("endpointurl")
        if explicit is not None and not explicit.startswith(("http://", "https://")):
            raise InvalidOption(
                f"endpoint {explicit!r} must be an http:// or https:// URL, e.g. "
                "http://127.0.0.1:10000/devstoreaccount1 for Azurite"
            )
        connection_string = opts.get("connectionstring")
        key, sas = opts.get("accountkey"), opts.get("sastoken")
        if connection_string is None and key is None and sas is None:
            connection_string = environ.get("AZURE_STORAGE_CONNECTION_STRING") or None
            if connection_string is None:
                key = environ.get("AZURE_STORAGE_KEY") or environ.get("AZURE_STORAGE_ACCOUNT_KEY") or None
                sas = environ.get("AZURE_STORAGE_SAS_TOKEN") or None
        name = (
            opts.get("accountname")
            or account
            or environ.get("AZURE_STORAGE_ACCOUNT")
            or environ.get("AZURE_STORAGE_ACCOUNT_NAME")
        )
        if connection_string is None and not explicit and not name and not endpoint:
            raise InvalidOption(
                "an az:// log needs its storage account: give the accountName option (or "
                "AZURE_STORAGE_ACCOUNT), a connectionString (or AZURE_STORAGE_CONNECTION_STRING), "
                "or write the URL as abfss://container@ACCOUNT.dfs.core.windows.net/prefix"
            )
        if sas is not None:
            sas = sas.lstrip("?")
        return cls(
            account_name=name,
            endpoint=(explicit or endpoint or (f"https://{name}.blob.core.windows.net" if name else None)),
            account_key=key,
            sas_token=sas,
            connection_string=connection_string,
        )


def parse_abfs_authority(url: str, authority: str) -> tuple[str, str, str]:
    """`(container, account, blob endpoint)` of `container@account.dfs.core.windows.net`: the
    ADLS Gen2 host Spark users write, whose blobs the Blob endpoint serves."""
    container, at, host = authority.partition("@")
    if not at or not container or not host:
        raise InvalidUrl(
            f"{url!r} names no container and account: use "
            "abfss://container@account.dfs.core.windows.net/prefix"
        )
    account = host.split(".", 1)[0]
    blob_host = host.replace(".dfs.", ".blob.", 1)
    return container, account, f"https://{blob_host}"


class AzureStore(ClientStore):
    """Objects under `az://container/prefix` (or the `abfs[s]://` form); keys are relative to
    the prefix."""

    def __init__(
        self,
        container: str,
        prefix: str = "",
        settings: AzureSettings | None = None,
        url: str | None = None,
    ) -> None:
        super().__init__("az", container, prefix, url)
        self.container = container
        self.settings = settings or AzureSettings()

    # ---------------------------------------------------------------------------- plumbing

    def _container(self) -> Any:
        return self._connection()

    def _new_client(self) -> Any:
        from azure.storage.blob import ContainerClient

        redact_http_logs()
        s = self.settings
        kwargs: dict[str, Any] = {
            "retry_total": 0,
            "connection_timeout": CONNECT_TIMEOUT_S,
            "read_timeout": READ_TIMEOUT_S,
            "max_single_put_size": MAX_SINGLE_PUT,
            "max_single_get_size": MAX_SINGLE_PUT,
            "user_agent": "wal3-spark",
        }
        try:
            if s.connection_string is not None:
                return ContainerClient.from_connection_string(s.connection_string, self.container, **kwargs)
            assert s.endpoint is not None
            credential: Any
            if s.account_key is not None:
                if not s.account_name:
                    raise InvalidOption("accountKey needs accountName (or an abfss:// URL naming the account)")
                credential = {"account_name": s.account_name, "account_key": s.account_key}
            elif s.sas_token is not None:
                credential = s.sas_token
            else:
                credential = _default_credential(self.url)
            return ContainerClient(s.endpoint, self.container, credential=credential, **kwargs)
        except ValueError as exc:  # a malformed connection string or key
            raise InvalidOption(f"the Azure credentials for {self.url} are malformed: {redact(str(exc))}") from None

    def _read_error(self, exc: Exception, op: str, key: str) -> Exception | None:
        from azure.core.exceptions import AzureError, ClientAuthenticationError, HttpResponseError

        where = self._where(key)
        if isinstance(exc, ClientAuthenticationError):
            return AccessDenied(f"{op} {where} failed: access denied: {_code(exc)}; {_CREDENTIALS_HINT}")
        if isinstance(exc, HttpResponseError) and exc.status_code is not None:
            status, code = exc.status_code, _code(exc)
            if status == 403:
                return AccessDenied(f"{op} {where} failed: access denied: {code}; {_CREDENTIALS_HINT}")
            if code == "ContainerNotFound":
                return StorageError(f"{op} {where} failed: container {self.container!r} does not exist")
            if status == 404:
                return ObjectNotFound(key, self.url)
            if status >= 500 or status in (408, 429):
                return TransientError(f"{op} {where} failed: {code} (HTTP {status})")
            return StorageError(f"{op} {where} failed: {code} (HTTP {status})")
        if isinstance(exc, AzureError):  # connection and transport failures
            return TransientError(f"{op} {where} failed: {_describe(exc)}")
        return None

    def _write_error(self, exc: Exception, key: str, condition: str) -> Exception:
        from azure.core.exceptions import (
            AzureError,
            ClientAuthenticationError,
            HttpResponseError,
            ServiceRequestError,
        )

        where = self._where(key)
        if isinstance(exc, ClientAuthenticationError):
            return AccessDenied(f"put {where} failed: access denied: {_code(exc)}; {_CREDENTIALS_HINT}")
        if isinstance(exc, HttpResponseError) and exc.status_code is not None:
            status, code = exc.status_code, _code(exc)
            if status == 412 or code in ("BlobAlreadyExists", "ConditionNotMet"):
                return PreconditionFailed(key, f"{condition} did not hold")
            if status == 404 and code == "ContainerNotFound":
                return StorageError(f"put {where} failed: container {self.container!r} does not exist")
            if status == 404 and condition.startswith("If-Match"):
                return PreconditionFailed(key, "the object does not exist")
            if status == 403:
                return AccessDenied(f"put {where} failed: access denied: {code}; {_CREDENTIALS_HINT}")
            if status == 429:
                return TransientError(f"put {where} was rejected: {code} (HTTP 429)")
            if status >= 500 or status == 408:
                return AmbiguousWrite(key, f"{code} (HTTP {status})")
            return StorageError(f"put {where} failed: {code} (HTTP {status})")
        if isinstance(exc, ServiceRequestError) and connection_not_made(exc):
            return TransientError(f"put {where} failed: {_describe(exc)}")
        if isinstance(exc, AzureError):
            return AmbiguousWrite(key, _describe(exc))
        return AmbiguousWrite(key, _describe(exc))

    def _idempotent(self, op: str, key: str, fn: Callable[[Any], T]) -> T:
        def attempt() -> T:
            try:
                return fn(self._container())
            except Exception as exc:
                mapped = self._read_error(exc, op, key)
                if mapped is None:
                    raise
                raise mapped from None

        return self._retry(attempt, f"{op} {self._where(key)}")

    def _put(self, key: str, data: bytes, condition: str, **kwargs: Any) -> str:
        full, body = self._full(key), bytes(data)

        def attempt() -> str:
            try:
                result = self._container().get_blob_client(full).upload_blob(body, overwrite=True, **kwargs)
            except Exception as exc:  # noqa: BLE001 - _write_error names each kind, or wraps it
                raise self._write_error(exc, key, condition) from None
            etag = result.get("etag")
            if not etag:
                raise AmbiguousWrite(key, "the store's answer to the PUT had no ETag")
            return str(etag).strip('"')

        return self._retry(attempt, f"put {self._where(key)} ({condition})")

    # ------------------------------------------------------------------------------- API

    def get(self, key: str) -> Blob:
        full = self._full(key)

        def get(container: Any) -> Blob:
            downloader = container.download_blob(full, max_concurrency=1)
            return Blob(downloader.readall(), str(downloader.properties.etag).strip('"'))

        return self._idempotent("get", key, get)

    def get_range(self, key: str, start: int, length: int) -> bytes:
        from azure.core.exceptions import HttpResponseError

        full = self._full(key)
        if length <= 0:
            self.head(key)
            return b""
        if start < 0:
            start = max(0, self.head(key).size + start)

        def get_range(container: Any) -> bytes:
            try:
                return bytes(container.download_blob(full, offset=start, length=length, max_concurrency=1).readall())
            except HttpResponseError as exc:
                if exc.status_code == 416:  # starts past the end
                    return b""
                raise

        return self._idempotent("get_range", key, get_range)

    def head(self, key: str) -> ObjectMeta:
        full = self._full(key)

        def head(container: Any) -> ObjectMeta:
            p = container.get_blob_client(full).get_blob_properties()
            return ObjectMeta(key, int(p.size), str(p.etag).strip('"'), p.last_modified.timestamp())

        return self._idempotent("head", key, head)

    def put_if_absent(self, key: str, data: bytes) -> str:
        return self._put(key, data, "If-None-Match: *", if_none_match="*")

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        from azure.core import MatchConditions

        quoted = f'"{etag.strip(chr(34))}"'
        return self._put(
            key, data, f"If-Match: {quoted}", etag=quoted, match_condition=MatchConditions.IfNotModified
        )

    def list(self, prefix: str = "") -> Iterator[ObjectMeta]:
        start = self._root + prefix

        def collect(container: Any) -> list[ObjectMeta]:
            found = []
            for p in container.list_blobs(name_starts_with=start, results_per_page=self.list_page_size):
                key = p.name[len(self._root) :]
                if key and not key.endswith("/"):
                    found.append(ObjectMeta(key, int(p.size), str(p.etag).strip('"'), p.last_modified.timestamp()))
            return found

        return iter(sorted(self._idempotent("list", prefix or "/", collect), key=lambda m: m.key))

    def list_children(self, prefix: str = "") -> Iterator[str]:
        start = self._root + check_children_prefix(prefix)

        def collect(container: Any) -> list[str]:
            names = set()
            for item in container.walk_blobs(name_starts_with=start, delimiter="/",
                                             results_per_page=self.list_page_size):
                name = item.name[len(start) :]
                if name.endswith("/") and name.strip("/"):
                    names.add(name.rstrip("/"))
            return sorted(names)

        return iter(self._idempotent("list_children", prefix or "/", collect))

    def delete(self, key: str) -> None:
        from azure.core.exceptions import ResourceNotFoundError

        full = self._full(key)

        def delete(container: Any) -> None:
            try:
                container.delete_blob(full)
            except ResourceNotFoundError as exc:
                if _code(exc) == "ContainerNotFound":
                    raise

        self._idempotent("delete", key, delete)


def _default_credential(url: str) -> Any:
    try:
        from azure.identity import DefaultAzureCredential
    except ImportError:
        raise AccessDenied(
            f"no Azure credentials for {url}: give the connectionString, accountKey or sasToken "
            "option (or AZURE_STORAGE_CONNECTION_STRING), or install azure-identity to use "
            "workload or managed identity"
        ) from None
    return DefaultAzureCredential()


def _code(exc: Any) -> str:
    return str(getattr(exc, "error_code", None) or type(exc).__name__)


def _describe(exc: Exception) -> str:
    return redact(f"{type(exc).__name__}: {exc}")
