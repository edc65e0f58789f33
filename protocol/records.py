"""The records inside a v2 record batch: decoding and building whole batches.

Off the hot path (the broker stores and serves batches without opening them): this is for tools,
tests, compaction, the key check of compacted topics, ListOffsets by timestamp and the like. The
batch header is described in protocol.record_batch. After it, `recordsCount` records follow,
compressed together as one blob when the codec is not NONE. Each record:

    length          varint   bytes in the record after this field
    attributes      int8     unused, 0
    timestampDelta  varlong  timestamp - batch baseTimestamp
    offsetDelta     varint   offset - batch baseOffset
    keyLength       varint   -1 for a null key
    key             bytes
    valueLength     varint   -1 for a null value
    value           bytes
    headerCount     varint
    headers, each:
      keyLength     varint
      key           bytes    UTF-8, never null
      valueLength   varint   -1 for a null value
      value         bytes

In a LOG_APPEND_TIME batch the record timestamps are not read: every record takes the batch
maxTimestamp. Control batches (transaction markers) hold one record whose key is
[int16 version 0][int16 type] and whose value is [int16 version 0][int32 coordinator epoch].
"""

import enum
import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

from protocol.compression import Compression, compress, decompress
from protocol.errors import (
    CorruptRecordError,
    InvalidRecordError,
    ProtocolError,
    UnsupportedMessageFormatError,
)
from protocol.primitives import encode_varint, read_varint
from protocol.record_batch import (
    BATCH_HEADER_SIZE,
    BATCH_HEADER_STRUCT,
    COMPRESSION_MASK,
    CONTROL_FLAG,
    DELETE_HORIZON_FLAG,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    TIMESTAMP_TYPE_FLAG,
    TRANSACTIONAL_FLAG,
    BatchHeader,
    TimestampType,
    write_crc,
)

__all__ = [
    "Header",
    "Record",
    "iter_records",
    "iter_keys",
    "build_batch",
    "rebuild_batch",
    "ControlRecordType",
    "control_batch_type",
    "control_record",
    "control_record_type",
]

_INT32_MAX = 2**31 - 1
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_NULL_LENGTH = encode_varint(-1)
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Header:
    key: str
    value: bytes | None


