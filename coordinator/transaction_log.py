"""The records of __transaction_state, in Kafka's own layouts (TransactionLogKey and
TransactionLogValue), so that Kafka's tools (kafka-dump-log.sh --transaction-log-decoder) read
what logway writes, and logway reads what Kafka wrote.

A record's key is an INT16 key version followed by the struct of that version; a value is an
INT16 value version followed by its struct; a null value is a tombstone, removing the
transactional id.

TransactionLogKey v0:
    transactional_id STRING

TransactionLogValue:
    v0  producer_id INT64, producer_epoch INT16, transaction_timeout_ms INT32,
        transaction_status INT8, transaction_partitions NULLABLE ARRAY of
            topic STRING, partition_ids ARRAY of INT32
        ,
        transaction_last_update_timestamp_ms INT64, transaction_start_timestamp_ms INT64
    v1  v0, flexible, with tagged fields previous_producer_id (0), next_producer_id (1) and
        client_transaction_version (2): written only by the second transaction protocol
        (KIP-890), which logway does not serve; reading one skips them.
Written: v0.

transaction_status holds the coordinator's TxnState codes (0 Empty ... 7 PrepareEpochFence).
"""

import enum
from dataclasses import dataclass

from protocol.primitives import INT8, INT16, INT32, INT64, Reader, encode_array_length, encode_string
from storage.topic_partition import TopicPartition

KEY_VERSION = 0
VALUE_VERSION = 0
_HIGHEST_VALUE_VERSION = 1
_FIRST_FLEXIBLE_VERSION = 1


class UnsupportedRecordVersionError(ValueError):
    """A key or value version this module does not know."""


class TxnState(enum.IntEnum):
    """A transactional id's state, with the codes Kafka stores."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def display_name(self) -> str:
        """The name Kafka's DescribeTransactions and ListTransactions report."""
        return "".join(word.capitalize() for word in self.name.split("_"))


@dataclass(frozen=True, slots=True)
class TransactionLogValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition]
    last_update_ms: int
    start_ms: int


def encode_key(transactional_id: str) -> bytes:
    return INT16.pack(KEY_VERSION) + encode_string(transactional_id, False)


def decode_key(data: bytes) -> str:
    """The transactional id of a record's key. Raises ProtocolError for bytes that do not
    parse, UnsupportedRecordVersionError for another key version."""
    reader = Reader(memoryview(data))
    version = reader.int16()
    if version != KEY_VERSION:
        raise UnsupportedRecordVersionError(f"transaction log key version {version} is not 0")
    return reader.string(False)


def encode_value(value: TransactionLogValue) -> bytes:
    out = bytearray(INT16.pack(VALUE_VERSION))
    out += INT64.pack(value.producer_id)
    out += INT16.pack(value.producer_epoch)
    out += INT32.pack(value.timeout_ms)
    out += INT8.pack(value.state)
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(value.partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    out += encode_array_length(len(by_topic), False)
    for topic, partitions in by_topic.items():
        out += encode_string(topic, False)
        out += encode_array_length(len(partitions), False)
        for partition in partitions:
            out += INT32.pack(partition)
    out += INT64.pack(value.last_update_ms)
    out += INT64.pack(value.start_ms)
    return bytes(out)


def decode_value(data: bytes) -> TransactionLogValue:
    reader = Reader(memoryview(data))
    version = reader.int16()
    if not 0 <= version <= _HIGHEST_VALUE_VERSION:
        raise UnsupportedRecordVersionError(f"transaction log value version {version} is not 0-1")
    flexible = version >= _FIRST_FLEXIBLE_VERSION
    producer_id = reader.int64()
    producer_epoch = reader.int16()
    timeout_ms = reader.int32()
    state = TxnState(reader.int8())
    partitions = set()
    for _ in range(max(reader.array_length(flexible), 0)):
        topic = reader.string(flexible)
        for _ in range(max(reader.array_length(flexible), 0)):
            partitions.add(TopicPartition(topic, reader.int32()))
        if flexible:
            reader.skip_tagged_fields()
    last_update_ms = reader.int64()
    start_ms = reader.int64()
    if flexible:
        reader.skip_tagged_fields()
    return TransactionLogValue(
        producer_id, producer_epoch, timeout_ms, state, frozenset(partitions), last_update_ms, start_ms
    )
