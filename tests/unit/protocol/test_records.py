import struct

import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from protocol.compression import Compression, compress
from protocol.errors import (
    CorruptRecordError,
    InvalidRecordError,
    RecordsTooLargeError,
    UnsupportedMessageFormatError,
)
from protocol.record_batch import (
    ATTRIBUTES,
    BATCH_HEADER_SIZE,
    CRC,
    BatchHeader,
    TimestampType,
    crc_is_valid,
    set_log_append_time,
)
from protocol.records import (
    ControlRecordType,
    Header,
    Record,
    build_batch,
    control_record,
    control_record_type,
    iter_keys,
    iter_records,
    rebuild_batch,
)

ALL_CODECS = list(Compression)


def varint(value: int) -> bytes:
    """Zigzag varint, written out longhand for hand-made records."""
    raw = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        byte = raw & 0x7F
        raw >>= 7
        if raw:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def hand_made_batch(
    records_section: bytes,
    *,
    record_count: int,
    base_offset: int = 100,
    base_timestamp: int = 5_000,
    max_timestamp: int = 5_000,
    attributes: int = 0,
    magic: int = 2,
) -> bytes:
    header = struct.pack(
        ">qiibIhiqqqhii",
        base_offset,
        49 + len(records_section),
        -1,  # partitionLeaderEpoch
        magic,
        0,
        attributes,
        max(record_count - 1, 0),
        base_timestamp,
        max_timestamp,
        -1,
        -1,
        -1,
        record_count,
    )
    return header + records_section


def hand_made_record(body: bytes) -> bytes:
    return varint(len(body)) + body


# offsetDelta 0, timestampDelta 0, key b"k", value b"v", no headers.
SIMPLE_RECORD = bytes.fromhex("10" "00" "00" "00" "02" "6b" "02" "76" "00")


def test_decode_a_hand_made_record():
    [record] = iter_records(hand_made_batch(SIMPLE_RECORD, record_count=1))
    assert record == Record(offset=100, timestamp=5_000, key=b"k", value=b"v", headers=())


def test_build_writes_the_documented_layout():
    batch = build_batch([Record(100, 5_000, b"k", b"v")])
    assert batch[BATCH_HEADER_SIZE:] == SIMPLE_RECORD
    # Equal to the hand-made batch everywhere but the CRC field, which the hand-made one leaves 0.
    expected = hand_made_batch(SIMPLE_RECORD, record_count=1)
    assert batch[:CRC] == expected[:CRC]
    assert batch[ATTRIBUTES:] == expected[ATTRIBUTES:]
    assert crc_is_valid(batch)


def test_decode_deltas_nulls_and_headers():
    body = (
        b"\x00"
        + varint(-7)  # timestampDelta
        + varint(3)  # offsetDelta
        + varint(-1)  # null key
        + varint(0)  # empty value
        + varint(2)
        + varint(2)
        + "é".encode()
        + varint(-1)
        + varint(1)
        + b"h"
        + varint(3)
        + b"\x00\x01\x02"
    )
    [record] = iter_records(hand_made_batch(hand_made_record(body), record_count=1))
    assert record == Record(
        offset=103,
        timestamp=4_993,
        key=None,
        value=b"",
        headers=(Header("é", None), Header("h", b"\x00\x01\x02")),
    )


def sample_records() -> list[Record]:
    return [
        Record(10, 1_000, b"key", b"value", (Header("trace-id", b"abc"),)),
        Record(11, 990, None, b"", (Header("", None), Header("ключ", b"\xff\x00"))),
        Record(15, 1_500, b"", None),
        Record(16, -1, b"\x00\xff", b"x" * 300, tuple(Header(f"h{i}", b"") for i in range(20))),
    ]


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_round_trip(codec):
    batch = build_batch(sample_records(), compression=codec)
    assert crc_is_valid(batch)
    assert BatchHeader.from_buffer(batch).compression is codec
    assert list(iter_records(batch)) == sample_records()
    assert list(iter_records(memoryview(batch))) == sample_records()


