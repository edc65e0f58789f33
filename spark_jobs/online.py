"""Online reads: through the brokers' Fetch API, with confluent-kafka (librdkafka).

Planning (on the driver) asks an AdminClient: Metadata for the topics and their partitions,
ListOffsets for earliest, latest (at the read's isolation level: the high watermark, or the last
stable offset for read_committed) and offsets by timestamp. Each offset-range task then runs one
Consumer that is assigned its single partition at the range start, never joins a group and
never commits. librdkafka routes fetches to each partition's leader from metadata (so a cluster
works as one broker does, following leader changes), decodes every codec, drops control batches,
and with isolation.level=read_committed drops aborted transactions' records too.

A task stops at the first record at or past the range end, or at the end of the partition once
its end offset reaches the range end: with compaction gaps, aborted records or control batches
the range's last offsets may hold nothing to return. It waits at most kafkaConsumer.pollTimeoutMs
for records it expects. A range start that retention deleted meanwhile comes back from the
broker as OFFSET_OUT_OF_RANGE (auto.offset.reset is "error"): DataLossError, or with
failOnDataLoss=false a warning and a restart at the log start.
"""

import logging
import time
from collections.abc import Iterable, Iterator, Mapping

from spark_jobs.options import TP, ReadOptions
from spark_jobs.planning import DataLossError, OffsetRange
from spark_jobs.rows import CREATE_TIME, LOG_APPEND_TIME, NO_TIMESTAMP_TYPE

log = logging.getLogger(__name__)

_REQUEST_TIMEOUT_S = 30
_CONSUME_BATCH = 1000
_READER_GROUP = "logway-spark-reader"  # librdkafka wants one; it is never joined nor committed


def client_config(bootstrap_servers: str, extra: Iterable[tuple[str, str]], **settings) -> dict:
    config = {"bootstrap.servers": bootstrap_servers, "client.id": "logway-spark"}
    config.update(settings)
    config.update(dict(extra))
    return config


class KafkaLookup:
    """Planning's questions (planning.OffsetLookup), answered by the brokers."""

    def __init__(self, options: ReadOptions) -> None:
        from confluent_kafka.admin import AdminClient

        self._options = options
        self._admin = AdminClient(
            client_config(options.bootstrap_servers, options.client_config)
        )

    def topics(self) -> dict[str, int]:
        metadata = self._admin.list_topics(timeout=_REQUEST_TIMEOUT_S)
        return {
            name: len(topic.partitions)
            for name, topic in metadata.topics.items()
            if topic.error is None
        }

    def _list_offsets(self, specs: dict) -> dict:
        from confluent_kafka import IsolationLevel, TopicPartition

        if not specs:
            return {}
        isolation = (
            IsolationLevel.READ_COMMITTED
            if self._options.read_committed
            else IsolationLevel.READ_UNCOMMITTED
        )
        futures = self._admin.list_offsets(
            {TopicPartition(t, p): spec for (t, p), spec in specs.items()},
            isolation_level=isolation,
            request_timeout=_REQUEST_TIMEOUT_S,
        )
        return {(tp.topic, tp.partition): f.result() for tp, f in futures.items()}

    def earliest(self, tps: Iterable[TP]) -> dict[TP, int]:
        from confluent_kafka.admin import OffsetSpec

        found = self._list_offsets({tp: OffsetSpec.earliest() for tp in tps})
        return {tp: info.offset for tp, info in found.items()}

    def latest(self, tps: Iterable[TP]) -> dict[TP, int]:
        from confluent_kafka.admin import OffsetSpec

        found = self._list_offsets({tp: OffsetSpec.latest() for tp in tps})
        return {tp: info.offset for tp, info in found.items()}

    def for_timestamps(self, timestamps: Mapping[TP, int]) -> dict[TP, int | None]:
        from confluent_kafka.admin import OffsetSpec

        found = self._list_offsets(
            {tp: OffsetSpec.for_timestamp(ts) for tp, ts in timestamps.items()}
        )
        return {tp: (info.offset if info.offset >= 0 else None) for tp, info in found.items()}


def read_range(options: ReadOptions, offsets: OffsetRange) -> Iterator[tuple]:
    """(offset, timestamp ms, timestamp type, key, value, headers) of each record of the range,
    fetched from the partition's leader."""
    from confluent_kafka import (
        TIMESTAMP_CREATE_TIME,
        TIMESTAMP_LOG_APPEND_TIME,
        Consumer,
        KafkaError,
        KafkaException,
        TopicPartition,
    )

    # librdkafka's timestamp types to Java's TimestampType ids.
    types = {TIMESTAMP_CREATE_TIME: CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME: LOG_APPEND_TIME}
    consumer = Consumer(
        client_config(
            options.bootstrap_servers,
            options.client_config,
            **{
                "group.id": _READER_GROUP,
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": True,
                "auto.offset.reset": "error",
                "isolation.level": options.isolation_level,
            },
        )
    )
    topic, partition, end = offsets.topic, offsets.partition, offsets.end
    position = offsets.start
    timeout_s = options.poll_timeout_ms / 1000
    try:
        consumer.assign([TopicPartition(topic, partition, position)])
        deadline = time.monotonic() + timeout_s
        while position < end:
            messages = consumer.consume(_CONSUME_BATCH, timeout=min(1.0, timeout_s))
            if not messages:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"no records of {offsets} from offset {position} in "
                        f"{options.poll_timeout_ms} ms (kafkaConsumer.pollTimeoutMs)"
                    )
                continue
            for message in messages:
                error = message.error()
                if error is not None:
                    code = error.code()
                    if code == KafkaError._PARTITION_EOF:
                        if message.offset() >= end:
                            position = end  # nothing more in the range: gaps or markers
                            break
                        continue
                    if code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                        position = _after_data_loss(consumer, options, offsets, position, error)
                        break
                    if error.fatal() or not error.retriable():
                        raise KafkaException(error)
                    log.warning("%s: %s (retrying)", offsets, error)
                    continue
                offset = message.offset()
                if offset >= end:
                    position = end
                    break
                kind, timestamp = message.timestamp()
                yield (
                    offset,
                    timestamp,
                    types.get(kind, NO_TIMESTAMP_TYPE),
                    message.key(),
                    message.value(),
                    message.headers(),
                )
                position = offset + 1
            deadline = time.monotonic() + timeout_s
    finally:
        consumer.close()


def _after_data_loss(consumer, options: ReadOptions, offsets: OffsetRange, position: int, error) -> int:
    """Where to go on after the broker said `position` is out of range."""
    from confluent_kafka import TopicPartition

    low, high = consumer.get_watermark_offsets(
        TopicPartition(offsets.topic, offsets.partition), timeout=_REQUEST_TIMEOUT_S, cached=False
    )
    message = (
        f"offset {position} of {offsets.topic}-{offsets.partition} is out of range "
        f"(the log holds {low}..{high - 1}): {error.str()}"
    )
    if position >= low:
        # Not below the log start: the log end moved back (an unclean leader change). The
        # records asked for are gone just the same.
        message += "; the log was truncated"
    if options.fail_on_data_loss:
        raise DataLossError(message + "; set failOnDataLoss=false to skip the lost offsets")
    log.warning("%s; skipping the lost offsets (failOnDataLoss=false)", message)
    if low >= offsets.end or position >= low:
        return offsets.end
    consumer.assign([TopicPartition(offsets.topic, offsets.partition, low)])
    return low
