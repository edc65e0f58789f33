"""The records of __consumer_offsets, in Kafka's own layouts, so that Kafka's tools
(kafka-dump-log.sh --offsets-decoder, kafka-consumer-groups.sh) read what logway writes, and
logway reads what Kafka wrote.

A record's key is an INT16 key version followed by the struct of that version; a value is an
INT16 value version followed by its struct; a null value is a tombstone, removing the key.

Keys:
    versions 0, 1  OffsetCommitKey   group STRING, topic STRING, partition INT32 (1 is written)
    version 2      GroupMetadataKey  group STRING
    others         records of group types logway does not serve (KIP-848's): skipped on load

OffsetCommitValue:
    v0  offset INT64, metadata STRING, commit_timestamp INT64
    v1  v0 + expire_timestamp INT64
    v2  as v0
    v3  offset INT64, leader_epoch INT32, metadata STRING, commit_timestamp INT64
    v4  v3, flexible
Written: v3, or v1 for a commit that carries an expire timestamp (OffsetCommit v2-4 with a
retention time), as Kafka does.

GroupMetadataValue:
    v0  protocol_type STRING, generation INT32, protocol NULLABLE_STRING,
        leader NULLABLE_STRING, members ARRAY of
            member_id STRING, client_id STRING, client_host STRING, session_timeout INT32,
            subscription BYTES, assignment BYTES
    v1  members gain rebalance_timeout INT32 before session_timeout
    v2  current_state_timestamp INT64 after leader
    v3  members gain group_instance_id NULLABLE_STRING after member_id
    v4  v3, flexible
Written: v3.

Flexible versions use compact lengths and end every struct with tagged fields; tags this
module does not know (later Kafka versions add some) are skipped when reading.
"""

from dataclasses import dataclass

from protocol.primitives import (
    EMPTY_TAGGED_FIELDS,
    INT16,
    INT32,
    INT64,
    Reader,
    encode_array_length,
    encode_bytes_length,
    encode_string,
)

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY = 1
GROUP_METADATA_VALUE_VERSION = 3

_OFFSET_COMMIT_KEY_VERSIONS = (0, 1)
_HIGHEST_OFFSET_COMMIT_VALUE_VERSION = 4
_HIGHEST_GROUP_METADATA_VALUE_VERSION = 4
_FIRST_FLEXIBLE_VERSION = 4
NO_TIMESTAMP = -1
NO_LEADER_EPOCH = -1


class UnsupportedRecordVersionError(ValueError):
    """A value version newer than this module knows."""


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    metadata: str
    commit_timestamp: int
    leader_epoch: int = NO_LEADER_EPOCH
    expire_timestamp: int = NO_TIMESTAMP


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberMetadata, ...]


# ------------------------------------------------------------------------------------- keys


def encode_offset_commit_key(key: OffsetCommitKey, version: int = OFFSET_COMMIT_KEY_VERSION) -> bytes:
    if version not in _OFFSET_COMMIT_KEY_VERSIONS:
        raise ValueError(f"offset commit keys have versions 0 and 1, not {version}")
    return (
        INT16.pack(version)
        + encode_string(key.group, False)
        + encode_string(key.topic, False)
        + INT32.pack(key.partition)
    )


def encode_group_metadata_key(key: GroupMetadataKey) -> bytes:
    return INT16.pack(GROUP_METADATA_KEY_VERSION) + encode_string(key.group, False)


def decode_key(data: bytes) -> OffsetCommitKey | GroupMetadataKey | None:
    """The key of a record; None for a key version of another group type. Raises
    ProtocolError for bytes that do not parse."""
    reader = Reader(memoryview(data))
    version = reader.int16()
    if version in _OFFSET_COMMIT_KEY_VERSIONS:
        return OffsetCommitKey(reader.string(False), reader.string(False), reader.int32())
    if version == GROUP_METADATA_KEY_VERSION:
        return GroupMetadataKey(reader.string(False))
    return None


# ----------------------------------------------------------------------- offset commit values


def offset_commit_value_version(value: OffsetCommitValue) -> int:
    """The version Kafka writes for this value: v1 when it expires at a set time, else v3."""
    if value.expire_timestamp != NO_TIMESTAMP:
        return OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY
    return OFFSET_COMMIT_VALUE_VERSION


def encode_offset_commit_value(value: OffsetCommitValue, version: int | None = None) -> bytes:
    """The value in `version`, by default the one Kafka would write for it. Fields the version
    lacks are left out."""
    if version is None:
        version = offset_commit_value_version(value)
    _check_version(version, _HIGHEST_OFFSET_COMMIT_VALUE_VERSION, "offset commit value")
    flexible = version >= _FIRST_FLEXIBLE_VERSION
    out = bytearray(INT16.pack(version))
    out += INT64.pack(value.offset)
    if version >= 3:
        out += INT32.pack(value.leader_epoch)
    out += encode_string(value.metadata, flexible)
    out += INT64.pack(value.commit_timestamp)
    if version == 1:
        out += INT64.pack(value.expire_timestamp)
    if flexible:
        out += EMPTY_TAGGED_FIELDS
    return bytes(out)


