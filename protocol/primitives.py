"""Kafka's primitive types, hand-written for the hot paths.

Most messages are parsed and built by kio (see protocol.schemas). The paths that run for every
produced or fetched batch (record batches, Produce, Fetch) use these instead: they read from
memoryviews without copying and build responses as lists of byte chunks.

Types, as the protocol guide names them: INT8/16/32/64 big-endian; UNSIGNED_VARINT (7 bits per
byte, low group first); VARINT/VARLONG (zigzag over the unsigned form); STRING (INT16 length),
COMPACT_STRING (UNSIGNED_VARINT length + 1, 0 for null); BYTES (INT32 length), COMPACT_BYTES;
ARRAY (INT32 count, -1 for null), COMPACT_ARRAY (UNSIGNED_VARINT count + 1); tagged fields
(UNSIGNED_VARINT count, then tag, size and bytes per field).
"""

import struct
from typing import Final

from protocol.errors import ProtocolError

INT8: Final = struct.Struct(">b")
INT16: Final = struct.Struct(">h")
INT32: Final = struct.Struct(">i")
UINT32: Final = struct.Struct(">I")
INT64: Final = struct.Struct(">q")

_MAX_VARINT_BYTES: Final = 10


def read_uvarint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """Decode an UNSIGNED_VARINT at `pos`; return (value, position after it)."""
    result = 0
    shift = 0
    for _ in range(_MAX_VARINT_BYTES):
        try:
            byte = buf[pos]
        except IndexError:
            raise ProtocolError("varint runs past the end of the buffer") from None
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
    raise ProtocolError("varint longer than 10 bytes")


def read_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """Decode a zigzag VARINT or VARLONG at `pos`; return (value, position after it)."""
    raw, pos = read_uvarint(buf, pos)
    return (raw >> 1) ^ -(raw & 1), pos


# The one-byte varints, built once: `bytes((value,))` is a generic call of the bytes type in
# compiled code, and every compact length and tagged-field count of a response is one.
_ONE_BYTE_UVARINTS: Final = [bytes((value,)) for value in range(0x80)]


# Two-byte varints (up to 16,383: a small fetch answer's records length) in one pack call.
_pack_two_bytes: Final = struct.Struct(">BB").pack


def encode_uvarint(value: int) -> bytes:
    if 0 <= value < 0x80:
        return _ONE_BYTE_UVARINTS[value]
    if 0 < value < 0x4000:
        return _pack_two_bytes((value & 0x7F) | 0x80, value >> 7)
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_varint(value: int) -> bytes:
    """Zigzag-encode a signed 64-bit value."""
    return encode_uvarint((value << 1) ^ (value >> 63))


def encode_string(value: str | None, flexible: bool) -> bytes:
    """STRING / NULLABLE_STRING, or their COMPACT forms when `flexible`."""
    if value is None:
        return b"\x00" if flexible else b"\xff\xff"
    data = value.encode()
    if flexible:
        return encode_uvarint(len(data) + 1) + data
    return INT16.pack(len(data)) + data


def encode_bytes_length(length: int | None, flexible: bool) -> bytes:
    """The length prefix of BYTES / NULLABLE_BYTES (or COMPACT_*): the payload follows it."""
    if length is None:
        return b"\x00" if flexible else b"\xff\xff\xff\xff"
    if flexible:
        return encode_uvarint(length + 1)
    return INT32.pack(length)


def encode_array_length(count: int | None, flexible: bool) -> bytes:
    if count is None:
        return b"\x00" if flexible else b"\xff\xff\xff\xff"
    if flexible:
        return encode_uvarint(count + 1)
    return INT32.pack(count)


EMPTY_TAGGED_FIELDS: Final = b"\x00"


class Reader:
    """A cursor over a buffer, raising ProtocolError on anything malformed or truncated."""

    __slots__ = ("buf", "pos")

    def __init__(self, buf: memoryview, pos: int = 0) -> None:
        self.buf = buf
        self.pos = pos

    def remaining(self) -> int:
        return len(self.buf) - self.pos

    def _unpack(self, fmt: struct.Struct) -> int:
        try:
            (value,) = fmt.unpack_from(self.buf, self.pos)
        except struct.error:
            raise ProtocolError(f"truncated at byte {self.pos}") from None
        self.pos += fmt.size
        return value

    def int8(self) -> int:
        return self._unpack(INT8)

    def int16(self) -> int:
        return self._unpack(INT16)

    def int32(self) -> int:
        return self._unpack(INT32)

    def int64(self) -> int:
        return self._unpack(INT64)

    def uvarint(self) -> int:
        value, self.pos = read_uvarint(self.buf, self.pos)
        return value

    def take(self, length: int) -> memoryview:
        if length < 0 or length > self.remaining():
            raise ProtocolError(f"length {length} runs past the end at byte {self.pos}")
        view = self.buf[self.pos : self.pos + length]
        self.pos += length
        return view

    def _length(self, flexible: bool, legacy: struct.Struct) -> int:
        """A length prefix; -1 stands for null."""
        if flexible:
            return self.uvarint() - 1
        return self._unpack(legacy)

    def nullable_string(self, flexible: bool) -> str | None:
        length = self._length(flexible, INT16)
        if length < 0:
            return None
        try:
            return str(self.take(length), "utf-8")
        except UnicodeDecodeError:
            raise ProtocolError("string is not valid UTF-8") from None

    def string(self, flexible: bool) -> str:
        value = self.nullable_string(flexible)
        if value is None:
            raise ProtocolError("null where a string is required")
        return value

    def nullable_bytes(self, flexible: bool) -> memoryview | None:
        length = self._length(flexible, INT32)
        if length < 0:
            return None
        return self.take(length)

    def array_length(self, flexible: bool) -> int:
        """Element count of an array; -1 for a null array."""
        count = self._length(flexible, INT32)
        # Every element takes at least one byte: a larger count is a lie that would make the
        # caller loop (or allocate) for nothing.
        if count > self.remaining():
            raise ProtocolError(f"array of {count} elements in {self.remaining()} bytes")
        return count

    def skip_tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self.take(self.uvarint())
