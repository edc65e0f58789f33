"""The dispatcher of an in-process broker: frames in, response frames out, no sockets."""

import asyncio
import dataclasses
import datetime
import inspect
import typing

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from broker.handlers import HANDLERS
from broker.server import Broker
from protocol import legacy
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, ProtocolError
from protocol.primitives import INT16, INT32
from protocol.records import Record, build_batch, iter_records
from storage.topic_partition import TopicPartition
from tests.in_process import CLIENT_SESSION, running_broker
from tests.kafka_wire import decode_response, encode_request


def with_broker(tmp_path, scenario):
    async def main():
        async with running_broker(tmp_path, None) as broker:
            await scenario(broker)

    asyncio.run(main())


async def exchange(broker: Broker, frame: bytes) -> bytes | None:
    chunks = broker._dispatcher.dispatch(memoryview(bytearray(frame))[4:], CLIENT_SESSION)
    if inspect.isawaitable(chunks):
        chunks = await chunks
    return None if chunks is None else b"".join(bytes(c) for c in chunks)


def test_api_versions_advertises_exactly_the_registry(tmp_path):
    async def scenario(broker):
        for version in (0, 3):
            request = ApiVersionsRequest(client_software_name="t", client_software_version="1")
            reply = await exchange(broker, encode_request(ApiKey.API_VERSIONS, version, request))
            response = decode_response(ApiKey.API_VERSIONS, version, reply)
            served = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
            assert served == {h.api_key: (h.min_version, h.max_version) for h in HANDLERS.values()}

    with_broker(tmp_path, scenario)


def test_a_sessions_dispatch_serves_its_requests_in_that_session(tmp_path):
    """What a connection calls: dispatch with its session bound (the session's principal is who
    Produce is authorized as, its client id what quotas count)."""

    async def scenario(broker):
        session_dispatch = broker._dispatcher.for_session(CLIENT_SESSION)
        request = encode_request(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(client_software_name="t", client_software_version="1"))
        frame = memoryview(bytearray(request))[4:]
        assert b"".join(bytes(c) for c in session_dispatch(frame)) == await exchange(broker, request)

    with_broker(tmp_path, scenario)


def test_api_versions_beyond_ours_answers_unsupported_in_the_v0_layout(tmp_path):
    async def scenario(broker):
        header = INT16.pack(ApiKey.API_VERSIONS) + INT16.pack(99) + INT32.pack(7) + b"\xff\xff"
        reply = await exchange(broker, INT32.pack(len(header) + 5) + header + b"junk!")
        body = reply[8:]
        assert reply[4:8] == INT32.pack(7)  # response header v0: the correlation id only
        assert INT16.unpack_from(body, 0)[0] == ErrorCode.unsupported_version
        assert body[2:] == INT32.pack(1) + INT16.pack(ApiKey.API_VERSIONS) + INT16.pack(0) + INT16.pack(3)

    with_broker(tmp_path, scenario)


@pytest.mark.parametrize("api_key, version", [(999, 0), (ApiKey.METADATA, 99), (ApiKey.FETCH, 3)])
def test_unknown_keys_and_versions_are_protocol_errors(tmp_path, api_key, version):
    async def scenario(broker):
        header = INT16.pack(api_key) + INT16.pack(version) + INT32.pack(1) + b"\xff\xff"
        with pytest.raises(ProtocolError):
            await exchange(broker, INT32.pack(len(header)) + header)

    with_broker(tmp_path, scenario)


def test_produce_v0_appends_and_answers_in_the_v0_layout(tmp_path):
    async def scenario(broker):
        await broker.topics.create("t", 1, {})
        produce_v0, response_v0 = legacy.MESSAGES[(ApiKey.PRODUCE, 0)]
        batch = build_batch([Record(0, 1_000, b"k", b"hello")])
        topic_type, partition_type = _produce_v0_types(produce_v0)
        request = produce_v0(
            acks=1,
            timeout=datetime.timedelta(seconds=1),
            topic_data=(topic_type(name="t", partition_data=(partition_type(index=0, records=batch),)),),
        )
        response = decode_response(ApiKey.PRODUCE, 0, await exchange(broker, encode_request(ApiKey.PRODUCE, 0, request)))
        (result,) = response.responses[0].partition_responses
        assert (result.error_code, result.base_offset) == (ErrorCode.none, 0)
        log = broker.replica_manager.get_partition(TopicPartition("t", 0)).log
        assert [r.value for r in iter_records(log.read(0, 1000, 1, True).read())] == [b"hello"]

    with_broker(tmp_path, scenario)


def _produce_v0_types(request_type):
    topic_type = typing.get_type_hints(request_type)["topic_data"].__args__[0]
    partition_type = typing.get_type_hints(topic_type)["partition_data"].__args__[0]
    return topic_type, partition_type


def test_flexible_responses_carry_header_v1(tmp_path):
    async def scenario(broker):
        for version, header_size in ((8, 4), (12, 5)):
            reply = await exchange(broker, encode_request(ApiKey.METADATA, version, MetadataRequest(topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False), correlation_id=5))
            assert reply[4:8] == INT32.pack(5)
            assert decode_response(ApiKey.METADATA, version, reply).topics == ()
            if header_size == 5:
                assert reply[8] == 0  # empty tagged fields of response header v1

    with_broker(tmp_path, scenario)


