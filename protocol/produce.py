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

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from protocol.errors import ErrorCode, ProtocolError
from protocol.primitives import (
    EMPTY_TAGGED_FIELDS,
    INT16,
    INT32,
    INT64,
    Reader,
    encode_array_length,
    encode_string,
    encode_uvarint,
    read_uvarint,
)

FIRST_FLEXIBLE_VERSION: Final = 9


# The dataclasses of the compiled modules write their own __init__ (init=False): mypyc calls it
# directly, where the one dataclass generates is an interpreted function called with an
# argument tuple and a keyword dict (tests/unit/test_compiled_modules.py).


@dataclass(slots=True, init=False)
class PartitionData:
    index: int
    records: memoryview | None

    def __init__(self, index: int, records: memoryview | None) -> None:
        self.index = index
        self.records = records


@dataclass(slots=True, init=False)
class TopicData:
    name: str
    partitions: list[PartitionData]

    def __init__(self, name: str, partitions: list[PartitionData]) -> None:
        self.name = name
        self.partitions = partitions


@dataclass(slots=True, init=False)
class ProduceRequest:
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topics: list[TopicData]

    def __init__(self, transactional_id: str | None, acks: int, timeout_ms: int, topics: list[TopicData]) -> None:
        self.transactional_id = transactional_id
        self.acks = acks
        self.timeout_ms = timeout_ms
        self.topics = topics


class _Malformed(Exception):
    """Raised by the fixed-width parser at anything unusual: the Reader parser says what."""


_INT16: Final = struct.Struct(">h")
_INT32: Final = struct.Struct(">i")
_ACKS_TIMEOUT: Final = struct.Struct(">hi")
_INDEX_RECORDS_LENGTH: Final = struct.Struct(">ii")
# The fixed-width parser's groups, each with the length or count that follows it: the head of a
# v3+ request, from its transactional_id length to the first topic's name length; the head from
# acks to that length (v0-2, or after a transactional id); a topic's partition count with its
# first partition's index and records length.
_HEAD_V3: Final = struct.Struct(">hhiih")
_HEAD: Final = struct.Struct(">hiih")
_PARTITIONS_AND_FIRST: Final = struct.Struct(">iii")
# Their sizes as Final ints: compiled code reads a C static, where `S.size` is an attribute
# lookup.
_HEAD_V3_SIZE: Final = _HEAD_V3.size
_HEAD_SIZE: Final = _HEAD.size
_PARTITIONS_AND_FIRST_SIZE: Final = _PARTITIONS_AND_FIRST.size
_INDEX_RECORDS_LENGTH_SIZE: Final = _INDEX_RECORDS_LENGTH.size
_ACKS_TIMEOUT_SIZE: Final = _ACKS_TIMEOUT.size
# Their unpack_from, bound once: compiled code calls a bound method straight, where
# `S.unpack_from(...)` looks the method up at every call (about a sixth of the call's
# instructions).
_unpack_int16: Final = _INT16.unpack_from
_unpack_int32: Final = _INT32.unpack_from
_unpack_acks_timeout: Final = _ACKS_TIMEOUT.unpack_from
_unpack_index_records_length: Final = _INDEX_RECORDS_LENGTH.unpack_from
_unpack_head_v3: Final = _HEAD_V3.unpack_from
_unpack_head: Final = _HEAD.unpack_from
_unpack_partitions_and_first: Final = _PARTITIONS_AND_FIRST.unpack_from


def parse_produce_request(version: int, body: memoryview) -> ProduceRequest:
    try:
        if version < FIRST_FLEXIBLE_VERSION:
            return _parse_fixed_width(version, body)
        return _parse_flexible(body)
    except (_Malformed, struct.error, UnicodeDecodeError, IndexError, ProtocolError):
        pass  # malformed or unusual: parsed again below, which raises the ProtocolError that says how
    return _parse_with_reader(version, body)