def test_header_fields_of_a_built_batch():
    batch = build_batch(
        sample_records(),
        compression=Compression.LZ4,
        producer_id=12345,
        producer_epoch=6,
        base_sequence=700,
        is_transactional=True,
        partition_leader_epoch=9,
    )
    header = BatchHeader.from_buffer(batch)
    assert header.base_offset == 10
    assert header.size == len(batch)
    assert header.last_offset_delta == 6
    assert header.last_offset == 16
    assert header.base_timestamp == 1_000  # the first record's, though not the smallest
    assert header.max_timestamp == 1_500
    assert header.record_count == 4
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (12345, 6, 700)
    assert header.partition_leader_epoch == 9
    assert header.is_transactional and not header.is_control
    assert header.timestamp_type is TimestampType.CREATE_TIME
    assert header.magic == 2


def test_defaults_leave_producer_fields_unset():
    header = BatchHeader.from_buffer(build_batch([Record(0, 0, None, None)]))
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (-1, -1, -1)
    assert header.partition_leader_epoch == -1
    assert header.attributes == 0


def test_log_append_time_gives_every_record_the_max_timestamp():
    records = [Record(0, 10, None, b"a"), Record(1, 30, None, b"b"), Record(2, 20, None, b"c")]
    batch = build_batch(records, timestamp_type=TimestampType.LOG_APPEND_TIME)
    assert BatchHeader.from_buffer(batch).timestamp_type is TimestampType.LOG_APPEND_TIME
    assert [record.timestamp for record in iter_records(batch)] == [30, 30, 30]


def test_log_append_time_set_later_overrides_record_timestamps():
    batch = bytearray(build_batch([Record(0, 10, None, b"a"), Record(1, 20, None, b"b")]))
    set_log_append_time(batch, 0, 99)
    assert [record.timestamp for record in iter_records(batch)] == [99, 99]


def test_build_rejects_empty_and_misordered_records():
    with pytest.raises(ValueError):
        build_batch([])
    with pytest.raises(ValueError):
        build_batch([Record(5, 0, None, None), Record(5, 0, None, None)])
    with pytest.raises(ValueError):
        build_batch([Record(5, 0, None, None), Record(4, 0, None, None)])


def test_build_rejects_values_that_do_not_fit():
    with pytest.raises(ValueError):
        build_batch([Record(0, 0, None, None), Record(2**31, 0, None, None)])
    with pytest.raises(ValueError):
        build_batch([Record(0, -(2**62), None, None), Record(1, 2**62 + 2**61, None, None)])
    with pytest.raises(ValueError):
        build_batch([Record(0, 0, None, None)], producer_epoch=2**15)


def test_offset_gaps_up_to_an_int32():
    records = [Record(7, 0, None, None), Record(7 + 2**31 - 1, 0, None, None)]
    assert [record.offset for record in iter_records(build_batch(records))] == [7, 7 + 2**31 - 1]


def test_iter_records_is_lazy():
    good = build_batch([Record(0, 0, None, b"good")])[BATCH_HEADER_SIZE:]
    batch = hand_made_batch(good + b"\x7f", record_count=2, base_offset=0, base_timestamp=0)
    records = iter_records(batch)
    assert next(records).value == b"good"
    with pytest.raises(CorruptRecordError):
        next(records)


def test_a_batch_with_no_records():
    assert list(iter_records(hand_made_batch(b"", record_count=0))) == []


def test_ten_thousand_lz4_records_build_and_read_back():
    # How fast is the benchmarks' question (benchmarks/), not a unit test's.
    records = [
        Record(i, 1_700_000_000_000 + i, b"key-%d" % i, b"value" * 20, (Header("h", b"v"),))
        for i in range(10_000)
    ]
    batch = build_batch(records, compression=Compression.LZ4)
    assert list(iter_records(batch)) == records


