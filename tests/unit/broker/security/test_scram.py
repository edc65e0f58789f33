"""SCRAM-SHA-256/512 server side: RFC 7677's exchange, Kafka's credential text, failures."""

import base64

import pytest

from broker.security import scram
from broker.security.mechanism import AuthenticationFailed, InvalidSaslMessage

# RFC 7677 section 3: user "user", password "pencil".
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def rfc_server(users=None):
    credentials = users if users is not None else {
        "user": scram.credential_from_password(scram.SCRAM_SHA_256, "pencil", 4096, RFC_SALT)
    }
    return scram.ScramServer(scram.SCRAM_SHA_256, lambda name, mechanism: credentials.get(name), nonce=RFC_SERVER_NONCE)


def test_the_server_side_of_rfc_7677s_exchange_gives_its_messages():
    server = rfc_server()
    assert server.evaluate(RFC_CLIENT_FIRST) == RFC_SERVER_FIRST
    assert not server.complete
    assert server.evaluate(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert server.complete and server.authorization_id == "user"


def test_the_client_side_gives_rfc_7677s_messages_and_checks_the_servers_signature():
    client = scram.ScramClient(scram.SCRAM_SHA_256, "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.first_message() == RFC_CLIENT_FIRST
    assert client.final_message(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    client.verify_server_final(RFC_SERVER_FINAL)
    with pytest.raises(InvalidSaslMessage):
        client.verify_server_final(b"v=" + base64.b64encode(b"x" * 32))


@pytest.mark.parametrize("mechanism", [scram.SCRAM_SHA_256, scram.SCRAM_SHA_512])
def test_a_client_with_the_password_authenticates_with_either_mechanism(mechanism):
    credential = scram.credential_from_password(mechanism, "s3cret", 4096)
    server = scram.ScramServer(mechanism, lambda name, m: credential if (name, m) == ("alice", mechanism) else None)
    client = scram.ScramClient(mechanism, "alice", "s3cret")
    final = client.final_message(server.evaluate(client.first_message()))
    client.verify_server_final(server.evaluate(final))
    assert server.authorization_id == "alice"


def test_a_wrong_password_fails_without_saying_why():
    server = rfc_server()
    client = scram.ScramClient(scram.SCRAM_SHA_256, "user", "wrong")
    with pytest.raises(InvalidSaslMessage):
        server.evaluate(client.final_message(server.evaluate(client.first_message())))
    assert not server.complete


def test_an_unknown_user_fails_like_a_wrong_password():
    with pytest.raises(InvalidSaslMessage):
        rfc_server().evaluate(b"n,,n=nobody,r=abc")


def test_a_delegation_token_login_is_refused():
    with pytest.raises(InvalidSaslMessage):
        rfc_server().evaluate(b"n,,n=user,r=abc,tokenauth=true")


def test_an_authorization_id_other_than_the_user_fails_with_kafkas_message():
    with pytest.raises(AuthenticationFailed, match="authorization id that is different from username"):
        rfc_server().evaluate(b"n,a=admin,n=user,r=abc")


def test_a_final_message_whose_nonce_ends_with_the_servers_is_accepted_as_kafka_accepts_it():
    # librdkafka before 2.1 puts its own nonce in front of the combined one.
    mechanism = scram.SCRAM_SHA_256
    server = rfc_server()
    server_first = server.evaluate(RFC_CLIENT_FIRST).decode()
    without_proof = "c=biws,r=rOprNGfwEbeRWgbNEkqO" + server_first[2:server_first.index(",")]
    auth_message = f"{RFC_CLIENT_FIRST[3:].decode()},{server_first},{without_proof}".encode()
    client_key = mechanism.hmac(scram.salted_password(mechanism, "pencil", RFC_SALT, 4096), b"Client Key")
    signature = mechanism.hmac(mechanism.hash(client_key), auth_message)
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature))).decode()
    server.evaluate(f"{without_proof},p={proof}".encode())
    assert server.complete


def test_a_final_message_with_another_nonce_fails():
    server = rfc_server()
    server.evaluate(RFC_CLIENT_FIRST)
    with pytest.raises(InvalidSaslMessage, match="nonce"):
        server.evaluate(RFC_CLIENT_FINAL.replace(b"k0,", b"k1,"))


def test_a_malformed_first_message_fails():
    with pytest.raises(InvalidSaslMessage):
        rfc_server().evaluate(b"not scram")


def test_a_credential_with_fewer_than_4096_iterations_is_not_used():
    weak = {"user": scram.credential_from_password(scram.SCRAM_SHA_256, "pencil", 1000, RFC_SALT)}
    with pytest.raises(InvalidSaslMessage, match="less than the minimum 4096"):
        rfc_server(weak).evaluate(RFC_CLIENT_FIRST)


def test_credentials_round_trip_through_kafkas_text_form():
    credential = scram.credential_from_password(scram.SCRAM_SHA_512, "pw", 8192, b"salty")
    text = credential.to_kafka_string()
    assert text.startswith("salt=c2FsdHk=,stored_key=") and text.endswith(",iterations=8192")
    assert scram.ScramCredential.from_kafka_string(text) == credential


def test_user_names_with_commas_and_equals_signs_are_escaped_as_rfc_5802_says():
    assert scram.encode_sasl_name("a,b=c") == "a=2Cb=3Dc"
    assert scram.decode_sasl_name("a=2Cb=3Dc") == "a,b=c"