@dataclass(frozen=True, slots=True)
class Record:
    """One record, with its absolute offset and timestamp (not the deltas stored on the wire)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


def iter_records(batch: bytes | bytearray | memoryview) -> Iterator[Record]:
    """Decode the records of `batch`, one whole v2 batch starting at its baseOffset.

    The header is checked and the records section decompressed at once; records are then decoded
    as they are consumed. Anything malformed raises CorruptRecordError. The CRC is not checked
    (see record_batch.crc_is_valid).
    """
    header, section = _records_section(batch, None)
    return _decode_records(section, header)


def iter_keys(
    batch: bytes | bytearray | memoryview, max_section_bytes: int | None = None
) -> Iterator[tuple[int, bytes | None, bool]]:
    """(offset, key, whether the value is not null) of each record of `batch`, values and
    headers skipped unread: what compaction and the key check of compacted topics need, for less
    work than `iter_records`.

    Records are walked by their length fields, so a malformed record is caught only as far as its
    key and value length go. With `max_section_bytes`, a records section that decompresses to
    more raises RecordsTooLargeError before it is held in memory.
    """
    header, section = _records_section(batch, max_section_bytes)
    base_offset = header.base_offset

    def decode(data: memoryview, pos: int, end: int) -> tuple[int, bytes | None, bool]:
        offset_delta, _, key, pos = _decode_record_start(data, pos, end)
        value_length, pos = read_varint(data, pos)
        if pos > end:
            raise CorruptRecordError(f"value length at byte {pos} runs past its record")
        return base_offset + offset_delta, key, value_length >= 0

    return _walk_records(section, header, decode)


def _records_section(
    batch: bytes | bytearray | memoryview, max_size: int | None
) -> tuple[BatchHeader, memoryview]:
    """The checked header of `batch` and its records section, decompressed."""
    header = BatchHeader.from_buffer(batch)
    if header.magic != MAGIC_V2:
        raise UnsupportedMessageFormatError(f"batch has magic {header.magic}, not {MAGIC_V2}")
    if not BATCH_HEADER_SIZE <= header.size <= len(batch):
        raise CorruptRecordError(
            f"batch size {header.size} does not fit a {len(batch)}-byte buffer"
        )
    if header.record_count < 0:
        raise CorruptRecordError(f"negative record count {header.record_count}")
    section = memoryview(batch)[BATCH_HEADER_SIZE : header.size]
    if header.compression != Compression.NONE:
        section = memoryview(decompress(header.compression, section, max_size))
    return header, section


def _decode_records(data: memoryview, header: BatchHeader) -> Iterator[Record]:
    fixed_timestamp = None
    if header.timestamp_type == TimestampType.LOG_APPEND_TIME:
        fixed_timestamp = header.max_timestamp

    def decode(data: memoryview, pos: int, end: int) -> Record:
        return _decode_record(data, pos, end, header, fixed_timestamp)

    return _walk_records(data, header, decode)


def _walk_records(
    data: memoryview, header: BatchHeader, decode: Callable[[memoryview, int, int], _T]
) -> Iterator[_T]:
    """`decode(data, start, end)` of each record of the section, framed by its length field."""
    pos = 0
    for index in range(header.record_count):
        if pos >= len(data):
            raise CorruptRecordError(
                f"batch declares {header.record_count} records but holds only {index}"
            )
        try:
            length, pos = read_varint(data, pos)
            if length < 0 or length > len(data) - pos:
                raise CorruptRecordError(
                    f"record of {length} bytes at byte {pos} runs past the batch"
                )
            item = decode(data, pos, pos + length)
        except ProtocolError as exc:  # from the varint readers
            raise CorruptRecordError(f"record {index}: {exc}") from None
        yield item
        pos += length
    if pos != len(data):
        raise CorruptRecordError(
            f"{len(data) - pos} bytes left after the {header.record_count} records declared"
        )


def _decode_record(
    data: memoryview, pos: int, end: int, header: BatchHeader, fixed_timestamp: int | None
) -> Record:
    offset_delta, timestamp_delta, key, pos = _decode_record_start(data, pos, end)
    value, pos = _decode_nullable_bytes(data, pos, end)
    headers, pos = _decode_headers(data, pos, end)
    if pos != end:
        raise CorruptRecordError(f"record fields end at byte {pos}, its length says {end}")
    timestamp = header.base_timestamp + timestamp_delta
    if fixed_timestamp is not None:
        timestamp = fixed_timestamp
    return Record(header.base_offset + offset_delta, timestamp, key, value, headers)


def _decode_record_start(
    data: memoryview, pos: int, end: int
) -> tuple[int, int, bytes | None, int]:
    """(offsetDelta, timestampDelta, key, position after the key) of the record at `pos`."""
    pos += 1  # attributes: no bit of them is used yet
    timestamp_delta, pos = read_varint(data, pos)
    offset_delta, pos = read_varint(data, pos)
    key, pos = _decode_nullable_bytes(data, pos, end)
    return offset_delta, timestamp_delta, key, pos


def _decode_nullable_bytes(data: memoryview, pos: int, end: int) -> tuple[bytes | None, int]:
    length, pos = read_varint(data, pos)
    if length < 0:
        return None, pos
    if length > end - pos:
        raise CorruptRecordError(f"field of {length} bytes at byte {pos} runs past its record")
    return bytes(data[pos : pos + length]), pos + length


def _decode_headers(data: memoryview, pos: int, end: int) -> tuple[tuple[Header, ...], int]:
    count, pos = read_varint(data, pos)
    # Each header takes at least two bytes; a larger count cannot be honest.
    if count < 0 or 2 * count > end - pos:
        raise CorruptRecordError(f"header count {count} at byte {pos} is impossible")
    headers = []
    for _ in range(count):
        raw_key, pos = _decode_nullable_bytes(data, pos, end)
        if raw_key is None:
            raise CorruptRecordError(f"null header key at byte {pos}")
        try:
            key = raw_key.decode()
        except UnicodeDecodeError:
            raise CorruptRecordError(f"header key at byte {pos} is not UTF-8") from None
        value, pos = _decode_nullable_bytes(data, pos, end)
        headers.append(Header(key, value))
    return tuple(headers), pos


def build_batch(
    records: Sequence[Record],
    *,
    compression: Compression = Compression.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """Build one v2 batch holding `records`, CRC included.

    baseOffset and baseTimestamp are those of the first record; offsets must increase (gaps are
    allowed, as compaction leaves them). Raises ValueError for an empty sequence, offsets out of
    order, or values that do not fit their fields.
    """
    if not records:
        raise ValueError("a batch holds at least one record")
    _check_offsets(records)
    attributes = int(compression)
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_FLAG
    if is_transactional:
        attributes |= TRANSACTIONAL_FLAG
    if is_control:
        attributes |= CONTROL_FLAG
    base_timestamp = records[0].timestamp
    template = BatchHeader(
        base_offset=records[0].offset,
        batch_length=0,
        partition_leader_epoch=partition_leader_epoch,
        magic=MAGIC_V2,
        crc=0,
        attributes=attributes,
        last_offset_delta=records[-1].offset - records[0].offset,
        base_timestamp=base_timestamp,
        max_timestamp=_check_timestamps(records, base_timestamp),
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        record_count=len(records),
    )
    return _assemble(template, records)


def rebuild_batch(
    header: BatchHeader,
    records: Sequence[Record],
    *,
    compression: Compression | None = None,
    delete_horizon_ms: int | None = None,
) -> bytes:
    """The batch `header` heads, now holding `records`: all of its records, or those compaction
    keeps.

    What the header says stays: baseOffset and lastOffsetDelta (so the batch spans the same
    offsets and, with baseSequence, the producer's sequence numbers are unchanged), producer
    fields, flags, timestamp type and partition leader epoch. maxTimestamp becomes that of
    `records`. `compression` replaces the codec.

    A delete horizon (KIP-534) the batch carries stays, and `delete_horizon_ms` sets one: the
    DELETE_HORIZON_FLAG attribute, with baseTimestamp holding the horizon; record timestamps are
    unchanged, as their deltas are taken from it. Without records, the result is a header-only
    batch, uncompressed, stamped with the old maxTimestamp: what compaction keeps of a producer's
    last batch.
    """
    attributes = header.attributes & ~(COMPRESSION_MASK | DELETE_HORIZON_FLAG)
    if not records:
        template = header._replace(
            attributes=attributes, base_timestamp=header.max_timestamp, record_count=0
        )
        return _assemble(template, records)
    _check_offsets(records)
    if records[0].offset < header.base_offset or records[-1].offset > header.last_offset:
        raise ValueError(
            f"records {records[0].offset}..{records[-1].offset} are not all within the batch's "
            f"offsets {header.base_offset}..{header.last_offset}"
        )
    attributes |= header.compression if compression is None else compression
    if delete_horizon_ms is None and header.has_delete_horizon:
        delete_horizon_ms = header.base_timestamp
    base_timestamp = records[0].timestamp
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_FLAG
        base_timestamp = delete_horizon_ms
    template = header._replace(
        attributes=attributes,
        base_timestamp=base_timestamp,
        max_timestamp=_check_timestamps(records, base_timestamp),
        record_count=len(records),
    )
    return _assemble(template, records)


def recompress_batch(batch: bytes | bytearray | memoryview, compression: Compression) -> bytes:
    """The same batch, records and producer fields and flags alike, compressed with
    `compression` (a topic whose compression.type names a codec stores its batches that way)."""
    return rebuild_batch(
        BatchHeader.from_buffer(batch), list(iter_records(batch)), compression=compression
    )


def _assemble(template: BatchHeader, records: Sequence[Record]) -> bytes:
    """The batch with `template`'s header fields (its length and CRC aside) and `records`, whose
    offset and timestamp deltas are taken from the template's base offset and timestamp."""
    body = bytearray()
    for record in records:
        _encode_record(
            body,
            record,
            record.offset - template.base_offset,
            record.timestamp - template.base_timestamp,
        )
    codec = Compression(template.attributes & COMPRESSION_MASK)
    batch = bytearray(BATCH_HEADER_SIZE)
    batch += body if codec == Compression.NONE else compress(codec, body)
    # The CRC field is written last, as it covers the rest of the header.
    fields = template._replace(batch_length=len(batch) - LOG_OVERHEAD, magic=MAGIC_V2, crc=0)
    try:
        BATCH_HEADER_STRUCT.pack_into(batch, 0, *fields)
    except struct.error as exc:
        raise ValueError(f"batch header field out of range: {exc}") from None
    write_crc(batch)
    return bytes(batch)


def _check_offsets(records: Sequence[Record]) -> None:
    base_offset = previous_offset = records[0].offset
    for record in records[1:]:
        if record.offset <= previous_offset:
            raise ValueError(f"offset {record.offset} follows {previous_offset}: not increasing")
        previous_offset = record.offset
    if previous_offset - base_offset > _INT32_MAX:
        raise ValueError(f"offsets {base_offset}..{previous_offset} span more than an int32")


def _check_timestamps(records: Sequence[Record], base_timestamp: int) -> int:
    """Check every timestamp delta from `base_timestamp` fits a varlong; return the batch
    maxTimestamp."""
    timestamps = [record.timestamp for record in records]
    max_timestamp = max(timestamps)
    for delta in (min(timestamps) - base_timestamp, max_timestamp - base_timestamp):
        if not _INT64_MIN <= delta <= _INT64_MAX:
            raise ValueError(f"timestamp delta {delta} does not fit a varlong")
    return max_timestamp


def _encode_record(out: bytearray, record: Record, offset_delta: int, timestamp_delta: int) -> None:
    body = bytearray(b"\x00")  # attributes
    body += encode_varint(timestamp_delta)
    body += encode_varint(offset_delta)
    _encode_nullable_bytes(body, record.key)
    _encode_nullable_bytes(body, record.value)
    body += encode_varint(len(record.headers))
    for header in record.headers:
        _encode_nullable_bytes(body, header.key.encode())
        _encode_nullable_bytes(body, header.value)
    out += encode_varint(len(body))
    out += body


def _encode_nullable_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        out += _NULL_LENGTH
    else:
        out += encode_varint(len(data))
        out += data


class ControlRecordType(enum.IntEnum):
    """The type in a control record's key."""

    ABORT = 0
    COMMIT = 1


_CONTROL_RECORD_VERSION = 0
_CONTROL_KEY = struct.Struct(">hh")  # version, type
_CONTROL_VALUE = struct.Struct(">hi")  # version, coordinator epoch


def control_record(
    record_type: ControlRecordType, coordinator_epoch: int, offset: int, timestamp: int
) -> Record:
    """A transaction marker, to go alone into a batch built with is_control=True."""
    return Record(
        offset=offset,
        timestamp=timestamp,
        key=_CONTROL_KEY.pack(_CONTROL_RECORD_VERSION, record_type),
        value=_CONTROL_VALUE.pack(_CONTROL_RECORD_VERSION, coordinator_epoch),
    )


def control_batch_type(batch: bytes | memoryview) -> ControlRecordType:
    """The type of a control batch: that of its (one) record. Raises as control_batch_marker."""
    return control_batch_marker(batch)[0]


def control_batch_marker(batch: bytes | memoryview) -> tuple[ControlRecordType, int]:
    """The type and the coordinator epoch of a transaction marker batch (its one record).
    Raises as control_record_type, and CorruptRecordError for a control batch without records or
    a value too short."""
    for record in iter_records(batch):
        record_type = control_record_type(record)
        if record.value is None or len(record.value) < _CONTROL_VALUE.size:
            raise CorruptRecordError(f"control record value {record.value!r} is too short")
        return record_type, _CONTROL_VALUE.unpack_from(record.value)[1]
    raise CorruptRecordError("control batch without records")


def control_record_type(record: Record) -> ControlRecordType:
    """The type of a control record, from its key.

    Raises CorruptRecordError for a key too short or with a negative version, and
    InvalidRecordError for a type this broker does not know.
    """
    if record.key is None or len(record.key) < _CONTROL_KEY.size:
        raise CorruptRecordError(f"control record key {record.key!r} is too short")
    version, type_code = _CONTROL_KEY.unpack_from(record.key)
    if version < 0:
        raise CorruptRecordError(f"control record key has negative version {version}")
    try:
        return ControlRecordType(type_code)
    except ValueError:
        raise InvalidRecordError(f"unknown control record type {type_code}") from None
