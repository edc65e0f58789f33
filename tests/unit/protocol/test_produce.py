import datetime
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.static.primitive import i16, i32

from protocol import produce, schemas
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, ProtocolError
from protocol.produce import PartitionResponse, encode_produce_response, parse_produce_request


def kio_request(version: int, records: bytes | None):
    request_type = schemas.request_type(ApiKey.PRODUCE, version)
    newest = schemas.request_type(ApiKey.PRODUCE, 9)
    from kio.schema.produce.v9.request import PartitionProduceData, TopicProduceData

    request = newest(
        transactional_id="tx",
        acks=i16(-1),
        timeout=datetime.timedelta(seconds=30),
        topic_data=(
            TopicProduceData(
                name="topic",
                partition_data=(
                    PartitionProduceData(index=i32(0), records=records),
                    PartitionProduceData(index=i32(3), records=b"more"),
                ),
            ),
        ),
    )
    return schemas.encode(schemas.adapt(request, request_type))


@pytest.mark.parametrize("version", range(3, 10))
def test_parses_what_kio_encodes(version):
    request = parse_produce_request(version, memoryview(kio_request(version, b"batch-bytes")))
    assert (request.transactional_id, request.acks, request.timeout_ms) == ("tx", -1, 30000)
    (topic,) = request.topics
    assert topic.name == "topic"
    assert [(p.index, bytes(p.records)) for p in topic.partitions] == [(0, b"batch-bytes"), (3, b"more")]


def test_records_are_views_into_the_request():
    body = bytearray(kio_request(9, b"batch-bytes"))
    records = parse_produce_request(9, memoryview(body)).topics[0].partitions[0].records
    records[0:5] = b"BATCH"
    assert b"BATCH-bytes" in body


def test_null_records_and_truncation():
    request = parse_produce_request(7, memoryview(kio_request(7, None)))
    assert request.topics[0].partitions[0].records is None
    with pytest.raises(ProtocolError):
        parse_produce_request(7, memoryview(kio_request(7, b"abc")[:-3]))


@pytest.mark.parametrize("version", range(3, 10))
def test_response_decodes_with_kio(version):
    partition = PartitionResponse(
        2,
        ErrorCode.corrupt_message,
        base_offset=41,
        log_append_time_ms=1234,
        log_start_offset=7,
        record_errors=[(0, "bad")],
        error_message="crc",
    )
    data = encode_produce_response(version, [("t", [partition])], throttle_time_ms=3)
    decoded = schemas.decode(schemas.response_type(ApiKey.PRODUCE, version), memoryview(data))
    (topic,) = decoded.responses
    (result,) = topic.partition_responses
    assert (topic.name, result.index, result.error_code, result.base_offset) == ("t", 2, ErrorCode.corrupt_message, 41)
    assert decoded.throttle_time == datetime.timedelta(milliseconds=3)
    if version >= 5:
        assert result.log_start_offset == 7
    if version >= 8:
        assert result.error_message == "crc"
        assert result.record_errors[0].batch_index_error_message == "bad"


def test_v0_response_layout():
    data = encode_produce_response(0, [("t", [PartitionResponse(1, base_offset=5)])])
    assert data == bytes.fromhex("00000001 0001 74 00000001 00000001 0000 0000000000000005")


@pytest.mark.parametrize("version", range(3, 9))
def test_fixed_width_parser_agrees_with_the_reader_parser(version):
    body = memoryview(kio_request(version, b"batch-bytes"))
    fast = produce._parse_fixed_width(version, body)
    slow = produce._parse_with_reader(version, body)
    assert fast == slow


@pytest.mark.parametrize(
    "cut",
    [
        lambda body: body[:-3],  # records run past the end
        lambda body: body[:1],  # transactional id length cut
        lambda body: body[:6],  # acks and timeout cut
    ],
)
def test_truncated_requests_raise_protocol_errors(cut):
    with pytest.raises(ProtocolError):
        parse_produce_request(7, memoryview(cut(kio_request(7, b"abc"))))


def test_a_topic_name_that_is_not_utf8_raises_a_protocol_error():
    body = bytearray(kio_request(7, b"abc"))
    body[body.index(b"topic")] = 0xFF
    with pytest.raises(ProtocolError):
        parse_produce_request(7, memoryview(body))


def test_a_null_topic_name_raises_a_protocol_error():
    body = bytearray(kio_request(7, b"abc"))
    at = body.index(b"topic") - 2
    body[at : at + 2] = b"\xff\xff"
    with pytest.raises(ProtocolError):
        parse_produce_request(7, memoryview(body))


@pytest.mark.parametrize("version", range(3, 10))
def test_a_partition_without_errors_decodes_with_kio(version):
    partition = PartitionResponse(2, base_offset=41, log_append_time_ms=1234, log_start_offset=7)
    data = encode_produce_response(version, [("t", [partition])], throttle_time_ms=3)
    decoded = schemas.decode(schemas.response_type(ApiKey.PRODUCE, version), memoryview(data))
    (result,) = decoded.responses[0].partition_responses
    assert (result.index, result.error_code, result.base_offset) == (2, ErrorCode.none, 41)
    if version >= 5:
        assert result.log_start_offset == 7
    if version >= 8:
        assert (tuple(result.record_errors), result.error_message) == ((), None)
    assert decoded.throttle_time == datetime.timedelta(milliseconds=3)


