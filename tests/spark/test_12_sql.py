"""Spark SQL catalog tables over wal3 logs: CREATE TABLE (OPTIONS path / LOCATION), DESCRIBE,
SELECT, INSERT INTO, refused statements that change nothing, DROP TABLE keeping the log,
readStream.table and writeStream.toTable."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pyarrow as pa
import pytest

from tests.support.spark import spark_env
from tests.spark.test_08_batch import append, check_log, read
from wal3_spark.format.layout import MANIFEST_KEY
from wal3_spark.log.reader import LogReader
from wal3_spark.storage import open_store

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def table(spark):
    """A fresh table name, dropped afterwards (dropping never touches the log)."""
    name = f"orders_{uuid.uuid4().hex[:8]}"
    yield name
    spark.sql(f"DROP TABLE IF EXISTS {name}")


def orders(spark, url: str, n: int = 5) -> None:
    """A log of `n` orders (id, name) at `url`."""
    append(spark.range(n).selectExpr("id", "concat('n', id) AS name"), url)


def manifest_bytes(url: str) -> bytes:
    return open_store(url).get(MANIFEST_KEY).data


def test_00_create_select_describe_insert(spark, log_url, table):
    orders(spark, log_url)
    spark.sql(f"CREATE TABLE {table} USING wal3 OPTIONS (path '{log_url}')")
    described = {r.col_name: r for r in spark.sql(f"DESCRIBE TABLE {table}").collect()}
    assert [c for c in described if c and not c.startswith("#")][:4] == ["id", "name", "_offset", "_timestamp"]
    assert log_url.removeprefix("file://") in described["_offset"].comment
    assert "metadataColumns 'false'" in described["_offset"].comment  # how positional INSERTs work
    row = spark.sql(f"SELECT count(*) n, min(_offset) lo, max(_offset) hi FROM {table}").first()
    assert (row.n, row.lo, row.hi) == (5, 1, 5)

    spark.sql(f"INSERT INTO {table} (id, name) SELECT id, 'x' FROM range(10, 13)")
    spark.sql(f"INSERT INTO {table} BY NAME SELECT 'y' AS name, id FROM range(20, 22)")
    rows = spark.sql(f"SELECT id, name, _offset, _timestamp FROM {table} ORDER BY _offset").collect()
    assert [(r.id, r.name, r._offset) for r in rows[5:]] == [
        (10, "x", 6), (11, "x", 7), (12, "x", 8), (20, "y", 9), (21, "y", 10)]
    assert all(r._timestamp is not None for r in rows)
    # each INSERT was one commit: two more txns-less appends, ten records, balanced
    manifest = LogReader(open_store(log_url)).manifest()
    assert manifest.next_offset == 11
    check_log(log_url)
    # a DataFrame read and a SQL read of the table agree
    assert read(spark, log_url).count() == spark.table(table).count() == 10


def test_01_location_and_per_statement_read_options(spark, log_url, table):
    orders(spark, log_url, 8)
    spark.sql(f"CREATE TABLE {table} USING wal3 LOCATION '{log_url}'")
    assert spark.sql(f"SELECT count(*) n FROM {table}").first().n == 8
    # read options go with the statement (a table keeps only its location)
    limited = spark.sql(f"SELECT _offset FROM {table} WITH ('startingOffsets' = '6')").collect()
    assert sorted(r._offset for r in limited) == [6, 7, 8]
    assert spark.read.option("endingOffsets", "3").table(table).count() == 2


def test_02_statements_an_append_only_log_cannot_run_change_nothing(spark, log_url, table):
    orders(spark, log_url)
    spark.sql(f"CREATE TABLE {table} USING wal3 OPTIONS (path '{log_url}')")
    before = manifest_bytes(log_url)
    with pytest.raises(Exception, match="a wal3 log is append-only"):
        spark.sql(f"INSERT OVERWRITE {table} (id, name) SELECT id, 'x' FROM range(3)")
    with pytest.raises(Exception, match="_offset is assigned by the log"):
        spark.sql(f"INSERT INTO {table} SELECT id, 'z', id, NULL FROM range(3)")
    with pytest.raises(Exception, match="INSERT_COLUMN_ARITY_MISMATCH"):
        spark.sql(f"INSERT INTO {table} SELECT id, 'z' FROM range(3)")  # name the columns
    with pytest.raises(Exception, match="does not support deletes"):
        spark.sql(f"DELETE FROM {table} WHERE id = 1")
    with pytest.raises(Exception, match="does not support truncates"):
        spark.sql(f"TRUNCATE TABLE {table}")
    with pytest.raises(Exception, match="does not support UPDATE TABLE"):
        spark.sql(f"UPDATE {table} SET name = 'u' WHERE id = 1")
    with pytest.raises(Exception, match="does not support MERGE INTO TABLE"):
        spark.sql(f"MERGE INTO {table} USING (SELECT 1 AS id, 'm' AS name) s ON {table}.id = s.id "
                  "WHEN MATCHED THEN UPDATE SET name = s.name "
                  "WHEN NOT MATCHED THEN INSERT (id, name) VALUES (s.id, s.name)")
    with pytest.raises(Exception, match="DEFAULT_UNSUPPORTED"):  # a log gains columns by mergeSchema
        spark.sql(f"ALTER TABLE {table} ADD COLUMNS (extra STRING)")
    assert manifest_bytes(log_url) == before
    assert {m.key for m in open_store(log_url).list("log/")} == {
        f.path for f in LogReader(open_store(log_url)).manifest().fragments}  # no leftovers
    assert spark.table(table).count() == 5


def test_03_drop_table_keeps_the_log(spark, log_url, table):
    orders(spark, log_url)
    spark.sql(f"CREATE TABLE {table} USING wal3 OPTIONS (path '{log_url}')")
    before = sorted(m.key for m in open_store(log_url).list())
    spark.sql(f"DROP TABLE {table}")
    assert sorted(m.key for m in open_store(log_url).list()) == before
    # a table made with LOCATION is external too, and PURGE does not make Spark delete it
    spark.sql(f"CREATE TABLE {table} USING wal3 LOCATION '{log_url}'")
    spark.sql(f"DROP TABLE {table} PURGE")
    assert sorted(m.key for m in open_store(log_url).list()) == before
    assert read(spark, log_url).count() == 5
    check_log(log_url)


def test_04_create_table_errors_change_nothing(spark, log_url, table):
    with pytest.raises(Exception, match="no wal3 log at .*declare its columns and the table creates it"):
        spark.sql(f"CREATE TABLE {table} USING wal3 OPTIONS (path '{log_url}')")
    assert not spark.catalog.tableExists(table)
    with pytest.raises(Exception, match="unknown type 'nosuchtype' for column 'name'"):
        spark.sql(f"CREATE TABLE {table} USING wal3 OPTIONS (path '{log_url}', schema 'id BIGINT, name nosuchtype')")
    with pytest.raises(Exception, match="metadataColumns='maybe': valid values are true .* and false"):
        spark.sql(f"CREATE TABLE {table} USING wal3 OPTIONS (path '{log_url}', schema 'id BIGINT', "
                  "metadataColumns 'maybe')")
    assert not spark.catalog.tableExists(table)
    # CREATE TABLE … AS SELECT hands the writer no path either: create the table, then INSERT
    with pytest.raises(Exception, match="no log URL.*without a column list or AS SELECT"):
        spark.sql(f"CREATE TABLE {table} USING wal3 OPTIONS (path '{log_url}') AS SELECT id, 'c' AS name "
                  "FROM range(3)")
    assert not spark.catalog.tableExists(table)
    assert not open_store(log_url).exists(MANIFEST_KEY)  # refused before any log was created
    orders(spark, log_url)
    with pytest.raises(Exception, match="table option verifyonread: Spark passes a table's options"):
        spark.sql(f"CREATE TABLE {table} USING wal3 OPTIONS (path '{log_url}', verifyOnRead 'false')")
    with pytest.raises(Exception, match="credentials in CREATE TABLE would be stored"):
        spark.sql(f"CREATE TABLE {table} USING wal3 OPTIONS (path '{log_url}', secretAccessKey 'S3CR3T')")
    assert not spark.catalog.tableExists(table)


def test_05_a_column_list_table_says_how_to_create_it(spark, log_url, table):
    """Spark runs no wal3 code for CREATE TABLE with a column list, so the table cannot know its
    log: every use fails naming the fix (the schema option), and nothing is written."""
    orders(spark, log_url)
    spark.sql(f"CREATE TABLE {table} (id BIGINT, name STRING) USING wal3 OPTIONS (path '{log_url}')")
    before = manifest_bytes(log_url)
    for statement in (f"SELECT * FROM {table}", f"INSERT INTO {table} VALUES (1, 'a')"):
        with pytest.raises(Exception, match="without a column list .*schema 'id BIGINT, name STRING'"):
            spark.sql(statement).collect()
    assert manifest_bytes(log_url) == before


def test_06_read_stream_table_and_write_stream_to_table(spark, log_url, tmp_path, table):
    source, sink = log_url, log_url + "-sink"
    orders(spark, source, 30)
    orders(spark, sink, 0)  # the sink log exists with the same schema, empty
    spark.sql(f"CREATE TABLE {table} USING wal3 OPTIONS (path '{source}')")
    sink_table = table + "_sink"
    spark.sql(f"CREATE TABLE {sink_table} USING wal3 OPTIONS (path '{sink}')")
    try:
        q = (spark.readStream.option("maxRecordsPerTrigger", "10").table(table)
             .drop("_offset", "_timestamp")
             .writeStream.option("checkpointLocation", str(tmp_path / "ckpt"))
             .option("path", sink)  # Spark does not hand a table's location to a stream sink
             .trigger(availableNow=True).toTable(sink_table))
        q.awaitTermination(240)
        assert q.exception() is None
        assert [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]] == [10, 10, 10]
        rows = spark.sql(f"SELECT id, _offset FROM {sink_table}").collect()
        assert sorted(r.id for r in rows) == list(range(30))
        with pytest.raises(Exception, match="no log URL"):
            q = (spark.readStream.table(table).drop("_offset", "_timestamp").writeStream
                 .option("checkpointLocation", str(tmp_path / "ckpt2")).toTable(sink_table))
            q.awaitTermination(240)
            if q.exception():
                raise q.exception()
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {sink_table}")
    check_log(sink)


S3_TABLE_SCRIPT = """
import json, sys
from pyspark.sql import SparkSession
from wal3_spark.spark import ensure_worker_python
ensure_worker_python()
spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "2").getOrCreate())
url, endpoint = sys.argv[1], sys.argv[2]
spark.range(4).selectExpr("id", "'a' AS name").write.format("wal3").mode("append") \\
    .option("endpoint", endpoint).option("pathStyle", "true").save(url)
