"""HTTP basic authentication against the broker's SASL users (http.authentication.method=BASIC).

A user/password pair is accepted when a SASL mechanism of the broker would accept it: a SCRAM
exchange with the stored credentials (SCRAM-SHA-256, then SCRAM-SHA-512; the client side is
played in-process with the given password, so the check is the SCRAM server's own), or a PLAIN
user of a SASL listener's JAAS entry. The principal is User:<name>, as a SASL connection's.
A successful check is remembered (a digest of the password, with the credential it matched) so
that each request does not cost a PBKDF2; a changed credential invalidates it.
"""

import base64
import hashlib
import hmac
from typing import TYPE_CHECKING

from broker.security import plain, scram
from broker.security.mechanism import AuthenticationFailed, InvalidSaslMessage
from broker.session import KafkaPrincipal

if TYPE_CHECKING:
    from broker.server import Broker


class BasicAuthenticator:
    def __init__(self, broker: "Broker") -> None:
        self._broker = broker
        self._remembered: dict[str, tuple[bytes, object]] = {}

    def principal(self, authorization: str | None) -> KafkaPrincipal | None:
        """The principal of an `Authorization: Basic ...` header; None when absent or wrong."""
        if not authorization or not authorization.startswith("Basic "):
            return None
        try:
            user, colon, password = base64.b64decode(authorization[6:], validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return None
        if not colon or not user:
            return None
        return KafkaPrincipal("User", user) if self._check(user, password) else None

    def _check(self, user: str, password: str) -> bool:
        digest = hashlib.sha256(password.encode()).digest()
        for mechanism in scram.MECHANISMS.values():
            credential = self._broker.scram_credentials.lookup(user, mechanism)
            if credential is None:
                continue
            remembered = self._remembered.get(user)
            if remembered is not None and remembered[1] is credential:
                return hmac.compare_digest(remembered[0], digest)
            if _scram_accepts(mechanism, self._broker.scram_credentials.lookup, user, password):
                self._remembered[user] = (digest, credential)
                return True
            return False
        for users in _plain_users(self._broker):
            if user in users:
                return hmac.compare_digest(users[user].encode(), password.encode())
        return False


def _scram_accepts(mechanism: scram.ScramMechanism, lookup, user: str, password: str) -> bool:
    client = scram.ScramClient(mechanism, user, password)
    server = scram.ScramServer(mechanism, lookup)
    try:
        server_first = server.evaluate(client.first_message())
        server.evaluate(client.final_message(server_first))
    except (AuthenticationFailed, InvalidSaslMessage, ValueError):
        return False
    return server.complete


def _plain_users(broker: "Broker"):
    config = broker.config
    for listener in config.listeners:
        settings = config.sasl_listener(listener.name)
        if settings is not None and "PLAIN" in settings.mechanisms:
            yield plain.users_from_jaas_options(settings.jaas["PLAIN"].options)