def _failing(monkeypatch, api_key: ApiKey, *, wait: bool) -> None:
    """Make `api_key`'s handler fail as a bug would, at once or after waiting."""
    real = HANDLERS[api_key]

    def handle(context, request):
        if not wait:
            raise RuntimeError("bug in the handler")

        async def later():
            await asyncio.sleep(0)
            raise RuntimeError("bug in the handler, later")

        return later()

    monkeypatch.setitem(HANDLERS, api_key, dataclasses.replace(real, handle=handle))


@pytest.mark.parametrize("wait", [False, True])
def test_a_failing_handler_answers_unknown_server_error_and_the_connection_goes_on(tmp_path, monkeypatch, caplog, wait):
    _failing(monkeypatch, ApiKey.METADATA, wait=wait)
    request = MetadataRequest(
        topics=(MetadataRequestTopic(name="t", topic_id=None),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )

    async def scenario(broker):
        reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
        for correlation_id in (1, 2):  # the second on the same connection
            writer.write(encode_request(ApiKey.METADATA, 12, request, correlation_id=correlation_id))
            size = await asyncio.wait_for(reader.readexactly(4), 5)
            reply = size + await reader.readexactly(int.from_bytes(size, "big"))
            assert reply[4:8] == INT32.pack(correlation_id)
            (topic,) = decode_response(ApiKey.METADATA, 12, reply).topics
            assert (topic.name, topic.error_code) == ("t", ErrorCode.unknown_server_error)
        writer.close()

    with_broker(tmp_path, scenario)
    failures = [r for r in caplog.records if "answering UNKNOWN_SERVER_ERROR" in r.getMessage()]
    assert len(failures) == 2 and all("bug in the handler" in str(r.exc_info[1]) for r in failures)


def test_a_failing_produce_is_answered_per_partition_unless_acks_is_0(tmp_path, monkeypatch):
    _failing(monkeypatch, ApiKey.PRODUCE, wait=False)
    batch = build_batch([Record(0, 1_000, b"k", b"v")])
    topics = (TopicProduceData(name="t", partition_data=(PartitionProduceData(index=2, records=batch),)),)

    async def scenario(broker):
        reply = await exchange(broker, encode_request(ApiKey.PRODUCE, 9, ProduceRequest(transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=1), topic_data=topics)))
        (partition,) = decode_response(ApiKey.PRODUCE, 9, reply).responses[0].partition_responses
        assert (partition.index, partition.error_code) == (2, ErrorCode.unknown_server_error)
        with pytest.raises(RuntimeError):  # no response to carry it: the connection closes
            await exchange(broker, encode_request(ApiKey.PRODUCE, 9, ProduceRequest(transactional_id=None, acks=0, timeout=datetime.timedelta(seconds=1), topic_data=topics)))

    with_broker(tmp_path, scenario)


def test_a_protocol_error_from_a_handler_still_closes_the_connection(tmp_path, monkeypatch):
    def handle(context, request):
        raise ProtocolError("malformed in a way only the handler sees")

    monkeypatch.setitem(HANDLERS, ApiKey.METADATA, dataclasses.replace(HANDLERS[ApiKey.METADATA], handle=handle))
    request = MetadataRequest(topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False)

    async def scenario(broker):
        with pytest.raises(ProtocolError):
            await exchange(broker, encode_request(ApiKey.METADATA, 12, request))

    with_broker(tmp_path, scenario)


def test_request_log_has_one_debug_line_per_request_with_kafkas_fields_while_at_debug(tmp_path, caplog):
    async def scenario(broker):
        request = MetadataRequest(topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False)
        reply = await exchange(broker, encode_request(ApiKey.METADATA, 12, request))
        with caplog.at_level("DEBUG", logger="kafka.request.logger"):
            reply = await exchange(broker, encode_request(ApiKey.METADATA, 12, request))
        lines = [r for r in caplog.records if r.name == "kafka.request.logger"]
        assert len(lines) == 1
        fields = lines[0].request
        assert {k: fields[k] for k in ("api", "version", "clientAddress", "principal", "listener")} == {
            "api": "METADATA",
            "version": 12,
            "clientAddress": CLIENT_SESSION.client_address,
            "principal": "User:ANONYMOUS",
            "listener": CLIENT_SESSION.listener,
        }
        assert fields["responseBytes"] == len(reply)
        assert fields["latencyMs"] >= 0
        assert "correlationId=" in lines[0].getMessage() and "clientId=" in lines[0].getMessage()
        # Off again once the level is back: the logger's remembered answers follow its level.
        await exchange(broker, encode_request(ApiKey.METADATA, 12, request))
        assert len([r for r in caplog.records if r.name == "kafka.request.logger"]) == 1

    with_broker(tmp_path, scenario)


def test_request_log_formats_nothing_while_it_is_off(tmp_path, monkeypatch):
    from broker import dispatch

    formatted = []
    monkeypatch.setattr(dispatch, "_log_request", lambda *args: formatted.append(args))

    async def scenario(broker):
        request = MetadataRequest(topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False)
        await exchange(broker, encode_request(ApiKey.METADATA, 12, request))
        assert formatted == []

    with_broker(tmp_path, scenario)