def _parse_fixed_width(version: int, body: memoryview) -> ProduceRequest:
    """v0-8 with one struct call per field group and no Reader: the request parsed for every
    produced batch. Each call reads ahead the length or count that follows its group, so that a
    request for one partition without a transactional id takes two calls. Refuses (raising
    _Malformed or struct.error) whatever the Reader parser would refuse, and some legal oddities
    (no topics, a topic without partitions), which that parser then takes."""
    # Typed, so that compiled code keeps them as C integers (struct gives Any).
    length: int
    acks: int
    timeout_ms: int
    topic_count: int
    name_length: int
    partition_count: int
    index: int
    size: int
    end = len(body)
    transactional_id = None
    if version >= 3:
        length, acks, timeout_ms, topic_count, name_length = _unpack_head_v3(body, 0)
        pos = _HEAD_V3_SIZE
        if length >= 0:  # read again after the transactional id
            if 2 + length > end:
                raise _Malformed
            transactional_id = str(body[2 : 2 + length], "utf-8")
            acks, timeout_ms, topic_count, name_length = _unpack_head(body, 2 + length)
            pos = 2 + length + _HEAD_SIZE
    else:
        acks, timeout_ms, topic_count, name_length = _unpack_head(body, 0)
        pos = _HEAD_SIZE
    if not 1 <= topic_count <= end - pos:
        raise _Malformed
    topics = []
    for topic_number in range(topic_count):
        if topic_number:
            (name_length,) = _unpack_int16(body, pos)
            pos += 2
        if name_length < 0 or pos + name_length > end:
            raise _Malformed
        name = str(body[pos : pos + name_length], "utf-8")
        pos += name_length
        partition_count, index, size = _unpack_partitions_and_first(body, pos)
        pos += _PARTITIONS_AND_FIRST_SIZE
        if not 1 <= partition_count <= end - pos + _INDEX_RECORDS_LENGTH_SIZE:
            raise _Malformed
        partitions = []
        for partition_number in range(partition_count):
            if partition_number:
                index, size = _unpack_index_records_length(body, pos)
                pos += _INDEX_RECORDS_LENGTH_SIZE
            if size < 0:
                records = None
            elif pos + size > end:
                raise _Malformed
            else:
                records = body[pos : pos + size]
                pos += size
            partitions.append(PartitionData(index, records))
        topics.append(TopicData(name, partitions))
    return ProduceRequest(transactional_id, acks, timeout_ms, topics)


def _parse_flexible(body: memoryview) -> ProduceRequest:
    """v9 the same way: compact lengths read inline when they take one byte, and every tagged
    field section empty (a request with tagged fields goes to the Reader parser)."""
    acks: int
    timeout_ms: int
    index: int
    end = len(body)
    length = body[0]
    pos = 1
    if length & 0x80:
        length, pos = read_uvarint(body, 0)
    transactional_id = None
    if length:
        length -= 1
        if pos + length > end:
            raise _Malformed
        transactional_id = str(body[pos : pos + length], "utf-8")
        pos += length
    acks, timeout_ms = _unpack_acks_timeout(body, pos)
    pos += _ACKS_TIMEOUT_SIZE
    topic_count = _one_byte_length(body, pos)
    pos += 1
    topics = []
    for _ in range(topic_count):
        length = _one_byte_length(body, pos)
        pos += 1
        if pos + length > end:
            raise _Malformed
        name = str(body[pos : pos + length], "utf-8")
        pos += length
        partition_count = _one_byte_length(body, pos)
        pos += 1
        partitions = []
        for _ in range(partition_count):
            (index,) = _unpack_int32(body, pos)
            size, pos = read_uvarint(body, pos + 4)
            if size == 0:
                records = None
            elif pos + size - 1 > end:
                raise _Malformed
            else:
                records = body[pos : pos + size - 1]
                pos += size - 1
            if body[pos]:
                raise _Malformed  # tagged fields
            pos += 1
            partitions.append(PartitionData(index, records))
        if body[pos]:
            raise _Malformed
        pos += 1
        topics.append(TopicData(name, partitions))
    if body[pos]:
        raise _Malformed
    return ProduceRequest(transactional_id, acks, timeout_ms, topics)


def _one_byte_length(body: memoryview, pos: int) -> int:
    """The compact length (an array's count or a string's length) at `pos`, when it takes one
    byte; _Malformed for null or a longer one, which the Reader parser reads."""
    length = body[pos] - 1
    if not 0 <= length < 0x7F:
        raise _Malformed
    return length


def _parse_with_reader(version: int, body: memoryview) -> ProduceRequest:
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


@dataclass(slots=True, init=False)
class PartitionResponse:
    index: int
    error_code: ErrorCode
    base_offset: int
    log_append_time_ms: int
    log_start_offset: int
    record_errors: Sequence[tuple[int, str | None]]
    error_message: str | None

    def __init__(
        self,
        index: int,
        error_code: ErrorCode = ErrorCode.none,
        base_offset: int = -1,
        log_append_time_ms: int = -1,
        log_start_offset: int = -1,
        record_errors: Sequence[tuple[int, str | None]] = (),
        error_message: str | None = None,
    ) -> None:
        self.index = index
        self.error_code = error_code
        self.base_offset = base_offset
        self.log_append_time_ms = log_append_time_ms
        self.log_start_offset = log_start_offset
        self.record_errors = record_errors
        self.error_message = error_message