@pytest.mark.parametrize(
    ("records_section", "record_count"),
    [
        pytest.param(SIMPLE_RECORD[:-1], 1, id="record-runs-past-the-end"),
        pytest.param(b"\x7f" + SIMPLE_RECORD[1:], 1, id="length-past-the-end"),
        pytest.param(b"\x01" + SIMPLE_RECORD[1:], 1, id="negative-length"),
        pytest.param(SIMPLE_RECORD, 2, id="fewer-records-than-declared"),
        pytest.param(SIMPLE_RECORD * 2, 1, id="more-records-than-declared"),
        pytest.param(SIMPLE_RECORD + b"\x00", 1, id="trailing-byte"),
        pytest.param(SIMPLE_RECORD, -1, id="negative-count"),
        pytest.param(b"\xff" * 11, 1, id="endless-varint"),
        pytest.param(hand_made_record(b"\x00\x00\x00\x02k\x02v\x00\x00"), 1, id="length-too-long"),
        pytest.param(hand_made_record(b"\x00\x00\x00\x02k\x02v"), 1, id="length-too-short"),
        pytest.param(hand_made_record(b"\x00\x00\x00\x14k\x02v\x00"), 1, id="key-past-record"),
        pytest.param(hand_made_record(b"\x00\x00\x00\x01\x01\x01"), 1, id="negative-header-count"),
        pytest.param(hand_made_record(b"\x00\x00\x00\x01\x01\x7f"), 1, id="header-count-too-big"),
        pytest.param(hand_made_record(b"\x00\x00\x00\x01\x01\x02\x01\x01"), 1, id="null-hdr-key"),
        pytest.param(
            hand_made_record(b"\x00\x00\x00\x01\x01\x02\x02\xc3\x28\x01"), 1, id="header-not-utf8"
        ),
    ],
)
def test_malformed_records_are_corrupt(records_section, record_count):
    batch = hand_made_batch(records_section, record_count=record_count)
    with pytest.raises(CorruptRecordError):
        list(iter_records(batch))


def test_batch_longer_than_its_buffer_is_corrupt():
    with pytest.raises(CorruptRecordError):
        iter_records(build_batch([Record(0, 0, b"k", b"v")])[:-1])


def test_short_header_is_corrupt():
    with pytest.raises(CorruptRecordError):
        iter_records(b"\x00" * 40)


def test_older_magic_is_unsupported():
    with pytest.raises(UnsupportedMessageFormatError):
        iter_records(hand_made_batch(SIMPLE_RECORD, record_count=1, magic=1))


