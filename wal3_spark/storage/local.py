"""Local-filesystem object store, atomic across processes on one host.

The two conditional writes map onto POSIX primitives that are atomic between processes:
- create-if-absent is `link(tmp, final)`, which fails if `final` exists (unlike `rename`);
- compare-and-swap holds an exclusive `flock` on a per-key sidecar lock file while it compares
  the current ETag and `rename`s the new content into place. Deletes take the same lock, so a
  CAS never resurrects an object deleted between its check and its rename.
Readers need no lock: `rename` swaps whole files, so a reader sees the old or the new bytes.

Temp and lock files live next to the object with names starting with `.`, which object keys
cannot (see `check_key`), so `list` skips them. A lock file lives only as long as its object,
and a directory a delete empties goes with it; the design note says why both are safe.

ETags are hex MD5s of the content, computed on read; `head` reads the object it reports, and a
listed object's ETag is computed when it is first asked for (a listing itself reads no file:
GC and `verify` list every fragment of a log and never need their ETags).

OS errors become `AccessDenied` (permissions) or `StorageError` (anything else, e.g. a full
disk), with the object and the cause in the message; a directory that cannot be listed fails
the listing instead of being skipped.

Design: docs/design/01-local-store-locks.md.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import stat
import uuid
from collections.abc import Iterator
from typing import BinaryIO

import pyarrow as pa

from wal3_spark.errors import (
    AccessDenied,
    ObjectNotFound,
    PreconditionFailed,
    StorageError,
)
from wal3_spark.storage.base import Blob, ContentBlob, ObjectMeta, ObjectStore
from wal3_spark.storage.common import (
    check_children_prefix,
    check_key,
    file_url,
    md5_etag,
)

_CHUNK = 1 << 20

#: what opening a key's file raises when no object is there (a missing file, or a path that
#: runs through a file or ends at a directory)
_MISSING = (FileNotFoundError, NotADirectoryError, IsADirectoryError)


def _file_md5(f: BinaryIO) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    while chunk := f.read(_CHUNK):
        digest.update(chunk)
    return digest.hexdigest()


def _fsync_dir(path: str) -> None:
    """Make a rename or link in `path` durable (a file's fsync does not cover its dir entry)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _os_error(exc: OSError, what: str) -> StorageError:
    if isinstance(exc, PermissionError):
        return AccessDenied(
            f"{what} failed: permission denied on {exc.filename}: give the user running wal3 "
            "read and write access to the log's files and directories"
        )
    return StorageError(f"{what} failed: {exc}")


def _walk_error(exc: OSError) -> None:
    """os.walk skips unreadable directories by default: a listing must not (a missing one holds
    no keys: the prefix names nothing, or it was removed during the walk)."""
    if not isinstance(exc, (FileNotFoundError, NotADirectoryError)):
        raise exc


def _acquire(lock_path: str) -> int:
    """An fd holding the exclusive `flock` of the lock file at `lock_path`.

    The file may be unlinked by the holder we waited for: then the lock we got guards nothing,
    and we start over on the file the path names now."""
    while True:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            held = os.fstat(fd)
            current = os.stat(lock_path)
        except FileNotFoundError:
            os.close(fd)
            continue
        except BaseException:
            os.close(fd)
            raise
        if (held.st_dev, held.st_ino) == (current.st_dev, current.st_ino):
            return fd
        os.close(fd)


class _ListedMeta(ObjectMeta):
    """An ObjectMeta from a listing, whose ETag (an MD5 of the whole file) is computed only if
    asked for; if the object is gone by then, asking raises ObjectNotFound."""

    def __init__(self, key: str, size: int, last_modified: float, path: str) -> None:
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "size", size)
        object.__setattr__(self, "last_modified", last_modified)
        object.__setattr__(self, "_path", path)

    def __getattr__(self, name: str) -> str:
        if name != "etag":
            raise AttributeError(name)
        try:
            with open(self._path, "rb") as f:
                etag = _file_md5(f)
        except _MISSING:
            raise ObjectNotFound(self.key) from None
        except OSError as exc:
            raise _os_error(exc, f"get of {self.key!r}") from exc
        object.__setattr__(self, "etag", etag)
        return etag


