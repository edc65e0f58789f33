"""Writing rows to topics: one producer per Spark task, fed Arrow record batches.

Columns, as Spark's Kafka sink takes them: `value` (binary or string, required; null writes a
tombstone), and optionally `key` (binary or string), `topic` (string; the `topic` option, when
set, wins over it), `partition` (int; null leaves the choice to the partitioner) and `headers`
(array<struct<key string, value binary>>). Other columns are ignored. Strings are written as
UTF-8.

The producer (confluent-kafka) is idempotent, uses acks=all and Java's partitioner for keyed
records (murmur2_random), so a key lands in the partition a Java client would pick. kafka.*
options reach it unchanged (compression.type, linger.ms, batch.size, ...; even
enable.idempotence). A task fails if any of its records is not acknowledged.

Delivery guarantees:

- Within a task attempt, exactly once and in order per partition: the producer is idempotent
  (enable.idempotence=true), so its own retries (an answer lost on the network, a reconnect, a
  broker restart) never write a record twice; the broker recognises a batch it already has by
  producer id, epoch and sequence numbers and answers with the original offsets. A record
  librdkafka gives up on (message.timeout.ms, or a fatal idempotence error) fails the task, as
  any unacknowledged record does.
- Across task attempts, at least once: a Spark task that fails after some of its records were
  acked and is retried runs a new producer, with a new producer id, and the broker cannot tell
  its records from those the failed attempt wrote. Idempotence does not dedupe them.
- Exactly once per task needs a transactional producer per task with a deterministic
  transactional.id (say "<prefix>-<job>-<Spark partition id>", the same for every attempt of a
  task): the new attempt's init_transactions() fences the failed attempt and aborts its open
  transaction, so read_committed consumers never see the failed attempt's records. That is the
  `TaskProducer` hooks: `begin` would call init_transactions() and begin_transaction(), `commit`
  commit_transaction(), `abort` abort_transaction(). One gap stays: an attempt that committed and
  was then lost before Spark heard of it is redone. Closing it needs the task to leave its
  transaction prepared and the driver's commit() to commit them all (two-phase commit, KIP-939),
  or idempotent keys downstream. logway serves transactions; this writer does not use them yet.
"""

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

import pyarrow as pa

from spark_jobs.options import TP, WriteOptions
from spark_jobs.online import client_config

log = logging.getLogger(__name__)

WRITE_COLUMNS = ("key", "value", "topic", "partition", "headers")
_FLUSH_TIMEOUT_S = 600


@dataclass
class WriteStats:
    """What a task wrote: rows, key and value bytes, and per partition (records acked, first
    offset, last offset)."""

    rows: int = 0
    bytes: int = 0
    partitions: dict[TP, tuple[int, int, int]] = field(default_factory=dict)

    def add_delivery(self, tp: TP, offset: int) -> None:
        count, first, last = self.partitions.get(tp, (0, offset, offset))
        self.partitions[tp] = (count + 1, min(first, offset), max(last, offset))

    def merge(self, other: "WriteStats") -> "WriteStats":
        self.rows += other.rows
        self.bytes += other.bytes
        for tp, (count, first, last) in other.partitions.items():
            if tp in self.partitions:
                old_count, old_first, old_last = self.partitions[tp]
                self.partitions[tp] = (old_count + count, min(old_first, first), max(old_last, last))
            else:
                self.partitions[tp] = (count, first, last)
        return self

    @property
    def acked(self) -> int:
        return sum(count for count, _, _ in self.partitions.values())


class WriteError(RuntimeError):
    pass


def check_columns(names: Iterable[str], topic_option: str | None) -> None:
    """Refuse, before any task runs, rows the writer could not write."""
    names = set(names)
    if "value" not in names:
        raise WriteError("writing to logway needs a value column (binary or string)")
    if topic_option is None and "topic" not in names:
        raise WriteError("writing to logway needs a topic option or a topic column")


