"""Fetch (api key 1) responses, versions 4-12, hand-written so record data is never copied.

The encoder returns the response body as a list of chunks: bytes it produced, with each
partition's record payload left in place as the object the caller passed (anything with a
length, such as a file region). The caller writes the bytes and sends the payloads with
sendfile. The decoder (a follower reading its leader's answer) leaves each partition's records
as a memoryview slice of the received frame.

Requests are parsed by hand too, since a tailing consumer sends one per record: one struct call
per field group into named tuples. Through kio's generic reader a tailing consumer's Fetch took
13% more instructions (benchmarks.request_cost --api fetch --instructions). Whatever the hand
parser does not take (a tagged field, a null array, a malformed message) is read again by kio,
which judges it. A follower's requests (v12, replication.fetcher: one or two a record at
acks=all) are encoded by hand as well: the bytes kio writes, in about a twentieth of its time.

Request: replica_id INT32, max_wait_ms INT32, min_bytes INT32, max_bytes INT32, isolation_level
INT8, [v7+] session_id INT32, [v7+] session_epoch INT32, topics ARRAY(topic STRING, partitions
ARRAY(partition INT32, [v9+] current_leader_epoch INT32, fetch_offset INT64, [v12+]
last_fetched_epoch INT32, [v5+] log_start_offset INT64, partition_max_bytes INT32)), [v7+]
forgotten_topics_data ARRAY(topic STRING, partitions ARRAY(INT32)), [v11+] rack_id STRING.

Body: [v1+] throttle_time_ms INT32, [v7+] error_code INT16, [v7+] session_id INT32, responses
ARRAY(topic STRING, partitions ARRAY(partition_index INT32, error_code INT16, high_watermark
INT64, [v4+] last_stable_offset INT64, [v5+] log_start_offset INT64, [v4+] aborted_transactions
NULLABLE ARRAY(producer_id INT64, first_offset INT64), [v11+] preferred_read_replica INT32,
records NULLABLE_RECORDS)). v12 is flexible: compact forms and tagged fields closing every
structure; a partition's tagged field 0 is diverging_epoch (epoch INT32, end_offset INT64), the
one we write and read (tags 1, current_leader, and 2, snapshot_id, are skipped when read).
"""

import struct
from collections.abc import Sized
from dataclasses import dataclass
from datetime import timedelta
from typing import Final

from protocol import schemas
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, ProtocolError
from protocol.primitives import (
    EMPTY_TAGGED_FIELDS,
    INT32,
    INT64,
    Reader,
    encode_array_length,
    encode_bytes_length,
    encode_string,
    encode_uvarint,
    read_uvarint,
)

MIN_VERSION: Final = 4
MAX_VERSION: Final = 12
FIRST_FLEXIBLE_VERSION: Final = 12
DIVERGING_EPOCH_TAG: Final = 0


# Plain classes with their own __init__ (tests/unit/test_compiled_modules.py): compiled code
# builds them with a direct call and reads their fields natively, where a NamedTuple's fields are
# generic attribute lookups and its tuple.__new__ a call through the type.


@dataclass(slots=True, init=False)
class FetchPartition:
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int  # v9+
    last_fetched_epoch: int  # v12+
    log_start_offset: int  # v5+, a follower's

    def __init__(
        self,
        partition: int,
        fetch_offset: int,
        partition_max_bytes: int,
        current_leader_epoch: int = -1,
        last_fetched_epoch: int = -1,
        log_start_offset: int = -1,
    ) -> None:
        self.partition = partition
        self.fetch_offset = fetch_offset
        self.partition_max_bytes = partition_max_bytes
        self.current_leader_epoch = current_leader_epoch
        self.last_fetched_epoch = last_fetched_epoch
        self.log_start_offset = log_start_offset


@dataclass(slots=True, init=False)
class FetchTopic:
    topic: str
    partitions: list[FetchPartition]

    def __init__(self, topic: str, partitions: list[FetchPartition]) -> None:
        self.topic = topic
        self.partitions = partitions


# KIP-227's session epochs: a full request that asks for a session, and one that does not (every
# request before v7, and librdkafka's).
INITIAL_EPOCH: Final = 0
FINAL_EPOCH: Final = -1
# isolation_level (Kafka's IsolationLevel), in Fetch and ListOffsets requests alike.
READ_UNCOMMITTED: Final = 0
READ_COMMITTED: Final = 1
_INT32_MAX: Final = 2**31 - 1