def decode_offset_commit_value(data: bytes) -> OffsetCommitValue:
    reader = Reader(memoryview(data))
    version = reader.int16()
    _check_version(version, _HIGHEST_OFFSET_COMMIT_VALUE_VERSION, "offset commit value")
    flexible = version >= _FIRST_FLEXIBLE_VERSION
    offset = reader.int64()
    leader_epoch = reader.int32() if version >= 3 else NO_LEADER_EPOCH
    metadata = reader.string(flexible)
    commit_timestamp = reader.int64()
    expire_timestamp = reader.int64() if version == 1 else NO_TIMESTAMP
    if flexible:
        reader.skip_tagged_fields()
    return OffsetCommitValue(offset, metadata, commit_timestamp, leader_epoch, expire_timestamp)


# ---------------------------------------------------------------------- group metadata values


def encode_group_metadata_value(
    value: GroupMetadataValue, version: int = GROUP_METADATA_VALUE_VERSION
) -> bytes:
    _check_version(version, _HIGHEST_GROUP_METADATA_VALUE_VERSION, "group metadata value")
    flexible = version >= _FIRST_FLEXIBLE_VERSION
    out = bytearray(INT16.pack(version))
    out += encode_string(value.protocol_type, flexible)
    out += INT32.pack(value.generation)
    out += encode_string(value.protocol, flexible)
    out += encode_string(value.leader, flexible)
    if version >= 2:
        out += INT64.pack(value.current_state_timestamp)
    out += encode_array_length(len(value.members), flexible)
    for member in value.members:
        _encode_member(out, member, version, flexible)
    if flexible:
        out += EMPTY_TAGGED_FIELDS
    return bytes(out)


def _encode_member(out: bytearray, member: MemberMetadata, version: int, flexible: bool) -> None:
    out += encode_string(member.member_id, flexible)
    if version >= 3:
        out += encode_string(member.group_instance_id, flexible)
    out += encode_string(member.client_id, flexible)
    out += encode_string(member.client_host, flexible)
    if version >= 1:
        out += INT32.pack(member.rebalance_timeout)
    out += INT32.pack(member.session_timeout)
    for blob in (member.subscription, member.assignment):
        out += encode_bytes_length(len(blob), flexible)
        out += blob
    if flexible:
        out += EMPTY_TAGGED_FIELDS


def decode_group_metadata_value(data: bytes) -> GroupMetadataValue:
    reader = Reader(memoryview(data))
    version = reader.int16()
    _check_version(version, _HIGHEST_GROUP_METADATA_VALUE_VERSION, "group metadata value")
    flexible = version >= _FIRST_FLEXIBLE_VERSION
    protocol_type = reader.string(flexible)
    generation = reader.int32()
    protocol = reader.nullable_string(flexible)
    leader = reader.nullable_string(flexible)
    state_timestamp = reader.int64() if version >= 2 else NO_TIMESTAMP
    members = tuple(_decode_member(reader, version, flexible) for _ in range(_array_length(reader, flexible)))
    if flexible:
        reader.skip_tagged_fields()
    return GroupMetadataValue(protocol_type, generation, protocol, leader, state_timestamp, members)


def _decode_member(reader: Reader, version: int, flexible: bool) -> MemberMetadata:
    member_id = reader.string(flexible)
    group_instance_id = reader.nullable_string(flexible) if version >= 3 else None
    client_id = reader.string(flexible)
    client_host = reader.string(flexible)
    rebalance_timeout = reader.int32() if version >= 1 else None
    session_timeout = reader.int32()
    subscription = _bytes(reader, flexible)
    assignment = _bytes(reader, flexible)
    if flexible:
        reader.skip_tagged_fields()
    return MemberMetadata(
        member_id,
        group_instance_id,
        client_id,
        client_host,
        # v0 has no rebalance timeout: the session timeout served as both.
        session_timeout if rebalance_timeout is None else rebalance_timeout,
        session_timeout,
        subscription,
        assignment,
    )


def _array_length(reader: Reader, flexible: bool) -> int:
    count = reader.array_length(flexible)
    return max(count, 0)


def _bytes(reader: Reader, flexible: bool) -> bytes:
    data = reader.nullable_bytes(flexible)
    return b"" if data is None else bytes(data)


def _check_version(version: int, highest: int, what: str) -> None:
    if not 0 <= version <= highest:
        raise UnsupportedRecordVersionError(f"{what} version {version} is not one of 0-{highest}")
