"""Google Cloud Storage object store, over GCS's JSON API (google-auth for credentials).

The two conditional writes are GCS's generation preconditions: create is a write with
`ifGenerationMatch=0`, compare-and-swap a write with `ifGenerationMatch=<generation>`; the
object's generation plays the ETag's role (`etag` here is the generation as a decimal string).

Every write is one `uploadType=multipart` request, whatever its size: GCS honours the
precondition on every upload form, but fake-gcs-server (the emulator the tests run against)
ignores it on `uploadType=media` and on resumable uploads, and a store that behaved differently
on the emulator would test nothing. google-cloud-storage is not used for the same reason: it
switches to resumable uploads above 8 MiB and retries conditional uploads itself by default
(docs/design/02-gcs-and-azure.md).

Retries are ours (`requests` makes one attempt): reads, lists and deletes retry every failure
that may be transient; a write retries only when it provably changed nothing (the connection
was never made, or GCS answered 429 before acting). A read timeout, a dropped connection or a
5xx after the request was sent is `AmbiguousWrite`.

Credentials: the `serviceAccountFile` option, else Google's default chain
(`GOOGLE_APPLICATION_CREDENTIALS`, gcloud's user credentials, workload identity, the metadata
server). `STORAGE_EMULATOR_HOST` or an `http://` `endpoint` option means an emulator: requests
are sent unauthenticated. Neither `repr()`, errors nor logs include a credential.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar
from urllib.parse import quote

from wal3_spark.errors import (
    AccessDenied,
    AmbiguousWrite,
    InvalidOption,
    ObjectNotFound,
    PreconditionFailed,
    StorageError,
    TransientError,
)
from wal3_spark.storage.base import Blob, ObjectMeta
from wal3_spark.storage.client import ClientStore
from wal3_spark.storage.common import (
    check_children_prefix,
    check_key,
    connection_not_made,
    redact,
    redact_http_logs,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: option names (lower-cased) the GCS store reads
GCS_OPTIONS = frozenset({"endpoint", "endpointurl", "serviceaccountfile", "project"})

DEFAULT_ENDPOINT = "https://storage.googleapis.com"
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 30.0
POOL_SIZE = 64
_SCOPE = "https://www.googleapis.com/auth/devstorage.read_write"
_CREDENTIALS_HINT = (
    "check the credentials (the serviceAccountFile option, GOOGLE_APPLICATION_CREDENTIALS, "
    "gcloud auth application-default login, or the workload's service account) and the "
    "bucket's IAM roles (storage.objects.create/get/list/delete)"
)


@dataclass(frozen=True)
class GCSSettings:
    """How to reach the bucket; the service-account file's path is not itself a secret, but
    is left out of `repr()` with the rest of the credential settings all the same."""

    endpoint: str = DEFAULT_ENDPOINT
    #: no credentials at all (an emulator)
    anonymous: bool = False
    service_account_file: str | None = field(default=None, repr=False)
    project: str | None = None

    @classmethod
    def from_options(
        cls, options: Mapping[str, str] | None = None, environ: Mapping[str, str] = os.environ
    ) -> GCSSettings:
        opts = {k.lower(): str(v) for k, v in (options or {}).items() if v not in (None, "")}
        endpoint = opts.get("endpoint") or opts.get("endpointurl")
        emulator = environ.get("STORAGE_EMULATOR_HOST")
        if endpoint is None and emulator:
            endpoint = emulator if "://" in emulator else f"http://{emulator}"
        if endpoint is not None and not endpoint.startswith(("http://", "https://")):
            raise InvalidOption(
                f"endpoint {endpoint!r} must be an http:// or https:// URL, e.g. "
                "http://127.0.0.1:4443 for fake-gcs-server"
            )
        account_file = opts.get("serviceaccountfile")
        endpoint = (endpoint or DEFAULT_ENDPOINT).rstrip("/")
        return cls(
            endpoint=endpoint,
            # only emulators serve plain HTTP; they take no credentials
            anonymous=endpoint.startswith("http://") and account_file is None,
            service_account_file=account_file,
            project=opts.get("project"),
        )


class GCSStore(ClientStore):
    """Objects under `gs://bucket/prefix`; keys are relative to the prefix."""

    def __init__(self, bucket: str, prefix: str = "", settings: GCSSettings | None = None) -> None:
        super().__init__("gs", bucket, prefix)
        self.bucket = bucket
        self.settings = settings or GCSSettings()

    # ---------------------------------------------------------------------------- plumbing

    def _http(self) -> Any:
        return self._connection()

    def _new_client(self) -> Any:
        import requests
        from requests.adapters import HTTPAdapter

        redact_http_logs()
        s = self.settings
        if s.anonymous:
            session = requests.Session()
        else:
            import google.auth
            import google.auth.exceptions
            from google.auth.transport.requests import AuthorizedSession

            try:
                if s.service_account_file is not None:
                    from google.oauth2 import service_account

                    credentials = service_account.Credentials.from_service_account_file(
                        s.service_account_file, scopes=[_SCOPE]
                    )
                else:
                    credentials, _ = google.auth.default(scopes=[_SCOPE])
            except (OSError, ValueError, google.auth.exceptions.GoogleAuthError) as exc:
                raise AccessDenied(
                    f"no usable Google credentials for {self.url}: {redact(str(exc))}; {_CREDENTIALS_HINT}"
                ) from None
            session = AuthorizedSession(credentials)
        adapter = HTTPAdapter(pool_connections=POOL_SIZE, pool_maxsize=POOL_SIZE, max_retries=0)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        session.headers["User-Agent"] = "wal3-spark"
        logger.debug("created GCS session for %s (endpoint %s)", self.url, s.endpoint)
        return session

    def _object_url(self, name: str) -> str:
        return f"{self.settings.endpoint}/storage/v1/b/{quote(self.bucket, safe='')}/o/{quote(name, safe='')}"

    def _request(self, method: str, url: str, **kwargs: Any) -> Any:
        session = self._http()
        try:
            return session.request(method, url, timeout=(CONNECT_TIMEOUT_S, READ_TIMEOUT_S), **kwargs)
        except Exception as exc:
            # google-auth refreshes the token before it sends the request: a failure there
            # happened before anything reached GCS
            if not type(exc).__module__.startswith("google.auth"):
                raise
            if type(exc).__name__ == "TransportError":
                raise TransientError(
                    f"{method} {self.url}: could not reach Google's token service: {_describe(exc)}"
                ) from None
            raise AccessDenied(
                f"{method} {self.url}: Google refused the credentials: {_describe(exc)}; {_CREDENTIALS_HINT}"
            ) from None

    def _status_error(self, response: Any, op: str, key: str) -> Exception:
        """The error of a read, list or delete answered with `response` (not 2xx)."""
        where, status = self._where(key), response.status_code
        if status in (401, 403):
            return AccessDenied(f"{op} {where} failed: access denied (HTTP {status}); {_CREDENTIALS_HINT}")
        if status == 404:
            if _bucket_missing(response):
                return StorageError(f"{op} {where} failed: bucket {self.bucket!r} does not exist")
            return ObjectNotFound(key, self.url)
        if status >= 500 or status in (408, 429):
            return TransientError(f"{op} {where} failed: HTTP {status}")
        return StorageError(f"{op} {where} failed: HTTP {status}: {redact(_message(response))}")

    def _idempotent(self, op: str, key: str, fn: Callable[[], Any]) -> Any:
        """`fn()`'s response, retrying every failure that may be transient; 2xx only."""
        import requests

        def attempt() -> Any:
            try:
                response = fn()
            except requests.RequestException as exc:
                raise TransientError(f"{op} {self._where(key)} failed: {_describe(exc)}") from None
            if response.status_code >= 300:
                raise self._status_error(response, op, key)
            return response

        return self._retry(attempt, f"{op} {self._where(key)}")

    def _upload(self, key: str, data: bytes, generation: int) -> str:
        """One multipart upload conditioned on `generation` (0: the object must not exist)."""
        import requests

        full, where = self._full(key), self._where(key)
        condition = "create-if-absent" if generation == 0 else f"generation {generation}"
        boundary = uuid.uuid4().hex
        body = b"".join(
            (
                f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n".encode(),
                json.dumps({"name": full}).encode(),
                f"\r\n--{boundary}\r\nContent-Type: application/octet-stream\r\n\r\n".encode(),
                bytes(data),
                f"\r\n--{boundary}--\r\n".encode(),
            )
        )
        url = f"{self.settings.endpoint}/upload/storage/v1/b/{quote(self.bucket, safe='')}/o"
        params = {"uploadType": "multipart", "ifGenerationMatch": str(generation), "fields": "generation"}
        headers = {"Content-Type": f'multipart/related; boundary="{boundary}"'}

        def attempt() -> str:
            try:
                response = self._request("POST", url, params=params, data=body, headers=headers)
            except (requests.ConnectionError, requests.Timeout) as exc:
                if connection_not_made(exc):
                    raise TransientError(f"put {where} failed: {_describe(exc)}") from None
                raise AmbiguousWrite(key, _describe(exc)) from None
            except requests.RequestException as exc:
                raise AmbiguousWrite(key, _describe(exc)) from None
            status = response.status_code
            if status == 200:
                try:
                    return str(int(response.json()["generation"]))
                except (ValueError, KeyError, TypeError):
                    raise AmbiguousWrite(key, "the store's answer to the upload had no generation") from None
            if status == 412:
                raise PreconditionFailed(key, f"{condition} did not hold")
            if status in (401, 403):
                raise AccessDenied(f"put {where} failed: access denied (HTTP {status}); {_CREDENTIALS_HINT}")
            if status == 429:  # rate-limited before acting (GCS: ~1 write/s per object name)
                raise TransientError(f"put {where} was rejected: HTTP 429 (rate limited)")
            if status >= 500 or status == 408:
                raise AmbiguousWrite(key, f"HTTP {status}")
            if status == 404:
                raise StorageError(f"put {where} failed: bucket {self.bucket!r} does not exist")
            raise StorageError(f"put {where} failed: HTTP {status}: {redact(_message(response))}")

        return self._retry(attempt, f"put {where} ({condition})")

    # ------------------------------------------------------------------------------- API

    def get(self, key: str) -> Blob:
        url = self._object_url(self._full(key))
        response = self._idempotent("get", key, lambda: self._request("GET", url, params={"alt": "media"}))
        generation = response.headers.get("x-goog-generation")
        if generation is None:  # every GCS media download names it; read it from the metadata
            return Blob(response.content, self.head(key).etag)
        return Blob(response.content, generation)

    def get_range(self, key: str, start: int, length: int) -> bytes:
        if length <= 0:
            self.head(key)
            return b""
        url = self._object_url(self._full(key))
        header = f"bytes={start}" if start < 0 else f"bytes={start}-{start + length - 1}"

        def fetch() -> Any:
            response = self._request("GET", url, params={"alt": "media"}, headers={"Range": header})
            if response.status_code == 416:  # starts past the end
                response.status_code, response._content = 200, b""
            return response

        response = self._idempotent("get_range", key, fetch)
        data = response.content
        if response.status_code == 200 and "Content-Range" not in response.headers and data:
            data = data[max(0, len(data) + start) :] if start < 0 else data[start:]
        return data[:length]

    def head(self, key: str) -> ObjectMeta:
        url = self._object_url(self._full(key))
        response = self._idempotent(
            "head", key, lambda: self._request("GET", url, params={"fields": "size,generation,updated"})
        )
        return _meta(key, response.json())

    def put_if_absent(self, key: str, data: bytes) -> str:
        return self._upload(key, data, 0)

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        check_key(key)
        text = etag.strip('"')
        if not text.isdigit() or int(text) <= 0:
            # not a generation this store handed out: it cannot be the object's current one
            raise PreconditionFailed(key, f"{etag!r} is not a GCS generation")
        return self._upload(key, data, int(text))

    def _pages(self, op: str, prefix: str, params: dict[str, str]) -> Iterator[dict[str, Any]]:
        url = f"{self.settings.endpoint}/storage/v1/b/{quote(self.bucket, safe='')}/o"
        params = dict(params, maxResults=str(self.list_page_size))
        while True:
            page = self._idempotent(
                op, prefix or "/", lambda: self._request("GET", url, params=dict(params))
            ).json()
            yield page
            token = page.get("nextPageToken")
            if not token:
                return
            params["pageToken"] = token

    def list(self, prefix: str = "") -> Iterator[ObjectMeta]:
        found = []
        params = {"prefix": self._root + prefix, "fields": "items(name,size,generation,updated),nextPageToken"}
        for page in self._pages("list", prefix, params):
            for item in page.get("items", ()):
                key = item["name"][len(self._root) :]
                if key and not key.endswith("/"):
                    found.append(_meta(key, item))
        return iter(sorted(found, key=lambda meta: meta.key))

    def list_children(self, prefix: str = "") -> Iterator[str]:
        start = self._root + check_children_prefix(prefix)
        names = set()
        params = {"prefix": start, "delimiter": "/", "fields": "prefixes,nextPageToken"}
        for page in self._pages("list_children", prefix, params):
            for common in page.get("prefixes", ()):
                name = common[len(start) :].rstrip("/")
                if name:
                    names.add(name)
        return iter(sorted(names))

    def delete(self, key: str) -> None:
        url = self._object_url(self._full(key))

        def delete() -> Any:
            response = self._request("DELETE", url)
            if response.status_code == 404 and not _bucket_missing(response):
                response.status_code = 204  # already gone
            return response

        self._idempotent("delete", key, delete)


def _meta(key: str, item: Mapping[str, Any]) -> ObjectMeta:
    updated = str(item.get("updated", "1970-01-01T00:00:00Z")).replace("Z", "+00:00")
    return ObjectMeta(key, int(item.get("size", 0)), str(item["generation"]),
                      datetime.fromisoformat(updated).timestamp())


def _error_body(response: Any) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body.get("error", {}) if isinstance(body, dict) and isinstance(body.get("error"), dict) else {}


def _message(response: Any) -> str:
    return str(_error_body(response).get("message", "")) or response.text[:200]


def _bucket_missing(response: Any) -> bool:
    """Whether a 404 is about the bucket ("The specified bucket does not exist."), not the
    object ("No such object: bucket/key", whose bucket's name may well contain "bucket")."""
    message = _message(response).lower()
    return "bucket" in message and "object" not in message


def _describe(exc: Exception) -> str:
    return redact(f"{type(exc).__name__}: {exc}")
