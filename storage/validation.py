"""Checks on a produced record set before it is appended (Kafka's LogValidator).

Only the 61-byte batch header and the CRC are looked at: decoding records would cap the broker
at a few tens of MB/s (see benchmarks/RESULTS.md). The one exception is compacted topics, where
Kafka refuses records without a key: there every record's key is looked at, with a walk that
skips values and headers, and a compressed batch may decompress to max.message.bytes at most
(MESSAGE_TOO_LARGE beyond), so that a few bytes expanding to gigabytes cannot exhaust memory.
"""

from typing import Final

from protocol.errors import CorruptRecordError, InvalidRecordError, UnsupportedMessageFormatError
import crc32c

from protocol.record_batch import (
    ATTRIBUTES,
    BATCH_HEADER_SIZE,
    BATCH_HEADER_STRUCT,
    CONTROL_FLAG,
    LOG_OVERHEAD,
    MAGIC,
    MAGIC_V2,
    TIMESTAMP_TYPE_FLAG,
    BatchHeader,
    split_batches,
)
from protocol.records import iter_keys
from storage.errors import InvalidTimestampError, MessageTooLargeError, RecordListTooLargeError
from storage.log_config import LogConfig

_MIN_MESSAGE_BYTES: Final = 17  # reaches the magic byte in every message format
_new_tuple: Final = tuple.__new__
# Bound once: compiled code calls them straight, where `crc32c.crc32c(...)` and
# `S.unpack_from(...)` look the function up at every call.
_crc32c: Final = crc32c.crc32c
_unpack_batch_header: Final = BATCH_HEADER_STRUCT.unpack_from


class ProduceChecks:
    """What `validate_produced_records` reads of a topic's config, read once per config (the
    log keeps one beside its LogConfig). LogConfig is an interpreted dataclass: compiled code
    reads each of its attributes with a generic lookup, six for every produced batch."""

    def __init__(self, config: LogConfig) -> None:
        self.config = config
        self.max_batch_bytes: int = min(config.max_message_bytes, config.segment_bytes)
        self.keys_required: bool = "compact" in config.cleanup_policy
        self.timestamps_checked: bool = config.message_timestamp_type != "LogAppendTime"
        self.before_max_ms: int = config.message_timestamp_before_max_ms
        self.after_max_ms: int = config.message_timestamp_after_max_ms


def validate_produced_records(records: memoryview, checks: ProduceChecks, now_ms: int) -> BatchHeader:
    """The header of the single batch a produce request carries for one partition.

    Called for every produced batch: the header is read with one struct call and the checks a
    good batch passes are made inline; each failure is explained by the helpers below."""
    size = len(records)
    if size < _MIN_MESSAGE_BYTES:
        raise CorruptRecordError(f"record set of {size} bytes is too small")
    magic = records[MAGIC]  # within the size just checked
    if magic != MAGIC_V2:
        raise UnsupportedMessageFormatError(
            f"message format v{magic} is not supported; only record batch v2 (Kafka 0.11+)"
        )
    if size < BATCH_HEADER_SIZE:
        BatchHeader.from_buffer(records)  # raises CorruptRecordError: the header is cut short
    header = _new_tuple(BatchHeader, _unpack_batch_header(records, 0))
    if header.batch_length + LOG_OVERHEAD != size:
        _explain_framing(records)
    if size > checks.max_batch_bytes:
        _check_size(header, checks.config)
    if _crc32c(records[ATTRIBUTES:]) != header.crc:
        raise CorruptRecordError("record batch fails its CRC-32C check")
    if header.record_count < 1 or header.last_offset_delta != header.record_count - 1:
        _check_counts(header)
    attributes = header.attributes
    if attributes & CONTROL_FLAG:
        raise InvalidRecordError("clients may not produce control batches")
    if checks.keys_required:
        _check_keys(records, checks.config)
    if checks.timestamps_checked and not attributes & TIMESTAMP_TYPE_FLAG:
        _check_timestamp(header, checks, now_ms)
    return header


def _explain_framing(records: memoryview) -> None:
    """Why a record set is not exactly one batch: corrupt framing, or more than one batch."""
    batches = split_batches(records)  # raises CorruptRecordError when the framing is broken
    raise InvalidRecordError(
        f"produce requests carry exactly one record batch per partition, not {len(batches)}"
    )


def _check_size(header: BatchHeader, config: LogConfig) -> None:
    if header.size > config.max_message_bytes:
        raise MessageTooLargeError(
            f"record batch of {header.size} bytes exceeds max.message.bytes "
            f"({config.max_message_bytes})"
        )
    if header.size > config.segment_bytes:
        raise RecordListTooLargeError(
            f"record batch of {header.size} bytes exceeds segment.bytes ({config.segment_bytes})"
        )


def _check_counts(header: BatchHeader) -> None:
    if header.record_count < 1:
        raise InvalidRecordError("record batch holds no records")
    if header.last_offset_delta != header.record_count - 1:
        raise InvalidRecordError(
            f"record batch of {header.record_count} records has lastOffsetDelta "
            f"{header.last_offset_delta}"
        )


def _check_keys(records: memoryview, config: LogConfig) -> None:
    keys = iter_keys(records, max_section_bytes=config.max_message_bytes)
    for index, (_, key, _) in enumerate(keys):
        if key is None:
            raise InvalidRecordError(
                f"compacted topics accept only records with a key; record {index} has none"
            )


def _check_timestamp(header: BatchHeader, checks: ProduceChecks, now_ms: int) -> None:
    """A CreateTime batch's timestamp against the topic's bounds (the caller checked the
    batch's timestamp type)."""
    timestamp = header.max_timestamp
    if now_ms - timestamp > checks.before_max_ms:
        raise InvalidTimestampError(
            f"timestamp {timestamp} is more than message.timestamp.before.max.ms "
            f"({checks.before_max_ms}) before the broker's clock"
        )
    if timestamp - now_ms > checks.after_max_ms:
        raise InvalidTimestampError(
            f"timestamp {timestamp} is more than message.timestamp.after.max.ms "
            f"({checks.after_max_ms}) after the broker's clock"
        )
