"""Conversions between Spark schemas and the Arrow schemas a log stores.

A log's payload is an Arrow schema (or none: a raw log's single binary `body` column); Spark
declares reads and writes as `StructType`s. Every role of the data source converts through these
three functions, so a read and a write agree on what a column's type is (timestamps in UTC).
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType

from wal3_spark.reader import output_schema
from wal3_spark.schema import is_raw_schema


def payload_to_spark(payload: pa.Schema | None) -> StructType:
    """The Spark schema a read of a log with this payload returns (`_offset`, `_timestamp` last)."""
    return from_arrow_schema(output_schema(payload))


def spark_to_arrow(schema: StructType) -> pa.Schema:
    """A Spark schema as Arrow, timestamps in UTC (the form a log stores)."""
    return to_arrow_schema(schema, timezone="UTC")


def appended_schema(schema: StructType) -> pa.Schema | None:
    """The Arrow schema to append as; None for a raw log's single binary `body` column."""
    arrow = spark_to_arrow(schema)
    return None if is_raw_schema(arrow) else arrow
