"""Small stand-ins shared by tests and benchmarks."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from wal3_spark.setsum import Setsum

#: shared/ lies beside the repository, for developers and in CI alike
TESTDATA = Path(__file__).resolve().parents[3] / "shared" / "testdata"


@dataclass(frozen=True)
class FakeFragment:
    """What the committer needs of a written fragment, without a file behind it: for tests of
    the pure manifest transitions and for building large manifests quickly."""

    path: str
    uuid: str
    records: int
    num_bytes: int
    setsum: Setsum


def shared_testdata(name: str) -> Path:
    """A file of shared/testdata (setsum vectors, Chroma's manifests)."""
    path = TESTDATA / name
    if not path.exists():
        pytest.fail(f"{path} is missing: shared/testdata must sit beside the repository")
    return path


def chroma_testdata(name: str) -> Path:
    return shared_testdata(f"chroma/{name}")
