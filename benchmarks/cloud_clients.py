"""Which client library for Google Cloud Storage and Azure: a short measurement on the emulators.

For each candidate: small conditional writes (create-if-absent of 1 KiB objects, then
compare-and-swap of one object) per second and CPU milliseconds per request (this process's
user + system time: the client's own cost; the emulator runs in another process), and reads of
a 1 MiB "fragment" per second. Sides alternate, `--rounds` times; medians are printed.

Candidates:
- gcs-json: wal3's GCS store (JSON API multipart uploads over requests);
- google-cloud-storage: `Blob.upload_from_string(if_generation_match=...)`, `retry=None`;
- obstore-gcs: obstore's GCSStore (Rust object_store); fake-gcs-server does not serve the XML
  API it speaks, so it is reported as failing rather than measured;
- azure-blob: wal3's Azure store (azure-storage-blob, SDK retries off);
- obstore-azure: obstore's AzureStore with `PutMode` create / update on the ETag.

    ./dev python benchmarks/cloud_clients.py [--rounds 3] [--writes 200] [--reads 50]

obstore is not a dependency: `pip install obstore google-cloud-storage` first to measure every
candidate (missing ones are reported as such).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from wal3_spark.storage import open_store  # noqa: E402
from wal3_spark.testing.emulators import running_azurite, running_fake_gcs  # noqa: E402

#: obstore retries a conditional put that timed out by default: off, as in wal3's stores
_NO_RETRIES = {"max_retries": 0, "retry_timeout": timedelta(seconds=30),
               "backoff": {"init_backoff": timedelta(milliseconds=100), "max_backoff": timedelta(seconds=1), "base": 2}}

Ops = tuple[Callable[[str], None], Callable[[str, bytes], None], Callable[[str], bytes]]


def wal3_ops(url: str, options: dict[str, str]) -> Ops:
    store = open_store(url, options)
    state: dict[str, str] = {}

    def create(key: str) -> None:
        store.put_if_absent(key, b"x" * 1024)

    def cas(key: str, data: bytes) -> None:
        if key not in state:
            state[key] = store.put_if_absent(key, data)
        else:
            state[key] = store.put_if_match(key, data, state[key])

    return create, cas, lambda key: store.get(key).data


def google_ops(endpoint: str, bucket: str, prefix: str) -> Ops:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    client = storage.Client(project="wal3", credentials=AnonymousCredentials(),
                            client_options={"api_endpoint": endpoint})  # fmt: skip
    b = client.bucket(bucket)
    gens: dict[str, int] = {}

    def create(key: str) -> None:
        b.blob(f"{prefix}/{key}").upload_from_string(b"x" * 1024, if_generation_match=0, retry=None)

    def cas(key: str, data: bytes) -> None:
        blob = b.blob(f"{prefix}/{key}")
        blob.upload_from_string(data, if_generation_match=gens.get(key, 0), retry=None)
        gens[key] = blob.generation

    return create, cas, lambda key: b.blob(f"{prefix}/{key}").download_as_bytes(retry=None)


def obstore_azure_ops(endpoint: str, account: str, key_: str, container: str, prefix: str) -> Ops:
    import obstore
    from obstore.store import AzureStore

    store = AzureStore(container, prefix=prefix, account_name=account, access_key=key_,
                       endpoint=endpoint, client_options={"allow_http": True},
                       retry_config=_NO_RETRIES)  # fmt: skip
    etags: dict[str, str] = {}

    def create(key: str) -> None:
        obstore.put(store, key, b"x" * 1024, mode="create")

    def cas(key: str, data: bytes) -> None:
        mode = {"e_tag": etags[key], "version": ""} if key in etags else "create"
        etags[key] = obstore.put(store, key, data, mode=mode)["e_tag"]  # type: ignore[arg-type]

    return create, cas, lambda key: bytes(obstore.get(store, key).bytes())


def obstore_gcs_ops(endpoint: str, bucket: str, prefix: str) -> Ops:
    import obstore
    from obstore.store import GCSStore

    store = GCSStore(bucket, prefix=prefix, base_url=endpoint, skip_signature=True,
                     client_options={"allow_http": True}, retry_config=_NO_RETRIES)  # fmt: skip
    obstore.list(store).collect()  # fails on fake-gcs-server (no XML API)
    return (lambda k: obstore.put(store, k, b"x", mode="create"),
            lambda k, d: None, lambda k: b"")  # fmt: skip


def measure(ops: Ops, writes: int, reads: int) -> dict[str, float]:
    create, cas, read = ops
    tag = uuid.uuid4().hex[:8]
    out: dict[str, float] = {}
    for name, fn in (
        ("create", lambda i: create(f"c-{tag}-{i}")),
        ("cas", lambda i: cas(f"m-{tag}", str(i).encode() * 100)),
    ):
        cpu0, t0 = time.process_time(), time.perf_counter()
        for i in range(writes):
            fn(i)
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        out[f"{name}/s"] = writes / wall
        out[f"{name} cpu ms"] = 1000 * cpu / writes
    blob = os.urandom(1 << 20)
    cas(f"f-{tag}", blob)
    cpu0, t0 = time.process_time(), time.perf_counter()
    for _ in range(reads):
        assert len(read(f"f-{tag}")) == len(blob)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    out["1 MiB reads/s"] = reads / wall
    out["read cpu ms"] = 1000 * cpu / reads
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--writes", type=int, default=200)
    parser.add_argument("--reads", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, running_fake_gcs(Path(tmp) / "gcs") as gcs, \
            running_azurite(Path(tmp) / "az") as az:  # fmt: skip
        candidates: dict[str, Callable[[], Ops]] = {
            "gcs-json (wal3)": lambda: wal3_ops(gcs.new_url("bench"), gcs.options),
            "google-cloud-storage": lambda: google_ops(gcs.endpoint, gcs.bucket, uuid.uuid4().hex),
            "obstore-gcs": lambda: obstore_gcs_ops(gcs.endpoint, gcs.bucket, uuid.uuid4().hex),
            "azure-storage-blob (wal3)": lambda: wal3_ops(az.new_url("bench"), az.options),
            "obstore-azure": lambda: obstore_azure_ops(az.endpoint, az.account, az.key, az.container,
                                                       uuid.uuid4().hex),  # fmt: skip
        }
        results: dict[str, list[dict[str, float]]] = {name: [] for name in candidates}
        failures: dict[str, str] = {}
        for _ in range(args.rounds):
            for name, make in candidates.items():  # alternate the sides every round
                if name in failures:
                    continue
                try:
                    results[name].append(measure(make(), args.writes, args.reads))
                except Exception as exc:  # a candidate that cannot run here is reported, not fatal
                    failures[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:90]}"
    columns = ["create/s", "create cpu ms", "cas/s", "cas cpu ms", "1 MiB reads/s", "read cpu ms"]
    print(f"{'client':28}" + "".join(f"{c:>15}" for c in columns))
    for name, runs in results.items():
        if name in failures:
            print(f"{name:28}  fails: {failures[name]}")
            continue
        cells = []
        for c in columns:
            values = [r[c] for r in runs]
            spread = (max(values) - min(values)) / statistics.median(values) * 100 if values else 0
            cells.append(f"{statistics.median(values):>9.1f} ±{spread:>3.0f}%")
        print(f"{name:28}" + "".join(f"{c:>15}" for c in cells))
    print(f"(medians of {args.rounds} rounds, ± the spread max-min as % of the median; "
          f"{args.writes} writes, {args.reads} reads per round; emulators, not clouds)")  # fmt: skip


if __name__ == "__main__":
    main()
