"""Syntax of store URLs and object keys, and the ETag rule, shared by every backend.

Keys are checked the same way on every backend so that code tested on the in-memory store
cannot rely on a key the local filesystem would reject (or hide: names starting with `.` are
the local store's temp and lock files).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import unicodedata
from urllib.parse import quote, unquote, urlsplit

from wal3_spark.errors import InvalidUrl


def check_key(key: str) -> str:
    """Return `key` if it is a valid object key, else raise `ValueError`.

    A key is `/`-separated, relative, and has no empty, `.`-prefixed or `..` segments.
    """
    if not isinstance(key, str) or not key:
        raise ValueError(f"object key must be a non-empty string, got {key!r}")
    for segment in key.split("/"):
        if not segment or segment.startswith("."):
            raise ValueError(
                f"invalid object key {key!r}: segments must be non-empty and must not start with '.'"
            )
    return key


def check_children_prefix(prefix: str) -> str:
    """Return `prefix` if `list_children` accepts it (`""`, or a valid key prefix ending with
    `/`), else raise `ValueError`."""
    if prefix != "":
        if not isinstance(prefix, str) or not prefix.endswith("/"):
            raise ValueError(f"list_children needs a prefix ending with '/' (or ''), got {prefix!r}")
        check_key(prefix[:-1])
    return prefix


def join_url(url: str, child: str) -> str:
    """`url` with the relative path `child` appended (`join_url("s3://b/logs", "a")` is
    `"s3://b/logs/a"`); an empty `child` returns `url` without its trailing slash."""
    child = child.strip("/")
    base = url.rstrip("/")
    return f"{base}/{child}" if child else base


#: the Unicode categories no URL or path wal3 opens may hold: controls (line ends, tabs, NUL,
#: escapes) and line or paragraph separators
_CONTROL = frozenset({"Cc", "Zl", "Zp"})


def split_url(url: str) -> tuple[str, str, str]:
    """`(scheme, authority, path)` of a store URL; a plain path has scheme `"file"`.

    The path of a `file` URL is returned absolute and percent-decoded.
    """
    if not isinstance(url, str) or not url.strip():
        raise InvalidUrl(f"a store URL must be a non-empty string, got {url!r}")
    _check_no_control(url, url)
    if "://" not in url and not url.startswith("file:"):
        return "file", "", os.path.abspath(os.path.expanduser(url))
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if parts.query or parts.fragment:
        raise InvalidUrl(f"store URL {url!r} must not have a query or fragment")
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise InvalidUrl(f"file URL {url!r} names host {parts.netloc!r}; use file:///abs/path")
        path = unquote(parts.path, errors="surrogateescape")  # `%FF` is the byte 0xff, as in a path
        _check_no_control(url, path)  # `%0A` decodes to a line end too
        return "file", "", os.path.abspath(path or "/")
    return scheme, parts.netloc, parts.path.strip("/")


def _check_no_control(url: str, text: str) -> None:
    """Refuse `url` if `text` (it, or its decoded path) holds a control character: urlsplit
    drops tabs and line ends silently (`s3://b/x\\n` would open `s3://b/x`), and a local path
    would keep them in a directory's name; neither is what was meant."""
    control = sorted({c for c in text if unicodedata.category(c) in _CONTROL})
    if control:
        raise InvalidUrl(f"store URL {url!r} contains the control character(s) "
                         f"{', '.join(repr(c) for c in control)}: remove them (a line end pasted with it?)")


def file_url(path: str) -> str:
    """The `file://` URL of an absolute local path (percent-encoded, so `split_url` inverts it).
    Its bytes are the filesystem's (`os.fsencode`): a name that is not UTF-8, which Python holds
    as surrogates, is `%FF` and so on, not a UnicodeEncodeError."""
    return "file://" + quote(os.fsencode(path), safe="/")


def md5_etag(data: bytes) -> str:
    """The ETag S3 gives a single-PUT object: the hex MD5 of its bytes (without quotes)."""
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


#: credential-bearing parts of URLs, connection strings and headers a client library may quote
#: in an exception: a SAS token's signature, an account key, a bearer token
_SECRETS = re.compile(
    r"(?i)(\b(?:sig|se|sv|sp|spr|srt|ss|st|skoid|sktid|skt|ske|sks|skv)=)[^&\s;'\"]+"
    r"|((?:AccountKey|SharedAccessSignature|SharedAccessKey)=)[^;\s'\"]+"
    r"|(Bearer\s+)[A-Za-z0-9._~+/=-]+"
)


def redact(text: str) -> str:
    """`text` with any credential a client library put in it (SAS parameters, account keys,
    bearer tokens) replaced by `***`: store errors quote their cause, and must not leak."""
    return _SECRETS.sub(lambda m: (m.group(1) or m.group(2) or m.group(3)) + "***", text)


class _Redacting(logging.Filter):
    """Rewrites a record's message with `redact`: urllib3 logs each request's URL (a SAS
    token's signature included) at DEBUG, under loggers wal3 does not own."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, ()
        return True


_REDACTING = _Redacting()
#: the loggers of the HTTP libraries under the cloud stores' clients
_HTTP_LOGGERS = ("urllib3.connectionpool", "urllib3.util.retry", "requests")


def redact_http_logs() -> None:
    """Make the HTTP libraries' loggers redact credentials (idempotent; called by the cloud
    stores when they create a client)."""
    for name in _HTTP_LOGGERS:
        logger = logging.getLogger(name)
        if _REDACTING not in logger.filters:
            logger.addFilter(_REDACTING)


def connection_not_made(exc: BaseException) -> bool:
    """Whether a client library's connection error happened before the request left: the
    connection was refused or timed out while connecting (urllib3's `NewConnectionError` or
    `ConnectTimeoutError` somewhere in its chain of causes). Only then is a failed conditional
    write known not to have landed, and safe to retry."""
    from urllib3.exceptions import ConnectTimeoutError, NewConnectionError

    seen: set[int] = set()
    todo: list[object] = [exc]
    while todo:
        cause = todo.pop()
        if not isinstance(cause, BaseException) or id(cause) in seen:
            continue
        seen.add(id(cause))
        if isinstance(cause, (NewConnectionError, ConnectTimeoutError)):
            return True
        if type(cause).__name__ == "ConnectTimeout":  # requests' ConnectTimeout
            return True
        todo.extend((cause.__cause__, cause.__context__, getattr(cause, "reason", None),
                     getattr(cause, "inner_exception", None), *cause.args))  # fmt: skip
    return False
