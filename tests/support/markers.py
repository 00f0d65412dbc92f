"""pytest plugin: the markers that pick a part of the suite (registered in pyproject.toml).

- `spark`: needs Spark (a JVM). Every test under `tests/spark/`, of a `test_NN_spark_*.py` file
  in another folder (`tests/jobs/`), and every test using the `spark` fixture gets it here, so a
  new Spark test is marked without remembering to; tests elsewhere that start Spark in a
  subprocess (spark-submit) carry `@pytest.mark.spark` themselves.
- `s3`: needs the SeaweedFS server. Tests using the `seaweed` or `s3_store` fixture, and the `s3`
  case of a backend-parametrized fixture (`store`, `store_url`, `backend`), get it here; tests
  that ask for the server with `request.getfixturevalue("seaweed")` carry the marker themselves.
- `gcs`, `azure`: need fake-gcs-server or Azurite (`tests/support/emulators.py`): tests using the
  `gcs` or `azure` fixture, and the `gcs`/`azure` case of a backend-parametrized fixture.
- `cluster`: runs executors in separate processes (`local-cluster`) or over Spark Connect;
  always marked by hand, always with `spark` too.
- `slow`: takes tens of seconds or more on two cores (process races, bounded stress runs);
  marked by hand.

`./dev test -m "not spark"` runs the core; `-m "not spark and not s3 and not slow"` needs
neither a JVM nor SeaweedFS and runs in seconds.
"""

from __future__ import annotations

import pytest

_S3_FIXTURES = frozenset({"seaweed", "s3_store"})


def _uses_s3(item: pytest.Item) -> bool:
    if _S3_FIXTURES.intersection(getattr(item, "fixturenames", ())):
        return True
    callspec = getattr(item, "callspec", None)
    return callspec is not None and "s3" in callspec.params.values()


def _uses_spark(item: pytest.Item) -> bool:
    return (item.path.parent.name == "spark" or "_spark_" in item.path.name
            or "spark" in getattr(item, "fixturenames", ()))


def _uses(item: pytest.Item, backend: str) -> bool:
    if backend in getattr(item, "fixturenames", ()):
        return True
    callspec = getattr(item, "callspec", None)
    return callspec is not None and backend in callspec.params.values()


def _weight(item: pytest.Item) -> int:
    """How heavy a test is by its markers: 3 for a cluster, 2 for slow, 1 for Spark, else 0."""
    names = {mark.name for mark in item.iter_markers()}
    return 3 if "cluster" in names else 2 if "slow" in names else 1 if "spark" in names else 0


def _heaviest_files_first(items: list[pytest.Item]) -> None:
    """Order the files by their heaviest test, heaviest first, keeping each file's own order and,
    among files of one weight, the folders' order. Under `--dist loadfile` the workers take
    files in this order: a file of cluster tests (minutes) started last would leave the other
    worker idle at the end of the run."""
    weight: dict[object, int] = {}
    for item in items:
        weight[item.path] = max(weight.get(item.path, 0), _weight(item))
    first_seen = {path: index for index, path in enumerate(dict.fromkeys(i.path for i in items))}
    items.sort(key=lambda item: (-weight[item.path], first_seen[item.path]))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for backend in ("gcs", "azure"):
            if _uses(item, backend):
                item.add_marker(getattr(pytest.mark, backend))
        if _uses_spark(item):
            item.add_marker(pytest.mark.spark)
        if _uses_s3(item):
            item.add_marker(pytest.mark.s3)
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: its order is the schedule's
        _heaviest_files_first(items)
