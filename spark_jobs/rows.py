"""Records to rows: the one place where a Kafka record becomes a row of the data source.

The schema is that of Spark's built-in Kafka source, so jobs port over unchanged:

    key binary, value binary, topic string, partition int, offset long, timestamp timestamp,
    timestampType int, and with includeHeaders=true headers array<struct<key string,
    value binary>>

`timestampType` is Java's TimestampType id: 0 CreateTime, 1 LogAppendTime, -1 none. A record
without headers has an empty headers array. Timestamps are exact to the millisecond (Spark keeps
microseconds).

Both readers feed `RowBuilder.add` with plain values: the online one from librdkafka messages
(spark_jobs.online), the offline one from records decoded out of segment files
(spark_jobs.offline). The builder gathers columns and hands out Arrow record batches, which
Spark takes from a Python data source without converting row by row; a schema the user narrowed
to some of the columns gets just those.
"""

from collections.abc import Iterable, Sequence

import pyarrow as pa

# Java's TimestampType ids, which Spark's Kafka source puts in the timestampType column.
NO_TIMESTAMP_TYPE = -1
CREATE_TIME = 0
LOG_APPEND_TIME = 1

COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType")
HEADERS_COLUMN = "headers"
_MAX_BATCH_ROWS = 8192
_MAX_BATCH_BYTES = 8 << 20

Headers = Sequence[tuple[str, bytes | None]] | None


def spark_schema(include_headers: bool):
    """The data source's schema, as a pyspark StructType."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField(HEADERS_COLUMN, ArrayType(header)))
    return StructType(fields)


def arrow_schema(schema) -> pa.Schema:
    """The Arrow schema Spark expects record batches of `schema` (a StructType) to have: it
    compares them exactly, down to field names inside lists."""
    from pyspark.sql.pandas.types import to_arrow_schema

    unknown = [name for name in schema.fieldNames() if name not in COLUMNS + (HEADERS_COLUMN,)]
    if unknown:
        raise ValueError(f"the logway source has no column {', '.join(unknown)}")
    return to_arrow_schema(schema, timezone="UTC")


class RowBuilder:
    """Rows of one topic-partition, gathered column by column into Arrow record batches."""

    def __init__(
        self,
        schema: pa.Schema,
        topic: str,
        partition: int,
        max_rows: int = _MAX_BATCH_ROWS,
        max_bytes: int = _MAX_BATCH_BYTES,
    ) -> None:
        self.schema = schema
        self.topic = topic
        self.partition = partition
        self._max_rows = max_rows
        self._max_bytes = max_bytes
        self._want_headers = HEADERS_COLUMN in schema.names
        self.rows = 0  # in all batches so far
        self.value_bytes = 0  # keys and values, in all batches so far
        self._reset()

    def _reset(self) -> None:
        self._keys: list[bytes | None] = []
        self._values: list[bytes | None] = []
        self._offsets: list[int] = []
        self._timestamps: list[int] = []
        self._types: list[int] = []
        self._headers: list[list[dict]] = []
        self._bytes = 0

    def add(
        self,
        offset: int,
        timestamp_ms: int,
        timestamp_type: int,
        key: bytes | None,
        value: bytes | None,
        headers: Headers,
    ) -> pa.RecordBatch | None:
        """Add one record; returns a full batch when this one filled it, else None."""
        self._keys.append(key)
        self._values.append(value)
        self._offsets.append(offset)
        self._timestamps.append(timestamp_ms * 1000)
        self._types.append(timestamp_type)
        if self._want_headers:
            self._headers.append([{"key": k, "value": v} for k, v in headers or ()])
        size = (len(key) if key else 0) + (len(value) if value else 0)
        self._bytes += size
        self.value_bytes += size
        self.rows += 1
        if len(self._offsets) >= self._max_rows or self._bytes >= self._max_bytes:
            return self.flush()
        return None

    def flush(self) -> pa.RecordBatch | None:
        """The rows added since the last batch, as a batch; None when there are none."""
        count = len(self._offsets)
        if not count:
            return None
        columns = {
            "key": lambda t: pa.array(self._keys, t),
            "value": lambda t: pa.array(self._values, t),
            "topic": lambda t: pa.array([self.topic] * count, t),
            "partition": lambda t: pa.array([self.partition] * count, t),
            "offset": lambda t: pa.array(self._offsets, t),
            "timestamp": lambda t: pa.array(self._timestamps, pa.int64()).cast(t),
            "timestampType": lambda t: pa.array(self._types, t),
            HEADERS_COLUMN: lambda t: pa.array(self._headers, t),
        }
        arrays = [columns[f.name](f.type) for f in self.schema]
        self._reset()
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def empty_table(self) -> pa.Table:
        return self.schema.empty_table()


def build_batches(builder: RowBuilder, records: Iterable[tuple]) -> Iterable[pa.RecordBatch]:
    """Batches of `records`, each (offset, timestamp ms, timestamp type, key, value, headers)."""
    add = builder.add
    for record in records:
        batch = add(*record)
        if batch is not None:
            yield batch
    batch = builder.flush()
    if batch is not None:
        yield batch
