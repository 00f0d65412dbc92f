"""Running test code as a user file permissions apply to.

Root bypasses file permissions, so a test of "permission denied" run as root would pass
whether or not the code handles it. `unprivileged(fn)` runs `fn` in a forked child that has
dropped to `nobody` when the tests run as root (as they do in containers), or in this process
otherwise. Files the child must reach need to be in a directory `nobody` can traverse:
`shared_tmp_dir()` makes one.
"""

from __future__ import annotations

import os
import pickle
import tempfile
import traceback
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

NOBODY = 65534


def shared_tmp_dir() -> str:
    """A fresh directory under the system temp dir that every user can traverse and read."""
    path = tempfile.mkdtemp(prefix="wal3-perm-")
    os.chmod(path, 0o755)
    return path


def unprivileged(fn: Callable[[], T]) -> T:
    """`fn()` as a user without root's permission bypass; its result must pickle."""
    if os.geteuid() != 0:
        return fn()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        status = 0
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            payload = pickle.dumps(("ok", fn()))
        except BaseException:
            payload = pickle.dumps(("error", traceback.format_exc()))
            status = 1
        with os.fdopen(write_end, "wb") as out:
            out.write(payload)
        os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as inp:
        data = inp.read()
    os.waitpid(pid, 0)
    kind, value = pickle.loads(data)
    if kind == "error":
        raise AssertionError(f"the unprivileged child failed:\n{value}")
    return value