class LocalStore(ObjectStore):
    """Objects are files under `root`; keys map to relative paths."""

    md5_etags = True

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        self.url = file_url(self.root)

    def _path(self, key: str) -> str:
        return os.path.join(self.root, *check_key(key).split("/"))

    @contextlib.contextmanager
    def _os_errors(self, op: str, key: str) -> Iterator[None]:
        """Report unexpected OS errors as what they are: refused permissions, or other failures
        (a full disk, an I/O error), naming the object and the file."""
        try:
            yield
        except OSError as exc:
            raise _os_error(exc, f"{op} of {key!r} under {self.url}") from exc

    # ------------------------------------------------------------------------------ reads

    def get(self, key: str) -> Blob:
        with self._os_errors("get", key):
            try:
                with open(self._path(key), "rb") as f:
                    data = f.read()
            except _MISSING:
                raise ObjectNotFound(key, self.url) from None
            return ContentBlob(data)

    def get_buffer(self, key: str) -> memoryview:
        """The file read into memory from Arrow's pool, which keeps freed memory for the next
        read (no page faults after the first), as a read-only view of it: 4-5 ms for a 43 MB
        fragment against `get`'s 28-31 ms (docs/benchmarks.md, "Fetching into reused memory"). The view keeps the memory
        alive for as long as anything refers to it."""
        with self._os_errors("get", key):
            try:
                with open(self._path(key), "rb", buffering=0) as f:
                    size = os.fstat(f.fileno()).st_size
                    buffer = pa.allocate_buffer(size)
                    view = memoryview(buffer).cast("B")  # Arrow exports signed bytes
                    filled = 0
                    while filled < size and (n := f.readinto(view[filled:])):
                        filled += n
            except _MISSING:
                raise ObjectNotFound(key, self.url) from None
            # `rename` replaces a file whole, so the size read is the size of what is read; a
            # short read would only come from a file changed in place, by something else
            return view[:filled].toreadonly()

    def get_range(self, key: str, start: int, length: int) -> bytes:
        with self._os_errors("get_range", key):
            try:
                with open(self._path(key), "rb") as f:
                    if length <= 0:
                        return b""
                    size = os.fstat(f.fileno()).st_size
                    f.seek(max(0, size + start) if start < 0 else start)
                    return f.read(length)
            except _MISSING:
                raise ObjectNotFound(key, self.url) from None

    def head(self, key: str) -> ObjectMeta:
        with self._os_errors("head", key):
            meta = self._meta(key, self._path(key))
            if meta is None:
                raise ObjectNotFound(key, self.url)
            return meta

    def _meta(self, key: str, path: str) -> ObjectMeta | None:
        try:
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
                etag = _file_md5(f)
        except _MISSING:
            return None
        return ObjectMeta(key, st.st_size, etag, st.st_mtime)

    def list(self, prefix: str = "") -> Iterator[ObjectMeta]:
        # Walk only the deepest directory the prefix pins down, then sort: the walk's order is
        # not key order ("a/b" sorts after "a-c" as a key but is visited first).
        directories = prefix.split("/")[:-1]
        if any(not d or d.startswith(".") for d in directories):
            return iter(())  # no valid key has such a prefix (and ".." must not escape the root)
        start = os.path.join(self.root, *directories)
        found = []
        with self._os_errors("list", prefix):
            for dirpath, dirnames, filenames in os.walk(start, onerror=_walk_error):
                dirnames[:] = [d for d in dirnames if not d.startswith(".")]
                rel = os.path.relpath(dirpath, self.root)
                base = "" if rel == "." else rel.replace(os.sep, "/") + "/"
                for name in filenames:
                    key = base + name
                    if name.startswith(".") or not key.startswith(prefix):
                        continue
                    try:
                        st = os.stat(os.path.join(dirpath, name))
                    except FileNotFoundError:
                        continue  # deleted since the walk saw it
                    if stat.S_ISREG(st.st_mode):
                        found.append(_ListedMeta(key, st.st_size, st.st_mtime, self._path(key)))
        return iter(sorted(found, key=lambda meta: meta.key))

    def list_children(self, prefix: str = "") -> Iterator[str]:
        # One directory read: the children's own contents are never walked.
        directory = os.path.join(self.root, *check_children_prefix(prefix).split("/"))
        with self._os_errors("list_children", prefix or "/"):
            try:
                with os.scandir(directory) as entries:
                    names = [e.name for e in entries if not e.name.startswith(".") and e.is_dir()]
            except (FileNotFoundError, NotADirectoryError):
                return iter(())
        return iter(sorted(names))

    # ----------------------------------------------------------------------------- writes

    def _write_temp_making_dirs(self, directory: str, name: str, data: bytes) -> str:
        """`_write_temp`, making `directory` first (again, when a delete pruned it meanwhile)."""
        attempts = 0
        while True:
            try:
                os.makedirs(directory, exist_ok=True)
                return self._write_temp(directory, name, data)
            except (FileNotFoundError, FileExistsError):
                # a delete pruned an empty directory meanwhile: between two steps of makedirs
                # (mkdir found it, then it was gone when makedirs checked that it is a
                # directory: FileExistsError) or before the temporary file was opened in it
                attempts += 1
                if attempts == 100:
                    raise

    def _write_temp(self, directory: str, name: str, data: bytes) -> str:
        tmp = os.path.join(directory, f".{name}.tmp-{uuid.uuid4().hex}")
        try:
            with open(tmp, "xb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        return tmp

    @contextlib.contextmanager
    def _locked(self, path: str) -> Iterator[None]:
        """Hold the exclusive lock of the object at `path`; unlink the lock file on the way out
        when the object does not exist (see the module docstring for why that is safe)."""
        directory, name = os.path.split(path)
        lock_path = os.path.join(directory, f".{name}.lock")
        fd = _acquire(lock_path)
        try:
            yield
        finally:
            try:
                if not os.path.lexists(path):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(lock_path)
            finally:
                os.close(fd)  # releases the lock

    def put_if_absent(self, key: str, data: bytes) -> str:
        self._create("put_if_absent", key, data)
        return md5_etag(data)

    def create(self, key: str, data: bytes) -> None:
        """Without the MD5 ETag: ~80 ms of CPU on a 42 MB fragment (docs/benchmarks.md)."""
        self._create("create", key, data)

    def _create(self, operation: str, key: str, data: bytes) -> None:
        with self._os_errors(operation, key):
            path = self._path(key)
            directory, name = os.path.split(path)
            tmp = self._write_temp_making_dirs(directory, name, data)
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise PreconditionFailed(key, "the object already exists") from None
            finally:
                os.unlink(tmp)
            _fsync_dir(directory)

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        with self._os_errors("put_if_match", key):
            path = self._path(key)
            directory, name = os.path.split(path)
            expected = etag.strip('"')
            if not os.path.isdir(directory):
                raise PreconditionFailed(key, "the object does not exist")
            # A stale ETag fails before any write; the new content is then written and fsynced
            # before taking the lock, so that racing writers hold it only to compare and rename.
            self._check_etag(key, path, expected)
            try:
                tmp = self._write_temp(directory, name, data)
            except FileNotFoundError:  # deleted since, and its directory pruned
                raise PreconditionFailed(key, "the object does not exist") from None
            try:
                with self._locked(path):
                    self._check_etag(key, path, expected)
                    os.replace(tmp, path)
                    _fsync_dir(directory)
            except FileNotFoundError:  # its lock file's directory was pruned: the object is gone
                raise PreconditionFailed(key, "the object does not exist") from None
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
            return md5_etag(data)

    @staticmethod
    def _check_etag(key: str, path: str, expected: str) -> None:
        try:
            with open(path, "rb") as f:
                current = _file_md5(f)
        except (FileNotFoundError, IsADirectoryError):
            raise PreconditionFailed(key, "the object does not exist") from None
        if current != expected:
            raise PreconditionFailed(key, f"its ETag is {current}, not {expected}")

    def delete(self, key: str) -> None:
        with self._os_errors("delete", key):
            path = self._path(key)
            if not os.path.isdir(os.path.dirname(path)):
                return
            try:
                self._unlink_locked(path)
            except FileNotFoundError:  # its directory was pruned meanwhile: the object is gone
                return
            self._prune(os.path.dirname(path))

    def _unlink_locked(self, path: str) -> None:
        with self._locked(path):
            try:
                os.unlink(path)
            except OSError as exc:
                # a missing object, or a key that names a directory (not an object: unlink
                # says EISDIR on Linux, EPERM on macOS, where EPERM otherwise means refused)
                if exc.errno == errno.EPERM and os.path.isdir(path):
                    return
                if exc.errno not in (errno.ENOENT, errno.ENOTDIR, errno.EISDIR):
                    raise

    def _prune(self, directory: str) -> None:
        """Remove `directory` and its parents up to the root while they are empty, as an object
        store holds no directories: a log deleted, or a failed job's fragments cleaned up, leaves
        none behind (a listing of a log set would show their names). A writer creating a file
        in one meanwhile either keeps it (not empty) or makes it again (`_create`)."""
        while directory != self.root and directory.startswith(self.root + os.sep):
            try:
                os.rmdir(directory)
            except OSError:
                return
            directory = os.path.dirname(directory)

