"""Envelope (broker/handlers/envelope.py) through an in-process broker's dispatcher with the ACL
authorizer: the request inside runs as the forwarded principal, a caller without CLUSTER_ACTION
is refused, an Envelope off the inter-broker listener closes the connection."""

import asyncio
import datetime

import pytest
from kio.schema.envelope.v0.request import EnvelopeRequest
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from broker.handlers.envelope import decode_principal, encode_address, encode_principal
from broker.session import KafkaPrincipal, Session
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, ProtocolError
from protocol.records import Record, build_batch
from replication.broker_client import decode_response
from tests.in_process import Client, running_broker
from tests.kafka_wire import encode_request

ADMIN = Session("127.0.0.1:5000", "PLAINTEXT", principal=KafkaPrincipal("User", "admin"))
SETTINGS = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "super.users": "User:admin"}
ALICE = KafkaPrincipal("User", "alice")


def _produce_frame() -> bytes:
    batch = build_batch([Record(0, 1_700_000_000_000, None, b"v")])
    request = ProduceRequest(transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=30), topic_data=(
        TopicProduceData(name="orders", partition_data=(PartitionProduceData(index=0, records=batch),)),))
    return encode_request(ApiKey.PRODUCE, 9, request)[4:]


def _envelope(principal: KafkaPrincipal) -> EnvelopeRequest:
    return EnvelopeRequest(request_data=_produce_frame(), request_principal=encode_principal(principal),
                           client_host_address=encode_address("10.1.2.3"))


def _produced(answer) -> ErrorCode:
    assert answer.error_code == ErrorCode.none
    inner = decode_response(ApiKey.PRODUCE, 9, memoryview(answer.response_data))
    return inner.responses[0].partition_responses[0].error_code


def test_principals_round_trip_as_kafkas_version_prefixed_default_principal_data():
    assert decode_principal(encode_principal(ALICE)) == ALICE
    with pytest.raises(ValueError):
        decode_principal(b"\x00\x07garbage")


def test_the_request_in_an_envelope_is_authorized_as_the_forwarded_principal(tmp_path):
    async def scenario():
        async with running_broker(tmp_path, SETTINGS) as broker:
            await broker.topics.create("orders", 1, {})
            admin = Client(broker, session=ADMIN)
            as_alice = _produced(await admin.call(ApiKey.ENVELOPE, 0, _envelope(ALICE)))
            as_admin = _produced(await admin.call(ApiKey.ENVELOPE, 0, _envelope(KafkaPrincipal("User", "admin"))))
            unreadable = await admin.call(ApiKey.ENVELOPE, 0, EnvelopeRequest(
                request_data=_produce_frame(), request_principal=b"\x00", client_host_address=b"\x7f\x00\x00\x01"))
            return as_alice, as_admin, unreadable.error_code

    assert asyncio.run(scenario()) == (ErrorCode.topic_authorization_failed, ErrorCode.none, ErrorCode.invalid_request)


def test_an_envelope_off_the_inter_broker_listener_closes_the_connection(tmp_path):
    async def scenario():
        settings = {**SETTINGS, "listeners": "PLAINTEXT://127.0.0.1:0,OTHER://127.0.0.1:0",
                    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT"}
        async with running_broker(tmp_path, settings) as broker:
            other = Client(broker, session=Session("127.0.0.1:5000", "OTHER", principal=KafkaPrincipal("User", "admin")))
            with pytest.raises(ProtocolError):
                await other.call(ApiKey.ENVELOPE, 0, _envelope(ALICE))

    asyncio.run(scenario())
