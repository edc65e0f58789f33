import pytest

from protocol import record_batch
from protocol.compression import Compression
from protocol.errors import CorruptRecordError, UnsupportedMessageFormatError
from protocol.record_batch import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    MAX_SEQUENCE,
    NO_SEQUENCE,
    BatchHeader,
    TimestampType,
    compute_crc,
    crc_is_valid,
    decrement_sequence,
    increment_sequence,
    iter_batches,
    magic_of,
    set_base_offset,
    set_base_offset_and_leader_epoch,
    set_log_append_time,
    set_partition_leader_epoch,
    size_of,
    split_batches,
    write_crc,
)
from protocol.records import Record, build_batch, iter_records

# (field, constant name, width, signed), in wire order, from the protocol guide.
FIELDS = [
    ("base_offset", "BASE_OFFSET", 8, True),
    ("batch_length", "BATCH_LENGTH", 4, True),
    ("partition_leader_epoch", "PARTITION_LEADER_EPOCH", 4, True),
    ("magic", "MAGIC", 1, True),
    ("crc", "CRC", 4, False),
    ("attributes", "ATTRIBUTES", 2, True),
    ("last_offset_delta", "LAST_OFFSET_DELTA", 4, True),
    ("base_timestamp", "BASE_TIMESTAMP", 8, True),
    ("max_timestamp", "MAX_TIMESTAMP", 8, True),
    ("producer_id", "PRODUCER_ID", 8, True),
    ("producer_epoch", "PRODUCER_EPOCH", 2, True),
    ("base_sequence", "BASE_SEQUENCE", 4, True),
    ("record_count", "RECORDS_COUNT", 4, True),
]

# A distinct value per field, so that a field read from the wrong place shows.
SAMPLE = {
    "base_offset": 0x0102030405060708,
    "batch_length": 49,
    "partition_leader_epoch": 7,
    "magic": 2,
    "crc": 0xFEDCBA98,
    "attributes": 0x0033,  # lz4 | transactional | control
    "last_offset_delta": 4,
    "base_timestamp": 1_700_000_000_000,
    "max_timestamp": 1_700_000_000_999,
    "producer_id": 123_456_789_012,
    "producer_epoch": -3,
    "base_sequence": 2_000_000_000,
    "record_count": 5,
}


def hand_made_header(**overrides: int) -> bytes:
    """A header packed field by field with int.to_bytes, independently of the module's struct."""
    values = {**SAMPLE, **overrides}
    return b"".join(
        values[field].to_bytes(width, "big", signed=signed) for field, _, width, signed in FIELDS
    )


def sample_batch(count: int = 3, offset: int = 0, compression=Compression.NONE) -> bytes:
    records = [
        Record(offset + i, 1_000 + i, b"key-%d" % i, b"value-%d" % i) for i in range(count)
    ]
    return build_batch(records, compression=compression)


def legacy_message(magic: int, value: bytes = b"v") -> bytes:
    """A v0/v1 message by hand: offset, size, crc, magic, attributes, [timestamp], key, value."""
    body = b"\x00\x00\x00\x00" + bytes((magic, 0))
    if magic == 1:
        body += (0).to_bytes(8, "big")
    body += (-1).to_bytes(4, "big", signed=True) + len(value).to_bytes(4, "big") + value
    return (0).to_bytes(8, "big") + len(body).to_bytes(4, "big") + body


def test_layout_constants():
    assert record_batch.MAGIC_V2 == 2
    assert LOG_OVERHEAD == 12
    assert BATCH_HEADER_SIZE == 61
    assert record_batch.BATCH_HEADER_STRUCT.size == BATCH_HEADER_SIZE
    assert len(hand_made_header()) == BATCH_HEADER_SIZE


def test_sentinels():
    assert record_batch.NO_TIMESTAMP == -1
    assert record_batch.NO_PRODUCER_ID == -1
    assert record_batch.NO_PRODUCER_EPOCH == -1
    assert record_batch.NO_SEQUENCE == -1
    assert record_batch.NO_PARTITION_LEADER_EPOCH == -1
    assert TimestampType.CREATE_TIME == 0
    assert TimestampType.LOG_APPEND_TIME == 1


@pytest.mark.parametrize(("field", "constant", "width", "signed"), FIELDS)
def test_offset_constant_points_at_its_field(field, constant, width, signed):
    header = hand_made_header()
    position = getattr(record_batch, constant)
    expected_position = sum(w for f, _, w, _ in FIELDS[: [f for f, *_ in FIELDS].index(field)])
    assert position == expected_position
    assert int.from_bytes(header[position : position + width], "big", signed=signed) == (
        SAMPLE[field]
    )