def encode_produce_response(
    version: int, topics: list[tuple[str, list[PartitionResponse]]], throttle_time_ms: int = 0
) -> bytes:
    if len(topics) == 1:
        name, partitions = topics[0]
        if len(partitions) == 1:
            partition = partitions[0]
            if not partition.record_errors and partition.error_message is None:
                return _encode_one_plain_partition(version, name, partition, throttle_time_ms)
    return _encode_any(version, topics, throttle_time_ms)


# The answer to what nearly every producer sends, one topic with one partition, when that
# partition answers without record errors or message: after the topic's name, one struct from
# the partition count to the end (throttle_time_ms from v1; v8's empty record_errors and null
# error_message; v9's compact forms and every structure's empty tagged fields). By version.
_ONE_PLAIN_PARTITION: Final = [
    struct.Struct(">iihq"),
    struct.Struct(">iihqi"),
    *[struct.Struct(">iihqqi")] * 3,
    *[struct.Struct(">iihqqqi")] * 3,
    struct.Struct(">iihqqqihi"),
    struct.Struct(">BihqqqBBBBiB"),
]
_ONE_TOPIC_AND_NAME_LENGTH: Final = struct.Struct(">ih")


def _encode_one_plain_partition(
    version: int, name: str, partition: PartitionResponse, throttle_time_ms: int
) -> bytes:
    """`_encode_any`'s bytes for one topic with one plain partition, in two struct calls."""
    data = name.encode()
    codec = _ONE_PLAIN_PARTITION[version]
    if version >= FIRST_FLEXIBLE_VERSION:
        return b"".join((
            b"\x02", encode_uvarint(len(data) + 1), data,
            codec.pack(2, partition.index, partition.error_code, partition.base_offset,
                       partition.log_append_time_ms, partition.log_start_offset,
                       1, 0, 0, 0, throttle_time_ms, 0),
        ))
    head = _ONE_TOPIC_AND_NAME_LENGTH.pack(1, len(data))
    if version >= 8:
        tail = codec.pack(1, partition.index, partition.error_code, partition.base_offset,
                          partition.log_append_time_ms, partition.log_start_offset, 0, -1, throttle_time_ms)
    elif version >= 5:
        tail = codec.pack(1, partition.index, partition.error_code, partition.base_offset,
                          partition.log_append_time_ms, partition.log_start_offset, throttle_time_ms)
    elif version >= 2:
        tail = codec.pack(1, partition.index, partition.error_code, partition.base_offset,
                          partition.log_append_time_ms, throttle_time_ms)
    elif version == 1:
        tail = codec.pack(1, partition.index, partition.error_code, partition.base_offset, throttle_time_ms)
    else:
        tail = codec.pack(1, partition.index, partition.error_code, partition.base_offset)
    return b"".join((head, data, tail))


def _encode_any(
    version: int, topics: list[tuple[str, list[PartitionResponse]]], throttle_time_ms: int
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


# A partition's answer without record errors or error message, in one struct call: its fields
# up to log_start_offset as the version has them, then (v8) an empty record_errors array and a
# null error_message, or (v9) their compact forms and the empty tagged fields.
# Indexed by version: (codec, how many of the fields it packs, the bytes after them).
_PLAIN_PARTITION: Final = [
    *[(struct.Struct(">ihq"), 3, b"")] * 2,
    *[(struct.Struct(">ihqq"), 4, b"")] * 3,
    *[(struct.Struct(">ihqqq"), 5, b"")] * 3,
    (struct.Struct(">ihqqq"), 5, INT32.pack(0) + INT16.pack(-1)),
    (struct.Struct(">ihqqq"), 5, b"\x01\x00" + EMPTY_TAGGED_FIELDS),
]


def _encode_partition(
    out: list[bytes], version: int, flexible: bool, partition: PartitionResponse
) -> None:
    if not partition.record_errors and partition.error_message is None:
        codec, count, tail = _PLAIN_PARTITION[version]
        fields = (partition.index, partition.error_code, partition.base_offset, partition.log_append_time_ms,
                  partition.log_start_offset)
        out.append(codec.pack(*fields[:count]) + tail)
        return
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
