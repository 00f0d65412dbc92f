"""Google Cloud Storage and Azure Blob Storage: what the shared store contract (storage/test_00_stores) cannot
say. The request forms the GCS store relies on (the emulator ignores preconditions on the
others), failure classification (a write that may have landed is ambiguous and never resent;
one that provably was not sent is retried), URLs and the ways each cloud finds credentials, and
that no credential appears in an error, a log record or a repr."""

from __future__ import annotations

import json
import logging
import os
import pickle
import urllib.error
import urllib.request
from typing import Any

import pytest
import requests
from urllib3.exceptions import NewConnectionError

from wal3_spark.errors import (
    AccessDenied,
    AmbiguousWrite,
    InvalidOption,
    InvalidUrl,
    ObjectNotFound,
    PreconditionFailed,
    StorageError,
    TransientError,
)
from wal3_spark.storage import AzureStore, GCSStore, open_store
from wal3_spark.storage.common import redact
from wal3_spark.testing.emulators import AzureEmulator, GcsEmulator


def _fast_store(emulator: GcsEmulator | AzureEmulator, request: pytest.FixtureRequest) -> GCSStore | AzureStore:
    """A store of its own on `emulator` for this test, retrying without waiting."""
    store = open_store(emulator.new_url(request.node.name), emulator.options)
    assert isinstance(store, GCSStore if isinstance(emulator, GcsEmulator) else AzureStore)
    store.retry_base_s = store.retry_cap_s = 0.001
    return store


@pytest.fixture
def gcs_store(gcs: GcsEmulator, request: pytest.FixtureRequest) -> GCSStore:
    return _fast_store(gcs, request)


@pytest.fixture
def azure_store(azure: AzureEmulator, request: pytest.FixtureRequest) -> AzureStore:
    return _fast_store(azure, request)


# ------------------------------------------------------------------- GCS request forms


