"""Fetch (api key 1) responses, versions 4-12, hand-written so record data is never copied.

The encoder returns the response body as a list of chunks: bytes it produced, with each
partition's record payload left in place as the object the caller passed (anything with a
length, such as a file region). The caller writes the bytes and sends the payloads with
sendfile. Requests are ordinary and go through kio.

Body: [v1+] throttle_time_ms INT32, [v7+] error_code INT16, [v7+] session_id INT32, responses
ARRAY(topic STRING, partitions ARRAY(partition_index INT32, error_code INT16, high_watermark
INT64, [v4+] last_stable_offset INT64, [v5+] log_start_offset INT64, [v4+] aborted_transactions
NULLABLE ARRAY(producer_id INT64, first_offset INT64), [v11+] preferred_read_replica INT32,
records NULLABLE_RECORDS)). v12 is flexible: compact forms and tagged fields closing every
structure.
"""

from collections.abc import Sized
from dataclasses import dataclass, field

from protocol.errors import ErrorCode
from protocol.primitives import (
    EMPTY_TAGGED_FIELDS,
    INT16,
    INT32,
    INT64,
    encode_array_length,
    encode_bytes_length,
    encode_string,
)

MIN_VERSION = 4
MAX_VERSION = 12
FIRST_FLEXIBLE_VERSION = 12


@dataclass(slots=True)
class PartitionResult:
    partition_index: int
    error_code: ErrorCode = ErrorCode.none
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted_transactions: list[tuple[int, int]] | None = None
    preferred_read_replica: int = -1
    records: Sized | None = None
    tagged_fields: bytes = field(default=EMPTY_TAGGED_FIELDS)


@dataclass(slots=True)
class TopicResult:
    topic: str
    partitions: list[PartitionResult]


def encode_fetch_response(
    version: int,
    topics: list[TopicResult],
    *,
    error_code: ErrorCode = ErrorCode.none,
    session_id: int = 0,
    throttle_time_ms: int = 0,
) -> list[bytes | Sized]:
    flexible = version >= FIRST_FLEXIBLE_VERSION
    chunks: list[bytes | Sized] = []
    out = bytearray(INT32.pack(throttle_time_ms))
    if version >= 7:
        out += INT16.pack(error_code)
        out += INT32.pack(session_id)
    out += encode_array_length(len(topics), flexible)
    for topic in topics:
        out += encode_string(topic.topic, flexible)
        out += encode_array_length(len(topic.partitions), flexible)
        for partition in topic.partitions:
            out = _encode_partition(chunks, out, version, flexible, partition)
        if flexible:
            out += EMPTY_TAGGED_FIELDS
    if flexible:
        out += EMPTY_TAGGED_FIELDS
    chunks.append(bytes(out))
    return chunks


def _encode_partition(
    chunks: list[bytes | Sized],
    out: bytearray,
    version: int,
    flexible: bool,
    partition: PartitionResult,
) -> bytearray:
    """Append one partition; returns the buffer to continue in (a new one after a payload)."""
    out += INT32.pack(partition.partition_index)
    out += INT16.pack(partition.error_code)
    out += INT64.pack(partition.high_watermark)
    out += INT64.pack(partition.last_stable_offset)
    if version >= 5:
        out += INT64.pack(partition.log_start_offset)
    aborted = partition.aborted_transactions
    out += encode_array_length(None if aborted is None else len(aborted), flexible)
    for producer_id, first_offset in aborted or ():
        out += INT64.pack(producer_id)
        out += INT64.pack(first_offset)
        if flexible:
            out += EMPTY_TAGGED_FIELDS
    if version >= 11:
        out += INT32.pack(partition.preferred_read_replica)
    records = partition.records
    out += encode_bytes_length(None if records is None else len(records), flexible)
    if records is not None and len(records):
        chunks.append(bytes(out))
        chunks.append(records)
        out = bytearray()
    if flexible:
        out += partition.tagged_fields
    return out