def test_parse_hand_made_header():
    header = BatchHeader.from_buffer(hand_made_header())
    assert header == BatchHeader(**SAMPLE)
    assert header.size == 49 + 12
    assert header.last_offset == SAMPLE["base_offset"] + 4
    assert header.next_offset == SAMPLE["base_offset"] + 5
    assert header.compression is Compression.LZ4
    assert header.timestamp_type is TimestampType.CREATE_TIME
    assert header.is_transactional
    assert header.is_control
    assert not header.has_delete_horizon


def test_crc_is_read_unsigned_and_signed_fields_signed():
    header = BatchHeader.from_buffer(
        hand_made_header(crc=0xFFFFFFFF, base_offset=-1, producer_id=-1, base_sequence=-1)
    )
    assert header.crc == 0xFFFFFFFF
    assert (header.base_offset, header.producer_id, header.base_sequence) == (-1, -1, -1)


@pytest.mark.parametrize(
    ("attributes", "compression", "timestamp_type", "transactional", "control", "horizon"),
    [
        (0x00, Compression.NONE, TimestampType.CREATE_TIME, False, False, False),
        (0x01, Compression.GZIP, TimestampType.CREATE_TIME, False, False, False),
        (0x02, Compression.SNAPPY, TimestampType.CREATE_TIME, False, False, False),
        (0x04, Compression.ZSTD, TimestampType.CREATE_TIME, False, False, False),
        (0x08, Compression.NONE, TimestampType.LOG_APPEND_TIME, False, False, False),
        (0x10, Compression.NONE, TimestampType.CREATE_TIME, True, False, False),
        (0x20, Compression.NONE, TimestampType.CREATE_TIME, False, True, False),
        (0x40, Compression.NONE, TimestampType.CREATE_TIME, False, False, True),
        (0x7B, Compression.LZ4, TimestampType.LOG_APPEND_TIME, True, True, True),
    ],
)
def test_attribute_bits(attributes, compression, timestamp_type, transactional, control, horizon):
    header = BatchHeader.from_buffer(hand_made_header(attributes=attributes))
    assert header.compression is compression
    assert header.timestamp_type is timestamp_type
    assert header.is_transactional is transactional
    assert header.is_control is control
    assert header.has_delete_horizon is horizon


@pytest.mark.parametrize("codec_bits", [5, 6, 7])
def test_unknown_codec_is_corrupt(codec_bits):
    header = BatchHeader.from_buffer(hand_made_header(attributes=codec_bits))
    with pytest.raises(CorruptRecordError):
        header.compression


def test_from_buffer_at_a_position_and_from_memoryview():
    buf = b"\xaa" * 5 + hand_made_header() + b"\xbb" * 3
    assert BatchHeader.from_buffer(buf, 5) == BatchHeader(**SAMPLE)
    assert BatchHeader.from_buffer(memoryview(buf), 5) == BatchHeader(**SAMPLE)


def test_from_buffer_does_not_check_magic():
    assert BatchHeader.from_buffer(hand_made_header(magic=1)).magic == 1


@pytest.mark.parametrize(("length", "pos"), [(0, 0), (60, 0), (61, 1), (100, 40), (100, -61)])
def test_from_buffer_needs_61_bytes(length, pos):
    with pytest.raises(CorruptRecordError):
        BatchHeader.from_buffer(bytes(length), pos)


def test_magic_of_and_size_of():
    buf = b"\x00" * 3 + hand_made_header()
    assert magic_of(buf, 3) == 2
    assert size_of(buf, 3) == 61
    assert magic_of(legacy_message(0)) == 0
    assert magic_of(legacy_message(1)) == 1
    assert size_of(legacy_message(1)) == len(legacy_message(1))


@pytest.mark.parametrize(("length", "pos"), [(16, 0), (17, 1), (30, -17)])
def test_magic_of_out_of_range(length, pos):
    with pytest.raises(CorruptRecordError):
        magic_of(bytes(length), pos)


@pytest.mark.parametrize(("length", "pos"), [(11, 0), (12, 1), (30, -12)])
def test_size_of_out_of_range(length, pos):
    with pytest.raises(CorruptRecordError):
        size_of(bytes(length), pos)


def test_crc_is_crc32c_of_everything_after_the_crc_field():
    # The CRC-32C check value: the CRC of b"123456789" is 0xE3069283.
    assert compute_crc(bytes(21) + b"123456789") == 0xE3069283
    assert compute_crc(memoryview(b"\xff" * 21 + b"123456789")) == 0xE3069283