@pytest.mark.parametrize("codec", [c for c in ALL_CODECS if c != Compression.NONE])
def test_corrupt_compressed_section_is_corrupt(codec):
    section = bytearray(compress(codec, SIMPLE_RECORD * 50))
    section[len(section) // 2 :] = b"\xff" * (len(section) - len(section) // 2)
    batch = hand_made_batch(bytes(section), record_count=50, attributes=codec)
    with pytest.raises(CorruptRecordError):
        list(iter_records(batch))


@pytest.mark.parametrize("codec", [c for c in ALL_CODECS if c != Compression.NONE])
def test_compressed_section_with_wrong_records_is_corrupt(codec):
    batch = hand_made_batch(compress(codec, SIMPLE_RECORD * 3), record_count=4, attributes=codec)
    with pytest.raises(CorruptRecordError):
        list(iter_records(batch))


# Control records


@pytest.mark.parametrize("record_type", list(ControlRecordType))
def test_control_record_layout(record_type):
    record = control_record(record_type, coordinator_epoch=7, offset=42, timestamp=1_000)
    assert record.key == struct.pack(">hh", 0, record_type)
    assert record.value == struct.pack(">hi", 0, 7)
    assert (record.offset, record.timestamp, record.headers) == (42, 1_000, ())
    assert control_record_type(record) is record_type


def test_control_record_types():
    assert (ControlRecordType.ABORT, ControlRecordType.COMMIT) == (0, 1)


def test_control_batch_round_trip():
    marker = control_record(ControlRecordType.COMMIT, 3, offset=8, timestamp=55)
    batch = build_batch(
        [marker], is_control=True, is_transactional=True, producer_id=9, producer_epoch=1
    )
    header = BatchHeader.from_buffer(batch)
    assert header.is_control and header.is_transactional
    [record] = iter_records(batch)
    assert record == marker
    assert control_record_type(record) is ControlRecordType.COMMIT


@pytest.mark.parametrize("key", [None, b"", b"\x00\x00\x00"])
def test_control_record_with_short_key_is_corrupt(key):
    with pytest.raises(CorruptRecordError):
        control_record_type(Record(0, 0, key, None))


def test_control_record_with_negative_version_is_corrupt():
    with pytest.raises(CorruptRecordError):
        control_record_type(Record(0, 0, struct.pack(">hh", -1, 1), None))


def test_control_record_of_unknown_type_is_invalid():
    with pytest.raises(InvalidRecordError):
        control_record_type(Record(0, 0, struct.pack(">hh", 0, 7), None))


# Interoperability with kafka-python, an independent implementation of the format.

# Values that compress well, so kafka-python keeps them compressed (it falls back to no
# compression when that does not pay).
INTEROP_RECORDS = [
    Record(0, 1_600_000_000_000, b"key-0", b"value " * 30, (Header("a", b"1"), Header("b", None))),
    Record(1, 1_600_000_000_500, None, b"value " * 30),
    Record(2, 1_599_999_999_000, b"key-2", None, (Header("ключ", b"\x00\xff"),)),
    Record(3, 1_600_000_000_100, b"", b""),
] + [Record(i, 1_600_000_001_000 + i, b"k%d" % i, b"value " * 10) for i in range(4, 40)]


def as_kafka_python_tuple(record) -> tuple:
    return (
        record.offset,
        record.timestamp,
        record.key,
        record.value,
        tuple((key, value) for key, value in record.headers),
    )


def as_tuple(record: Record) -> tuple:
    return (
        record.offset,
        record.timestamp,
        record.key,
        record.value,
        tuple((header.key, header.value) for header in record.headers),
    )


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_kafka_python_reads_our_batches(codec):
    batch = build_batch(
        INTEROP_RECORDS,
        compression=codec,
        producer_id=77,
        producer_epoch=2,
        base_sequence=10,
        is_transactional=True,
    )
    theirs = DefaultRecordBatch(batch)
    assert theirs.validate_crc()
    assert theirs.compression_type == codec
    assert theirs.base_offset == 0
    assert theirs.last_offset_delta == len(INTEROP_RECORDS) - 1
    assert theirs.max_timestamp == max(record.timestamp for record in INTEROP_RECORDS)
    assert (theirs.producer_id, theirs.producer_epoch, theirs.base_sequence) == (77, 2, 10)
    assert theirs.is_transactional
    assert [as_kafka_python_tuple(record) for record in theirs] == list(
        map(as_tuple, INTEROP_RECORDS)
    )


def test_kafka_python_reads_our_control_batch():
    marker = control_record(ControlRecordType.ABORT, 4, offset=100, timestamp=5)
    batch = build_batch([marker], is_control=True, is_transactional=True, producer_id=1)
    theirs = DefaultRecordBatch(batch)
    assert theirs.is_control_batch
    [record] = list(theirs)
    assert record.abort and record.version == 0


def kafka_python_batch(codec: Compression, records: list[Record]) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for record in records:
        headers = [(header.key, header.value) for header in record.headers]
        builder.append(record.offset, record.timestamp, record.key, record.value, headers)
    return bytes(builder.build())


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_we_read_kafka_python_batches(codec):
    batch = kafka_python_batch(codec, INTEROP_RECORDS)
    assert crc_is_valid(batch)
    header = BatchHeader.from_buffer(batch)
    assert header.compression is codec
    assert header.record_count == len(INTEROP_RECORDS)
    assert list(iter_records(batch)) == INTEROP_RECORDS


def test_we_read_kafka_python_producer_state():
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=True,
        producer_id=5,
        producer_epoch=1,
        base_sequence=40,
        batch_size=1 << 20,
    )
    builder.append(0, 1_000, b"k", b"v", [])
    header = BatchHeader.from_buffer(bytes(builder.build()))
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (5, 1, 40)
    assert header.is_transactional
    assert header.record_count == 1


