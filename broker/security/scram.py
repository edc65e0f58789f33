"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka's ScramSaslServer serves them.

Credentials are what Kafka stores, never the password: a salt, the iteration count, StoredKey =
H(HMAC(SaltedPassword, "Client Key")) and ServerKey = HMAC(SaltedPassword, "Server Key"), with
SaltedPassword = PBKDF2-HMAC(password, salt, iterations). Their text form is Kafka's
ScramCredentialUtils one: `salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>`.

The exchange: client-first `n,[a=<authzid>],n=<user>,r=<nonce>[,<extensions>]`; server-first
`r=<nonce+server nonce>,s=<salt>,i=<iterations>`; client-final `c=<b64 gs2 header>,r=<nonce>,
p=<proof>`; server-final `v=<server signature>`. Failures are Kafka's: an unknown user, a bad
proof or a malformed message are InvalidSaslMessage (the client learns nothing more); an
authorization id other than the user is AuthenticationFailed with Kafka's message. The
`tokenauth` extension (delegation tokens) is refused: logway has no delegation tokens.
"""

import base64
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from broker.security.mechanism import AuthenticationFailed, InvalidSaslMessage

MIN_ITERATIONS = 4096  # Kafka's ScramMechanism minimum, both mechanisms
MAX_ITERATIONS = 16384  # Kafka's AlterUserScramCredentials maximum


@dataclass(frozen=True)
class ScramMechanism:
    name: str
    hash_name: str
    kafka_type: int  # the int8 of Describe/AlterUserScramCredentials

    def hash(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()


SCRAM_SHA_256 = ScramMechanism("SCRAM-SHA-256", "sha256", 1)
SCRAM_SHA_512 = ScramMechanism("SCRAM-SHA-512", "sha512", 2)
MECHANISMS = {m.name: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}
BY_KAFKA_TYPE = {m.kafka_type: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_kafka_string(self) -> str:
        b64 = lambda data: base64.b64encode(data).decode()  # noqa: E731
        return (
            f"salt={b64(self.salt)},stored_key={b64(self.stored_key)},"
            f"server_key={b64(self.server_key)},iterations={self.iterations}"
        )

    @classmethod
    def from_kafka_string(cls, text: str) -> "ScramCredential":
        fields = dict(item.split("=", 1) for item in text.split(",") if "=" in item)
        try:
            return cls(
                base64.b64decode(fields["salt"], validate=True),
                base64.b64decode(fields["stored_key"], validate=True),
                base64.b64decode(fields["server_key"], validate=True),
                int(fields["iterations"]),
            )
        except (KeyError, ValueError) as exc:
            raise ValueError(f"invalid SCRAM credential {text!r}: {exc}") from None


def salted_password(mechanism: ScramMechanism, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password.encode(), salt, iterations)


def credential_from_salted_password(
    mechanism: ScramMechanism, salted: bytes, salt: bytes, iterations: int
) -> ScramCredential:
    """What AlterUserScramCredentials carries (the client salts) turned into what is stored."""
    client_key = mechanism.hmac(salted, b"Client Key")
    return ScramCredential(salt, mechanism.hash(client_key), mechanism.hmac(salted, b"Server Key"), iterations)


def credential_from_password(
    mechanism: ScramMechanism, password: str, iterations: int, salt: bytes | None = None
) -> ScramCredential:
    salt = secrets.token_bytes(32) if salt is None else salt
    salted = salted_password(mechanism, password, salt, iterations)
    return credential_from_salted_password(mechanism, salted, salt, iterations)


_SASL_NAME = r"(?:[\x21-\x2b\x2d-\x3c\x3e-\x7e\x80-\U0010ffff]|=2C|=3D)+"
_CLIENT_FIRST = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASL_NAME}))?,(?P<bare>(?:m=[^,]*,)?n=(?P<name>{_SASL_NAME}),"
    r"r=(?P<nonce>[\x21-\x2b\x2d-\x7e]+)(?P<extensions>(?:,[A-Za-z]+=[^,]*)*))"
)
_CLIENT_FINAL = re.compile(
    r"c=(?P<channel>[A-Za-z0-9+/=]*),r=(?P<nonce>[\x21-\x2b\x2d-\x7e]+)"
    r"(?:,[A-Za-z]+=[^,]*)*?,p=(?P<proof>[A-Za-z0-9+/=]+)"
)


def decode_sasl_name(name: str) -> str:
    return name.replace("=2C", ",").replace("=3D", "=")


def encode_sasl_name(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


CredentialLookup = Callable[[str, ScramMechanism], ScramCredential | None]


class ScramServer:
    """One exchange. `lookup(username, mechanism)` gives the stored credential or None."""

    credential_expiry_ms = None

    def __init__(self, mechanism: ScramMechanism, lookup: CredentialLookup, nonce: str | None = None) -> None:
        self.mechanism = mechanism.name
        self._scram = mechanism
        self._lookup = lookup
        self._server_nonce = _random_nonce() if nonce is None else nonce
        self._state = "first"
        self._username = ""
        self._credential: ScramCredential | None = None
        self._client_first_bare = ""
        self._server_first = ""
        self._gs2_header = ""
        self._nonce = ""

    @property
    def complete(self) -> bool:
        return self._state == "complete"

    @property
    def authorization_id(self) -> str:
        if not self.complete:
            raise RuntimeError("Authentication exchange has not completed")
        return self._username

    def evaluate(self, token: bytes) -> bytes:
        if self._state == "first":
            return self._client_first(token)
        if self._state == "final":
            return self._client_final(token)
        raise InvalidSaslMessage(f"Unexpected challenge in Sasl server state {self._state}")

    def _client_first(self, token: bytes) -> bytes:
        match = _CLIENT_FIRST.fullmatch(_text(token))
        if match is None:
            raise InvalidSaslMessage("Invalid SCRAM client first message format")
        extensions = dict(item.split("=", 1) for item in match["extensions"].split(",") if item)
        if extensions.get("tokenauth", "false").lower() == "true":
            raise InvalidSaslMessage("Token Authentication failed: logway has no delegation tokens")
        username = decode_sasl_name(match["name"])
        credential = self._lookup(username, self._scram)
        if credential is None:
            raise InvalidSaslMessage("Authentication failed: Invalid user credentials")
        authzid = match["authzid"]
        if authzid is not None and decode_sasl_name(authzid) != username:
            raise AuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        if credential.iterations < MIN_ITERATIONS:
            raise InvalidSaslMessage(
                f"Iterations {credential.iterations} is less than the minimum {MIN_ITERATIONS} for {self.mechanism}"
            )
        self._username = username
        self._credential = credential
        self._gs2_header = _text(token)[: match.start("bare")]
        self._client_first_bare = match["bare"]
        self._nonce = match["nonce"] + self._server_nonce
        self._server_first = (
            f"r={self._nonce},s={base64.b64encode(credential.salt).decode()},i={credential.iterations}"
        )
        self._state = "final"
        return self._server_first.encode()

    def _client_final(self, token: bytes) -> bytes:
        text = _text(token)
        match = _CLIENT_FINAL.fullmatch(text)
        if match is None:
            raise InvalidSaslMessage("Authentication failed: Invalid client final message")
        # Kafka checks only that the nonce ends with the server-first one: librdkafka before
        # 2.1 (Debian's kcat) sends its own nonce in front of the combined one.
        if not match["nonce"].endswith(self._nonce):
            raise InvalidSaslMessage("Invalid client nonce in the final client message.")
        if match["channel"] != base64.b64encode(self._gs2_header.encode()).decode():
            raise InvalidSaslMessage("Invalid channel binding in the final client message")
        without_proof = text[: text.rindex(",p=")]
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        credential = self._credential
        assert credential is not None
        try:
            proof = base64.b64decode(match["proof"], validate=True)
        except ValueError:
            raise InvalidSaslMessage("Invalid client credentials") from None
        client_signature = self._scram.hmac(credential.stored_key, auth_message)
        if len(proof) != len(client_signature):
            raise InvalidSaslMessage("Invalid client credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature))
        if not hmac.compare_digest(self._scram.hash(client_key), credential.stored_key):
            raise InvalidSaslMessage("Invalid client credentials")
        server_signature = self._scram.hmac(credential.server_key, auth_message)
        self._state = "complete"
        return b"v=" + base64.b64encode(server_signature)


def _random_nonce() -> str:
    """Letters and digits, as Kafka's ScramFormatter.secureRandomString makes them (130 random
    bits in base 36)."""
    value = secrets.randbits(130)
    digits = []
    while value:
        value, digit = divmod(value, 36)
        digits.append("0123456789abcdefghijklmnopqrstuvwxyz"[digit])
    return "".join(digits) or "0"


def _text(token: bytes) -> str:
    try:
        return token.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidSaslMessage("SCRAM message is not UTF-8") from None


class ScramClient:
    """The client side, for inter-broker connections (and tests)."""

    def __init__(self, mechanism: ScramMechanism, username: str, password: str, nonce: str | None = None) -> None:
        self._scram = mechanism
        self._username = username
        self._password = password
        self._nonce = _random_nonce() if nonce is None else nonce
        self._client_first_bare = f"n={encode_sasl_name(username)},r={self._nonce}"
        self._server_signature = b""

    def first_message(self) -> bytes:
        return f"n,,{self._client_first_bare}".encode()

    def final_message(self, server_first: bytes) -> bytes:
        fields = dict(item.split("=", 1) for item in server_first.decode().split(","))
        nonce, salt, iterations = fields["r"], base64.b64decode(fields["s"]), int(fields["i"])
        if not nonce.startswith(self._nonce):
            raise InvalidSaslMessage("server nonce does not extend the client's")
        if iterations < MIN_ITERATIONS:
            raise InvalidSaslMessage(f"server asks for {iterations} iterations, fewer than {MIN_ITERATIONS}")
        salted = salted_password(self._scram, self._password, salt, iterations)
        client_key = self._scram.hmac(salted, b"Client Key")
        without_proof = f"c={base64.b64encode(b'n,,').decode()},r={nonce}"
        auth_message = f"{self._client_first_bare},{server_first.decode()},{without_proof}".encode()
        signature = self._scram.hmac(self._scram.hash(client_key), auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        self._server_signature = self._scram.hmac(self._scram.hmac(salted, b"Server Key"), auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify_server_final(self, server_final: bytes) -> None:
        if server_final != b"v=" + base64.b64encode(self._server_signature):
            raise InvalidSaslMessage("the server's signature does not match: it does not know the credential")