@pytest.mark.parametrize("compression", [Compression.NONE, Compression.ZSTD])
def test_crc_detects_a_flipped_bit_anywhere_it_covers(compression):
    batch = sample_batch(compression=compression)
    assert crc_is_valid(batch)
    for position in range(record_batch.ATTRIBUTES, len(batch)):
        damaged = bytearray(batch)
        damaged[position] ^= 1 << (position % 8)
        assert not crc_is_valid(damaged), position


def test_crc_detects_a_damaged_crc_field():
    damaged = bytearray(sample_batch())
    damaged[record_batch.CRC + 3] ^= 0x80
    assert not crc_is_valid(damaged)


def test_crc_ignores_base_offset_and_partition_leader_epoch():
    batch = bytearray(sample_batch())
    batch[0:8] = b"\x12" * 8
    batch[12:16] = b"\x34" * 4
    assert crc_is_valid(batch)


def test_crc_of_too_short_a_batch_is_corrupt():
    with pytest.raises(CorruptRecordError):
        crc_is_valid(bytes(20))


def test_set_base_offset_and_leader_epoch_in_place():
    prefix = b"\xee" * 7
    buf = bytearray(prefix + sample_batch())
    set_base_offset(buf, 7, 9_000_000_000)
    set_partition_leader_epoch(buf, 7, 42)
    header = BatchHeader.from_buffer(buf, 7)
    assert (header.base_offset, header.partition_leader_epoch) == (9_000_000_000, 42)
    assert buf[:7] == prefix
    assert crc_is_valid(buf[7:])
    assert [record.offset for record in iter_records(buf[7:])] == [
        9_000_000_000,
        9_000_000_001,
        9_000_000_002,
    ]


def test_base_offset_and_leader_epoch_set_in_one_call_keep_the_batch_length_and_crc():
    buf = bytearray(b"\xee" * 7 + sample_batch())
    length_before = BatchHeader.from_buffer(buf, 7).batch_length
    set_base_offset_and_leader_epoch(memoryview(buf), 7, 9_000_000_000, 42, length_before)
    header = BatchHeader.from_buffer(buf, 7)
    assert (header.base_offset, header.batch_length, header.partition_leader_epoch) == (9_000_000_000, length_before, 42)
    assert crc_is_valid(buf[7:])
    with pytest.raises(CorruptRecordError):
        set_base_offset_and_leader_epoch(bytearray(20), 0, 1, 1, 8)


def test_setters_work_on_a_writable_memoryview():
    buf = bytearray(sample_batch() * 2)
    view = memoryview(buf)
    second = len(buf) // 2
    set_base_offset(view, second, 3)
    set_partition_leader_epoch(view, second, 5)
    set_log_append_time(view, second, 77)
    header = BatchHeader.from_buffer(buf, second)
    assert (header.base_offset, header.partition_leader_epoch, header.max_timestamp) == (3, 5, 77)
    assert BatchHeader.from_buffer(buf, 0).base_offset == 0


def test_set_log_append_time():
    buf = bytearray(b"\x00" * 4 + sample_batch(compression=Compression.GZIP))
    set_log_append_time(buf, 4, 1_234_567)
    header = BatchHeader.from_buffer(buf, 4)
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert header.max_timestamp == 1_234_567
    assert header.base_timestamp == 1_000
    assert header.compression is Compression.GZIP  # the other attribute bits survive
    assert crc_is_valid(buf[4:])
    assert {record.timestamp for record in iter_records(buf[4:])} == {1_234_567}


@pytest.mark.parametrize(
    "setter", [set_base_offset, set_partition_leader_epoch, set_log_append_time]
)
def test_setters_refuse_a_short_buffer(setter):
    with pytest.raises(CorruptRecordError):
        setter(bytearray(sample_batch())[:60], 0, 1)


def test_set_log_append_time_refuses_a_batch_past_the_buffer():
    with pytest.raises(CorruptRecordError):
        set_log_append_time(bytearray(sample_batch())[:-1], 0, 1)


def test_write_crc_repairs_a_patched_batch():
    buf = bytearray(sample_batch())
    buf[record_batch.PRODUCER_ID + 7] = 9
    assert not crc_is_valid(buf)
    write_crc(buf)
    assert crc_is_valid(buf)


