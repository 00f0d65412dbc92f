"""Fragment uploads: create-if-absent at a fresh UUIDv7 path, retried through ambiguous and
dropped writes until the bytes are known to be there, never over another fragment's bytes."""

from __future__ import annotations

import pickle
import uuid
from collections.abc import Iterator

import pytest

from wal3_spark.errors import (
    AmbiguousWrite,
    PreconditionFailed,
    StorageError,
    TransientError,
)
from wal3_spark.format.fragment import EncodedFragment, encode_raw
from wal3_spark.format.layout import fragment_path
from wal3_spark.format.uuid7 import new_uuid7, uuid7_timestamp_us
from wal3_spark.log.fragment_io import FragmentFile, write_fragment
from wal3_spark.storage import Blob, ObjectMeta, ObjectStore, open_store

TS = 1_700_000_000_123_456


class ScriptedStore(ObjectStore):
    """A fresh `memory://` store whose next `put_if_absent` calls fail as scripted.

    `faults` entries: "landed" (the object is written, then AmbiguousWrite), "lost"
    (AmbiguousWrite, nothing written) or "drop" (TransientError, nothing written).
    """

    def __init__(self) -> None:
        self.inner = open_store(f"memory://fragment-tests-{uuid.uuid4().hex}")
        self.url = self.inner.url
        self.faults: list[str] = []

    @property
    def objects(self) -> dict[str, bytes]:
        return {meta.key: self.inner.get(meta.key).data for meta in self.inner.list()}

    def put_if_absent(self, key: str, data: bytes) -> str:
        fault = self.faults.pop(0) if self.faults else None
        if fault == "lost":
            raise AmbiguousWrite(key, "timeout")
        if fault == "drop":
            raise TransientError("connection refused")
        etag = self.inner.put_if_absent(key, data)
        if fault == "landed":
            raise AmbiguousWrite(key, "timeout")
        return etag

    def get(self, key: str) -> Blob:
        return self.inner.get(key)

    def head(self, key: str) -> ObjectMeta:
        return self.inner.head(key)

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        return self.inner.put_if_match(key, data, etag)

    def list(self, prefix: str = "") -> Iterator[ObjectMeta]:
        return self.inner.list(prefix)

    def delete(self, key: str) -> None:
        self.inner.delete(key)


def test_00_write_fragment():
    store = ScriptedStore()
    encoded = encode_raw([b"a", b"b"], TS)
    file = write_fragment(store, encoded)
    assert store.objects[file.path] == encoded.data
    assert file.path == fragment_path(file.uuid)
    assert uuid7_timestamp_us(file.uuid) == TS == file.timestamp_us
    assert (file.records, file.num_bytes, file.setsum) == (2, len(encoded.data), encoded.setsum)
    assert write_fragment(store, encoded).path != file.path


def test_01_fragment_file_pickles_small():
    file = write_fragment(ScriptedStore(), encode_raw([b"a"], TS))
    blob = pickle.dumps(file)
    assert pickle.loads(blob) == file
    assert len(blob) < 400, len(blob)


@pytest.mark.parametrize(
    "faults",
    [["landed"], ["lost"], ["drop"], ["lost", "landed"], ["landed", "lost"], ["drop", "lost", "landed"]],
)
def test_02_write_fragment_resolves_ambiguous_writes(faults):
    store = ScriptedStore()
    store.faults = list(faults)
    encoded = encode_raw([b"a"], TS)
    file = write_fragment(store, encoded)
    assert store.objects == {file.path: encoded.data}


@pytest.mark.parametrize("fault,error", [("lost", AmbiguousWrite), ("drop", TransientError)])
def test_03_write_fragment_gives_up_after_its_attempts(fault, error):
    store = ScriptedStore()
    store.faults = [fault] * 3
    with pytest.raises(error):
        write_fragment(store, encode_raw([b"a"], TS), attempts=3)
    assert store.objects == {}


def test_04_write_fragment_refuses_a_path_holding_other_bytes(monkeypatch):
    store = ScriptedStore()
    fixed = new_uuid7(TS)
    monkeypatch.setattr("wal3_spark.log.fragment_io.new_uuid7", lambda _ts: fixed)
    write_fragment(store, encode_raw([b"a"], TS))
    with pytest.raises(PreconditionFailed):
        write_fragment(store, encode_raw([b"b"], TS))
    store.faults = ["lost"]
    with pytest.raises(StorageError, match="did not write"):
        write_fragment(store, encode_raw([b"b"], TS))


def test_05_encoded_fragment_is_plain_data():
    encoded = encode_raw([b"a"], TS)
    assert isinstance(encoded, EncodedFragment) and isinstance(encoded.data, bytes)
    assert isinstance(write_fragment(ScriptedStore(), encoded), FragmentFile)