# ------------------------------------------------------------------ keys, and rebuilt batches


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_iter_keys_gives_offsets_keys_and_whether_a_value_is_there(codec):
    batch = build_batch(sample_records(), compression=codec)
    assert list(iter_keys(batch)) == [
        (r.offset, r.key, r.value is not None) for r in sample_records()
    ]


def test_iter_keys_finds_malformed_records():
    good = build_batch([Record(0, 0, b"k", b"good")])[BATCH_HEADER_SIZE:]
    batch = hand_made_batch(good + b"\x7f", record_count=2, base_offset=0, base_timestamp=0)
    with pytest.raises(CorruptRecordError):
        list(iter_keys(batch))
    cut_short = hand_made_record(b"\x00" + varint(0) + varint(0) + varint(1) + b"k")
    with pytest.raises(CorruptRecordError):
        list(iter_keys(hand_made_batch(cut_short, record_count=1)))


def test_iter_keys_can_bound_the_decompressed_size():
    batch = build_batch([Record(0, 0, b"k", bytes(100_000))], compression=Compression.ZSTD)
    assert len(batch) < 1000
    assert [key for _, key, _ in iter_keys(batch, max_section_bytes=200_000)] == [b"k"]
    with pytest.raises(RecordsTooLargeError):
        list(iter_keys(batch, max_section_bytes=50_000))


def producer_batch(codec: Compression = Compression.LZ4, **kwargs) -> bytes:
    return build_batch(
        sample_records(),
        compression=codec,
        producer_id=12345,
        producer_epoch=6,
        base_sequence=700,
        partition_leader_epoch=9,
        **kwargs,
    )


def test_a_rebuilt_batch_keeps_its_header_but_holds_fewer_records():
    original = BatchHeader.from_buffer(producer_batch())
    kept = [sample_records()[1], sample_records()[2]]
    rebuilt = rebuild_batch(original, kept)
    header = BatchHeader.from_buffer(rebuilt)
    assert crc_is_valid(rebuilt) and list(iter_records(rebuilt)) == kept
    same = ("base_offset", "last_offset_delta", "producer_id", "producer_epoch", "base_sequence")
    assert [getattr(header, f) for f in same] == [getattr(original, f) for f in same]
    assert header.partition_leader_epoch == 9 and header.compression is Compression.LZ4
    assert (header.record_count, header.base_timestamp, header.max_timestamp) == (2, 990, 1_500)
    assert not header.has_delete_horizon


def test_a_rebuilt_batch_may_carry_a_delete_horizon():
    original = BatchHeader.from_buffer(producer_batch())
    rebuilt = rebuild_batch(original, sample_records(), delete_horizon_ms=99_000)
    header = BatchHeader.from_buffer(rebuilt)
    assert header.has_delete_horizon and header.base_timestamp == 99_000
    assert list(iter_records(rebuilt)) == sample_records()  # record timestamps unchanged
    again = rebuild_batch(header, sample_records()[2:])
    assert BatchHeader.from_buffer(again).base_timestamp == 99_000  # the horizon stays


def test_a_rebuilt_batch_without_records_is_a_header():
    original = BatchHeader.from_buffer(producer_batch(is_transactional=True))
    empty = rebuild_batch(original, [])
    header = BatchHeader.from_buffer(empty)
    assert len(empty) == BATCH_HEADER_SIZE and crc_is_valid(empty)
    assert (header.base_offset, header.last_offset) == (original.base_offset, original.last_offset)
    assert header.record_count == 0 and header.compression is Compression.NONE
    assert header.base_timestamp == header.max_timestamp == original.max_timestamp
    assert header.is_transactional and header.base_sequence == 700
    assert list(iter_records(empty)) == []


def test_a_rebuilt_batch_holds_only_its_own_offsets():
    original = BatchHeader.from_buffer(producer_batch())
    with pytest.raises(ValueError):
        rebuild_batch(original, [Record(9, 0, None, None)])
    with pytest.raises(ValueError):
        rebuild_batch(original, [Record(17, 0, None, None)])