spark.sql(f"CREATE TABLE s3_orders USING wal3 OPTIONS (path '{url}', endpoint '{endpoint}', "
          "pathStyle 'true')")
spark.sql("INSERT INTO s3_orders (id, name) SELECT id, 'b' FROM range(4, 6)")
rows = spark.sql("SELECT id, name, _offset FROM s3_orders ORDER BY _offset").collect()
print(json.dumps([[r.id, r.name, r._offset] for r in rows]))
spark.stop()
"""


@pytest.mark.s3
def test_07_a_table_on_s3_keeps_its_endpoint_and_takes_credentials_from_the_environment(request, tmp_path):
    """The endpoint given at CREATE TABLE reaches every read and INSERT (no AWS_ENDPOINT_URL*
    in the environment); the credentials come from the environment, never the catalog."""
    seaweed = request.getfixturevalue("seaweed")
    url = seaweed.new_url("sql-table")
    env = {k: v for k, v in spark_env().items() if not k.startswith("AWS_ENDPOINT_URL")}
    env.update({k: v for k, v in seaweed.env.items() if not k.startswith("AWS_ENDPOINT_URL")})
    script = tmp_path / "s3_table.py"
    script.write_text(S3_TABLE_SCRIPT)
    result = subprocess.run([sys.executable, str(script), url, seaweed.endpoint], cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=280)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-5000:]
    rows = json.loads(result.stdout.strip().splitlines()[-1])
    assert rows == [[0, "a", 1], [1, "a", 2], [2, "a", 3], [3, "a", 4], [4, "b", 5], [5, "b", 6]]
    check_log(url, dict(seaweed.options))


def test_08_the_schema_option_creates_an_empty_structured_log(spark, log_url, table):
    """What a column list would do: the table's `schema` option creates the log, empty, with
    those columns (Spark SQL types become the Arrow types a DataFrame of them appends)."""
    spark.sql(f"CREATE TABLE {table} USING wal3 LOCATION '{log_url}' "
              "OPTIONS (schema 'id BIGINT NOT NULL, name STRING, amount DECIMAL(10, 2)')")
    manifest = LogReader(open_store(log_url)).manifest()
    assert manifest.next_offset == 1 and not manifest.fragments
    assert manifest.arrow_schema() == pa.schema([pa.field("id", pa.int64(), nullable=False),
                                                 ("name", pa.string()), ("amount", pa.decimal128(10, 2))])
    described = [r.col_name for r in spark.sql(f"DESCRIBE TABLE {table}").collect()]
    assert described[:5] == ["id", "name", "amount", "_offset", "_timestamp"]
    assert spark.table(table).count() == 0

    spark.sql(f"INSERT INTO {table} (id, name, amount) SELECT id, 'x', 2.5 FROM range(3)")
    append(spark.range(3, 5).selectExpr("id", "'df' AS name", "CAST(1 AS DECIMAL(10, 2)) AS amount"), log_url)
    rows = spark.sql(f"SELECT id, name, _offset FROM {table} ORDER BY _offset").collect()
    assert [(r.id, r.name, r._offset) for r in rows] == [
        (0, "x", 1), (1, "x", 2), (2, "x", 3), (3, "df", 4), (4, "df", 5)]
    check_log(log_url)

    # another table over the same log: a schema the log takes is fine, another one is refused
    again = table + "_again"
    try:
        spark.sql(f"CREATE TABLE {again} USING wal3 OPTIONS (path '{log_url}', schema 'id BIGINT, name STRING')")
        assert spark.table(again).columns == ["id", "name", "amount", "_offset", "_timestamp"]
        spark.sql(f"DROP TABLE {again}")
        before = manifest_bytes(log_url)
        with pytest.raises(Exception, match="exists, and appends of the columns the schema option declares "
                                            "would not fit it.*column 'id' is int32, the log has int64"):
            spark.sql(f"CREATE TABLE {again} USING wal3 OPTIONS (path '{log_url}', schema 'id INT')")
        assert not spark.catalog.tableExists(again) and manifest_bytes(log_url) == before
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {again}")


def test_09_a_table_without_metadata_columns_takes_positional_inserts(spark, log_url, table):
    """Spark 4.3 checks a positional INSERT's arity against every column of a DS v2 table, so
    with `_offset`/`_timestamp` in the table only INSERTs naming their columns work; with
    metadataColumns 'false' the table holds only the payload and positional INSERTs work."""
    spark.sql(f"CREATE TABLE {table} USING wal3 OPTIONS (path '{log_url}', "
              "schema 'id BIGINT, name STRING', metadataColumns 'false')")
    assert [r.col_name for r in spark.sql(f"DESCRIBE TABLE {table}").collect()] == ["id", "name"]
    spark.sql(f"INSERT INTO {table} SELECT id, 'p' FROM range(2)")
    spark.sql(f"INSERT INTO {table} VALUES (7, 'v')")
    spark.sql(f"INSERT INTO {table} BY NAME SELECT 'n' AS name, 8 AS id")
    assert spark.table(table).columns == ["id", "name"]
    assert sorted(tuple(r) for r in spark.table(table).collect()) == [(0, "p"), (1, "p"), (7, "v"), (8, "n")]
    # the log still numbers every record: a DataFrame read shows them
    assert [r._offset for r in read(spark, log_url).orderBy("_offset").collect()] == [1, 2, 3, 4]
    with pytest.raises(Exception, match="a wal3 log is append-only"):
        spark.sql(f"INSERT OVERWRITE {table} SELECT id, 'o' FROM range(1)")
    assert LogReader(open_store(log_url)).manifest().next_offset == 5
    check_log(log_url)
