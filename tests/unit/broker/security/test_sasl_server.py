"""The connection's SASL state machine: which requests are served when, handshake,
authentication, failures, raw tokens (v0) and KIP-368 re-authentication."""

import pytest

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode

from broker.security.plain import PlainServer
from broker.security.sasl_server import Admission, SaslAuthenticator, State

USERS = {"alice": "alice-secret", "bob": "bob-secret"}


class Clock:
    def __init__(self) -> None:
        self.ns = 10**12

    def advance_ms(self, ms: int) -> None:
        self.ns += ms * 1_000_000


def authenticator(max_reauth_ms: int = 0, clock: Clock | None = None) -> SaslAuthenticator:
    clock = clock or Clock()
    return SaslAuthenticator(
        {"PLAIN": lambda: PlainServer(USERS)}, {"PLAIN": max_reauth_ms}, clock_ns=lambda: clock.ns
    )


def authenticated(max_reauth_ms: int = 0, clock: Clock | None = None, user: str = "alice") -> SaslAuthenticator:
    sasl = authenticator(max_reauth_ms, clock)
    assert sasl.admit(ApiKey.SASL_HANDSHAKE) is Admission.SERVE
    assert sasl.handshake("PLAIN", 1) is ErrorCode.none
    assert sasl.admit(ApiKey.SASL_AUTHENTICATE) is Admission.SERVE
    error, _, _, _ = sasl.authenticate(f"\0{user}\0{USERS[user]}".encode())
    assert error is ErrorCode.none
    return sasl


def test_api_versions_then_handshake_then_authenticate_completes_with_the_users_name():
    sasl = authenticator()
    assert sasl.admit(ApiKey.API_VERSIONS) is Admission.SERVE
    assert sasl.admit(ApiKey.SASL_HANDSHAKE) is Admission.SERVE
    assert sasl.handshake("PLAIN", 1) is ErrorCode.none
    assert sasl.enabled_mechanisms == ["PLAIN"]
    assert sasl.admit(ApiKey.SASL_AUTHENTICATE) is Admission.SERVE
    assert sasl.authenticate(b"\0alice\0alice-secret") == (ErrorCode.none, None, b"", 0)
    assert not sasl.in_progress and sasl.authorization_id == "alice"
    assert sasl.admit(ApiKey.PRODUCE) is Admission.SERVE


@pytest.mark.parametrize("api_key", [ApiKey.METADATA, ApiKey.PRODUCE, ApiKey.SASL_AUTHENTICATE])
def test_any_other_request_before_the_handshake_is_answered_illegal_sasl_state(api_key):
    sasl = authenticator()
    assert sasl.admit(api_key) is Admission.ILLEGAL_STATE
    assert sasl.failed and "during SASL handshake" in sasl.failure


def test_a_second_api_versions_before_the_handshake_is_answered_illegal_sasl_state():
    sasl = authenticator()
    sasl.admit(ApiKey.API_VERSIONS)
    assert sasl.admit(ApiKey.API_VERSIONS) is Admission.ILLEGAL_STATE


def test_another_request_during_the_exchange_is_answered_illegal_sasl_state():
    sasl = authenticator()
    sasl.admit(ApiKey.SASL_HANDSHAKE)
    sasl.handshake("PLAIN", 1)
    assert sasl.admit(ApiKey.METADATA) is Admission.ILLEGAL_STATE
    assert sasl.failed
    assert sasl.failure == "Unexpected Kafka request of type METADATA during SASL authentication."


def test_a_mechanism_not_enabled_fails_the_connection():
    sasl = authenticator()
    sasl.admit(ApiKey.SASL_HANDSHAKE)
    assert sasl.handshake("SCRAM-SHA-256", 1) is ErrorCode.unsupported_sasl_mechanism
    assert sasl.failed


def test_a_wrong_password_fails_with_kafkas_message_and_the_connection_closes_after():
    sasl = authenticator()
    sasl.admit(ApiKey.SASL_HANDSHAKE)
    sasl.handshake("PLAIN", 1)
    error, message, _, _ = sasl.authenticate(b"\0alice\0wrong")
    assert (error, message) == (ErrorCode.sasl_authentication_failed, "Authentication failed: Invalid username or password")
    assert sasl.failed
    assert sasl.admit(ApiKey.METADATA) is Admission.CLOSE


def test_a_malformed_token_gets_the_generic_message():
    sasl = authenticator()
    sasl.admit(ApiKey.SASL_HANDSHAKE)
    sasl.handshake("PLAIN", 1)
    _, message, _, _ = sasl.authenticate(b"no separators")
    assert message == "Authentication failed during authentication due to invalid credentials with SASL mechanism PLAIN"


