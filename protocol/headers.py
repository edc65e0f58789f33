"""Request and response headers.

Request header v1: api_key INT16, api_version INT16, correlation_id INT32, client_id
NULLABLE_STRING. v2 (used by flexible versions) adds tagged fields; client_id stays a plain
NULLABLE_STRING even there. Which version a request uses follows from its API's flexible
versions, so the fixed first eight bytes are read before anything else (`peek_request`).

Response header v0: correlation_id INT32. v1 (flexible versions) adds tagged fields, except that
ApiVersions responses always use v0 so that a client can read the answer to a version it guessed.
"""

import struct
from dataclasses import dataclass
from typing import Final

from protocol.api_keys import ApiKey
from protocol.errors import ProtocolError
from protocol.primitives import EMPTY_TAGGED_FIELDS, INT32, Reader, encode_string

_FIXED_PART: Final = struct.Struct(">hhi")
# The fixed part and client_id's length: a v1 or v2 header up to its client_id in one call.
_FIXED_PART_AND_CLIENT_ID_LENGTH: Final = struct.Struct(">hhih")
# Their sizes as Final ints: compiled code reads a C static, where `S.size` is an attribute
# lookup.
_FIXED_PART_AND_CLIENT_ID_LENGTH_SIZE: Final = _FIXED_PART_AND_CLIENT_ID_LENGTH.size
# Their unpack_from, bound once: compiled code calls a bound method straight, where
# `S.unpack_from(...)` looks the method up at every call (about a sixth of the call's
# instructions).
_unpack_fixed_part: Final = _FIXED_PART.unpack_from
_unpack_fixed_part_and_client_id_length: Final = _FIXED_PART_AND_CLIENT_ID_LENGTH.unpack_from


@dataclass(slots=True, init=False)  # its own __init__, which compiled code calls directly
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None

    def __init__(self, api_key: int, api_version: int, correlation_id: int, client_id: str | None) -> None:
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id


def peek_request(frame: memoryview) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id): the part of the header every version shares."""
    try:
        return _unpack_fixed_part(frame, 0)
    except struct.error:
        raise ProtocolError(f"request of {len(frame)} bytes is shorter than a header") from None


def parse_request_header(frame: memoryview, flexible: bool) -> tuple[RequestHeader, int]:
    """The header and the position where the request body starts.

    On every request's path: the fixed part and client_id's length come from one struct call,
    and the client_id straight from the frame; the rest (a truncated header, tagged fields)
    goes through Reader, with its errors."""
    # Typed, so that compiled code keeps them as C integers (struct gives Any).
    api_key: int
    api_version: int
    correlation_id: int
    length: int
    try:
        api_key, api_version, correlation_id, length = _unpack_fixed_part_and_client_id_length(frame, 0)
    except struct.error:
        return _parse_request_header_slowly(frame, flexible)
    if length < 0 or _FIXED_PART_AND_CLIENT_ID_LENGTH_SIZE + length > len(frame):
        return _parse_request_header_slowly(frame, flexible)
    end = _FIXED_PART_AND_CLIENT_ID_LENGTH_SIZE + length
    try:
        client_id = str(frame[_FIXED_PART_AND_CLIENT_ID_LENGTH_SIZE : end], "utf-8")
    except UnicodeDecodeError:
        raise ProtocolError("string is not valid UTF-8") from None
    if flexible:
        if end < len(frame) and frame[end] == 0:  # no tagged fields, as nearly always
            end += 1
        else:
            reader = Reader(frame, end)
            reader.skip_tagged_fields()
            end = reader.pos
    return RequestHeader(api_key, api_version, correlation_id, client_id), end


def _parse_request_header_slowly(frame: memoryview, flexible: bool) -> tuple[RequestHeader, int]:
    api_key, api_version, correlation_id = peek_request(frame)
    reader = Reader(frame, _FIXED_PART.size)
    client_id = reader.nullable_string(flexible=False)
    if flexible:
        reader.skip_tagged_fields()
    return RequestHeader(api_key, api_version, correlation_id, client_id), reader.pos


def response_header_is_flexible(api_key: int, flexible_body: bool) -> bool:
    return flexible_body and api_key != ApiKey.API_VERSIONS


# Response headers v0 (correlation_id) and v1 (and no tagged field), packed by methods bound
# once: compiled code looks `S.pack` up at every call, and every response has a header.
_pack_response_header_v0: Final = INT32.pack
_pack_response_header_v1: Final = struct.Struct(">iB").pack


def encode_response_header(correlation_id: int, flexible: bool) -> bytes:
    if flexible:
        return _pack_response_header_v1(correlation_id, 0)
    return _pack_response_header_v0(correlation_id)


def encode_request_header(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None, flexible: bool
) -> bytes:
    """Request header v1, or v2 for flexible versions (`flexible`)."""
    header = _FIXED_PART.pack(api_key, api_version, correlation_id)
    header += encode_string(client_id, flexible=False)
    if flexible:
        header += EMPTY_TAGGED_FIELDS
    return header


def parse_response_header(frame: memoryview, flexible: bool) -> tuple[int, int]:
    """(correlation_id, position where the response body starts)."""
    reader = Reader(frame)
    correlation_id = reader.int32()
    if flexible:
        reader.skip_tagged_fields()
    return correlation_id, reader.pos
