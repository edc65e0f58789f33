from datetime import timedelta

import pytest
from kio.schema.fetch.v12 import response as v12
from kio.schema.fetch.v12.request import FetchPartition, FetchTopic, ForgottenTopic

from protocol import fetch, schemas
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, ProtocolError
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


@pytest.mark.parametrize("aborted", [None, [], [(7, 3), (9, 5)]])
@pytest.mark.parametrize("version", range(4, 13))
def test_aborted_transactions_and_the_preferred_replica_are_read_back_as_written(version, aborted):
    # v12 without aborted transactions to list takes a shorter path; every other answer the
    # general one: kio must read the same either way.
    partition = PartitionResult(
        3, high_watermark=10, last_stable_offset=8, log_start_offset=2, aborted_transactions=aborted,
        preferred_read_replica=2, records=Payload(b"RECORDS"), diverging_epoch=(4, 6),
    )
    chunks = encode_fetch_response(version, [TopicResult("t", [partition])])
    decoded = schemas.decode(schemas.response_type(ApiKey.FETCH, version), memoryview(flatten(chunks)))
    (read,) = decoded.responses[0].partitions
    assert (read.partition_index, read.high_watermark, read.last_stable_offset) == (3, 10, 8)
    assert read.records == b"RECORDS"
    if version >= 5:
        assert read.log_start_offset == 2
    got = None if read.aborted_transactions is None else [(a.producer_id, a.first_offset) for a in read.aborted_transactions]
    assert got == aborted
    if version >= 11:
        assert read.preferred_read_replica == 2
    if version >= 12:
        assert (read.diverging_epoch.epoch, read.diverging_epoch.end_offset) == (4, 6)


@pytest.mark.parametrize(
    "throttle_ms, session_id, error_code",
    [(0, 0, ErrorCode.none), (5, 77, ErrorCode.none), (0, 0, ErrorCode.unknown_server_error)],
)
@pytest.mark.parametrize("aborted", [None, []])
def test_a_one_partition_v12_answer_is_byte_for_byte_what_kio_writes(aborted, throttle_ms, session_id, error_code):
    # A tailing consumer's answer takes a path of its own (_encode_one_partition_v12): the whole
    # answer must be the reference encoder's, not only readable by it.
    partition = PartitionResult(
        3, ErrorCode.none, high_watermark=1_000_000_007, last_stable_offset=1_000_000_006, log_start_offset=2,
        aborted_transactions=aborted, preferred_read_replica=-1, records=Payload(b"R" * 300),
    )
    chunks = encode_fetch_response(
        12, [TopicResult("a-topic", [partition])], session_id=session_id, throttle_time_ms=throttle_ms,
        error_code=error_code,
    )
    expected = v12.FetchResponse(
        throttle_time=timedelta(milliseconds=throttle_ms), error_code=error_code, session_id=session_id,
        responses=(v12.FetchableTopicResponse(topic="a-topic", partitions=(v12.PartitionData(
            partition_index=3, error_code=ErrorCode.none, high_watermark=1_000_000_007,
            last_stable_offset=1_000_000_006, log_start_offset=2,
            aborted_transactions=None if aborted is None else (), preferred_read_replica=-1, records=b"R" * 300,
        ),)),),
    )

    assert len(chunks) == 3 and chunks[1] is partition.records
    assert flatten(chunks) == schemas.encode(expected)


def fetch_request_body(version, topics, *, forgotten=(), rack_id="r1", cluster_id=None, session_id=0, session_epoch=-1):
    """A Fetch request body of `version` as kio writes it: topics as (name, [(partition,
    fetch_offset)]), every other partition field set apart so a swapped field shows."""
    request = schemas.request_type(ApiKey.FETCH, 12)(
        cluster_id=cluster_id,
        replica_id=3,
        max_wait=timedelta(milliseconds=500),
        min_bytes=7,
        max_bytes=52_428_800,
        isolation_level=1,
        session_id=session_id,
        session_epoch=session_epoch,
        topics=tuple(
            FetchTopic(
                topic=name,
                partitions=tuple(
                    FetchPartition(
                        partition=partition,
                        current_leader_epoch=5,
                        fetch_offset=offset,
                        last_fetched_epoch=4,
                        log_start_offset=2,
                        partition_max_bytes=1_048_576,
                    )
                    for partition, offset in partitions
                ),
            )
            for name, partitions in topics
        ),
        forgotten_topics_data=tuple(ForgottenTopic(topic=name, partitions=tuple(ps)) for name, ps in forgotten),
        rack_id=rack_id,
    )
    return memoryview(schemas.encode(schemas.adapt(request, schemas.request_type(ApiKey.FETCH, version))))


