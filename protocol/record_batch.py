"""The fixed 61-byte header of a record batch (magic v2), read and patched in place.

This module is on the broker's hot path: it looks at headers only and never at the records.
A batch, all integers big-endian:

    offset  size  field
         0     8  baseOffset            int64   first offset of the batch (assigned by the broker)
         8     4  batchLength           int32   bytes after this field (batch size - 12)
        12     4  partitionLeaderEpoch  int32   set by the broker
        16     1  magic                 int8    2
        17     4  crc                   uint32  CRC-32C of bytes 21 to the end of the batch
        21     2  attributes            int16   bits 0-2 compression, 3 timestamp type,
                                                4 transactional, 5 control, 6 has delete horizon
        23     4  lastOffsetDelta       int32   last offset - baseOffset
        27     8  baseTimestamp         int64
        35     8  maxTimestamp          int64
        43     8  producerId            int64
        51     2  producerEpoch         int16
        53     4  baseSequence          int32
        57     4  recordsCount          int32
        61        records (compressed as a whole when the codec is not NONE)

The CRC starts after itself, so the broker can assign baseOffset and partitionLeaderEpoch without
recomputing it. Every message format (v0 and v1 message sets included) starts with the same
int64 offset and int32 size, and keeps its magic byte at offset 16: that is all `split_batches`
needs to cut any buffer into batches.
"""

import enum
import struct
from collections.abc import Iterator
from typing import Final, NamedTuple

import crc32c

from protocol.compression import Compression
from protocol.errors import CorruptRecordError, UnsupportedMessageFormatError
from protocol.primitives import INT8, INT16, INT32, INT64, UINT32

__all__ = [
    "MAGIC_V2",
    "LOG_OVERHEAD",
    "BATCH_HEADER_SIZE",
    "BASE_OFFSET",
    "BATCH_LENGTH",
    "PARTITION_LEADER_EPOCH",
    "MAGIC",
    "CRC",
    "ATTRIBUTES",
    "LAST_OFFSET_DELTA",
    "BASE_TIMESTAMP",
    "MAX_TIMESTAMP",
    "PRODUCER_ID",
    "PRODUCER_EPOCH",
    "BASE_SEQUENCE",
    "RECORDS_COUNT",
    "NO_TIMESTAMP",
    "NO_PRODUCER_ID",
    "NO_PRODUCER_EPOCH",
    "NO_SEQUENCE",
    "NO_PARTITION_LEADER_EPOCH",
    "MAX_SEQUENCE",
    "COMPRESSION_MASK",
    "TIMESTAMP_TYPE_FLAG",
    "TRANSACTIONAL_FLAG",
    "CONTROL_FLAG",
    "DELETE_HORIZON_FLAG",
    "BATCH_HEADER_STRUCT",
    "TimestampType",
    "BatchHeader",
    "magic_of",
    "size_of",
    "compute_crc",
    "crc_is_valid",
    "write_crc",
    "set_base_offset",
    "set_partition_leader_epoch",
    "set_base_offset_and_leader_epoch",
    "set_log_append_time",
    "split_batches",
    "iter_batches",
    "increment_sequence",
    "decrement_sequence",
]

MAGIC_V2: Final = 2
LOG_OVERHEAD: Final = 12  # baseOffset + batchLength: the part of a batch that batchLength does not count
BATCH_HEADER_SIZE: Final = 61

# Byte offsets of the header fields from the start of the batch.
BASE_OFFSET: Final = 0
BATCH_LENGTH: Final = 8
PARTITION_LEADER_EPOCH: Final = 12
MAGIC: Final = 16
CRC: Final = 17
ATTRIBUTES: Final = 21
LAST_OFFSET_DELTA: Final = 23
BASE_TIMESTAMP: Final = 27
MAX_TIMESTAMP: Final = 35
PRODUCER_ID: Final = 43
PRODUCER_EPOCH: Final = 51
BASE_SEQUENCE: Final = 53
RECORDS_COUNT: Final = 57

NO_TIMESTAMP: Final = -1
NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1
NO_SEQUENCE: Final = -1
NO_PARTITION_LEADER_EPOCH: Final = -1
MAX_SEQUENCE: Final = 2**31 - 1  # sequences wrap from here to 0

COMPRESSION_MASK: Final = 0x07
TIMESTAMP_TYPE_FLAG: Final = 0x08
TRANSACTIONAL_FLAG: Final = 0x10
CONTROL_FLAG: Final = 0x20
DELETE_HORIZON_FLAG: Final = 0x40

BATCH_HEADER_STRUCT: Final = struct.Struct(">qiibIhiqqqhii")  # the fields above, in order

