"""The mirror's own records, in MirrorMaker 2's encodings (Kafka's Struct schemas: STRING is an
INT16 length and UTF-8 bytes, integers big-endian).

- Offset pair (MirrorMaker 2's OffsetSync): key = topic STRING, partition INT32 (the source
  partition); value = upstream offset INT64, downstream offset INT64. The upstream offset is the
  next source offset to copy, the downstream one the target offset the next copied record gets
  (both "next", so that a pair is also valid before any record was copied: (0, 0)).
- Heartbeat: key = source alias STRING, target alias STRING; value = version INT16 (0),
  timestamp INT64 (milliseconds since the epoch).
"""

import struct
from dataclasses import dataclass

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_PAIR_VALUE = struct.Struct(">qq")
_HEARTBEAT_VALUE = struct.Struct(">hq")
HEARTBEAT_VERSION = 0


class RecordFormatError(ValueError):
    """A key or value that is not in the expected encoding."""


@dataclass(frozen=True)
class OffsetPair:
    topic: str
    partition: int
    source_offset: int
    target_offset: int


@dataclass(frozen=True)
class Heartbeat:
    source_alias: str
    target_alias: str
    timestamp_ms: int


def _string(text: str) -> bytes:
    data = text.encode()
    return _INT16.pack(len(data)) + data


def _read_string(data: bytes, pos: int) -> tuple[str, int]:
    if pos + 2 > len(data):
        raise RecordFormatError("string length runs past the end")
    (length,) = _INT16.unpack_from(data, pos)
    end = pos + 2 + length
    if length < 0 or end > len(data):
        raise RecordFormatError("string runs past the end")
    return data[pos + 2 : end].decode(), end


def encode_pair(pair: OffsetPair) -> tuple[bytes, bytes]:
    key = _string(pair.topic) + _INT32.pack(pair.partition)
    return key, _PAIR_VALUE.pack(pair.source_offset, pair.target_offset)


def decode_pair(key: bytes, value: bytes) -> OffsetPair:
    topic, pos = _read_string(key, 0)
    if len(key) != pos + 4 or len(value) != _PAIR_VALUE.size:
        raise RecordFormatError("not an offset pair")
    (partition,) = _INT32.unpack_from(key, pos)
    source_offset, target_offset = _PAIR_VALUE.unpack(value)
    return OffsetPair(topic, partition, source_offset, target_offset)


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