class TaskProducer:
    """The producer of one Spark task. `begin` / `commit` / `abort` are where a transactional
    producer slots in (see the module docstring); this one is idempotent: exactly once within
    the attempt, at least once across attempts."""

    def __init__(self, options: WriteOptions, settings: dict | None = None) -> None:
        from confluent_kafka import Producer

        config = client_config(
            options.bootstrap_servers,
            options.client_config,
            **{
                "acks": "all",
                "enable.idempotence": True,
                "partitioner": "murmur2_random",
                "linger.ms": 5,
                **(settings or {}),
            },
        )
        self._producer = Producer(config)
        self.stats = WriteStats()
        self._errors: list[str] = []

    def begin(self) -> None:
        pass

    def _on_delivery(self, error, message) -> None:
        if error is not None:
            if len(self._errors) < 10:
                self._errors.append(f"{message.topic()}-{message.partition()}: {error.str()}")
            else:
                self._errors[-1] = "... and more"
            return
        self.stats.add_delivery((message.topic(), message.partition()), message.offset())

    def send(self, topic: str, value, key, partition, headers) -> None:
        kwargs = {"value": value, "key": key, "on_delivery": self._on_delivery}
        if partition is not None:
            kwargs["partition"] = partition
        if headers:
            kwargs["headers"] = headers
        while True:
            try:
                self._producer.produce(topic, **kwargs)
                break
            except BufferError:
                self._producer.poll(0.05)  # the local queue is full: let deliveries drain
        self.stats.rows += 1
        self.stats.bytes += (len(value) if value else 0) + (len(key) if key else 0)

    def poll(self) -> None:
        self._producer.poll(0)

    def commit(self) -> WriteStats:
        """Wait until every record is acked; raise WriteError if any was not."""
        remaining = self._producer.flush(_FLUSH_TIMEOUT_S)
        if remaining:
            self._errors.append(f"{remaining} records still unacknowledged after {_FLUSH_TIMEOUT_S}s")
        if self._errors:
            raise WriteError("records were not written: " + "; ".join(self._errors))
        return self.stats

    def abort(self) -> None:
        """Give up: drop what is not sent yet (a plain producer cannot take back what was)."""
        self._producer.purge()
        self._producer.flush(0)


def _bytes_column(batch: pa.RecordBatch, name: str, required: bool = False) -> list:
    if name not in batch.schema.names:
        if required:
            raise WriteError(f"no {name} column")
        return [None] * batch.num_rows
    column = batch.column(name)
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        return [None if v is None else v.encode() for v in column.to_pylist()]
    if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
        return column.to_pylist()
    raise WriteError(f"the {name} column must be binary or string, not {column.type}")


def _column(batch: pa.RecordBatch, name: str) -> list:
    if name not in batch.schema.names:
        return [None] * batch.num_rows
    return batch.column(name).to_pylist()


def write_batches(
    options: WriteOptions, batches: Iterable[pa.RecordBatch], settings: dict | None = None
) -> WriteStats:
    """Produce every row of `batches` with one producer; return once all are acked."""
    producer = TaskProducer(options, settings)
    producer.begin()
    try:
        for batch in batches:
            values = _bytes_column(batch, "value", required=True)
            keys = _bytes_column(batch, "key")
            topics = [options.topic] * batch.num_rows if options.topic else _column(batch, "topic")
            partitions = _column(batch, "partition")
            headers = _column(batch, "headers")
            for value, key, topic, partition, row_headers in zip(
                values, keys, topics, partitions, headers
            ):
                if not topic:
                    raise WriteError("a row has no topic (null topic column and no topic option)")
                producer.send(
                    topic,
                    value,
                    key,
                    partition,
                    [(h["key"], h["value"]) for h in row_headers] if row_headers else None,
                )
            producer.poll()
        return producer.commit()
    except BaseException:
        producer.abort()
        raise