def next_epoch(epoch: int) -> int:
    """The session epoch after `epoch` (Kafka's FetchMetadata.nextEpoch): it wraps to 1, never
    to 0; FINAL stays FINAL."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == _INT32_MAX else epoch + 1


@dataclass(slots=True, init=False)
class FetchRequest:
    """What the broker reads of a Fetch request of any version (cluster_id is checked and left
    out). `forgotten`: the forgotten_topics_data of an incremental request, (topic, partitions)."""

    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation_level: int
    topics: list[FetchTopic]
    session_id: int  # v7+
    rack_id: str  # v11+
    session_epoch: int  # v7+
    forgotten: list[tuple[str, list[int]]]  # v7+

    def __init__(
        self,
        replica_id: int,
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
        isolation_level: int,
        topics: list[FetchTopic],
        session_id: int = 0,
        rack_id: str = "",
        session_epoch: int = FINAL_EPOCH,
        forgotten: list[tuple[str, list[int]]] | None = None,
    ) -> None:
        self.replica_id = replica_id
        self.max_wait_ms = max_wait_ms
        self.min_bytes = min_bytes
        self.max_bytes = max_bytes
        self.isolation_level = isolation_level
        self.topics = topics
        self.session_id = session_id
        self.rack_id = rack_id
        self.session_epoch = session_epoch
        self.forgotten = [] if forgotten is None else forgotten


class _Malformed(Exception):
    """Raised by the hand parser at anything it leaves to kio."""


_MILLISECOND: Final = timedelta(milliseconds=1)  # kio's max_wait, a timedelta, in whole ms
_REQUEST_FIXED: Final = struct.Struct(">iiiib")
_SESSION: Final = struct.Struct(">ii")
_INT32: Final = struct.Struct(">i")
_INT16: Final = struct.Struct(">h")
# A partition's fields by version: (partition, [current_leader_epoch], fetch_offset,
# [last_fetched_epoch], [log_start_offset], partition_max_bytes).
_PARTITION_V4: Final = struct.Struct(">iqi")
_PARTITION_V5: Final = struct.Struct(">iqqi")
_PARTITION_V9: Final = struct.Struct(">iiqqi")
_PARTITION_V12: Final = struct.Struct(">iiqiqi")
# Their sizes as Final ints: compiled code reads a C static, where `S.size` is an attribute
# lookup.
_REQUEST_FIXED_SIZE: Final = _REQUEST_FIXED.size
_SESSION_SIZE: Final = _SESSION.size
_PARTITION_V12_SIZE: Final = _PARTITION_V12.size
_PARTITION_V9_SIZE: Final = _PARTITION_V9.size
_PARTITION_V5_SIZE: Final = _PARTITION_V5.size
_PARTITION_V4_SIZE: Final = _PARTITION_V4.size
# The unpack_from of the three every librdkafka consumer's Fetch goes through, bound once:
# compiled code calls a bound method straight, where `S.unpack_from(...)` looks the method up
# at every call (about a sixth of the call's instructions).
_unpack_request_fixed: Final = _REQUEST_FIXED.unpack_from
_unpack_partition_v12: Final = _PARTITION_V12.unpack_from
_unpack_session: Final = _SESSION.unpack_from
# A follower's request, encoded: its fixed fields up to session_epoch, and a partition with its
# (empty) tagged fields.
_pack_request_head_v12: Final = struct.Struct(">iiiibii").pack
_pack_partition_v12_tagless: Final = struct.Struct(">iiqiqiB").pack
# A response partition's first fields: partition_index, error_code, high_watermark,
# last_stable_offset and, from v5, log_start_offset.
_PARTITION_HEAD_V4: Final = struct.Struct(">ihqq")
_PARTITION_HEAD_V5: Final = struct.Struct(">ihqqq")
# The fields of what a tailing consumer is answered in one call each (v12): the response's
# throttle_time_ms, error_code and session_id; a partition's head with its aborted transactions'
# compact length (0 for null, 1 for none) and preferred_read_replica.
_RESPONSE_HEAD_V7: Final = struct.Struct(">ihi")
_PARTITION_HEAD_V12: Final = struct.Struct(">ihqqqBi")
_pack_response_head_v7: Final = _RESPONSE_HEAD_V7.pack
_pack_partition_head_v12: Final = _PARTITION_HEAD_V12.pack
# The same with the compact array length before each (2: one element), for a v12 answer of one
# topic's one partition: the response head and the topics' count; the partitions' count and the
# partition's head. Its tail is the partition's, the topic's and the response's empty tagged fields.
_pack_one_topic_head_v12: Final = struct.Struct(">ihiB").pack
_pack_one_partition_head_v12: Final = struct.Struct(">BihqqqBi").pack
_ONE_PARTITION_TAIL_V12: Final = EMPTY_TAGGED_FIELDS * 3
# Its head when not throttled, with no error and no fetch session (librdkafka opens none).
_PLAIN_ONE_TOPIC_HEAD_V12: Final = _pack_one_topic_head_v12(0, 0, 0, 2)
# Bound once: compiled code looks an enum member up on its class (EnumType's __getattr__ hook,
# a few hundred instructions) at every `ErrorCode.none`.
_NO_ERROR: Final = ErrorCode.none


def parse_fetch_request(version: int, body: memoryview) -> FetchRequest:
    try:
        return _parse_by_hand(version, body)
    except (_Malformed, struct.error, UnicodeDecodeError, IndexError, ProtocolError):
        pass  # unusual or malformed: kio reads it, and raises the ProtocolError that says how
    return _parse_with_kio(version, body)


def _parse_by_hand(version: int, body: memoryview) -> FetchRequest:
    flexible = version >= FIRST_FLEXIBLE_VERSION
    end = len(body)
    replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level = _unpack_request_fixed(body, 0)
    pos = _REQUEST_FIXED_SIZE
    session_id = 0
    session_epoch = FINAL_EPOCH
    if version >= 7:
        session_id, session_epoch = _unpack_session(body, pos)
        pos += _SESSION_SIZE
    count, pos = _array_length(body, pos, flexible)
    topics = []
    for _ in range(count):
        name, pos = _string(body, pos, flexible)
        partition_count, pos = _array_length(body, pos, flexible)
        partitions = []
        for _ in range(partition_count):
            if version >= 12:
                partition, leader_epoch, offset, last_epoch, log_start, partition_max = (
                    _unpack_partition_v12(body, pos)
                )
                pos += _PARTITION_V12_SIZE
                if body[pos]:
                    raise _Malformed  # tagged fields
                pos += 1
                partitions.append(
                    FetchPartition(partition, offset, partition_max, leader_epoch, last_epoch, log_start)
                )
            elif version >= 9:
                partition, leader_epoch, offset, log_start, partition_max = _PARTITION_V9.unpack_from(body, pos)
                pos += _PARTITION_V9_SIZE
                partitions.append(
                    FetchPartition(partition, offset, partition_max, leader_epoch, -1, log_start)
                )
            elif version >= 5:
                partition, offset, log_start, partition_max = _PARTITION_V5.unpack_from(body, pos)
                pos += _PARTITION_V5_SIZE
                partitions.append(FetchPartition(partition, offset, partition_max, -1, -1, log_start))
            else:
                partition, offset, partition_max = _PARTITION_V4.unpack_from(body, pos)
                pos += _PARTITION_V4_SIZE
                partitions.append(FetchPartition(partition, offset, partition_max))
        pos = _no_tagged_fields(body, pos, flexible)
        topics.append(FetchTopic(name, partitions))
    forgotten: list[tuple[str, list[int]]] = []
    if version >= 7:
        count, pos = _array_length(body, pos, flexible)
        for _ in range(count):
            name, pos = _string(body, pos, flexible)
            partition_count, pos = _array_length(body, pos, flexible)
            if pos + 4 * partition_count > end:
                raise _Malformed
            forgotten.append((name, list(struct.unpack_from(f">{partition_count}i", body, pos))))
            pos += 4 * partition_count
            pos = _no_tagged_fields(body, pos, flexible)
    rack_id = ""
    if version >= 11:
        rack_id, pos = _string(body, pos, flexible)
    if _no_tagged_fields(body, pos, flexible) > end:
        raise _Malformed
    return FetchRequest(
        replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level, topics, session_id, rack_id,
        session_epoch, forgotten,
    )


def _array_length(body: memoryview, pos: int, flexible: bool) -> tuple[int, int]:
    """(count, position after it) of a non-null array whose items can fit what is left."""
    if flexible:
        count, pos = _compact_length(body, pos)
    else:
        (count,) = _INT32.unpack_from(body, pos)
        pos += 4
    if not 0 <= count <= len(body) - pos:
        raise _Malformed
    return count, pos


def _string(body: memoryview, pos: int, flexible: bool) -> tuple[str, int]:
    if flexible:
        length, pos = _compact_length(body, pos)
    else:
        (length,) = _INT16.unpack_from(body, pos)
        pos += 2
    if not 0 < length <= len(body) - pos:
        if length == 0:  # a consumer's rack, most often: no slice and no decoding
            return "", pos
        raise _Malformed
    return str(body[pos : pos + length], "utf-8"), pos + length


def _compact_length(body: memoryview, pos: int) -> tuple[int, int]:
    """A compact count or length (stored plus one, -1 for null) and the position after it."""
    length = body[pos] - 1
    if length < 0x7F:  # one byte, as nearly always
        return length, pos + 1
    length, pos = read_uvarint(body, pos)
    return length - 1, pos


def _no_tagged_fields(body: memoryview, pos: int, flexible: bool) -> int:
    if not flexible:
        return pos
    if body[pos]:
        raise _Malformed
    return pos + 1


def encode_fetch_request_v12(request: FetchRequest) -> bytes:
    """The body of `request` as Fetch v12 (a follower's version): what kio encodes, with no
    tagged fields."""
    out = bytearray(
        _pack_request_head_v12(
            request.replica_id, request.max_wait_ms, request.min_bytes, request.max_bytes,
            request.isolation_level, request.session_id, request.session_epoch,
        )
    )
    out += encode_array_length(len(request.topics), True)
    for topic in request.topics:
        out += encode_string(topic.topic, True)
        out += encode_array_length(len(topic.partitions), True)
        for p in topic.partitions:
            out += _pack_partition_v12_tagless(
                p.partition, p.current_leader_epoch, p.fetch_offset, p.last_fetched_epoch,
                p.log_start_offset, p.partition_max_bytes, 0,
            )
        out += EMPTY_TAGGED_FIELDS
    out += encode_array_length(len(request.forgotten), True)
    for name, indexes in request.forgotten:
        out += encode_string(name, True)
        out += encode_array_length(len(indexes), True)
        for index in indexes:
            out += _INT32.pack(index)
        out += EMPTY_TAGGED_FIELDS
    out += encode_string(request.rack_id, True)
    out += EMPTY_TAGGED_FIELDS
    return bytes(out)


def _parse_with_kio(version: int, body: memoryview) -> FetchRequest:
    """Through kio, the fields of older versions given their defaults by adapting to the newest."""
    request = schemas.adapt(
        schemas.decode(schemas.request_type(ApiKey.FETCH, version), body),
        schemas.request_type(ApiKey.FETCH, MAX_VERSION),
    )
    topics = [
        FetchTopic(
            topic.topic,
            [
                FetchPartition(
                    p.partition, p.fetch_offset, p.partition_max_bytes, p.current_leader_epoch,
                    p.last_fetched_epoch, p.log_start_offset,
                )
                for p in topic.partitions
            ],
        )
        for topic in request.topics
    ]
    # kio gives the fields a version lacks their defaults: epoch -1 before v7, a sessionless
    # fetch (Kafka's FetchMetadata.LEGACY).
    return FetchRequest(
        request.replica_id, request.max_wait // _MILLISECOND, request.min_bytes, request.max_bytes,
        request.isolation_level, topics, request.session_id, request.rack_id, request.session_epoch,
        [(topic.topic, list(topic.partitions)) for topic in request.forgotten_topics_data],
    )


# The dataclasses write their own __init__ (init=False), which compiled code calls directly
# (tests/unit/test_compiled_modules.py).


@dataclass(slots=True, init=False)
class PartitionResult:
    partition_index: int
    error_code: ErrorCode
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: list[tuple[int, int]] | None
    preferred_read_replica: int
    records: Sized | None
    # (epoch, end offset) when the follower's last fetched epoch ends before its fetch offset
    # on the leader (v12): the follower must truncate to the end offset first.
    diverging_epoch: tuple[int, int] | None

    def __init__(
        self,
        partition_index: int,
        error_code: ErrorCode = ErrorCode.none,
        high_watermark: int = -1,
        last_stable_offset: int = -1,
        log_start_offset: int = -1,
        aborted_transactions: list[tuple[int, int]] | None = None,
        preferred_read_replica: int = -1,
        records: Sized | None = None,
        diverging_epoch: tuple[int, int] | None = None,
    ) -> None:
        self.partition_index = partition_index
        self.error_code = error_code
        self.high_watermark = high_watermark
        self.last_stable_offset = last_stable_offset
        self.log_start_offset = log_start_offset
        self.aborted_transactions = aborted_transactions
        self.preferred_read_replica = preferred_read_replica
        self.records = records
        self.diverging_epoch = diverging_epoch


@dataclass(slots=True, init=False)
class TopicResult:
    topic: str
    partitions: list[PartitionResult]

    def __init__(self, topic: str, partitions: list[PartitionResult]) -> None:
        self.topic = topic
        self.partitions = partitions


@dataclass(slots=True, init=False)
class FetchResponse:
    throttle_time_ms: int
    error_code: ErrorCode
    session_id: int
    topics: list[TopicResult]

    def __init__(self, throttle_time_ms: int, error_code: ErrorCode, session_id: int, topics: list[TopicResult]) -> None:
        self.throttle_time_ms = throttle_time_ms
        self.error_code = error_code
        self.session_id = session_id
        self.topics = topics


def response_session_id(head: bytes) -> int:
    """The session_id of an encoded v7+ response, from its first chunk."""
    (session_id,) = INT32.unpack_from(head, 6)  # after throttle_time_ms and error_code
    return session_id


def encode_fetch_response(
    version: int,
    topics: list[TopicResult],
    *,
    error_code: ErrorCode = ErrorCode.none,
    session_id: int = 0,
    throttle_time_ms: int = 0,
) -> list[bytes | Sized]:
    flexible = version >= FIRST_FLEXIBLE_VERSION
    if flexible and len(topics) == 1 and len(topics[0].partitions) == 1:
        partition = topics[0].partitions[0]
        records = partition.records
        if records is not None and len(records) and not partition.aborted_transactions and partition.diverging_epoch is None:
            return _encode_one_partition_v12(throttle_time_ms, error_code, session_id, topics[0].topic, partition, records)
    chunks: list[bytes | Sized] = []
    if version >= 7:
        out = bytearray(_pack_response_head_v7(throttle_time_ms, error_code, session_id))
    else:
        out = bytearray(INT32.pack(throttle_time_ms))
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


def _encode_one_partition_v12(
    throttle_time_ms: int, error_code: ErrorCode, session_id: int, topic: str, partition: PartitionResult, records: Sized
) -> list[bytes | Sized]:
    """What a tailing consumer is nearly always answered: v12, one topic's one partition with
    records, no aborted transaction to list and no diverging epoch. The same bytes as the general
    encoding, the head joined from two struct calls (half the instructions of filling a buffer
    piece by piece)."""
    aborted = partition.aborted_transactions
    plain = throttle_time_ms == 0 and error_code == _NO_ERROR and session_id == 0
    head = b"".join((
        _PLAIN_ONE_TOPIC_HEAD_V12 if plain else _pack_one_topic_head_v12(throttle_time_ms, error_code, session_id, 2),
        encode_string(topic, True),
        _pack_one_partition_head_v12(
            2, partition.partition_index, partition.error_code, partition.high_watermark,
            partition.last_stable_offset, partition.log_start_offset, 0 if aborted is None else 1,
            partition.preferred_read_replica,
        ),
        encode_uvarint(len(records) + 1),
    ))
    return [head, records, _ONE_PARTITION_TAIL_V12]


def _encode_partition(
    chunks: list[bytes | Sized],
    out: bytearray,
    version: int,
    flexible: bool,
    partition: PartitionResult,
) -> bytearray:
    """Append one partition; returns the buffer to continue in (a new one after a payload)."""
    aborted = partition.aborted_transactions
    if flexible and not aborted:  # v12 with no aborted transaction to list, as nearly always
        out += _pack_partition_head_v12(
            partition.partition_index, partition.error_code, partition.high_watermark,
            partition.last_stable_offset, partition.log_start_offset, 0 if aborted is None else 1,
            partition.preferred_read_replica,
        )
        return _encode_partition_records(chunks, out, flexible, partition)
    if version >= 5:
        out += _PARTITION_HEAD_V5.pack(
            partition.partition_index, partition.error_code, partition.high_watermark,
            partition.last_stable_offset, partition.log_start_offset,
        )
    else:
        out += _PARTITION_HEAD_V4.pack(
            partition.partition_index, partition.error_code, partition.high_watermark, partition.last_stable_offset
        )
    out += encode_array_length(None if aborted is None else len(aborted), flexible)
    for producer_id, first_offset in aborted or ():
        out += INT64.pack(producer_id)
        out += INT64.pack(first_offset)
        if flexible:
            out += EMPTY_TAGGED_FIELDS
    if version >= 11:
        out += INT32.pack(partition.preferred_read_replica)
    return _encode_partition_records(chunks, out, flexible, partition)


def _encode_partition_records(
    chunks: list[bytes | Sized], out: bytearray, flexible: bool, partition: PartitionResult
) -> bytearray:
    """A partition's records and, in v12, its tagged fields."""
    records = partition.records
    out += encode_bytes_length(None if records is None else len(records), flexible)
    if records is not None and len(records):
        chunks.append(bytes(out))
        chunks.append(records)
        out = bytearray()
    if flexible:
        out += _encode_partition_tags(partition)
    return out


def _encode_partition_tags(partition: PartitionResult) -> bytes:
    if partition.diverging_epoch is None:
        return EMPTY_TAGGED_FIELDS
    epoch, end_offset = partition.diverging_epoch
    value = INT32.pack(epoch) + INT64.pack(end_offset) + EMPTY_TAGGED_FIELDS
    return encode_uvarint(1) + encode_uvarint(DIVERGING_EPOCH_TAG) + encode_uvarint(len(value)) + value


def decode_fetch_response(version: int, body: memoryview) -> FetchResponse:
    """A Fetch response body; each partition's records are a slice of `body`, not a copy."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ProtocolError(f"Fetch v{version} responses are not decoded")
    flexible = version >= FIRST_FLEXIBLE_VERSION
    reader = Reader(body)
    throttle_time_ms = reader.int32()
    error_code, session_id = (reader.int16(), reader.int32()) if version >= 7 else (0, 0)
    topics = []
    for _ in range(reader.array_length(flexible)):
        topic = reader.string(flexible)
        partitions = [
            _decode_partition(reader, version, flexible) for _ in range(reader.array_length(flexible))
        ]
        if flexible:
            reader.skip_tagged_fields()
        topics.append(TopicResult(topic, partitions))
    if flexible:
        reader.skip_tagged_fields()
    return FetchResponse(throttle_time_ms, ErrorCode(error_code), session_id, topics)


def _decode_partition(reader: Reader, version: int, flexible: bool) -> PartitionResult:
    partition = PartitionResult(reader.int32(), ErrorCode(reader.int16()))
    partition.high_watermark = reader.int64()
    partition.last_stable_offset = reader.int64()
    if version >= 5:
        partition.log_start_offset = reader.int64()
    count = reader.array_length(flexible)
    if count >= 0:
        partition.aborted_transactions = []
        for _ in range(count):
            partition.aborted_transactions.append((reader.int64(), reader.int64()))
            if flexible:
                reader.skip_tagged_fields()
    if version >= 11:
        partition.preferred_read_replica = reader.int32()
    partition.records = reader.nullable_bytes(flexible)
    if flexible:
        _decode_partition_tags(reader, partition)
    return partition


def _decode_partition_tags(reader: Reader, partition: PartitionResult) -> None:
    for _ in range(reader.uvarint()):
        tag = reader.uvarint()
        value = Reader(reader.take(reader.uvarint()))
        if tag == DIVERGING_EPOCH_TAG:
            partition.diverging_epoch = (value.int32(), value.int64())
