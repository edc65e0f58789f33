"""Refusals raised by the storage layer, each carrying the Kafka error code clients receive."""

from protocol.errors import ErrorCode, KafkaError


class OffsetOutOfRangeError(KafkaError):
    error_code = ErrorCode.offset_out_of_range


class MessageTooLargeError(KafkaError):
    """A batch larger than max.message.bytes."""

    error_code = ErrorCode.message_too_large


class RecordListTooLargeError(KafkaError):
    """A batch that would not fit in an empty segment (segment.bytes)."""

    error_code = ErrorCode.record_list_too_large


class InvalidTimestampError(KafkaError):
    """A CreateTime timestamp outside message.timestamp.before/after.max.ms."""

    error_code = ErrorCode.invalid_timestamp


class KafkaStorageError(KafkaError):
    """The partition's log directory failed (disk full, I/O error): the partition is offline."""

    error_code = ErrorCode.kafka_storage_error


class LogDirNotFoundError(KafkaError):
    """A path that is not one of the broker's log.dirs (AlterReplicaLogDirs)."""

    error_code = ErrorCode.log_dir_not_found


class ReplicaNotAvailableError(KafkaError):
    """The broker holds no replica of the partition (AlterReplicaLogDirs)."""

    error_code = ErrorCode.replica_not_available


class OutOfOrderSequenceError(KafkaError):
    """An idempotent producer's batch that does not follow its last one (a gap, or a new epoch
    not starting at sequence 0)."""

    error_code = ErrorCode.out_of_order_sequence_number


class InvalidProducerEpochError(KafkaError):
    """A batch from an older epoch of its producer id: a fenced, zombie producer."""

    error_code = ErrorCode.invalid_producer_epoch


class TransactionCoordinatorFencedError(KafkaError):
    """A transaction marker from a coordinator older than the one that last ended a transaction
    of the producer (a coordinator that lost its __transaction_state partition)."""

    error_code = ErrorCode.transaction_coordinator_fenced


class OffsetMovedToTieredStorageError(KafkaError):
    """An offset below the local log start of a tiered log: its records are in the remote store
    only (a consumer's fetch reads them from there; a follower gets this error, as in Kafka)."""

    error_code = ErrorCode.offset_moved_to_tiered_storage
