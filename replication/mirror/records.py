"""The mirror's own records, in MirrorMaker 2's encodings (Kafka's Struct schemas: STRING is an
INT16 length and UTF-8 bytes, integers big-endian).

- Offset pair (MirrorMaker 2's OffsetSync, extended): key = topic STRING, partition INT32 (the
  source partition); value = upstream offset INT64, downstream offset INT64, then logway's
  addition: the source topic's id and the target topic's id (UUID, 16 bytes each, as Kafka
  writes a UUID). A pair (s, t) says: every source record before s is on the target before t,
  and the source record at s, if copied yet, is at t or after -- for the topics of those ids
  only (a topic deleted and created again under its name has a new id: the pairs of the old one
  say nothing about it). The mirror writes two per partition and transaction
  (flow.MirrorFlow._copy). A value of the two offsets only (written before the ids were added)
  decodes with no ids.
- Checkpoint (MirrorMaker 2's): key = group STRING, topic STRING, partition INT32 (the target
  topic partition); value = version INT16 (0), upstream offset INT64 (the group's committed offset
  on the source), downstream offset INT64 (its translation on the target), metadata STRING.
- Heartbeat: key = source alias STRING, target alias STRING; value = version INT16 (0),
  timestamp INT64 (milliseconds since the epoch).
"""

import base64
import struct
from dataclasses import dataclass

from protocol.primitives import INT16, INT32

_PAIR_VALUE = struct.Struct(">qq")
_TOPIC_ID_SIZE = 16
_HEARTBEAT_VALUE = struct.Struct(">hq")
_CHECKPOINT_OFFSETS = struct.Struct(">hqq")
HEARTBEAT_VERSION = 0
CHECKPOINT_VERSION = 0


class RecordFormatError(ValueError):
    """A key or value that is not in the expected encoding."""


@dataclass(frozen=True)
class Incarnation:
    """Which topics a pair is about: the source topic and its target topic, by topic id (16
    bytes). A topic deleted and created again under the same name is a new incarnation."""

    source_topic_id: bytes
    target_topic_id: bytes


@dataclass(frozen=True)
class OffsetPair:
    topic: str
    partition: int
    source_offset: int
    target_offset: int
    incarnation: Incarnation | None = None  # None: a pair written before pairs carried ids


def topic_id_text(topic_id: bytes) -> str:
    """Kafka's text form of a topic id (Uuid.toString: URL-safe base64 without padding)."""
    return base64.urlsafe_b64encode(topic_id).rstrip(b"=").decode()


@dataclass(frozen=True)
class Checkpoint:
    group: str
    topic: str
    partition: int
    upstream_offset: int
    downstream_offset: int
    metadata: str = ""


@dataclass(frozen=True)
class Heartbeat:
    source_alias: str
    target_alias: str
    timestamp_ms: int


def _string(text: str) -> bytes:
    data = text.encode()
    return INT16.pack(len(data)) + data


def _read_string(data: bytes, pos: int) -> tuple[str, int]:
    if pos + 2 > len(data):
        raise RecordFormatError("string length runs past the end")
    (length,) = INT16.unpack_from(data, pos)
    end = pos + 2 + length
    if length < 0 or end > len(data):
        raise RecordFormatError("string runs past the end")
    return data[pos + 2 : end].decode(), end


def encode_pair(pair: OffsetPair) -> tuple[bytes, bytes]:
    """Pairs are always written with their incarnation."""
    if pair.incarnation is None:
        raise ValueError("an offset pair is written with its topic ids")
    ids = pair.incarnation.source_topic_id + pair.incarnation.target_topic_id
    if len(ids) != 2 * _TOPIC_ID_SIZE:
        raise ValueError("topic ids are 16 bytes")
    key = _string(pair.topic) + INT32.pack(pair.partition)
    return key, _PAIR_VALUE.pack(pair.source_offset, pair.target_offset) + ids


def decode_pair(key: bytes, value: bytes) -> OffsetPair:
    topic, pos = _read_string(key, 0)
    if len(key) != pos + 4 or len(value) not in (_PAIR_VALUE.size, _PAIR_VALUE.size + 2 * _TOPIC_ID_SIZE):
        raise RecordFormatError("not an offset pair")
    (partition,) = INT32.unpack_from(key, pos)
    source_offset, target_offset = _PAIR_VALUE.unpack_from(value, 0)
    incarnation = None
    if len(value) > _PAIR_VALUE.size:
        ids = value[_PAIR_VALUE.size :]
        incarnation = Incarnation(ids[:_TOPIC_ID_SIZE], ids[_TOPIC_ID_SIZE:])
    return OffsetPair(topic, partition, source_offset, target_offset, incarnation)


def encode_heartbeat(heartbeat: Heartbeat) -> tuple[bytes, bytes]:
    key = _string(heartbeat.source_alias) + _string(heartbeat.target_alias)
    return key, _HEARTBEAT_VALUE.pack(HEARTBEAT_VERSION, heartbeat.timestamp_ms)


def decode_heartbeat(key: bytes, value: bytes) -> Heartbeat:
    source, pos = _read_string(key, 0)
    target, pos = _read_string(key, pos)
    if pos != len(key) or len(value) != _HEARTBEAT_VALUE.size:
        raise RecordFormatError("not a heartbeat")
    version, timestamp_ms = _HEARTBEAT_VALUE.unpack(value)
    if version != HEARTBEAT_VERSION:
        raise RecordFormatError(f"heartbeat version {version} is not {HEARTBEAT_VERSION}")
    return Heartbeat(source, target, timestamp_ms)


def encode_checkpoint(checkpoint: Checkpoint) -> tuple[bytes, bytes]:
    key = _string(checkpoint.group) + _string(checkpoint.topic) + INT32.pack(checkpoint.partition)
    value = _CHECKPOINT_OFFSETS.pack(CHECKPOINT_VERSION, checkpoint.upstream_offset, checkpoint.downstream_offset)
    return key, value + _string(checkpoint.metadata)


def decode_checkpoint(key: bytes, value: bytes) -> Checkpoint:
    group, pos = _read_string(key, 0)
    topic, pos = _read_string(key, pos)
    if len(key) != pos + 4 or len(value) < _CHECKPOINT_OFFSETS.size:
        raise RecordFormatError("not a checkpoint")
    (partition,) = INT32.unpack_from(key, pos)
    version, upstream, downstream = _CHECKPOINT_OFFSETS.unpack_from(value, 0)
    if version != CHECKPOINT_VERSION:
        raise RecordFormatError(f"checkpoint version {version} is not {CHECKPOINT_VERSION}")
    metadata, end = _read_string(value, _CHECKPOINT_OFFSETS.size)
    if end != len(value):
        raise RecordFormatError("not a checkpoint")
    return Checkpoint(group, topic, partition, upstream, downstream, metadata)