def _media_upload(gcs: GcsEmulator, name: str, data: bytes, generation: int) -> int:
    request = urllib.request.Request(
        f"{gcs.endpoint}/upload/storage/v1/b/{gcs.bucket}/o?uploadType=media&name={name}"
        f"&ifGenerationMatch={generation}",
        data=data, method="POST",
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_00_fake_gcs_server_ignores_preconditions_on_media_uploads_so_the_store_never_sends_one(
    gcs_store: GCSStore, gcs: GcsEmulator
) -> None:
    """Why every write is a multipart upload: on the emulator a media upload conditioned on
    `ifGenerationMatch=0` overwrites an existing object (GCS itself would answer 412). Should
    the emulator start honouring it, this test says so and docs/design/02-gcs-and-azure.md can drop the note."""
    gcs_store.put_if_absent("k", b"first")
    name = f"{gcs_store.prefix}/k"
    assert _media_upload(gcs, name, b"media", 0) == 200  # accepted although the object exists
    assert gcs_store.get("k").data == b"media"
    # the store's own create-if-absent is refused on the same object, at any size (GCS's
    # client library would switch to a resumable upload above 8 MiB, which the emulator
    # does not condition either)
    for data in (b"second", os.urandom(9 * 1024 * 1024)):
        with pytest.raises(PreconditionFailed):
            gcs_store.put_if_absent("k", data)
    assert gcs_store.get("k").data == b"media"


def test_01_a_large_create_and_a_stale_swap_lose_on_the_emulator(gcs_store: GCSStore) -> None:
    big = os.urandom(9 * 1024 * 1024)
    generation = gcs_store.put_if_absent("big", big)
    assert gcs_store.get("big") == type(gcs_store.get("big"))(big, generation)
    newer = gcs_store.put_if_match("big", b"small", generation)
    assert int(newer) > int(generation)
    with pytest.raises(PreconditionFailed):
        gcs_store.put_if_match("big", os.urandom(9 * 1024 * 1024), generation)
    with pytest.raises(PreconditionFailed):
        gcs_store.put_if_match("big", b"x", "not-a-generation")
    assert gcs_store.get("big").data == b"small"


# ------------------------------------------------------------- GCS failure classification


class _Answer:
    def __init__(self, status: int, body: dict[str, Any] | None = None) -> None:
        self.status_code = status
        self._body = body or {}
        self.headers: dict[str, str] = {}
        self.text = json.dumps(self._body)
        self.content = self.text.encode()

    def json(self) -> dict[str, Any]:
        return self._body


def _refused() -> requests.ConnectionError:
    cause = NewConnectionError(None, "Failed to establish a new connection: [Errno 111] refused")  # type: ignore[arg-type]
    return requests.ConnectionError(cause)


@pytest.mark.parametrize(
    ("outcome", "expected", "calls"),
    [
        (requests.ReadTimeout("read timed out"), AmbiguousWrite, 1),
        (requests.ConnectionError("Connection aborted: RemoteDisconnected"), AmbiguousWrite, 1),
        (_Answer(503), AmbiguousWrite, 1),
        (_Answer(500), AmbiguousWrite, 1),
        (_Answer(200, {}), AmbiguousWrite, 1),  # written, but which generation?
        (_Answer(412), PreconditionFailed, 1),
        (_Answer(403), AccessDenied, 1),
        (_Answer(401), AccessDenied, 1),
        (_refused(), TransientError, 4),  # never sent: retried, then reported
        (requests.ConnectTimeout("connect timed out"), TransientError, 4),
        (_Answer(429), TransientError, 4),  # rate limited before acting
    ],
    ids=lambda v: type(v).__name__ if not isinstance(v, _Answer) else f"HTTP{v.status_code}",
)
def test_02_gcs_writes_are_resent_only_when_they_provably_changed_nothing(
    outcome: Any, expected: type[Exception], calls: int
) -> None:
    store = GCSStore("bucket", "log")
    store.retry_attempts, store.retry_base_s, store.retry_cap_s = 4, 0.001, 0.001
    sent = []

    def request(method: str, url: str, **kwargs: Any) -> Any:
        sent.append((method, kwargs.get("params", {}).get("uploadType")))
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    store._request = request  # type: ignore[method-assign]
    for write in (lambda: store.put_if_absent("k", b"v"), lambda: store.put_if_match("k", b"v", "17")):
        sent.clear()
        with pytest.raises(expected):
            write()
        assert len(sent) == calls and set(sent) == {("POST", "multipart")}


def test_03_gcs_reads_retry_transient_failures_and_map_404() -> None:
    store = GCSStore("bucket", "log")
    store.retry_base_s = store.retry_cap_s = 0.001
    answers: list[Any] = [
        _Answer(503), requests.ReadTimeout("slow"),
        _Answer(404, {"error": {"message": "No such object: my-bucket/log/k"}}),
    ]  # fmt: skip

    def request(method: str, url: str, **kwargs: Any) -> Any:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    store._request = request  # type: ignore[method-assign]
    with pytest.raises(ObjectNotFound):
        store.get("k")
    assert answers == []
    answers.append(_Answer(404, {"error": {"message": "The specified bucket does not exist."}}))
    with pytest.raises(StorageError, match="bucket 'bucket' does not exist") as info:
        store.get("k")
    assert not isinstance(info.value, ObjectNotFound)
    answers.append(_Answer(404, {"error": {"message": "No such object: my-bucket/log/k"}}))
    store.delete("k")  # already gone: not an error


@pytest.mark.parametrize(("error", "expected", "calls"), [("RefreshError", AccessDenied, 1), ("TransportError", TransientError, 3)])
def test_09_gcs_token_failures_happen_before_sending(error: str, expected: type[Exception], calls: int) -> None:
    import google.auth.exceptions

    class Session:
        calls = 0

        def request(self, *args: Any, **kwargs: Any) -> Any:
            Session.calls += 1
            raise getattr(google.auth.exceptions, error)("token endpoint said no: Bearer ya29.SECRET")

    store = GCSStore("bucket", "log")
    store.retry_attempts, store.retry_base_s, store.retry_cap_s = 3, 0.001, 0.001
    store._client = Session()
    with pytest.raises(expected) as info:
        store.put_if_absent("k", b"v")
    assert Session.calls == calls and "ya29.SECRET" not in str(info.value)


# ----------------------------------------------------------- Azure failure classification


class _FailingBlob:
    def __init__(self, exc: Exception) -> None:
        self.exc = exc
        self.calls = 0

    def get_blob_client(self, name: str) -> _FailingBlob:
        return self

    def upload_blob(self, *args: Any, **kwargs: Any) -> dict[str, str]:
        self.calls += 1
        raise self.exc


def _azure_http_error(status: int, code: str) -> Exception:
    from azure.core.exceptions import HttpResponseError

    error = HttpResponseError(message=f"{code} (HTTP {status})")
    error.status_code, error.error_code = status, code
    return error


def _azure_cases() -> list[tuple[Exception, type[Exception], int]]:
    from azure.core.exceptions import (
        ClientAuthenticationError,
        ServiceRequestError,
        ServiceResponseError,
    )

    refused = ServiceRequestError("could not connect", error=_refused())
    return [
        (ServiceResponseError("read timed out"), AmbiguousWrite, 1),
        (ServiceRequestError("connection reset while sending"), AmbiguousWrite, 1),
        (_azure_http_error(500, "InternalError"), AmbiguousWrite, 1),
        (_azure_http_error(503, "ServerBusy"), AmbiguousWrite, 1),
        (_azure_http_error(412, "ConditionNotMet"), PreconditionFailed, 1),
        (_azure_http_error(409, "BlobAlreadyExists"), PreconditionFailed, 1),
        # Azure answers a swap of a missing blob 404 (Azurite: 412): the same lost race
        (_azure_http_error(404, "BlobNotFound"), PreconditionFailed, 1),
        (_azure_http_error(404, "ContainerNotFound"), StorageError, 1),
        (ClientAuthenticationError("Server failed to authenticate the request"), AccessDenied, 1),
        (_azure_http_error(403, "AuthorizationPermissionMismatch"), AccessDenied, 1),
        (refused, TransientError, 4),
        (_azure_http_error(429, "TooManyRequests"), TransientError, 4),
    ]


@pytest.mark.parametrize("case", range(12))
def test_04_azure_writes_are_resent_only_when_they_provably_changed_nothing(case: int) -> None:
    exc, expected, calls = _azure_cases()[case]
    store = AzureStore("container", "log")
    store.retry_attempts, store.retry_base_s, store.retry_cap_s = 4, 0.001, 0.001
    fake = _FailingBlob(exc)
    store._client = fake
    with pytest.raises(expected):
        store.put_if_match("k", b"v", '"0x1"')
    assert fake.calls == calls
    if not (expected is PreconditionFailed and "BlobNotFound" in str(exc)):
        fake.calls = 0
        with pytest.raises(expected):
            store.put_if_absent("k", b"v")
        assert fake.calls == calls


# --------------------------------------------------------------------- URLs and settings


def test_05_urls_of_each_cloud(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCOUNT", "STORAGE_EMULATOR_HOST"):
        monkeypatch.delenv(name, raising=False)
    gs = open_store("gs://bucket/logs/orders/")
    assert isinstance(gs, GCSStore) and (gs.bucket, gs.prefix, gs.url) == ("bucket", "logs/orders", "gs://bucket/logs/orders")
    assert gs.settings.endpoint == "https://storage.googleapis.com" and not gs.settings.anonymous
    abfs = open_store("abfss://events@acct.dfs.core.windows.net/logs/orders")
    assert isinstance(abfs, AzureStore) and (abfs.container, abfs.prefix) == ("events", "logs/orders")
    assert abfs.settings.account_name == "acct"
    assert abfs.settings.endpoint == "https://acct.blob.core.windows.net"
    assert abfs.url == "abfss://events@acct.dfs.core.windows.net/logs/orders"
    az = open_store("az://events/logs", {"accountName": "acct"})
    assert isinstance(az, AzureStore) and az.settings.endpoint == "https://acct.blob.core.windows.net"
    with pytest.raises(InvalidOption, match="accountName"):
        open_store("az://events/logs")
    for bad in ("gs:///nobucket", "az:///x", "abfss://events/x", "abfss://@acct.dfs.core.windows.net/x"):
        with pytest.raises((InvalidUrl, InvalidOption)):
            open_store(bad)
    with pytest.raises(InvalidOption, match="http"):
        open_store("gs://b/p", {"endpoint": "localhost:4443"})


def test_06_emulators_are_found_the_way_each_ecosystem_does_it(
    gcs: GcsEmulator, azure: AzureEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`STORAGE_EMULATOR_HOST` (with or without a scheme) for GCS, a connection string in
    `AZURE_STORAGE_CONNECTION_STRING` for Azure: no store options needed."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs.endpoint.removeprefix("http://"))
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azure.connection_string)
    for url in (gcs.new_url("env"), azure.new_url("env")):
        store = open_store(url)
        store.put_if_absent("k", b"v")
        restored = pickle.loads(pickle.dumps(store))  # as an executor gets it
        assert restored.get("k").data == b"v"
        with pytest.raises(PreconditionFailed):
            restored.put_if_absent("k", b"w")


# ------------------------------------------------------------------------------ secrets


def test_07_credentials_never_appear_in_errors_logs_or_reprs(
    azure: AzureEmulator, tmp_path: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from wal3_spark.spark.options import WRITE, parse

    caplog.set_level(logging.DEBUG)
    monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING", raising=False)
    wrong_key = "V3J vbmcta2V5LW5vdC10aGUtb25lLUF6dXJpdGUta25vd3M=".replace(" ", "")
    secrets = [azure.key, wrong_key, "sig=SIGNATURE0123", "PRIVATEKEYMATERIAL"]
    messages: list[str] = []
    # a wrong account key: Azurite refuses every request
    wrong = azure.connection_string.replace(azure.key, wrong_key)
    bad = open_store(azure.new_url("creds"), {"connectionString": wrong})
    for call in (lambda: bad.put_if_absent("k", b"v"), lambda: bad.get("k"), lambda: list(bad.list())):
        with pytest.raises(AccessDenied) as info:
            call()
        messages.append(str(info.value))
    # a SAS token the emulator does not accept
    sas = open_store(azure.new_url("sas"), {"endpoint": azure.endpoint, "accountName": azure.account,
                                            "sasToken": "sv=2021-08-06&ss=b&sig=SIGNATURE0123"})  # fmt: skip
    with pytest.raises(StorageError) as info:
        sas.put_if_absent("k", b"v")
    messages.append(str(info.value))
    # a service-account file whose key is not a key
    account_file = tmp_path / "sa.json"
    account_file.write_text(json.dumps({"type": "service_account", "client_email": "x@y.iam.gserviceaccount.com",
                                        "private_key": "-----BEGIN PRIVATE KEY-----\nPRIVATEKEYMATERIAL\n-----END PRIVATE KEY-----\n",
                                        "token_uri": "https://oauth2.googleapis.com/token"}))  # fmt: skip
    gs = open_store("gs://bucket/log", {"serviceAccountFile": str(account_file)})
    with pytest.raises(AccessDenied) as info:
        gs.get("k")
    messages.append(str(info.value))
    # reprs: stores, settings, the Spark connector's options
    good = open_store(azure.new_url("repr"), azure.options)
    opts = parse({"path": azure.new_url("spark"), **azure.options}, WRITE)
    messages += [repr(good), repr(good.settings), repr(bad.settings), repr(sas.settings), repr(gs.settings), repr(opts)]
    messages += [record.getMessage() for record in caplog.records]
    messages += [str(record.exc_info[1]) for record in caplog.records if record.exc_info]
    text = "\n".join(messages)
    assert "access denied" in text
    for secret in secrets:
        assert secret not in text
    assert redact(wrong) == wrong.replace(wrong_key, "***")


# ------------------------------------------------------------------ between any two stores


def test_08_copy_between_any_two_stores_keeps_every_record(
    gcs: GcsEmulator, azure: AzureEmulator, seaweed: Any, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A log copied around the stores one way (local -> S3 -> GCS -> Azure -> local) and back
    the other (local -> Azure -> GCS -> S3 -> local): every kind of store is a source and a
    destination, and both directions between neighbours are taken. The copies alternate between
    `copy_log` and the `wal3 copy` command, which finds the servers through the environment
    (AWS_*, STORAGE_EMULATOR_HOST, AZURE_STORAGE_CONNECTION_STRING). Each copy is verified and
    read back exactly, with its cursor."""
    import wal3_spark.cli.main as cli
    from wal3_spark.log.cursors import CursorStore
    from wal3_spark.log.reader import LogReader
    from wal3_spark.log.writer import LogWriter
    from wal3_spark.ops.copy import copy_log
    from wal3_spark.ops.verify import verify

    servers = {"s3": seaweed, "gcs": gcs, "azure": azure}
    bodies = [f"record {i}".encode() for i in range(30)]
    first = str(tmp_path / "origin")
    with LogWriter(first) as writer:
        for i in range(0, 30, 10):
            writer.append(bodies[i : i + 10])
    CursorStore(open_store(first)).create("reader", 11)
    steps = 0
    for way, order in (("there", ["s3", "gcs", "azure", "local"]), ("back", ["azure", "gcs", "s3", "local"])):
        source: tuple[str, dict[str, str] | None] = (first, None)
        for kind in order:
            if kind == "local":
                target: tuple[str, dict[str, str] | None] = (str(tmp_path / f"copy-{way}"), None)
            else:
                target = (servers[kind].new_url(f"copy-{way}"), servers[kind].options)
            if steps % 2 == 0:
                copy_log(source[0], target[0], options=source[1], destination_options=target[1])
            else:
                with pytest.MonkeyPatch.context() as env:
                    for server in servers.values():
                        for name, value in server.env.items():
                            env.setenv(name, value)
                    assert cli.main(["copy", source[0], target[0]]) == 0, (source[0], target[0])
                capsys.readouterr()
            steps += 1
            url, options = target
            assert verify(url, options=options).ok, (way, kind)
            assert LogReader(url, options=options).read_table().column("body").to_pylist() == bodies, (way, kind)
            cursor = CursorStore(open_store(url, options)).get("reader")
            assert cursor is not None and cursor.cursor.offset == 11, (way, kind)
            source = target
    assert steps == 8


# ------------------------------------------------------------------- emulator restarts


@pytest.mark.parametrize("kind", ["gcs", "azure"])
def test_10_a_persistent_emulator_restarts_with_every_object_generation_and_etag(kind: str, tmp_path: Any) -> None:
    """`wal3 stress --gcs/--azure` restarts its emulator under load, as `--s3` restarts
    SeaweedFS: after the restart (same port, same key) the objects are there, the compare-and-swap
    a writer prepared before it still goes through, and a stale one or a second create still
    loses. In memory (the suite's emulators) a restart would lose the log."""
    from wal3_spark.testing.emulators import AzuriteProcess, FakeGcsProcess

    process = (FakeGcsProcess if kind == "gcs" else AzuriteProcess)(tmp_path, persistent=True)
    try:
        server = process.start()
        url = server.new_url("restart")
        store = open_store(url, server.options)
        first = store.put_if_absent("m", b"one")
        second = store.put_if_match("m", b"two", first)
        store.put_if_absent("fragment", b"x" * 1000)
        again = process.restart()
        assert again == server
        store = open_store(url, again.options)
        assert store.get("m").data == b"two" and store.get("fragment").data == b"x" * 1000
        with pytest.raises(PreconditionFailed):
            store.put_if_match("m", b"stale", first)
        with pytest.raises(PreconditionFailed):
            store.put_if_absent("m", b"create")
        store.put_if_match("m", b"three", second)
        assert store.get("m").data == b"three"
    finally:
        process.stop()


def test_11_gcs_listings_follow_every_page_as_gcs_pages_them(gcs_store: GCSStore) -> None:
    """GCS pages a listing by `maxResults`, prefixes of a delimited listing included; the
    emulator pages objects but answers a delimited listing in one page. Paged object listings
    run on the emulator; the delimited one, paged as GCS does it, on a fake of the service."""
    for i in range(5):
        gcs_store.put_if_absent(f"d{i}/k", b"x")
    gcs_store.list_page_size = 2
    tokens: list[str | None] = []
    real = gcs_store._request

    def counting(method: str, url: str, **kwargs: Any) -> Any:
        tokens.append(kwargs.get("params", {}).get("pageToken"))
        return real(method, url, **kwargs)

    gcs_store._request = counting  # type: ignore[method-assign]
    assert [meta.key for meta in gcs_store.list()] == [f"d{i}/k" for i in range(5)]
    assert len(tokens) == 3 and tokens[0] is None and all(tokens[1:])  # 2 + 2 + 1
    root = gcs_store._root
    pages = {None: {"prefixes": [f"{root}d0/", f"{root}d1/"], "nextPageToken": "p2"},
             "p2": {"prefixes": [f"{root}d2/", f"{root}d3/"], "nextPageToken": "p3"},
             "p3": {"prefixes": [f"{root}d4/"]}}  # fmt: skip
    gcs_store._request = lambda method, url, **kwargs: _Answer(200, pages[kwargs["params"].get("pageToken")])  # type: ignore[method-assign]
    assert list(gcs_store.list_children()) == [f"d{i}" for i in range(5)]
