"""wal3-spark: Chroma's wal3 log on object storage, in plain Python, with a PySpark data source.

The public API is re-exported here lazily (PEP 562), so that importing one core module does not
import them all, and executors pay only for what they use: the readers and writers of logs, the
operations on whole logs (`verify`, `copy_log`, `collect_garbage`, `branch`, `delete_branch`,
`checkpoint`, `set_retention`) with their reports, and the values they hand back; the machinery under them (the
committer, the CAS loop, the stores' internals) is imported from its module by those who need
it. So is `__version__`, whose one source is pyproject.toml (`wal3 --version` prints it).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import tomllib
from pathlib import Path
from typing import Any

DISTRIBUTION = "wal3-spark"

_EXPORTS = {
    # where logs are read and written
    "AutoCompactOptions": "wal3_spark.log.auto_compaction",
    "CommitResult": "wal3_spark.log.committer",
    "CursorStore": "wal3_spark.log.cursors",
    "DirtyLog": "wal3_spark.logset.dirty",
    "LogReader": "wal3_spark.log.reader",
    "LogSelection": "wal3_spark.logset.logs",
    "LogSet": "wal3_spark.logset.logs",
    "LogWriter": "wal3_spark.log.writer",
    "LogWriterOptions": "wal3_spark.log.writer",
    "TagStore": "wal3_spark.log.tags",
    "open_store": "wal3_spark.storage",
    # the operations on whole logs, each returning its report
    "BranchReport": "wal3_spark.log.branches",
    "CheckpointReport": "wal3_spark.ops.checkpoint",
    "CompactReport": "wal3_spark.log.compaction",
    "CopyReport": "wal3_spark.ops.copy",
    "DeletionReport": "wal3_spark.log.branches",
    "GCOptions": "wal3_spark.ops.garbage_collector",
    "GCReport": "wal3_spark.ops.garbage_collector",
    "RetentionReport": "wal3_spark.ops.retention",
    "VerifyReport": "wal3_spark.ops.verify",
    "branch": "wal3_spark.log.branches",
    "checkpoint": "wal3_spark.ops.checkpoint",
    "collect_garbage": "wal3_spark.ops.garbage_collector",
    "compact": "wal3_spark.log.compaction",
    "copy_log": "wal3_spark.ops.copy",
    "delete_branch": "wal3_spark.log.branches",
    "set_retention": "wal3_spark.ops.retention",
    "verify": "wal3_spark.ops.verify",
    # the values they hand back
    "Manifest": "wal3_spark.format.manifest",
    "RetentionPolicy": "wal3_spark.format.retention",
    "Setsum": "wal3_spark.format.setsum",
    "SnapshotOptions": "wal3_spark.format.manifest",
    "Wal3Error": "wal3_spark.errors",
}

__all__ = sorted(_EXPORTS)


def _version() -> str:
    """This copy's version: the installed distribution's when this package is the one it
    installed (a wheel), else that of the checkout it was imported from (pyproject.toml beside
    it: a checkout on PYTHONPATH, an editable install, an executor shipped the sources), else
    the distribution's, else `0+unknown`."""
    here = Path(__file__).resolve()
    try:
        dist: importlib.metadata.Distribution | None = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        dist = None
    if dist is not None and Path(str(dist.locate_file("wal3_spark/__init__.py"))).resolve() == here:
        return dist.version
    pyproject = here.parent.parent / "pyproject.toml"
    try:
        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
    except (OSError, tomllib.TOMLDecodeError):
        project = {}
    if project.get("name") == DISTRIBUTION and isinstance(project.get("version"), str):
        return project["version"]
    return dist.version if dist is not None else "0+unknown"


def __getattr__(name: str) -> Any:
    if name == "__version__":
        return _version()
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'wal3_spark' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
