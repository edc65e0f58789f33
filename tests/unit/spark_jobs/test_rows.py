"""Records to rows: the schema Spark expects, and the Arrow batches both readers produce."""

import datetime

import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructField, StructType

from spark_jobs.rows import RowBuilder, arrow_schema, build_batches, spark_schema


def test_schema_of_sparks_kafka_source():
    assert spark_schema(False).simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int>"
    )
    assert spark_schema(True).fields[-1].simpleString() == (
        "headers:array<struct<key:string,value:binary>>"
    )
    assert arrow_schema(spark_schema(True)).equals(to_arrow_schema(spark_schema(True), timezone="UTC"))


def test_rows_become_arrow_columns():
    schema = arrow_schema(spark_schema(True))
    builder = RowBuilder(schema, "t", 3)
    records = [
        (10, 1_700_000_000_123, 0, b"k", b"v", [("a", b"1"), ("n", None)]),
        (12, -1, 1, None, None, None),
        (13, 0, -1, b"", b"", []),
    ]
    batches = list(build_batches(builder, records))
    assert len(batches) == 1 and batches[0].schema.equals(schema)
    rows = batches[0].to_pylist()
    utc = datetime.timezone.utc
    assert rows[0] == {
        "key": b"k",
        "value": b"v",
        "topic": "t",
        "partition": 3,
        "offset": 10,
        "timestamp": datetime.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=utc),
        "timestampType": 0,
        "headers": [{"key": "a", "value": b"1"}, {"key": "n", "value": None}],
    }
    assert rows[1]["key"] is None and rows[1]["value"] is None and rows[1]["headers"] == []
    assert rows[1]["timestamp"] == datetime.datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=utc)
    assert (rows[2]["key"], rows[2]["value"], rows[2]["timestampType"]) == (b"", b"", -1)
    assert (builder.rows, builder.value_bytes) == (3, 2)


def test_batches_are_cut_by_rows_and_bytes():
    schema = arrow_schema(spark_schema(False))
    records = [(i, i, 0, None, b"x" * 100, None) for i in range(25)]
    by_rows = list(build_batches(RowBuilder(schema, "t", 0, max_rows=10), records))
    assert [b.num_rows for b in by_rows] == [10, 10, 5]
    by_bytes = list(build_batches(RowBuilder(schema, "t", 0, max_bytes=250), records))
    assert [b.num_rows for b in by_bytes] == [3] * 8 + [1]
    assert [r["offset"] for b in by_rows for r in b.to_pylist()] == list(range(25))
    assert list(build_batches(RowBuilder(schema, "t", 0), [])) == []


def test_a_narrowed_schema_gets_just_its_columns():
    full = spark_schema(True)
    narrow = StructType([full["offset"], full["value"]])
    batch = next(build_batches(RowBuilder(arrow_schema(narrow), "t", 0), [(5, 1, 0, b"k", b"v", [("h", b"")])]))
    assert batch.schema.names == ["offset", "value"]
    assert batch.to_pylist() == [{"offset": 5, "value": b"v"}]
    with pytest.raises(ValueError, match="no column nope"):
        arrow_schema(StructType([StructField("nope", full["key"].dataType)]))
    assert isinstance(arrow_schema(narrow), pa.Schema)
