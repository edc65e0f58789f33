"""Produce (api key 0), versions 0-9, hand-written because it carries every produced byte.

The request's record sets come back as memoryviews into the request frame, so the broker can
validate and patch batches in place and write them to the log without a copy.

Request: [v3+] transactional_id NULLABLE_STRING, acks INT16, timeout_ms INT32, topic_data
ARRAY(name STRING, partition_data ARRAY(index INT32, records NULLABLE_BYTES)).
Response: responses ARRAY(name STRING, partition_responses ARRAY(index INT32, error_code
INT16, base_offset INT64, [v2+] log_append_time_ms INT64, [v5+] log_start_offset INT64,
[v8+] record_errors ARRAY(batch_index INT32, batch_index_error_message NULLABLE_STRING),
[v8+] error_message NULLABLE_STRING)), [v1+] throttle_time_ms INT32.
v9 is flexible: compact strings, bytes and arrays, and tagged fields closing every structure.
"""

from dataclasses import dataclass, field

from protocol.errors import ErrorCode
from protocol.primitives import (
    EMPTY_TAGGED_FIELDS,
    INT16,
    INT32,
    INT64,
    Reader,
    encode_array_length,
    encode_string,
)

FIRST_FLEXIBLE_VERSION = 9


@dataclass(slots=True)
class PartitionData:
    index: int
    records: memoryview | None


@dataclass(slots=True)
class TopicData:
    name: str
    partitions: list[PartitionData]


@dataclass(slots=True)
class ProduceRequest:
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topics: list[TopicData]


def parse_produce_request(version: int, body: memoryview) -> ProduceRequest:
    flexible = version >= FIRST_FLEXIBLE_VERSION
    reader = Reader(body)
    transactional_id = reader.nullable_string(flexible) if version >= 3 else None
    acks = reader.int16()
    timeout_ms = reader.int32()
    topics = [_parse_topic(reader, flexible) for _ in range(max(reader.array_length(flexible), 0))]
    if flexible:
        reader.skip_tagged_fields()
    return ProduceRequest(transactional_id, acks, timeout_ms, topics)


def _parse_topic(reader: Reader, flexible: bool) -> TopicData:
    name = reader.string(flexible)
    partitions = []
    for _ in range(max(reader.array_length(flexible), 0)):
        index = reader.int32()
        records = reader.nullable_bytes(flexible)
        if flexible:
            reader.skip_tagged_fields()
        partitions.append(PartitionData(index, records))
    if flexible:
        reader.skip_tagged_fields()
    return TopicData(name, partitions)


@dataclass(slots=True)
class PartitionResponse:
    index: int
    error_code: ErrorCode = ErrorCode.none
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    record_errors: list[tuple[int, str | None]] = field(default_factory=list)
    error_message: str | None = None


def encode_produce_response(
    version: int, topics: list[tuple[str, list[PartitionResponse]]], throttle_time_ms: int = 0
) -> bytes:
    flexible = version >= FIRST_FLEXIBLE_VERSION
    out = [encode_array_length(len(topics), flexible)]
    for name, partitions in topics:
        out.append(encode_string(name, flexible))
        out.append(encode_array_length(len(partitions), flexible))
        for partition in partitions:
            _encode_partition(out, version, flexible, partition)
        if flexible:
            out.append(EMPTY_TAGGED_FIELDS)
    if version >= 1:
        out.append(INT32.pack(throttle_time_ms))
    if flexible:
        out.append(EMPTY_TAGGED_FIELDS)
    return b"".join(out)


def _encode_partition(
    out: list[bytes], version: int, flexible: bool, partition: PartitionResponse
) -> None:
    out.append(INT32.pack(partition.index))
    out.append(INT16.pack(partition.error_code))
    out.append(INT64.pack(partition.base_offset))
    if version >= 2:
        out.append(INT64.pack(partition.log_append_time_ms))
    if version >= 5:
        out.append(INT64.pack(partition.log_start_offset))
    if version >= 8:
        out.append(encode_array_length(len(partition.record_errors), flexible))
        for batch_index, message in partition.record_errors:
            out.append(INT32.pack(batch_index))
            out.append(encode_string(message, flexible))
            if flexible:
                out.append(EMPTY_TAGGED_FIELDS)
        out.append(encode_string(partition.error_message, flexible))
    if flexible:
        out.append(EMPTY_TAGGED_FIELDS)
