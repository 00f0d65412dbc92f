"""The object-store interface the wal3 protocol is built on.

Two conditional writes are all the protocol needs: create-if-absent (`put_if_absent`) and
compare-and-swap on the ETag (`put_if_match`). Keys are relative to the store's root (a log's
root URL), use `/` as separator, and never start with `/`.

Error contract (see `wal3_spark.errors`):
- `ObjectNotFound` from `get`/`head` when the key does not exist;
- `PreconditionFailed` when a conditional write loses (the key exists, or its ETag differs, or it
  does not exist for `put_if_match`);
- `AmbiguousWrite` when a conditional write may have landed (timeout or 5xx after sending):
  never retried blindly, the caller decides by looking at the store;
- `TransientError` only for failures known not to have changed anything; stores retry those
  (and all idempotent operations) themselves with jittered backoff, and raise it once their
  retries are exhausted;
- `AccessDenied` when the store refuses the request (file permissions, S3 credentials or
  policy): never retried;
- `StorageError` for anything else (a full disk, a missing bucket).
Every message names the object (or listing prefix) and the cause, and no backend lets an
`OSError` or a botocore exception escape.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator
from dataclasses import dataclass

from wal3_spark.errors import ObjectNotFound
from wal3_spark.storage.common import check_children_prefix, md5_etag


@dataclass(frozen=True)
class ObjectMeta:
    key: str
    size: int
    etag: str
    #: seconds since the epoch, as the store reports it
    last_modified: float


@dataclass(frozen=True)
class Blob:
    data: bytes
    etag: str


class ContentBlob(Blob):
    """A Blob whose ETag is the MD5 of its content, computed only if asked for: most GETs are
    of immutable fragments whose ETag nobody uses, and hashing them cost ~7% of a read."""

    def __init__(self, data: bytes) -> None:
        object.__setattr__(self, "data", data)

    def __getattr__(self, name: str) -> str:
        if name != "etag":
            raise AttributeError(name)
        etag = md5_etag(self.data)
        object.__setattr__(self, "etag", etag)
        return etag


class ObjectStore(abc.ABC):
    """An object store rooted at `url`. Instances are cheap to pickle: clients open lazily."""

    url: str
    #: whether the ETag of a write is the MD5 of the bytes written (S3's single-part PUT without
    #: SSE-KMS, SeaweedFS, the local and memory stores): a writer may then predict the ETag of
    #: a write still in flight and condition its next write on it (`wal3_spark.log.chain`). A
    #: wrong prediction only costs a 412; stores say True only where it holds.
    md5_etags: bool = False

    @abc.abstractmethod
    def get(self, key: str) -> Blob:
        """The object's bytes and ETag."""

    def get_buffer(self, key: str) -> bytes | memoryview:
        """The object's bytes (as `get`, without the ETag) for a caller that only reads them
        (decodes, hashes) and must not write to them: a store may hand out memory it reuses
        instead of a new `bytes`. Why: a fresh `bytes` of a 43 MB fragment is mapped anew on
        every read, 10,600 page faults and 24 ms of system time per fragment here, over twice
        the time its file read takes (docs/benchmarks.md, "Fetching into reused memory").
        Wrappers that change `get` (fault injection, hedging) need no override: this calls it."""
        return self.get(key).data

    def get_range(self, key: str, start: int, length: int) -> bytes:
        """`length` bytes from `start` (negative `start`: from the end); stores may override."""
        data = self.get(key).data
        if start < 0:
            start = max(0, len(data) + start)
        return data[start : start + length]

    @abc.abstractmethod
    def head(self, key: str) -> ObjectMeta:
        """The object's metadata without its bytes."""

    @abc.abstractmethod
    def put_if_absent(self, key: str, data: bytes) -> str:
        """Create the object only if it does not exist; return its ETag."""

    def create(self, key: str, data: bytes) -> None:
        """`put_if_absent` for a caller that never reads the ETag (a fragment: nothing is ever
        written conditionally on it). Stores that compute ETags themselves skip that work;
        the others, and every wrapper, are their own `put_if_absent`."""
        self.put_if_absent(key, data)

    @abc.abstractmethod
    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        """Replace the object only if its current ETag is `etag`; return the new ETag."""

    @abc.abstractmethod
    def list(self, prefix: str = "") -> Iterator[ObjectMeta]:
        """Every object whose key starts with `prefix`, in key order."""

    def list_children(self, prefix: str = "") -> Iterator[str]:
        """The names of the "directories" directly under `prefix`, sorted: each distinct key
        segment that follows `prefix` and is itself followed by `/` (S3's `ListObjectsV2` with
        `Delimiter="/"`, its CommonPrefixes). `prefix` is `""` or ends with `/`.

        Backends answer with one request per page of children, never per object: that is what
        lets a prefix of thousands of logs, each with thousands of fragments, be listed in
        O(logs). This default walks every key (O(objects)) for wrappers that do not forward
        it. The local store may also name a directory that holds no object (S3 has no empty
        directories); callers look inside each child anyway.
        """
        check_children_prefix(prefix)
        seen: set[str] = set()
        for meta in self.list(prefix):
            name, sep, _ = meta.key[len(prefix) :].partition("/")
            if sep:
                seen.add(name)
        return iter(sorted(seen))

    @abc.abstractmethod
    def delete(self, key: str) -> None:
        """Delete the object; deleting a missing object is not an error."""

    def exists(self, key: str) -> bool:
        try:
            self.head(key)
        except ObjectNotFound:
            return False
        return True

    def close(self) -> None:  # noqa: B027 - a store without clients has nothing to release
        """Release clients and connections (optional)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"
