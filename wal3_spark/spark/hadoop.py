"""Reaching a log through Hadoop filesystems, for scans that Spark's own file readers run.

- `hadoop_url`: where Spark finds a log's object: `s3://` logs become `s3a://` (Hadoop's S3
  connector), `az://container/prefix` becomes `abfss://container@ACCOUNT.dfs.core.windows.net/
  prefix` (hadoop-azure's ABFS), local paths `file://` URLs, and any other Hadoop filesystem
  URL (`hdfs://`, `gs://` for the GCS connector, `abfss://`, ...) is used as it is;
- `hadoop_options`: the wal3 store options of an S3 log as the `fs.s3a.*` settings that give
  S3A the same endpoint, region, addressing and credentials (passed as reader options, which
  Spark copies into the scan's Hadoop configuration);
- `HadoopFileStore`: a read-only object store over Spark's `binaryFile` source, so the driver
  can read the manifest and snapshots of a log on a filesystem `open_store` has no backend for.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import Any

from wal3_spark.errors import InvalidUrl, ObjectNotFound, Wal3Error
from wal3_spark.storage import S3Settings, open_store
from wal3_spark.storage.base import Blob, ObjectMeta, ObjectStore
from wal3_spark.storage.common import join_url, split_url

#: schemes `open_store` reaches by itself (the others are read through Spark)
_STORE_SCHEMES = ("s3", "s3a", "s3n", "gs", "az", "abfs", "abfss", "file")
_S3_SCHEMES = ("s3", "s3a", "s3n")
_TEMPORARY_CREDENTIALS = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"


def hadoop_url(url: str) -> str:
    """The log root as Hadoop names it."""
    scheme, authority, path = split_url(url)
    if scheme in _S3_SCHEMES:
        return f"s3a://{authority}/{path}".rstrip("/")
    if scheme == "az":
        account = os.environ.get("AZURE_STORAGE_ACCOUNT")
        if not account:
            raise InvalidUrl(
                f"Spark's file readers reach {url} through hadoop-azure, which needs the storage "
                "account in the URL: write it as abfss://container@ACCOUNT.dfs.core.windows.net/"
                "prefix (or set AZURE_STORAGE_ACCOUNT)"
            )
        return f"abfss://{authority}@{account}.dfs.core.windows.net/{path}".rstrip("/")
    if scheme == "file":
        return f"file://{path}".rstrip("/")
    if scheme == "memory":
        raise InvalidUrl(
            f"{url} lives in this Python process only; Spark's file readers cannot reach it. "
            "Use spark.read.format(\"wal3\") for memory:// logs"
        )
    return url.rstrip("/")


def hadoop_options(url: str, store_options: Mapping[str, str] | None) -> dict[str, str]:
    """`fs.s3a.*` settings equivalent to the store options of an S3 log ({} for others).

    Credentials given neither as options nor in settings are left to S3A's own provider chain
    (the AWS environment variables, profiles, instance roles), as boto3 finds them for the
    driver's store.
    """
    if split_url(url)[0] not in _S3_SCHEMES:
        return {}
    settings = S3Settings.from_options(store_options)
    conf: dict[str, str] = {}
    if settings.endpoint is not None:
        conf["fs.s3a.endpoint"] = settings.endpoint
        conf["fs.s3a.connection.ssl.enabled"] = str(settings.endpoint.startswith("https://")).lower()
    if settings.region is not None:
        conf["fs.s3a.endpoint.region"] = settings.region
    conf["fs.s3a.path.style.access"] = str(settings.path_style).lower()
    if settings.access_key_id is not None:
        conf["fs.s3a.access.key"] = settings.access_key_id
        conf["fs.s3a.secret.key"] = settings.secret_access_key or ""
    if settings.session_token is not None:
        conf["fs.s3a.session.token"] = settings.session_token
        conf["fs.s3a.aws.credentials.provider"] = _TEMPORARY_CREDENTIALS
    return conf


def driver_store(spark: Any, url: str, store_options: Mapping[str, str] | None) -> ObjectStore:
    """The store the driver reads a log's metadata from: `open_store` for the schemes it has a
    backend for, Spark's `binaryFile` reader for every other Hadoop filesystem."""
    hadoop_url(url)  # refuses memory:// before anything is read
    if split_url(url)[0] in _STORE_SCHEMES:
        return open_store(url, store_options)
    return HadoopFileStore(spark, url)


class HadoopFileStore(ObjectStore):
    """Reads objects through `spark.read.format("binaryFile")`: one Spark job per object, which
    is fine for the few a scan plans with (the manifest, the snapshots covering its range).

    Writes are refused: appending needs create-if-absent and compare-and-swap, which a Hadoop
    filesystem in general does not offer.
    """

    def __init__(self, spark: Any, url: str) -> None:
        self.spark = spark
        self.url = url.rstrip("/")

    def get(self, key: str) -> Blob:
        try:
            rows = self.spark.read.format("binaryFile").load(join_url(self.url, key)).select("content").collect()
        except Exception as exc:  # Spark reports a missing path as an AnalysisException
            if "PATH_NOT_FOUND" in str(exc) or "does not exist" in str(exc):
                raise ObjectNotFound(key, self.url) from None
            raise
        if not rows:
            raise ObjectNotFound(key, self.url)
        return Blob(bytes(rows[0].content), etag="")

    def head(self, key: str) -> ObjectMeta:
        return ObjectMeta(key, len(self.get(key).data), "", 0.0)

    def put_if_absent(self, key: str, data: bytes) -> str:
        raise self._read_only()

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        raise self._read_only()

    def list(self, prefix: str = "") -> Iterator[ObjectMeta]:
        raise self._read_only()

    def delete(self, key: str) -> None:
        raise self._read_only()

    def _read_only(self) -> Wal3Error:
        return Wal3Error(
            f"{self.url} is read through Spark's file readers, which can scan a log but not "
            "append to or maintain it (that needs an S3 or local store)"
        )
