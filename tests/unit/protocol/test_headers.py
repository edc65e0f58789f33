import pytest

from protocol.api_keys import ApiKey
from protocol.errors import ProtocolError
from protocol.headers import (
    encode_response_header,
    parse_request_header,
    peek_request,
    response_header_is_flexible,
)

HEADER_V1 = bytes.fromhex("0003 000c 00000007 0004 6b636174")  # Metadata v12, id 7, "kcat"


def test_peek_reads_the_fixed_fields():
    assert peek_request(memoryview(HEADER_V1)) == (3, 12, 7)


def test_header_v1_and_body_start():
    frame = memoryview(HEADER_V1 + b"BODY")
    header, start = parse_request_header(frame, flexible=False)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (3, 12, 7, "kcat")
    assert bytes(frame[start:]) == b"BODY"


def test_header_v2_skips_tagged_fields_and_keeps_a_legacy_client_id():
    tagged = bytes.fromhex("01 05 02 aabb")  # one tagged field: tag 5, two bytes
    frame = memoryview(HEADER_V1 + tagged + b"BODY")
    header, start = parse_request_header(frame, flexible=True)
    assert header.client_id == "kcat"
    assert bytes(frame[start:]) == b"BODY"


def test_null_client_id():
    header, _ = parse_request_header(memoryview(bytes.fromhex("0012 0000 00000001 ffff")), False)
    assert header.client_id is None


def test_short_header_is_a_protocol_error():
    with pytest.raises(ProtocolError):
        peek_request(memoryview(b"\x00\x03"))
    with pytest.raises(ProtocolError):
        parse_request_header(memoryview(HEADER_V1[:-2]), False)


def test_response_headers():
    assert encode_response_header(7, flexible=False) == bytes.fromhex("00000007")
    assert encode_response_header(7, flexible=True) == bytes.fromhex("00000007 00")
    assert response_header_is_flexible(ApiKey.METADATA, True)
    assert not response_header_is_flexible(ApiKey.API_VERSIONS, True)


def test_a_client_id_that_is_not_utf8_is_a_protocol_error():
    with pytest.raises(ProtocolError):
        parse_request_header(memoryview(HEADER_V1[:-4] + b"\xff\xfe\xfd\xfc"), False)


def test_a_header_cut_inside_its_fixed_part_is_a_protocol_error():
    with pytest.raises(ProtocolError):
        parse_request_header(memoryview(HEADER_V1[:9]), False)