@pytest.mark.parametrize("rack", ["r1", ""])  # a consumer's rack is most often empty
@pytest.mark.parametrize("version", range(4, 13))
def test_a_fetch_request_is_parsed_by_hand_as_kio_reads_it(version, rack):
    body = fetch_request_body(
        version, [("orders", [(0, 10), (3, 2**40)]), ("é-topic", [(1, 0)])], forgotten=[("old", [1, 2])], rack_id=rack
    )

    by_hand = fetch._parse_by_hand(version, body)

    assert by_hand == fetch._parse_with_kio(version, body)
    assert (by_hand.replica_id, by_hand.max_wait_ms, by_hand.min_bytes, by_hand.isolation_level) == (3, 500, 7, 1)
    first = by_hand.topics[0].partitions[1]
    assert (first.partition, first.fetch_offset, first.partition_max_bytes) == (3, 2**40, 1_048_576)
    assert first.current_leader_epoch == (5 if version >= 9 else -1)
    assert first.last_fetched_epoch == (4 if version >= 12 else -1)
    assert first.log_start_offset == (2 if version >= 5 else -1)
    assert by_hand.rack_id == (rack if version >= 11 else "")


@pytest.mark.parametrize("version", range(4, 13))
def test_an_incremental_fetchs_session_and_forgotten_partitions_are_parsed(version):
    body = fetch_request_body(
        version, [("orders", [(0, 10)])], forgotten=[("old", [1, 2]), ("gone", [7])], session_id=42, session_epoch=3
    )

    by_hand = fetch._parse_by_hand(version, body)

    assert by_hand == fetch._parse_with_kio(version, body)
    if version >= 7:
        assert (by_hand.session_id, by_hand.session_epoch) == (42, 3)
        assert by_hand.forgotten == [("old", [1, 2]), ("gone", [7])]
    else:  # no sessions before v7: every fetch is a full one without (Kafka's LEGACY metadata)
        assert (by_hand.session_id, by_hand.session_epoch, by_hand.forgotten) == (0, -1, [])


def test_a_follower_fetch_of_hundreds_of_partitions_is_parsed_by_hand():
    # 300 partitions: a compact array length of two bytes in v12.
    body = fetch_request_body(12, [("t", [(p, p * 10) for p in range(300)])])

    parsed = fetch._parse_by_hand(12, body)

    assert [(p.partition, p.fetch_offset) for p in parsed.topics[0].partitions] == [(p, p * 10) for p in range(300)]


@pytest.mark.parametrize(
    "topics, forgotten, session",
    [
        ([("orders", [(0, 10), (3, 2**40)]), ("é-topic", [(1, 0)])], [], (0, 0)),  # a full fetch opening a session
        ([], [], (42, 7)),  # an idle follower's incremental fetch
        ([("orders", [(5, 9)])], [("old", [1, 2]), ("gone", [7])], (42, 8)),
        ([("t", [(p, p * 10) for p in range(300)])], [("u", list(range(200)))], (42, 9)),  # two-byte lengths
    ],
)
def test_a_followers_fetch_is_encoded_by_hand_as_kio_writes_it(topics, forgotten, session):
    expected = fetch_request_body(
        12, topics, forgotten=forgotten, rack_id="", session_id=session[0], session_epoch=session[1]
    )
    parsed = fetch._parse_by_hand(12, expected)

    encoded = fetch.encode_fetch_request_v12(parsed)

    assert encoded == bytes(expected)
    assert fetch._parse_by_hand(12, memoryview(encoded)) == parsed


def test_what_the_hand_parser_leaves_to_kio_is_still_read():
    # A tagged field (cluster_id) is kio's to read.
    body = fetch_request_body(12, [("t", [(0, 5)])], cluster_id="the-cluster")
    with pytest.raises(fetch._Malformed):
        fetch._parse_by_hand(12, body)

    parsed = fetch.parse_fetch_request(12, body)

    read = [(t.topic, [(p.partition, p.fetch_offset) for p in t.partitions]) for t in parsed.topics]
    assert read == [("t", [(0, 5)])]


@pytest.mark.parametrize("version", [4, 11, 12])
def test_a_truncated_fetch_request_is_refused_with_a_protocol_error(version):
    body = fetch_request_body(version, [("t", [(0, 5)])], forgotten=[("old", [1, 2])])
    for cut in (5, len(body) // 2, len(body) - 1):
        with pytest.raises(ProtocolError):
            fetch.parse_fetch_request(version, body[:cut])


def test_an_array_longer_than_the_request_is_refused_with_a_protocol_error():
    body = bytearray(fetch_request_body(11, [("t", [(0, 5)])]))
    body[25:29] = (1_000_000).to_bytes(4, "big")  # the topics array's count (after 25 bytes of fields)

    with pytest.raises(ProtocolError):
        fetch.parse_fetch_request(11, memoryview(body))
