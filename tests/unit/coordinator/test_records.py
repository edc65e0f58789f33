"""The __consumer_offsets record formats (coordinator.records): every key and value version
round-trips, known records have the bytes Kafka's layouts give them, and tombstones remove."""

import dataclasses

import pytest

from coordinator.group_coordinator import PartitionContents
from coordinator.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    UnsupportedRecordVersionError,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
)
from protocol.records import Record
from storage.topic_partition import TopicPartition

MEMBER = MemberMetadata(
    member_id="m-1",
    group_instance_id="instance-1",
    client_id="client",
    client_host="/10.0.0.1",
    rebalance_timeout=300_000,
    session_timeout=45_000,
    subscription=b"\x00\x01sub",
    assignment=b"\x00\x01assigned",
)
GROUP = GroupMetadataValue(
    protocol_type="consumer",
    generation=7,
    protocol="range",
    leader="m-1",
    current_state_timestamp=1_700_000_000_000,
    members=(MEMBER, dataclasses.replace(MEMBER, member_id="m-2", group_instance_id=None)),
)


def hexbytes(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", ""))


# ------------------------------------------------------------------------------ known bytes


def test_an_offset_commit_key_has_kafkas_bytes():
    key = encode_offset_commit_key(OffsetCommitKey("g", "t", 1))
    # version 1 | group "g" | topic "t" | partition 1
    assert key == hexbytes("0001 0001 67 0001 74 00000001")


def test_an_offset_commit_value_v3_has_kafkas_bytes():
    value = encode_offset_commit_value(OffsetCommitValue(offset=5, metadata="", commit_timestamp=1_000))
    # version 3 | offset 5 | leader epoch -1 | metadata "" | commit timestamp 1000
    assert value == hexbytes("0003 0000000000000005 ffffffff 0000 00000000000003e8")


def test_a_group_metadata_key_and_value_v3_have_kafkas_bytes():
    assert encode_group_metadata_key(GroupMetadataKey("g")) == hexbytes("0002 0001 67")
    value = GroupMetadataValue(
        protocol_type="consumer",
        generation=1,
        protocol="range",
        leader="m",
        current_state_timestamp=7,
        members=(MemberMetadata("m", None, "c", "/h", 300, 100, b"\x01", b"\x02"),),
    )
    assert encode_group_metadata_value(value) == hexbytes(
        "0003"  # version
        "0008" + b"consumer".hex() + "00000001"  # protocol type, generation
        "0005" + b"range".hex() + "0001 6d"  # protocol, leader
        "0000000000000007 00000001"  # current state timestamp, one member:
        "0001 6d ffff 0001 63 0002 2f68"  # member id, no instance id, client id, client host
        "0000012c 00000064"  # rebalance timeout 300, session timeout 100
        "00000001 01 00000001 02"  # subscription, assignment
    )


def test_an_empty_groups_value_has_a_null_protocol_and_leader():
    value = GroupMetadataValue("consumer", 3, None, None, 9, ())
    encoded = encode_group_metadata_value(value)
    assert encoded == hexbytes("0003 0008" + b"consumer".hex() + "00000003 ffff ffff 0000000000000009 00000000")
    assert decode_group_metadata_value(encoded) == value


# ------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("version", [0, 1])
def test_offset_commit_keys_round_trip(version):
    key = OffsetCommitKey("group-é", "topic", 42)
    encoded = encode_offset_commit_key(key, version)
    assert encoded[:2] == version.to_bytes(2, "big")
    assert decode_key(encoded) == key


def test_group_metadata_keys_round_trip():
    assert decode_key(encode_group_metadata_key(GroupMetadataKey("grp"))) == GroupMetadataKey("grp")


def test_keys_of_other_group_types_are_not_decoded():
    assert decode_key(hexbytes("0003 0001 67")) is None  # KIP-848's consumer group records


FULL_OFFSET = OffsetCommitValue(offset=99, metadata="meta", commit_timestamp=5_000, leader_epoch=3, expire_timestamp=9_000)


@pytest.mark.parametrize(
    "version, expected",
    [
        (0, OffsetCommitValue(99, "meta", 5_000)),
        (1, OffsetCommitValue(99, "meta", 5_000, expire_timestamp=9_000)),
        (2, OffsetCommitValue(99, "meta", 5_000)),
        (3, OffsetCommitValue(99, "meta", 5_000, leader_epoch=3)),
        (4, OffsetCommitValue(99, "meta", 5_000, leader_epoch=3)),
    ],
)
def test_offset_commit_values_round_trip_with_the_fields_of_their_version(version, expected):
    encoded = encode_offset_commit_value(FULL_OFFSET, version)
    assert encoded[:2] == version.to_bytes(2, "big")
    assert decode_offset_commit_value(encoded) == expected


def test_the_written_offset_commit_version_is_3_or_1_with_an_expiry():
    assert encode_offset_commit_value(OffsetCommitValue(1, "", 2))[:2] == b"\x00\x03"
    assert encode_offset_commit_value(OffsetCommitValue(1, "", 2, expire_timestamp=3))[:2] == b"\x00\x01"


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_group_metadata_values_round_trip_with_the_fields_of_their_version(version):
    encoded = encode_group_metadata_value(GROUP, version)
    assert encoded[:2] == version.to_bytes(2, "big")
    decoded = decode_group_metadata_value(encoded)
    member = decoded.members[0]
    assert (decoded.protocol_type, decoded.generation, decoded.protocol, decoded.leader) == (
        "consumer",
        7,
        "range",
        "m-1",
    )
    assert decoded.current_state_timestamp == (GROUP.current_state_timestamp if version >= 2 else -1)
    assert member.group_instance_id == ("instance-1" if version >= 3 else None)
    # v0 has no rebalance timeout: the session timeout served as both.
    assert member.rebalance_timeout == (300_000 if version >= 1 else 45_000)
    assert (member.member_id, member.client_id, member.client_host, member.session_timeout) == (
        "m-1",
        "client",
        "/10.0.0.1",
        45_000,
    )
    assert (member.subscription, member.assignment) == (MEMBER.subscription, MEMBER.assignment)
    assert [m.member_id for m in decoded.members] == ["m-1", "m-2"]


def test_flexible_versions_skip_tagged_fields_they_do_not_know():
    offset = encode_offset_commit_value(OffsetCommitValue(1, "m", 2, leader_epoch=0), 4)
    # one tagged field: tag 0 (a later Kafka's topic id), 2 bytes
    with_tag = offset[:-1] + hexbytes("01 00 02 abcd")
    assert decode_offset_commit_value(with_tag) == OffsetCommitValue(1, "m", 2, leader_epoch=0)
    group = encode_group_metadata_value(GroupMetadataValue("consumer", 1, None, None, -1, ()), 4)
    assert decode_group_metadata_value(group[:-1] + hexbytes("01 05 01 ff")).generation == 1


def test_versions_beyond_the_known_ones_are_refused():
    with pytest.raises(UnsupportedRecordVersionError):
        decode_offset_commit_value(hexbytes("0005 0000000000000001"))
    with pytest.raises(UnsupportedRecordVersionError):
        decode_group_metadata_value(hexbytes("0009"))


# --------------------------------------------------------------------------- tombstones


def record(offset: int, key: bytes, value: bytes | None) -> Record:
    return Record(offset, 0, key, value)


def test_replaying_keeps_the_last_value_and_tombstones_remove_keys():
    offset_key = encode_offset_commit_key(OffsetCommitKey("g", "t", 0))
    other_key = encode_offset_commit_key(OffsetCommitKey("g", "t", 1))
    group_key = encode_group_metadata_key(GroupMetadataKey("g"))
    contents = PartitionContents()
    for r in [
        record(0, offset_key, encode_offset_commit_value(OffsetCommitValue(1, "", 0))),
        record(1, offset_key, encode_offset_commit_value(OffsetCommitValue(2, "", 0))),
        record(2, other_key, encode_offset_commit_value(OffsetCommitValue(3, "", 0))),
        record(3, group_key, encode_group_metadata_value(GROUP)),
        record(4, other_key, None),
    ]:
        contents.apply(r)
    assert contents.offsets["g"] == {TopicPartition("t", 0): OffsetCommitValue(2, "", 0)}
    assert contents.groups["g"].generation == 7
    contents.apply(record(5, group_key, None))
    assert "g" not in contents.groups
