"""Round trips of arbitrary records and batches through build_batch, iter_records and the
header readers, for every codec."""

from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch

from protocol.compression import Compression
from protocol.record_batch import (
    BatchHeader,
    TimestampType,
    crc_is_valid,
    iter_batches,
    split_batches,
)
from protocol.records import Header, Record, build_batch, iter_records

SETTINGS = settings(max_examples=150, deadline=None)

nullable_bytes = st.none() | st.binary(max_size=40)
headers = st.lists(st.builds(Header, st.text(max_size=12), nullable_bytes), max_size=12).map(tuple)
# Between -2**62 and 2**62 - 1 every delta between two timestamps fits the varlong it is stored
# in (2**62 - 1 - -2**62 is 2**63 - 1, the largest).
timestamps = st.integers(-(2**62), 2**62 - 1) | st.sampled_from([-1, 0, 1_700_000_000_000])
codecs = st.sampled_from(list(Compression))


@st.composite
def record_lists(draw, max_size: int = 12) -> list[Record]:
    offset = draw(st.integers(0, 2**62))
    gaps = draw(st.lists(st.integers(1, 1 << 20), max_size=max_size - 1))
    offsets = [offset]
    for gap in gaps:
        offsets.append(offsets[-1] + gap)
    return [
        Record(offset, draw(timestamps), draw(nullable_bytes), draw(nullable_bytes), draw(headers))
        for offset in offsets
    ]


@SETTINGS
@given(records=record_lists(), codec=codecs)
def test_records_round_trip(records, codec):
    batch = build_batch(records, compression=codec)
    assert crc_is_valid(batch)
    assert list(iter_records(batch)) == records


@SETTINGS
@given(
    records=record_lists(max_size=4),
    codec=codecs,
    timestamp_type=st.sampled_from(list(TimestampType)),
    producer_id=st.integers(-1, 2**63 - 1),
    producer_epoch=st.integers(-1, 2**15 - 1),
    base_sequence=st.integers(-1, 2**31 - 1),
    is_transactional=st.booleans(),
    is_control=st.booleans(),
    partition_leader_epoch=st.integers(-1, 2**31 - 1),
)
def test_header_fields_round_trip(
    records,
    codec,
    timestamp_type,
    producer_id,
    producer_epoch,
    base_sequence,
    is_transactional,
    is_control,
    partition_leader_epoch,
):
    batch = build_batch(
        records,
        compression=codec,
        timestamp_type=timestamp_type,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=is_transactional,
        is_control=is_control,
        partition_leader_epoch=partition_leader_epoch,
    )
    header = BatchHeader.from_buffer(batch)
    assert header.size == len(batch)
    assert header.magic == 2
    assert header.compression is codec
    assert header.timestamp_type is timestamp_type
    assert (header.producer_id, header.producer_epoch) == (producer_id, producer_epoch)
    assert header.base_sequence == base_sequence
    assert header.is_transactional is is_transactional
    assert header.is_control is is_control
    assert header.partition_leader_epoch == partition_leader_epoch
    assert header.base_offset == records[0].offset
    assert header.last_offset == records[-1].offset
    assert header.record_count == len(records)
    assert header.base_timestamp == records[0].timestamp
    assert header.max_timestamp == max(record.timestamp for record in records)
    if timestamp_type is TimestampType.LOG_APPEND_TIME:
        assert {record.timestamp for record in iter_records(batch)} == {header.max_timestamp}


@SETTINGS
@given(batches=st.lists(st.tuples(record_lists(max_size=4), codecs), max_size=6), data=st.data())
def test_split_batches_finds_exactly_the_boundaries(batches, data):
    built = [build_batch(records, compression=codec) for records, codec in batches]
    buf = b"".join(built)
    boundaries = []
    position = 0
    for batch in built:
        boundaries.append((position, len(batch)))
        position += len(batch)
    assert split_batches(buf) == boundaries
    assert [(pos, header.size) for pos, header in iter_batches(buf)] == boundaries

    cut = data.draw(st.integers(0, len(buf)), label="cut")
    complete = [(pos, size) for pos, size in boundaries if pos + size <= cut]
    assert [(pos, header.size) for pos, header in iter_batches(buf[:cut])] == complete


@settings(max_examples=100, deadline=None)
@given(records=record_lists(max_size=6), codec=codecs)
def test_kafka_python_reads_what_we_build(records, codec):
    theirs = DefaultRecordBatch(build_batch(records, compression=codec))
    assert theirs.validate_crc()
    decoded = [
        (record.offset, record.timestamp, record.key, record.value, tuple(record.headers))
        for record in theirs
    ]
    assert decoded == [
        (
            record.offset,
            record.timestamp,
            record.key,
            record.value,
            tuple((header.key, header.value) for header in record.headers),
        )
        for record in records
    ]
