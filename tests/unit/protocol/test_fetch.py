import pytest

from protocol import schemas
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.fetch import PartitionResult, TopicResult, encode_fetch_response


class Payload:
    """Stands for a file region: only its length is known to the encoder."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __len__(self) -> int:
        return len(self.data)


def flatten(chunks) -> bytes:
    return b"".join(c.data if isinstance(c, Payload) else c for c in chunks)


def response(records):
    return [
        TopicResult(
            "t",
            [
                PartitionResult(0, high_watermark=10, last_stable_offset=10, log_start_offset=2, records=records),
                PartitionResult(1, ErrorCode.offset_out_of_range, records=b""),
            ],
        )
    ]


@pytest.mark.parametrize("version", range(4, 13))
def test_kio_reads_the_response_with_the_payload_spliced_in(version):
    payload = Payload(b"RECORD-BYTES")
    chunks = encode_fetch_response(version, response(payload), session_id=0)
    assert any(c is payload for c in chunks), "the payload must be passed through, not copied"
    decoded = schemas.decode(schemas.response_type(ApiKey.FETCH, version), memoryview(flatten(chunks)))
    first, second = decoded.responses[0].partitions
    assert first.records == b"RECORD-BYTES"
    assert (first.high_watermark, first.last_stable_offset) == (10, 10)
    if version >= 5:
        assert first.log_start_offset == 2
    assert second.error_code == ErrorCode.offset_out_of_range
    assert second.records == b""


def test_top_level_error_and_null_aborted_transactions():
    chunks = encode_fetch_response(12, [], error_code=ErrorCode.fetch_session_id_not_found)
    decoded = schemas.decode(schemas.response_type(ApiKey.FETCH, 12), memoryview(flatten(chunks)))
    assert decoded.error_code == ErrorCode.fetch_session_id_not_found
    chunks = encode_fetch_response(11, response(b""))
    decoded = schemas.decode(schemas.response_type(ApiKey.FETCH, 11), memoryview(flatten(chunks)))
    assert decoded.responses[0].partitions[0].aborted_transactions is None