# The smallest batchLength of each message format: a v2 batch with no records is all header;
# v0 and v1 messages are crc + magic + attributes (+ v1 timestamp) + two int32 lengths.
_MIN_BATCH_LENGTH_BY_MAGIC: Final = {0: 14, 1: 22, MAGIC_V2: BATCH_HEADER_SIZE - LOG_OVERHEAD}
# Whatever the format, a batch must reach its magic byte to be told apart from the others.
_MIN_BATCH_SIZE: Final = MAGIC + 1


class TimestampType(enum.IntEnum):
    """Bit 3 of the attributes: who set the timestamps."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class BatchHeader(NamedTuple):
    """The 61-byte header of one v2 batch, as its fields read (crc unsigned, the rest signed).

    A NamedTuple: built for every produced and scanned batch, and a frozen dataclass costs five
    times as much to construct."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @classmethod
    def from_buffer(cls, buf: bytes | bytearray | memoryview, pos: int = 0) -> "BatchHeader":
        """Parse the header at `pos`. The magic is not checked: see `magic_of`."""
        _check_range(buf, pos, BATCH_HEADER_SIZE, "batch header")
        return cls._make(BATCH_HEADER_STRUCT.unpack_from(buf, pos))

    @property
    def size(self) -> int:
        """Bytes the whole batch takes, from baseOffset to its end."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def last_sequence(self) -> int:
        """The sequence number of the batch's last record (NO_SEQUENCE when it has none)."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return increment_sequence(self.base_sequence, self.last_offset_delta)

    @property
    def compression(self) -> Compression:
        """The codec; raises CorruptRecordError for codec numbers that do not exist."""
        codec = self.attributes & COMPRESSION_MASK
        try:
            return Compression(codec)
        except ValueError:
            raise CorruptRecordError(f"unknown compression codec {codec}") from None

    @property
    def timestamp_type(self) -> TimestampType:
        if self.attributes & TIMESTAMP_TYPE_FLAG:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_FLAG)


def increment_sequence(sequence: int, increment: int) -> int:
    """`sequence` + `increment`, wrapping past MAX_SEQUENCE to 0 as producers number records."""
    if sequence > MAX_SEQUENCE - increment:
        return increment - (MAX_SEQUENCE - sequence) - 1
    return sequence + increment


def decrement_sequence(sequence: int, decrement: int) -> int:
    """`sequence` - `decrement`, wrapping below 0 to MAX_SEQUENCE."""
    if sequence < decrement:
        return MAX_SEQUENCE - (decrement - sequence) + 1
    return sequence - decrement


def _check_range(buf: bytes | bytearray | memoryview, pos: int, length: int, what: str) -> None:
    # struct would read a negative position from the end of the buffer: refuse it here.
    if pos < 0 or len(buf) - pos < length:
        raise CorruptRecordError(f"{what} at byte {pos} runs past the end ({len(buf)} bytes)")


def magic_of(buf: bytes | bytearray | memoryview, pos: int = 0) -> int:
    """The magic byte of the batch (or legacy message) at `pos`."""
    _check_range(buf, pos, MAGIC + 1, "magic byte")
    return INT8.unpack_from(buf, pos + MAGIC)[0]


def size_of(buf: bytes | bytearray | memoryview, pos: int = 0) -> int:
    """The size of the batch at `pos` from its batchLength field: batchLength + LOG_OVERHEAD."""
    _check_range(buf, pos, LOG_OVERHEAD, "batch length")
    return INT32.unpack_from(buf, pos + BATCH_LENGTH)[0] + LOG_OVERHEAD


def compute_crc(batch: bytes | bytearray | memoryview) -> int:
    """CRC-32C of `batch[21:]`, where `batch` is exactly one whole batch."""
    _check_range(batch, 0, ATTRIBUTES, "batch")
    with memoryview(batch) as view:
        return crc32c.crc32c(view[ATTRIBUTES:])


def crc_is_valid(batch: bytes | bytearray | memoryview) -> bool:
    """Whether the CRC field of `batch` (exactly one whole batch) matches its content."""
    return compute_crc(batch) == UINT32.unpack_from(batch, CRC)[0]


def write_crc(buf: bytearray | memoryview, pos: int = 0) -> None:
    """Recompute and store the CRC of the batch at `pos` in a writable buffer."""
    size = size_of(buf, pos)
    if size < BATCH_HEADER_SIZE:
        raise CorruptRecordError(f"batch at byte {pos} has size {size}, less than its header")
    _check_range(buf, pos, size, "batch")
    with memoryview(buf) as view:
        crc = compute_crc(view[pos : pos + size])
    UINT32.pack_into(buf, pos + CRC, crc)