def test_handshake_v0_switches_to_raw_tokens():
    sasl = authenticator()
    sasl.admit(ApiKey.SASL_HANDSHAKE)
    sasl.handshake("PLAIN", 0)
    assert sasl.expects_raw_token
    assert sasl.raw_token(b"\0bob\0bob-secret") == b""
    assert not sasl.expects_raw_token and sasl.authorization_id == "bob"


def test_sessions_do_not_expire_without_connections_max_reauth_ms():
    clock = Clock()
    sasl = authenticated(0, clock)
    clock.advance_ms(10**9)
    assert sasl.admit(ApiKey.FETCH) is Admission.SERVE
    # With no session lifetime, a handshake is not a re-authentication: its handler answers
    # ILLEGAL_SASL_STATE, as KafkaApis does.
    assert sasl.admit(ApiKey.SASL_HANDSHAKE) is Admission.SERVE and not sasl.in_progress


def test_the_session_lifetime_is_connections_max_reauth_ms_and_an_expired_session_closes():
    clock = Clock()
    sasl = authenticator(60_000, clock)
    sasl.admit(ApiKey.SASL_HANDSHAKE)
    sasl.handshake("PLAIN", 1)
    assert sasl.authenticate(b"\0alice\0alice-secret")[3] == 60_000
    clock.advance_ms(60_000)
    assert sasl.admit(ApiKey.FETCH) is Admission.SERVE
    clock.advance_ms(1)
    assert sasl.admit(ApiKey.FETCH) is Admission.CLOSE


def test_re_authentication_renews_the_session():
    clock = Clock()
    sasl = authenticated(60_000, clock)
    clock.advance_ms(50_000)
    assert sasl.admit(ApiKey.SASL_HANDSHAKE) is Admission.SERVE and sasl.in_progress
    assert sasl.handshake("PLAIN", 1) is ErrorCode.none
    assert sasl.admit(ApiKey.SASL_AUTHENTICATE) is Admission.SERVE
    assert sasl.authenticate(b"\0alice\0alice-secret")[0] is ErrorCode.none
    clock.advance_ms(50_000)
    assert sasl.admit(ApiKey.FETCH) is Admission.SERVE


def test_re_authentication_as_another_user_fails():
    clock = Clock()
    sasl = authenticated(60_000, clock)
    clock.advance_ms(2_000)
    sasl.admit(ApiKey.SASL_HANDSHAKE)
    sasl.handshake("PLAIN", 1)
    error, message, _, _ = sasl.authenticate(b"\0bob\0bob-secret")
    assert error is ErrorCode.sasl_authentication_failed
    assert message == "Cannot change principals during re-authentication from User.alice: User.bob"


def test_re_authentication_with_another_mechanism_closes_at_its_next_token():
    clock = Clock()
    sasl = SaslAuthenticator(
        {"PLAIN": lambda: PlainServer(USERS), "OTHER": lambda: PlainServer(USERS)},
        {"PLAIN": 60_000, "OTHER": 60_000},
        clock_ns=lambda: clock.ns,
    )
    sasl.admit(ApiKey.SASL_HANDSHAKE)
    sasl.handshake("PLAIN", 1)
    sasl.authenticate(b"\0alice\0alice-secret")
    clock.advance_ms(2_000)
    sasl.admit(ApiKey.SASL_HANDSHAKE)
    assert sasl.handshake("OTHER", 1) is ErrorCode.none
    assert sasl.state is State.REAUTH_BAD_MECHANISM
    assert sasl.admit(ApiKey.SASL_AUTHENTICATE) is Admission.CLOSE


def test_re_authentication_at_most_once_a_second():
    clock = Clock()
    sasl = authenticated(60_000, clock)
    clock.advance_ms(2_000)
    sasl.admit(ApiKey.SASL_HANDSHAKE)
    sasl.handshake("PLAIN", 1)
    sasl.authenticate(b"\0alice\0alice-secret")
    clock.advance_ms(500)
    assert sasl.admit(ApiKey.SASL_HANDSHAKE) is Admission.SERVE
    assert not sasl.in_progress  # served by the handler: ILLEGAL_SASL_STATE


class ExpiringCredential(PlainServer):
    credential_expiry_ms = 1_000_000 + 30_000


def test_a_credentials_expiry_bounds_the_session_lifetime():
    sasl = SaslAuthenticator(
        {"PLAIN": lambda: ExpiringCredential(USERS)}, {"PLAIN": 60_000}, wall_clock_ms=lambda: 1_000_000
    )
    sasl.admit(ApiKey.SASL_HANDSHAKE)
    sasl.handshake("PLAIN", 1)
    assert sasl.authenticate(b"\0alice\0alice-secret")[3] == 30_000