def test_split_batches_of_a_concatenation():
    batches = [sample_batch(1), sample_batch(5, offset=1), sample_batch(2, offset=6)]
    buf = b"".join(batches)
    positions = [0, len(batches[0]), len(batches[0]) + len(batches[1])]
    assert split_batches(buf) == list(zip(positions, map(len, batches)))
    assert split_batches(memoryview(buf)) == split_batches(buf)


def test_split_batches_of_nothing():
    assert split_batches(b"") == []


def test_split_batches_handles_any_magic():
    parts = [legacy_message(0), legacy_message(1, b"longer value"), sample_batch()]
    positions = [0, len(parts[0]), len(parts[0]) + len(parts[1])]
    assert split_batches(b"".join(parts)) == list(zip(positions, map(len, parts)))


def test_split_batches_accepts_an_empty_v2_batch():
    assert split_batches(hand_made_header(record_count=0)) == [(0, 61)]


@pytest.mark.parametrize("cut", [1, 11, 12, 16, 60, 61, 62])
def test_split_batches_rejects_a_truncated_tail(cut):
    buf = sample_batch() + sample_batch()
    with pytest.raises(CorruptRecordError):
        split_batches(buf[: len(buf) - len(sample_batch()) + cut])


@pytest.mark.parametrize("batch_length", [-100, -12, -1, 0, 4])
def test_split_batches_rejects_sizes_that_do_not_reach_the_magic(batch_length):
    buf = hand_made_header(batch_length=batch_length) + sample_batch()
    with pytest.raises(CorruptRecordError):
        split_batches(buf)


@pytest.mark.parametrize(("magic", "batch_length"), [(2, 48), (2, 5), (1, 21), (0, 13)])
def test_split_batches_rejects_sizes_below_the_format_minimum(magic, batch_length):
    buf = hand_made_header(magic=magic, batch_length=batch_length) + bytes(100)
    with pytest.raises(CorruptRecordError):
        split_batches(buf)


def test_iter_batches_yields_headers_and_positions():
    batches = [sample_batch(2), sample_batch(3, offset=2)]
    found = list(iter_batches(b"".join(batches)))
    assert [pos for pos, _ in found] == [0, len(batches[0])]
    assert [header.record_count for _, header in found] == [2, 3]
    assert [header.base_offset for _, header in found] == [0, 2]


@pytest.mark.parametrize("tail", [1, 11, 12, 16, 17, 60, 61, -1])
def test_iter_batches_stops_silently_at_a_partial_tail(tail):
    first, second = sample_batch(2), sample_batch(3, offset=2)
    buf = first + second[:tail]
    assert [pos for pos, _ in iter_batches(buf)] == [0]


def test_iter_batches_between_pos_and_end():
    batches = [sample_batch(1), sample_batch(1, offset=1), sample_batch(1, offset=2)]
    buf = b"\xff" * 3 + b"".join(batches)
    start = 3 + len(batches[0])
    found = list(iter_batches(buf, start, start + len(batches[1]) + 20))
    assert [(pos, header.base_offset) for pos, header in found] == [(start, 1)]


def test_iter_batches_of_nothing():
    assert list(iter_batches(b"")) == []


def test_iter_batches_refuses_older_formats():
    with pytest.raises(UnsupportedMessageFormatError):
        list(iter_batches(sample_batch() + legacy_message(1)))


@pytest.mark.parametrize("batch_length", [-1, 0, 4, 48])
def test_iter_batches_refuses_impossible_sizes(batch_length):
    buf = hand_made_header(batch_length=batch_length) + bytes(200)
    with pytest.raises(CorruptRecordError):
        list(iter_batches(buf))


def test_built_batches_carry_magic_2():
    assert magic_of(sample_batch()) == MAGIC_V2


@pytest.mark.parametrize(
    "sequence, delta, expected",
    [(0, 0, 0), (5, 3, 8), (MAX_SEQUENCE - 1, 1, MAX_SEQUENCE), (MAX_SEQUENCE, 1, 0), (MAX_SEQUENCE - 2, 5, 2)],
)
def test_sequences_wrap_past_int32_max(sequence, delta, expected):
    assert increment_sequence(sequence, delta) == expected
    assert decrement_sequence(expected, delta) == sequence


def test_last_sequence_of_a_batch():
    records = [Record(i, 0, None, b"v") for i in range(3)]
    header = BatchHeader.from_buffer(build_batch(records, producer_id=1, producer_epoch=0, base_sequence=MAX_SEQUENCE - 1))
    assert header.last_sequence == 0  # MAX_SEQUENCE - 1, MAX_SEQUENCE, 0
    assert BatchHeader.from_buffer(build_batch(records)).last_sequence == NO_SEQUENCE