def set_base_offset(buf: bytearray | memoryview, pos: int, offset: int) -> None:
    """Assign the batch's first offset. Not covered by the CRC, which stays valid."""
    _check_range(buf, pos, BATCH_HEADER_SIZE, "batch header")
    INT64.pack_into(buf, pos + BASE_OFFSET, offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    """Stamp the leader epoch the batch was appended under. Not covered by the CRC either."""
    _check_range(buf, pos, BATCH_HEADER_SIZE, "batch header")
    INT32.pack_into(buf, pos + PARTITION_LEADER_EPOCH, epoch)


_OFFSET_LENGTH_EPOCH: Final = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch
# What every appended batch is patched with, bound once: compiled code calls a bound method
# straight, where `S.pack_into(...)` looks the method up at every call.
_pack_offset_length_epoch_into: Final = _OFFSET_LENGTH_EPOCH.pack_into


def set_base_offset_and_leader_epoch(
    buf: bytearray | memoryview, pos: int, offset: int, epoch: int, batch_length: int
) -> None:
    """`set_base_offset` and `set_partition_leader_epoch` in one struct call: what the leader
    patches in every batch it appends. `batch_length` is the batch's own (its header read
    already, as the leader has it): the call writes it back as it is."""
    _check_range(buf, pos, BATCH_HEADER_SIZE, "batch header")
    _pack_offset_length_epoch_into(buf, pos, offset, batch_length, epoch)


def set_log_append_time(buf: bytearray | memoryview, pos: int, timestamp: int) -> None:
    """Mark the batch LOG_APPEND_TIME with `timestamp` as its maxTimestamp, then redo the CRC.

    Record timestamps are left alone: readers of a LOG_APPEND_TIME batch give every record the
    batch maxTimestamp instead.
    """
    _check_range(buf, pos, BATCH_HEADER_SIZE, "batch header")
    (attributes,) = INT16.unpack_from(buf, pos + ATTRIBUTES)
    INT16.pack_into(buf, pos + ATTRIBUTES, attributes | TIMESTAMP_TYPE_FLAG)
    INT64.pack_into(buf, pos + MAX_TIMESTAMP, timestamp)
    write_crc(buf, pos)


def split_batches(buf: bytes | bytearray | memoryview) -> list[tuple[int, int]]:
    """(position, size) of each batch in `buf`, which must hold whole batches back to back.

    Works for any magic, reading only the size field and, to check the minimum size, the magic.
    Raises CorruptRecordError for a size too small for its format, or for a buffer that does not
    end exactly at a batch boundary (a produce request carries no partial batches).
    """
    batches = []
    pos = 0
    end = len(buf)
    while pos < end:
        size = size_of(buf, pos)
        _check_min_size(buf, pos, size)
        if size > end - pos:
            raise CorruptRecordError(
                f"batch at byte {pos} of {size} bytes runs past the end ({end} bytes)"
            )
        batches.append((pos, size))
        pos += size
    return batches


def _check_min_size(buf: bytes | bytearray | memoryview, pos: int, size: int) -> None:
    if size < _MIN_BATCH_SIZE:
        raise CorruptRecordError(f"batch at byte {pos} has impossible size {size}")
    magic = magic_of(buf, pos)
    min_length = _MIN_BATCH_LENGTH_BY_MAGIC.get(magic, 0)
    if size - LOG_OVERHEAD < min_length:
        raise CorruptRecordError(
            f"magic {magic} batch at byte {pos} has batchLength {size - LOG_OVERHEAD},"
            f" below the minimum of {min_length}"
        )


def iter_batches(
    buf: bytes | bytearray | memoryview, pos: int = 0, end: int | None = None
) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) for each complete v2 batch in `buf[pos:end]`.

    A partial batch at the end stops the iteration without error: fetch responses and torn log
    tails end that way. A batch in an older format raises UnsupportedMessageFormatError, and a
    size too small for a v2 batch raises CorruptRecordError.
    """
    if end is None:
        end = len(buf)
    while end - pos >= LOG_OVERHEAD:
        size = size_of(buf, pos)
        if size < _MIN_BATCH_SIZE:
            raise CorruptRecordError(f"batch at byte {pos} has impossible size {size}")
        if size > end - pos:
            return
        magic = magic_of(buf, pos)
        if magic != MAGIC_V2:
            raise UnsupportedMessageFormatError(f"batch at byte {pos} has magic {magic}")
        _check_min_size(buf, pos, size)
        yield pos, BatchHeader.from_buffer(buf, pos)
        pos += size
