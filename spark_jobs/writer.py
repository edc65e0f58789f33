"""Writing rows to topics: one producer per Spark task, fed Arrow record batches.

Columns, as Spark's Kafka sink takes them: `value` (binary or string, required; null writes a
tombstone), and optionally `key` (binary or string), `topic` (string; the `topic` option, when
set, wins over it), `partition` (int; null leaves the choice to the partitioner) and `headers`
(array<struct<key string, value binary>>). Other columns are ignored. Strings are written as
UTF-8.

The producer (confluent-kafka) uses acks=all and Java's partitioner for keyed records
(murmur2_random), so a key lands in the partition a Java client would pick. kafka.* options
reach it unchanged (compression.type, linger.ms, batch.size, transaction.timeout.ms, ...).
A task fails if any of its records is not acknowledged.

Delivery guarantees (option `transactional`, true by default):

- Exactly once per task, for readers with isolation.level=read_committed (the logway source's
  kafka.isolation.level=read_committed): each task writes in one transaction of a transactional
  producer whose transactional.id is "<transactionalIdPrefix>-<job id>-<Spark partition id>".
  The job id is made once per write on the driver (the writer object Spark pickles to every
  task), so every attempt of a task has the same transactional.id and two writes never share
  one. A new attempt's init_transactions() fences the attempts before it (a zombie can no
  longer produce nor commit) and aborts their open transaction, so a read_committed reader
  never sees the records of a failed attempt: only those of the attempt that committed.
  read_uncommitted readers see aborted attempts' records too, as Kafka's do.
- The transaction spans the whole task, so transaction.timeout.ms (default here 900000, the
  broker's default transaction.max.timeout.ms; librdkafka's own default is 60000) bounds how
  long a task may write: the coordinator aborts a transaction older than that, and the task
  fails at its commit. Until a task commits, its partitions' last stable offset stays at its
  first record, so read_committed readers wait for it.
- One gap stays: an attempt that committed and was lost before Spark heard of it (its executor
  died right after the commit, or a speculative copy of a task that already committed) is run
  again and writes its rows a second time. Closing it needs the task to leave its transaction
  prepared and the driver's commit() to commit them all (two-phase commit, KIP-939), or
  idempotent keys downstream. The driver's abort() of a failed write cannot take back the
  tasks that committed either; it fences the tasks that did not, aborting a transaction an
  executor lost mid-task left open (`abort_tasks`).
- transactional=false: an idempotent producer (enable.idempotence=true). Exactly once within a
  task attempt (librdkafka's retries never write a record twice), at least once across
  attempts: a retried task's new producer has a new producer id, and the broker cannot tell
  its records from those the failed attempt wrote.

For tests, the undocumented option injectFailureAfterRows=N makes the first attempt of every
task that sends N rows wait until they are acked (so they are in the log) and then fail with
InjectedFailure; Spark's retry of the task (spark.task.maxFailures >= 2) runs normally.
"""

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

import pyarrow as pa

from spark_jobs.faults import InjectedFailure, task_attempt
from spark_jobs.options import TP, WriteOptions
from spark_jobs.online import client_config

log = logging.getLogger(__name__)

WRITE_COLUMNS = ("key", "value", "topic", "partition", "headers")
_FLUSH_TIMEOUT_S = 600
_ABORT_TIMEOUT_S = 60
_COMMIT_ATTEMPTS = 3
# Kafka's default transaction.max.timeout.ms: the longest transaction a default broker allows,
# so that a task may write for up to 15 minutes (kafka.transaction.timeout.ms changes it).
TRANSACTION_TIMEOUT_MS = 900_000


@dataclass
class WriteStats:
    """What a task wrote: rows, key and value bytes, per partition (records acked, first offset,
    last offset), and per partition the transaction markers its commits added to the log (one
    per committed transaction that wrote there; none for a non-transactional write)."""

    rows: int = 0
    bytes: int = 0
    partitions: dict[TP, tuple[int, int, int]] = field(default_factory=dict)
    markers: dict[TP, int] = field(default_factory=dict)

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
        for tp, markers in other.markers.items():
            self.markers[tp] = self.markers.get(tp, 0) + markers
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


def task_transactional_id(options: WriteOptions, job_id: str) -> str | None:
    """The transactional.id of the running Spark task's producer (None: not transactional):
    the same for every attempt of the task, different for every task of every write."""
    if not options.transactional:
        return None
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        raise WriteError("a transactional write runs in a Spark task (no TaskContext here)")
    return transactional_id(options, job_id, context.partitionId())


def transactional_id(options: WriteOptions, job_id: str, partition_id: int) -> str:
    return f"{options.transactional_id_prefix}-{job_id}-{partition_id}"


