"""SASL/PLAIN server side: Kafka's PlainSaslServer checks and messages."""

import pytest

from broker.security.mechanism import AuthenticationFailed, InvalidSaslMessage
from broker.security.plain import PlainServer, users_from_jaas_options


def server():
    return PlainServer(users_from_jaas_options({"username": "admin", "password": "x", "user_alice": "alice-secret"}))


def test_users_are_the_user_options_of_the_jaas_entry():
    assert users_from_jaas_options({"username": "admin", "password": "x", "user_alice": "a", "user_bob": "b"}) == {
        "alice": "a", "bob": "b",
    }


def test_the_right_password_authenticates_the_user():
    plain = server()
    assert plain.evaluate(b"\0alice\0alice-secret") == b""
    assert plain.complete and plain.authorization_id == "alice"


def test_an_authorization_id_equal_to_the_user_is_accepted():
    plain = server()
    plain.evaluate(b"alice\0alice\0alice-secret")
    assert plain.authorization_id == "alice"


@pytest.mark.parametrize(
    "message, error",
    [
        (b"\0alice\0wrong", "Authentication failed: Invalid username or password"),
        (b"\0mallory\0alice-secret", "Authentication failed: Invalid username or password"),
        (b"\0\0alice-secret", "Authentication failed: username not specified"),
        (b"\0alice\0", "Authentication failed: password not specified"),
        (b"bob\0alice\0alice-secret", "Authentication failed: Client requested an authorization id that is different from username"),
    ],
)
def test_failures_carry_kafkas_messages(message, error):
    plain = server()
    with pytest.raises(AuthenticationFailed) as failure:
        plain.evaluate(message)
    assert str(failure.value) == error
    assert not plain.complete


def test_a_message_without_three_parts_is_malformed():
    with pytest.raises(InvalidSaslMessage, match="expected 3 tokens, got 2"):
        server().evaluate(b"alice\0alice-secret")
