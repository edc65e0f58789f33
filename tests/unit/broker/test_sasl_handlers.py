"""SaslHandshake, SaslAuthenticate and the SCRAM credential APIs through the dispatcher of an
in-process broker with a SASL_PLAINTEXT listener: what each state serves, the answers, the
principal, and the answers after which the connection closes."""

import asyncio
import inspect

import pytest
from kio.schema.alter_user_scram_credentials.v0.request import (
    AlterUserScramCredentialsRequest,
    ScramCredentialUpsertion,
)
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.describe_user_scram_credentials.v0.request import DescribeUserScramCredentialsRequest
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from broker.responses import CloseAfterResponse
from broker.security import scram
from broker.session import ANONYMOUS, KafkaPrincipal, Session
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.primitives import INT32
from tests.in_process import CLIENT_SESSION, running_broker
from tests.kafka_wire import decode_response, encode_request

SASL = {
    "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
    "advertised.listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
        'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";'
    ),
    "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": (
        "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    ),
}


def with_sasl_broker(tmp_path, scenario):
    async def main():
        async with running_broker(tmp_path, SASL) as broker:
            await scenario(broker)

    asyncio.run(main())


def sasl_session(broker) -> Session:
    return Session("127.0.0.1:50001", "SASL_PLAINTEXT", "SASL_PLAINTEXT", "SASL_PLAINTEXT",
                   sasl=broker._sasl_authenticator("SASL_PLAINTEXT"))


async def send(broker, session, api_key, version, request) -> bytes:
    chunks = broker._dispatcher.dispatch(memoryview(bytearray(encode_request(api_key, version, request)))[4:], session)
    if inspect.isawaitable(chunks):
        chunks = await chunks
    return b"".join(bytes(c) for c in chunks)


async def call(broker, session, api_key, version, request):
    return decode_response(api_key, version, await send(broker, session, api_key, version, request))


def closing_answer(api_key, version, failure: pytest.ExceptionInfo):
    return decode_response(api_key, version, b"".join(bytes(c) for c in failure.value.response))


