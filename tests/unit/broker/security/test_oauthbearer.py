"""OAUTHBEARER with Kafka's unsecured JWS validator: RFC 7628 messages, claims, the error
challenge and the failure that follows it."""

import base64
import json

import pytest

from broker.security.mechanism import AuthenticationFailed, InvalidSaslMessage
from broker.security.oauthbearer import OAuthBearerServer, UnsecuredValidator

NOW_MS = 1_700_000_000_000


def b64url(value: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()


def token(claims: dict, header: dict | None = None, signature: str = "") -> str:
    return f"{b64url(header or {'alg': 'none'})}.{b64url(claims)}.{signature}"


def message(jws: str, authzid: str = "", extensions: str = "") -> bytes:
    gs2 = f"n,a={authzid}," if authzid else "n,,"
    return f"{gs2}\x01auth=Bearer {jws}\x01{extensions}\x01".encode()


def valid_claims(**extra) -> dict:
    return {"sub": "alice", "iat": NOW_MS // 1000 - 10, "exp": NOW_MS // 1000 + 3600, **extra}


def server(**options: str) -> OAuthBearerServer:
    return OAuthBearerServer(UnsecuredValidator(options), clock_ms=lambda: NOW_MS)


def test_a_valid_unsecured_token_authenticates_its_subject_until_it_expires():
    oauth = server()
    assert oauth.evaluate(message(token(valid_claims()), extensions="traceId=123\x01")) == b""
    assert oauth.complete and oauth.authorization_id == "alice"
    assert oauth.credential_expiry_ms == (NOW_MS // 1000 + 3600) * 1000


def test_librdkafkas_unsecured_token_is_accepted():
    # librdkafka's sasl.oauthbearer.config "principal=alice": header {"alg":"none"}, claims
    # sub, iat and exp as numbers (with fractions), no signature.
    jws = token({"sub": "alice", "iat": NOW_MS / 1000 - 1.5, "exp": NOW_MS / 1000 + 3600.5})
    oauth = server()
    oauth.evaluate(message(jws))
    assert oauth.authorization_id == "alice"


def test_the_principal_claim_name_option_names_the_claim():
    oauth = server(unsecuredValidatorPrincipalClaimName="user")
    oauth.evaluate(message(token(valid_claims(user="bob"))))
    assert oauth.authorization_id == "bob"


@pytest.mark.parametrize(
    "jws",
    [
        token(valid_claims(exp=NOW_MS // 1000 - 1)),
        token({"sub": "alice"}),
        token({"exp": NOW_MS // 1000 + 60}),
        token(valid_claims(), header={"alg": "HS256"}),
        token(valid_claims(), signature="c2ln"),
        token(valid_claims(iat=NOW_MS // 1000 + 60)),
        "not-a-jws",
    ],
    ids=["expired", "no exp", "no sub", "signed alg", "signature", "issued in the future", "garbage"],
)
def test_an_invalid_token_gets_the_invalid_token_challenge_then_fails_with_it(jws):
    oauth = server()
    assert oauth.evaluate(message(jws)) == b'{"status":"invalid_token"}'
    assert not oauth.complete
    with pytest.raises(AuthenticationFailed, match='{"status":"invalid_token"}'):
        oauth.evaluate(b"\x01")


def test_a_missing_required_scope_is_insufficient_scope():
    oauth = server(unsecuredValidatorRequiredScope="write read")
    assert oauth.evaluate(message(token(valid_claims(scope="read")))) == b'{"status":"insufficient_scope"}'
    oauth = server(unsecuredValidatorRequiredScope="write read")
    oauth.evaluate(message(token(valid_claims(scope=["read", "write"]))))
    assert oauth.complete


def test_clock_skew_allows_a_token_just_expired():
    oauth = server(unsecuredValidatorAllowableClockSkewMs="5000")
    oauth.evaluate(message(token(valid_claims(exp=NOW_MS // 1000 - 2))))
    assert oauth.complete


def test_an_authorization_id_other_than_the_tokens_principal_fails():
    with pytest.raises(AuthenticationFailed, match="different from the token's principal name"):
        server().evaluate(message(token(valid_claims()), authzid="bob"))


def test_a_message_without_a_bearer_token_is_malformed():
    with pytest.raises(InvalidSaslMessage):
        server().evaluate(b"n,,\x01host=x\x01\x01")
    with pytest.raises(InvalidSaslMessage):
        server().evaluate(b"\x01")  # no challenge was sent


def test_a_negative_clock_skew_is_refused():
    with pytest.raises(ValueError, match="must not be negative"):
        UnsecuredValidator({"unsecuredValidatorAllowableClockSkewMs": "-1"})
