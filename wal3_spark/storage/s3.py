"""S3 object store (boto3), for AWS and S3-compatible servers (SeaweedFS, MinIO, ...).

Conditional writes are one single PUT each (`If-None-Match: *` / `If-Match: "etag"`): S3 and
SeaweedFS make those atomic, but not conditional multipart completions.

Retries are ours, not botocore's (its client makes exactly one attempt: `total_max_attempts=1`),
because only we know which failures are safe to retry:
- reads, lists and deletes are idempotent: every connection error, timeout, 5xx and throttle
  is retried with jittered backoff (`retry_attempts` tries, a few seconds in all);
- a conditional PUT is retried only when it provably changed nothing: the connection was never
  established (`_NOT_SENT`: the endpoint or proxy refused it, or the connect timed out), or the
  server rejected it before acting (throttled, 409 conflict). Anything else that may come after
  the request was sent raises `AmbiguousWrite`: a read timeout, a connection dropped, a TLS
  error (botocore's `SSLError` is a `ConnectionError`, but TLS fails while reading the answer
  too), a short response, a 5xx, an error botocore does not classify, an answer without an
  ETag. Had a PUT that had in fact landed been retried, the retry
  would report a false 412, and a pipelined writer (`wal3_spark.log.chain`) would commit its
  records again.

The store pickles small (bucket, prefix, settings): the boto3 client is created lazily in each
process. Credentials given as options travel with the pickle (executors need them); credentials
left to the environment are resolved by boto3's default chain where the store is used, so they
never enter a pickle. Neither `repr()` nor error messages include credentials.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionError as BotoConnectionError,
    ConnectTimeoutError,
    EndpointConnectionError,
    HTTPClientError,
    IncompleteReadError,
    NoCredentialsError,
    ProxyConnectionError,
)

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
from wal3_spark.storage.common import check_children_prefix

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: option names (lower-cased) the S3 store reads
S3_OPTIONS = frozenset(
    {
        "endpoint",
        "endpointurl",
        "region",
        "accesskeyid",
        "secretaccesskey",
        "sessiontoken",
        "pathstyle",
    }
)

CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 30.0
#: connections per client: enough for the 64 threads a log set reads manifests with (more threads
#: than connections would open and discard one per request, with a warning each time)
POOL_SIZE = 64

#: 4xx codes that mean "rejected before acting, try again later"
_RETRYABLE_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "TooManyRequests",
        "RequestLimitExceeded",
        "RequestTimeout",
    }
)

#: codes of requests refused for their credentials or the bucket's policy (besides any HTTP 403)
_DENIED_CODES = frozenset(
    {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken"}
)

_CREDENTIALS_HINT = (
    "check the credentials (the accessKeyId/secretAccessKey options, or AWS_ACCESS_KEY_ID/"
    "AWS_SECRET_ACCESS_KEY or a profile) and the bucket's policy"
)

_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})


@dataclass(frozen=True)
class S3Settings:
    """How to reach the bucket. Credential fields are left out of `repr()`."""

    endpoint: str | None = None
    region: str | None = None
    path_style: bool = False
    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)

    @classmethod
    def from_options(
        cls, options: Mapping[str, str] | None = None, environ: Mapping[str, str] = os.environ
    ) -> S3Settings:
        """Settings from store options (any case), falling back to the AWS environment variables.

        Other stores' option names are ignored (`open_store` has refused those of no store, the
        Spark connector has told its own options apart). Credentials absent from the options are
        not read here but by boto3 where the client is created (environment, profile, role).
        """
        opts = {k.lower(): v for k, v in (options or {}).items() if v not in (None, "")}

        def pick(*names: str, env: tuple[str, ...] = ()) -> str | None:
            for name in names:
                if name in opts:
                    return str(opts[name])
            return next((environ[e] for e in env if environ.get(e)), None)

        endpoint = pick("endpoint", "endpointurl", env=("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"))
        if endpoint is not None and not endpoint.startswith(("http://", "https://")):
            raise InvalidOption(
                f"endpoint {endpoint!r} must be an http:// or https:// URL, "
                "e.g. http://127.0.0.1:8333"
            )
        region = pick("region", env=("AWS_REGION", "AWS_DEFAULT_REGION"))
        if region is None and endpoint is not None:
            region = "us-east-1"  # S3-compatible servers accept any region; SigV4 needs one
        path_style_text = pick("pathstyle")
        if path_style_text is None:
            path_style = endpoint is not None  # self-hosted servers rarely have bucket DNS names
        elif path_style_text.lower() in _TRUE | _FALSE:
            path_style = path_style_text.lower() in _TRUE
        else:
            raise InvalidOption(f"pathStyle must be true or false, got {path_style_text!r}")
        access_key_id, secret = pick("accesskeyid"), pick("secretaccesskey")
        if (access_key_id is None) != (secret is None):
            raise InvalidOption(
                "give both accessKeyId and secretAccessKey, or neither (to use the "
                "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY environment variables or an AWS profile)"
            )
        session_token = pick("sessiontoken")
        if session_token is not None and access_key_id is None:
            raise InvalidOption("sessionToken needs accessKeyId and secretAccessKey too")
        return cls(
            endpoint=endpoint,
            region=region,
            path_style=path_style,
            access_key_id=access_key_id,
            secret_access_key=secret,
            session_token=session_token,
        )


#: connection errors botocore raises only before a request is sent (no connection was made);
#: every other `ConnectionError` (e.g. `SSLError`, which the TLS layer raises while reading an
#: answer as well as while connecting) may come after a PUT was sent
_NOT_SENT = (EndpointConnectionError, ConnectTimeoutError, ProxyConnectionError)


class _Conflict(TransientError):
    """HTTP 409: a concurrent conditional write to the key was in flight; nothing was written."""


def _unquote(etag: str) -> str:
    return etag.strip('"')


def _http_error(exc: ClientError) -> tuple[int, str, str]:
    error = exc.response.get("Error", {})
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    return int(status or 0), str(error.get("Code", "")), str(error.get("Message", ""))


def _denied(exc: Exception, what: str) -> AccessDenied | None:
    """`exc` as AccessDenied if the store refused the request for its credentials or policy."""
    if isinstance(exc, NoCredentialsError):
        return AccessDenied(f"{what} failed: no S3 credentials were found; {_CREDENTIALS_HINT}")
    if isinstance(exc, ClientError):
        status, code, message = _http_error(exc)
        if status == 403 or code in _DENIED_CODES:
            return AccessDenied(
                f"{what} failed: access denied: {code} (HTTP {status}): {message}; {_CREDENTIALS_HINT}"
            )
    return None


class S3Store(ClientStore):
    """Objects under `s3://bucket/prefix`; keys are relative to the prefix."""

    #: every write is one single-part PUT and this client sets no server-side encryption. A
    #: bucket whose *default* encryption is SSE-KMS answers other ETags all the same: a pipelined
    #: writer sees its first prediction fail (one 412) and writes one manifest at a time after
    md5_etags = True

    def __init__(self, bucket: str, prefix: str = "", settings: S3Settings | None = None) -> None:
        super().__init__("s3", bucket, prefix)
        self.bucket = bucket
        self.settings = settings or S3Settings()

    # ---------------------------------------------------------------------------- plumbing

    def _s3(self) -> Any:
        return self._connection()

    def _new_client(self) -> Any:
        # imported here, not at the top: boto3 costs ~0.25 s of CPU to import, paid by every
        # Python process Spark starts for a query (a streaming source's runner is a fresh one
        # per query start) even when the log is not on S3
        import boto3
        from botocore.config import Config

        s = self.settings
        logger.debug("creating S3 client for %s (endpoint %s)", self.url, s.endpoint or "AWS")
        config = Config(
            connect_timeout=CONNECT_TIMEOUT_S,
            read_timeout=READ_TIMEOUT_S,
            max_pool_connections=POOL_SIZE,
            # not {"max_attempts": 1}: botocore counts that as one *retry*
            retries={"total_max_attempts": 1, "mode": "standard"},
            s3={"addressing_style": "path" if s.path_style else "virtual"},
            user_agent_extra="wal3-spark",
        )
        # a session per client: boto3's default session is not safe to share between threads
        return boto3.session.Session().client(
            "s3",
            endpoint_url=s.endpoint,
            region_name=s.region,
            aws_access_key_id=s.access_key_id,
            aws_secret_access_key=s.secret_access_key,
            aws_session_token=s.session_token,
            config=config,
        )

    def _wrap_exhausted(self, exc: TransientError) -> bool:
        return not isinstance(exc, _Conflict)  # a conflict becomes PreconditionFailed

    def _idempotent(self, op: str, key: str, fn: Callable[[Any], T]) -> T:
        """Run `fn(client)`, retrying every failure that may be transient."""

        def attempt() -> T:
            try:
                return fn(self._s3())
            except Exception as exc:
                mapped = self._read_error(exc, op, key)
                if mapped is None:
                    raise
                raise mapped from exc

        return self._retry(attempt, f"{op} {self._where(key)}")

    def _read_error(self, exc: Exception, op: str, key: str) -> Exception | None:
        where = self._where(key)
        denied = _denied(exc, f"{op} {where}")
        if denied is not None:
            return denied
        if isinstance(exc, ClientError):
            status, code, message = _http_error(exc)
            if code == "NoSuchBucket":
                return StorageError(f"{op} {where} failed: bucket {self.bucket!r} does not exist")
            if status == 404:
                return ObjectNotFound(key, self.url)
            if status >= 500 or status == 429 or code in _RETRYABLE_CODES:
                return TransientError(f"{op} {where} failed: {code} (HTTP {status})")
            return StorageError(f"{op} {where} failed: {code} (HTTP {status}): {message}")
        if isinstance(exc, (BotoConnectionError, HTTPClientError, IncompleteReadError)):
            return TransientError(f"{op} {where} failed: {exc}")
        if isinstance(exc, BotoCoreError):
            return StorageError(f"{op} {where} failed: {exc}")
        return None

    def _write_error(self, exc: Exception, key: str, condition: str) -> Exception:
        where = self._where(key)
        denied = _denied(exc, f"put {where}")
        if denied is not None:
            return denied
        if isinstance(exc, ClientError):
            status, code, message = _http_error(exc)
            if status == 412 or code == "PreconditionFailed":
                return PreconditionFailed(key, f"{condition} did not hold")
            if status == 409:
                return _Conflict(f"put {where} ({condition}) conflicted: {code}")
            if code == "NoSuchBucket":
                return StorageError(f"put {where} failed: bucket {self.bucket!r} does not exist")
            if status == 404 and condition.startswith("If-Match"):
                return PreconditionFailed(key, "the object does not exist")  # AWS; SeaweedFS: 412
            if status >= 500:
                return AmbiguousWrite(key, f"{code} (HTTP {status})")
            if status == 429 or code in _RETRYABLE_CODES:
                return TransientError(f"put {where} was rejected: {code} (HTTP {status})")
            return StorageError(f"put {where} failed: {code} (HTTP {status}): {message}")
        if isinstance(exc, _NOT_SENT):  # no connection, so the request was never sent
            return TransientError(f"put {where} failed: {exc}")
        if isinstance(exc, (BotoConnectionError, HTTPClientError, IncompleteReadError)):
            return AmbiguousWrite(key, exc)  # may have been sent: timed out, dropped, TLS, short answer
        if isinstance(exc, BotoCoreError):
            return StorageError(f"put {where} failed: {exc}")
        # anything else (an answer botocore could not parse, an error it does not wrap) came
        # from a request that may have been sent: only a look at the store can tell
        return AmbiguousWrite(key, exc)

    def _conditional_put(self, key: str, data: bytes, condition: str, **kwargs: str) -> str:
        full, body = self._full(key), bytes(data)

        def attempt() -> str:
            try:
                response = self._s3().put_object(Bucket=self.bucket, Key=full, Body=body, **kwargs)
            except Exception as exc:
                raise self._write_error(exc, key, condition) from exc
            etag = response.get("ETag")
            if not etag:  # it was written, but with which ETag? the caller must read it back
                raise AmbiguousWrite(key, "the store's answer to the PUT had no ETag")
            return _unquote(etag)

        try:
            return self._retry(attempt, f"put {self._where(key)} ({condition})")
        except _Conflict as exc:
            raise PreconditionFailed(key, f"concurrent writes kept conflicting: {exc}") from exc

    # ------------------------------------------------------------------------------- API

    def get(self, key: str) -> Blob:
        full = self._full(key)

        def get(s3: Any) -> Blob:
            response = s3.get_object(Bucket=self.bucket, Key=full)
            with contextlib.closing(response["Body"]) as body:
                return Blob(body.read(), _unquote(response["ETag"]))

        return self._idempotent("get", key, get)

    def get_range(self, key: str, start: int, length: int) -> bytes:
        full = self._full(key)
        if length <= 0:  # no valid Range header asks for nothing; still report a missing key
            self.head(key)
            return b""
        http_range = f"bytes={start}" if start < 0 else f"bytes={start}-{start + length - 1}"

        def get_range(s3: Any) -> bytes:
            try:
                response = s3.get_object(Bucket=self.bucket, Key=full, Range=http_range)
            except ClientError as exc:
                if _http_error(exc)[0] == 416:  # starts past the end
                    return b""
                raise
            with contextlib.closing(response["Body"]) as body:
                data = body.read()
            if "ContentRange" not in response:  # the server ignored Range and sent it all
                data = data[max(0, len(data) + start) :] if start < 0 else data[start:]
            return data[:length]

        return self._idempotent("get_range", key, get_range)

    def head(self, key: str) -> ObjectMeta:
        full = self._full(key)

        def head(s3: Any) -> ObjectMeta:
            r = s3.head_object(Bucket=self.bucket, Key=full)
            return ObjectMeta(
                key, r["ContentLength"], _unquote(r["ETag"]), r["LastModified"].timestamp()
            )

        return self._idempotent("head", key, head)

    def put_if_absent(self, key: str, data: bytes) -> str:
        return self._conditional_put(key, data, "If-None-Match: *", IfNoneMatch="*")

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        quoted = f'"{_unquote(etag)}"'
        return self._conditional_put(key, data, f"If-Match: {quoted}", IfMatch=quoted)

    def list(self, prefix: str = "") -> Iterator[ObjectMeta]:
        # Collected, then sorted: SeaweedFS lists in directory-tree order ("a/b" before "a-c"),
        # not in key order as AWS does.
        kwargs: dict[str, Any] = {
            "Bucket": self.bucket,
            "Prefix": self._root + prefix,
            "MaxKeys": self.list_page_size,
        }
        found = []
        while True:
            page = self._idempotent("list", prefix, lambda s3: s3.list_objects_v2(**kwargs))
            for obj in page.get("Contents", ()):
                key = obj["Key"][len(self._root) :]
                if key and not key.endswith("/"):  # skip "directory" markers
                    found.append(
                        ObjectMeta(
                            key, obj["Size"], _unquote(obj["ETag"]), obj["LastModified"].timestamp()
                        )
                    )
            if not page.get("IsTruncated"):
                break
            kwargs["ContinuationToken"] = page["NextContinuationToken"]
        return iter(sorted(found, key=lambda meta: meta.key))

    def list_children(self, prefix: str = "") -> Iterator[str]:
        start = self._root + check_children_prefix(prefix)
        kwargs: dict[str, Any] = {
            "Bucket": self.bucket,
            "Prefix": start,
            "Delimiter": "/",
            "MaxKeys": self.list_page_size,
        }
        names = []
        while True:
            page = self._idempotent(
                "list_children", prefix or "/", lambda s3: s3.list_objects_v2(**kwargs)
            )
            for common in page.get("CommonPrefixes", ()):
                name = common["Prefix"][len(start) :].rstrip("/")
                if name:
                    names.append(name)
            if not page.get("IsTruncated"):
                break
            kwargs["ContinuationToken"] = page["NextContinuationToken"]
        return iter(sorted(names))

    def delete(self, key: str) -> None:
        full = self._full(key)
        self._idempotent("delete", key, lambda s3: s3.delete_object(Bucket=self.bucket, Key=full))