def test_api_versions_handshake_and_plain_authentication_make_the_principal(tmp_path):
    async def scenario(broker):
        session = sasl_session(broker)
        versions = await call(broker, session, ApiKey.API_VERSIONS, 3, ApiVersionsRequest(client_software_name="t", client_software_version="1"))
        assert {k.api_key for k in versions.api_keys} >= {ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE}
        handshake = await call(broker, session, ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"))
        assert handshake.error_code is ErrorCode.none
        assert handshake.mechanisms == ("PLAIN", "SCRAM-SHA-256")
        assert session.principal == ANONYMOUS
        done = await call(broker, session, ApiKey.SASL_AUTHENTICATE, 2, SaslAuthenticateRequest(auth_bytes=b"\0alice\0alice-secret"))
        assert done.error_code is ErrorCode.none
        assert done.session_lifetime.total_seconds() == 0
        assert session.principal == KafkaPrincipal("User", "alice")
        metadata = await call(broker, session, ApiKey.METADATA, 12, MetadataRequest(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False))
        assert metadata.brokers

    with_sasl_broker(tmp_path, scenario)


def test_a_request_before_the_handshake_is_answered_illegal_sasl_state_then_closed(tmp_path):
    async def scenario(broker):
        request = DescribeUserScramCredentialsRequest(users=None)
        with pytest.raises(CloseAfterResponse, match="type DESCRIBE_USER_SCRAM_CREDENTIALS during SASL handshake") as failure:
            await send(broker, sasl_session(broker), ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, request)
        answer = closing_answer(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, failure)
        assert answer.error_code is ErrorCode.illegal_sasl_state

    with_sasl_broker(tmp_path, scenario)


def test_a_request_during_the_exchange_is_answered_illegal_sasl_state_then_closed(tmp_path):
    async def scenario(broker):
        session = sasl_session(broker)
        await call(broker, session, ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"))
        with pytest.raises(CloseAfterResponse) as failure:
            await send(broker, session, ApiKey.METADATA, 12, MetadataRequest(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False))
        assert closing_answer(ApiKey.METADATA, 12, failure).topics == ()

    with_sasl_broker(tmp_path, scenario)


def test_a_wrong_password_is_answered_sasl_authentication_failed_then_closed(tmp_path):
    async def scenario(broker):
        session = sasl_session(broker)
        await call(broker, session, ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"))
        with pytest.raises(CloseAfterResponse) as failure:
            await send(broker, session, ApiKey.SASL_AUTHENTICATE, 1, SaslAuthenticateRequest(auth_bytes=b"\0alice\0wrong"))
        answer = closing_answer(ApiKey.SASL_AUTHENTICATE, 1, failure)
        assert answer.error_code is ErrorCode.sasl_authentication_failed
        assert answer.error_message == "Authentication failed: Invalid username or password"
        assert session.principal == ANONYMOUS

    with_sasl_broker(tmp_path, scenario)


def test_an_unsupported_mechanism_is_answered_with_the_enabled_ones_then_closed(tmp_path):
    async def scenario(broker):
        with pytest.raises(CloseAfterResponse) as failure:
            await send(broker, sasl_session(broker), ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="GSSAPI"))
        answer = closing_answer(ApiKey.SASL_HANDSHAKE, 1, failure)
        assert answer.error_code is ErrorCode.unsupported_sasl_mechanism
        assert answer.mechanisms == ("PLAIN", "SCRAM-SHA-256")

    with_sasl_broker(tmp_path, scenario)


def test_handshake_v0_is_followed_by_raw_tokens(tmp_path):
    async def scenario(broker):
        session = sasl_session(broker)
        await call(broker, session, ApiKey.SASL_HANDSHAKE, 0, SaslHandshakeRequest(mechanism="PLAIN"))
        answer = broker._dispatcher.dispatch(memoryview(bytearray(b"\0alice\0alice-secret")), session)
        assert answer == [INT32.pack(0)]
        assert session.principal == KafkaPrincipal("User", "alice")

    with_sasl_broker(tmp_path, scenario)


def test_sasl_requests_on_a_listener_without_sasl_are_illegal_sasl_state(tmp_path):
    async def scenario(broker):
        handshake = await call(broker, CLIENT_SESSION, ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"))
        assert (handshake.error_code, handshake.mechanisms) == (ErrorCode.illegal_sasl_state, ())
        authenticate = await call(broker, CLIENT_SESSION, ApiKey.SASL_AUTHENTICATE, 2, SaslAuthenticateRequest(auth_bytes=b""))
        assert authenticate.error_code is ErrorCode.illegal_sasl_state
        assert authenticate.error_message == "SaslAuthenticate request received after successful authentication"

    with_sasl_broker(tmp_path, scenario)


def test_a_user_created_with_alter_user_scram_credentials_authenticates_with_scram(tmp_path):
    async def scenario(broker):
        salt = b"some salt"
        salted = scram.salted_password(scram.SCRAM_SHA_256, "bob-secret", salt, 4096)
        altered = await call(broker, CLIENT_SESSION, ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, AlterUserScramCredentialsRequest(
            deletions=(),
            upsertions=(ScramCredentialUpsertion(name="bob", mechanism=1, iterations=4096, salt=salt, salted_password=salted),),
        ))
        assert [(r.user, r.error_code) for r in altered.results] == [("bob", ErrorCode.none)]
        described = await call(broker, CLIENT_SESSION, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, DescribeUserScramCredentialsRequest(users=None))
        assert [(r.user, [(i.mechanism, i.iterations) for i in r.credential_infos]) for r in described.results] == [("bob", [(1, 4096)])]

        session = sasl_session(broker)
        await call(broker, session, ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="SCRAM-SHA-256"))
        client = scram.ScramClient(scram.SCRAM_SHA_256, "bob", "bob-secret")
        first = await call(broker, session, ApiKey.SASL_AUTHENTICATE, 2, SaslAuthenticateRequest(auth_bytes=client.first_message()))
        final = await call(broker, session, ApiKey.SASL_AUTHENTICATE, 2, SaslAuthenticateRequest(auth_bytes=client.final_message(first.auth_bytes)))
        client.verify_server_final(final.auth_bytes)
        assert session.principal == KafkaPrincipal("User", "bob")

    with_sasl_broker(tmp_path, scenario)