@pytest.mark.parametrize("version", range(0, 10))
def test_a_partition_without_errors_is_encoded_as_field_by_field(version):
    """The one-struct-call encoding gives the bytes the general one gives."""
    plain = PartitionResponse(2, base_offset=41, log_append_time_ms=1234, log_start_offset=7)
    fast: list[bytes] = []
    produce._encode_partition(fast, version, version >= 9, plain)
    general: list[bytes] = []
    # An error message forces the general encoding; its bytes end the partition (v8+).
    produce._encode_partition(general, version, version >= 9, PartitionResponse(
        2, base_offset=41, log_append_time_ms=1234, log_start_offset=7, error_message="x"))
    general_bytes = b"".join(general)
    if version >= 8:
        tail = (b"\x02x" if version >= 9 else b"\x00\x01x") + (b"\x00" if version >= 9 else b"")
        null = (b"\x00" if version >= 9 else b"\xff\xff") + (b"\x00" if version >= 9 else b"")
        general_bytes = general_bytes[: -len(tail)] + null
    assert b"".join(fast) == general_bytes


def test_flexible_parser_agrees_with_the_reader_parser():
    body = memoryview(kio_request(9, b"batch-bytes" * 20))  # records longer than one varint byte
    assert produce._parse_flexible(body) == produce._parse_with_reader(9, body)


def test_v9_request_with_tagged_fields_is_parsed_by_the_reader_parser():
    plain = kio_request(9, b"batch-bytes")
    assert plain[-1] == 0  # the request's tagged fields: none
    tagged = plain[:-1] + bytes.fromhex("01 05 02 6162")  # one: tag 5, two bytes
    request = parse_produce_request(9, memoryview(tagged))
    assert request == parse_produce_request(9, memoryview(plain))


def test_v9_truncated_request_raises_a_protocol_error():
    with pytest.raises(ProtocolError):
        parse_produce_request(9, memoryview(kio_request(9, b"abc")[:-5]))


@settings(max_examples=300, deadline=None)
@given(
    version=st.integers(0, 9),
    name=st.text(min_size=1, max_size=300),
    index=st.integers(0, 2**31 - 1),
    error=st.sampled_from([ErrorCode.none, ErrorCode.not_leader_or_follower]),
    offsets=st.tuples(*[st.integers(-1, 2**63 - 1)] * 3),
    throttle_time_ms=st.integers(0, 2**31 - 1),
)
def test_one_plain_partition_is_encoded_as_the_general_encoder_encodes_it(
    version, name, index, error, offsets, throttle_time_ms
):
    base_offset, log_append_time_ms, log_start_offset = offsets
    partition = PartitionResponse(index, error, base_offset, log_append_time_ms, log_start_offset)
    topics = [(name, [partition])]

    assert encode_produce_response(version, topics, throttle_time_ms) == produce._encode_any(
        version, topics, throttle_time_ms
    )


def _fixed_width_request(version, transactional_id, topics) -> bytes:
    """A v0-8 Produce body, written field by field as the protocol lays it out."""
    out = bytearray()
    if version >= 3:
        if transactional_id is None:
            out += struct.pack(">h", -1)
        else:
            out += struct.pack(">h", len(transactional_id.encode())) + transactional_id.encode()
    out += struct.pack(">hii", -1, 30_000, len(topics))
    for name, partitions in topics:
        out += struct.pack(">h", len(name.encode())) + name.encode() + struct.pack(">i", len(partitions))
        for index, records in partitions:
            out += struct.pack(">ii", index, -1 if records is None else len(records)) + (records or b"")
    return bytes(out)


@settings(max_examples=300, deadline=None)
@given(
    version=st.integers(0, 8),
    transactional_id=st.none() | st.text(max_size=20),
    topics=st.lists(
        st.tuples(
            st.text(max_size=20),
            st.lists(st.tuples(st.integers(0, 2**31 - 1), st.none() | st.binary(max_size=30)), max_size=3),
        ),
        max_size=3,
    ),
)
def test_the_fixed_width_parser_reads_every_shape_of_request_as_the_reader_parser(version, transactional_id, topics):
    body = memoryview(_fixed_width_request(version, transactional_id, topics))
    expected = produce._parse_with_reader(version, body)

    assert parse_produce_request(version, body) == expected
    assert expected.transactional_id == (transactional_id if version >= 3 else None)
    assert [(t.name, [(p.index, None if p.records is None else bytes(p.records)) for p in t.partitions])
            for t in expected.topics] == topics
    if topics and all(partitions for _, partitions in topics):  # the shapes it takes itself
        assert produce._parse_fixed_width(version, body) == expected