class TaskProducer:
    """The producer of one Spark task attempt: transactional when given a transactional.id,
    else idempotent (see the module docstring). `begin`, `send`, then `commit` or `abort`."""

    def __init__(
        self, options: WriteOptions, transactional_id: str | None, settings: dict | None = None
    ) -> None:
        from confluent_kafka import Producer

        transactional = (
            {"transactional.id": transactional_id, "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS}
            if transactional_id
            else {}
        )
        config = client_config(
            options.bootstrap_servers,
            options.client_config,
            **{
                "acks": "all",
                "enable.idempotence": True,
                "partitioner": "murmur2_random",
                "linger.ms": 5,
                **transactional,
                **(settings or {}),
            },
        )
        self._producer = Producer(config)
        self._transactional = bool(transactional_id)
        self._in_transaction = False
        self.stats = WriteStats()
        self._errors: list[str] = []

    def begin(self) -> None:
        """Transactional: fence the earlier attempts of the task (aborting their open
        transaction) and open this attempt's transaction."""
        if self._transactional:
            self._producer.init_transactions(_FLUSH_TIMEOUT_S)
            self._producer.begin_transaction()
            self._in_transaction = True

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

    def wait_for_acks(self) -> None:
        """Return once every record sent is acked; raise WriteError if one was not."""
        remaining = self._producer.flush(_FLUSH_TIMEOUT_S)
        if remaining:
            self._errors.append(f"{remaining} records still unacknowledged after {_FLUSH_TIMEOUT_S}s")
        if self._errors:
            raise WriteError("records were not written: " + "; ".join(self._errors))

    def commit(self) -> WriteStats:
        """Wait until every record is acked, then commit the transaction; raise WriteError if
        a record was not acked (the caller aborts)."""
        self.wait_for_acks()
        if self._transactional:
            self._commit_transaction()
        return self.stats

    def _commit_transaction(self) -> None:
        from confluent_kafka import KafkaException

        for attempt in range(_COMMIT_ATTEMPTS):
            try:
                self._producer.commit_transaction(_FLUSH_TIMEOUT_S)
                break
            except KafkaException as exc:
                error = exc.args[0]
                # librdkafka lets a commit that timed out be called again: it resumes the
                # commit under way rather than starting another.
                if not error.retriable() or attempt + 1 == _COMMIT_ATTEMPTS:
                    raise WriteError(f"the task's transaction did not commit: {error.str()}") from exc
                log.warning("committing the task's transaction: %s (retrying)", error.str())
        self._in_transaction = False
        self.stats.markers = {tp: 1 for tp in self.stats.partitions}

    def abort(self) -> None:
        """Give up. Transactional: abort the transaction, so read_committed readers never see
        its records (if even that fails, the next attempt's begin aborts it). Otherwise drop
        what is not sent yet: a plain producer cannot take back what was."""
        if not self._in_transaction:
            self._producer.purge()
            self._producer.flush(0)
            return
        try:
            self._producer.abort_transaction(_ABORT_TIMEOUT_S)
        except Exception as exc:  # the task fails anyway; its original error matters more
            log.warning("aborting the task's transaction: %s", exc)
        self._in_transaction = False


def abort_tasks(options: WriteOptions, job_id: str, partition_ids: Iterable[int]) -> None:
    """After a failed write, on the driver: fence the given tasks' transactional ids, so that a
    transaction their last attempt left open (an executor lost mid-task) is aborted now rather
    than when transaction.timeout.ms runs out, holding read_committed readers back until then."""
    if not options.transactional:
        return
    from confluent_kafka import Producer

    for partition_id in partition_ids:
        producer = Producer(
            client_config(
                options.bootstrap_servers,
                options.client_config,
                **{"transactional.id": transactional_id(options, job_id, partition_id)},
            )
        )
        try:
            producer.init_transactions(_ABORT_TIMEOUT_S)
        except Exception as exc:  # best effort: the timeout aborts it in the end
            log.warning("fencing task %d of the failed write %s: %s", partition_id, job_id, exc)


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


def _inject_failure(producer: TaskProducer) -> None:
    attempt = task_attempt()
    if attempt == 0:
        producer.wait_for_acks()
        raise InjectedFailure(
            f"injected failure after {producer.stats.acked} rows were acked (attempt {attempt})"
        )


def write_batches(
    options: WriteOptions,
    batches: Iterable[pa.RecordBatch],
    job_id: str,
    settings: dict | None = None,
) -> WriteStats:
    """Produce every row of `batches` with the running Spark task's producer; return once all
    are acked (and, transactional, committed). `job_id` names the write (see the module
    docstring)."""
    producer = TaskProducer(options, task_transactional_id(options, job_id), settings)
    try:
        producer.begin()
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
                if producer.stats.rows == options.inject_failure_after_rows:
                    _inject_failure(producer)
            producer.poll()
        return producer.commit()
    except BaseException:
        producer.abort()
        raise

