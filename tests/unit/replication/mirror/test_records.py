import pytest

from replication.mirror.records import (
    Checkpoint,
    Heartbeat,
    Incarnation,
    OffsetPair,
    RecordFormatError,
    decode_checkpoint,
    decode_heartbeat,
    decode_pair,
    encode_checkpoint,
    encode_heartbeat,
    encode_pair,
    topic_id_text,
)

IDS = Incarnation(bytes(range(16)), bytes(range(16, 32)))


def test_offset_pairs_use_mirrormaker_2_offset_sync_encoding_followed_by_the_topic_ids():
    key, value = encode_pair(OffsetPair("orders", 2, 1000, 1042, IDS))
    assert key == b"\x00\x06orders\x00\x00\x00\x02"
    assert value == (1000).to_bytes(8, "big") + (1042).to_bytes(8, "big") + bytes(range(32))
    assert decode_pair(key, value) == OffsetPair("orders", 2, 1000, 1042, IDS)


def test_pairs_written_before_they_carried_topic_ids_decode_without_them():
    value = (1000).to_bytes(8, "big") + (1042).to_bytes(8, "big")
    assert decode_pair(b"\x00\x06orders\x00\x00\x00\x02", value) == OffsetPair("orders", 2, 1000, 1042)


def test_pairs_are_never_written_without_their_topic_ids():
    with pytest.raises(ValueError):
        encode_pair(OffsetPair("orders", 2, 1000, 1042))


def test_topic_ids_read_as_kafka_prints_them():
    # Kafka's Uuid.toString: URL-safe base64, no padding
    assert topic_id_text(bytes(range(16))) == "AAECAwQFBgcICQoLDA0ODw"


def test_heartbeats_use_mirrormaker_2_encoding():
    key, value = encode_heartbeat(Heartbeat("A", "B", 1_700_000_000_123))
    assert key == b"\x00\x01A\x00\x01B"
    assert value == b"\x00\x00" + (1_700_000_000_123).to_bytes(8, "big")
    assert decode_heartbeat(key, value) == Heartbeat("A", "B", 1_700_000_000_123)


def test_non_ascii_topic_names_count_bytes():
    pair = OffsetPair("заказы", 0, 1, 1, IDS)
    assert decode_pair(*encode_pair(pair)) == pair


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (b"\x00\x06orders", b"\x00" * 16),  # partition missing
        (b"\x00\x09orders\x00\x00\x00\x02", b"\x00" * 16),  # string longer than the key
        (b"\x00\x06orders\x00\x00\x00\x02", b"\x00" * 15),
        (b"\x00\x06orders\x00\x00\x00\x02", b"\x00" * 32),  # one topic id only
    ],
)
def test_malformed_pairs_are_refused(key, value):
    with pytest.raises(RecordFormatError):
        decode_pair(key, value)


def test_heartbeats_of_another_version_are_refused():
    key, _ = encode_heartbeat(Heartbeat("A", "B", 0))
    with pytest.raises(RecordFormatError, match="version 1"):
        decode_heartbeat(key, b"\x00\x01" + bytes(8))


def test_checkpoints_use_mirrormaker_2_encoding():
    checkpoint = Checkpoint("billing", "A.orders", 1, 500, 512, "m")
    key, value = encode_checkpoint(checkpoint)
    assert key == b"\x00\x07billing\x00\x08A.orders\x00\x00\x00\x01"
    assert value == b"\x00\x00" + (500).to_bytes(8, "big") + (512).to_bytes(8, "big") + b"\x00\x01m"
    assert decode_checkpoint(key, value) == checkpoint


def test_truncated_checkpoints_are_refused():
    key, value = encode_checkpoint(Checkpoint("g", "t", 0, 1, 1))
    with pytest.raises(RecordFormatError):
        decode_checkpoint(key, value[:-1])
