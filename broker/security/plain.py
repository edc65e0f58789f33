"""SASL/PLAIN (RFC 4616) as Kafka's PlainSaslServer serves it.

The client's one message is `authzid NUL username NUL password` (UTF-8). Users are the
`user_<name>="<password>"` options of the listener's PlainLoginModule JAAS entry, as Kafka's
PlainServerCallbackHandler reads them; passwords are compared in constant time. An
authorization id, when given, must be the username.
"""

import hmac
from collections.abc import Mapping

from broker.security.mechanism import AuthenticationFailed, InvalidSaslMessage

MECHANISM = "PLAIN"


def users_from_jaas_options(options: Mapping[str, str]) -> dict[str, str]:
    """{username: password} from the `user_<name>` options of a PlainLoginModule entry."""
    return {key[len("user_"):]: value for key, value in options.items() if key.startswith("user_")}


class PlainServer:
    mechanism = MECHANISM
    credential_expiry_ms = None

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users
        self._authorization_id: str | None = None

    @property
    def complete(self) -> bool:
        return self._authorization_id is not None

    @property
    def authorization_id(self) -> str:
        if self._authorization_id is None:
            raise RuntimeError("Authentication exchange has not completed")
        return self._authorization_id

    def evaluate(self, token: bytes) -> bytes:
        tokens = token.decode("utf-8", errors="replace").split("\0")
        if len(tokens) != 3:
            raise InvalidSaslMessage(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(tokens)}")
        authorization_id, username, password = tokens
        if not username:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise AuthenticationFailed("Authentication failed: password not specified")
        expected = self._users.get(username)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise AuthenticationFailed("Authentication failed: Invalid username or password")
        if authorization_id and authorization_id != username:
            raise AuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        self._authorization_id = username
        return b""
