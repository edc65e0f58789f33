"""Kafka request and response frames for tests that speak the protocol directly.

    frame = encode_request(ApiKey.METADATA, 12, MetadataRequest(...))
    response = decode_response(ApiKey.METADATA, 12, reply_bytes)

`encode_request` gives the whole frame (4-byte size, request header v1, or v2 for flexible
versions, then the body); the entity may be of any version of the API: it is rebuilt as the
requested version, copying fields by name (fields that version lacks are dropped, missing ones
take their defaults). `decode_response` takes a whole response frame, size included, and skips
response header v0, or v1 for flexible versions except ApiVersions, which always answers with v0.
`call` sends a request on a blocking socket and decodes the answer.
`decode_describe_transactions` reads a DescribeTransactions v0 answer field by field: kio refuses
the start time -1 Kafka gives an id in the Empty state.
"""

import socket
from typing import Any, NamedTuple

from protocol import schemas
from protocol.errors import ErrorCode
from protocol.headers import encode_request_header, parse_response_header, response_header_is_flexible
from protocol.primitives import INT32, Reader


def encode_request(
    api_key: int, version: int, entity: Any, correlation_id: int = 1, client_id: str | None = "test"
) -> bytes:
    flexible = schemas.is_flexible(api_key, version)
    header = encode_request_header(api_key, version, correlation_id, client_id, flexible)
    body = schemas.encode(schemas.adapt(entity, schemas.request_type(api_key, version)))
    return INT32.pack(len(header) + len(body)) + header + body


def decode_response(api_key: int, version: int, frame_bytes: bytes) -> Any:
    (size,) = INT32.unpack_from(frame_bytes, 0)
    if size != len(frame_bytes) - INT32.size:
        raise ValueError(f"frame says {size} bytes but holds {len(frame_bytes) - INT32.size}")
    flexible = response_header_is_flexible(api_key, schemas.is_flexible(api_key, version))
    _correlation_id, body_start = parse_response_header(memoryview(frame_bytes)[INT32.size :], flexible)
    return schemas.decode(schemas.response_type(api_key, version), memoryview(frame_bytes)[INT32.size + body_start :])


def read_frame(sock: socket.socket) -> bytes:
    """One whole response frame, its size included."""
    data = b""
    while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        data += chunk
    return data


def call(sock: socket.socket, api_key: int, version: int, request: Any) -> Any:
    sock.sendall(encode_request(api_key, version, request))
    return decode_response(api_key, version, read_frame(sock))


class DescribedTransaction(NamedTuple):
    """One id's entry in a DescribeTransactions v0 answer; `topics` is [(topic, [partitions])]."""

    error_code: ErrorCode
    transactional_id: str
    transaction_state: str
    timeout_ms: int
    start_ms: int
    producer_id: int
    producer_epoch: int
    topics: list[tuple[str, list[int]]]


def decode_describe_transactions(frame_bytes: bytes) -> list[DescribedTransaction]:
    """Every entry of a whole DescribeTransactions v0 response frame, its size included."""
    reader = Reader(memoryview(frame_bytes), INT32.size)
    reader.int32()  # correlation id
    reader.skip_tagged_fields()  # v0 is flexible: response header v1
    reader.int32()  # throttle time
    described = []
    for _ in range(reader.array_length(True)):
        fields = (ErrorCode(reader.int16()), reader.string(True), reader.string(True), reader.int32(),
                  reader.int64(), reader.int64(), reader.int16())
        topics = []
        for _ in range(reader.array_length(True)):
            topic = reader.string(True)
            topics.append((topic, [reader.int32() for _ in range(reader.array_length(True))]))
            reader.skip_tagged_fields()
        reader.skip_tagged_fields()
        described.append(DescribedTransaction(*fields, topics))
    return described
