"""What every SASL mechanism's server side offers, and its two kinds of failure.

Kafka keeps two failures apart, and so does logway:
- `AuthenticationFailed` (Kafka's SaslAuthenticationException): its message is what the client
  is told, e.g. "Authentication failed: Invalid username or password".
- `InvalidSaslMessage` (Kafka's SaslException): the detail may say whether a user exists, so
  the client is told only "Authentication failed during authentication due to invalid
  credentials with SASL mechanism <mechanism>"; the detail is logged at debug level.
"""

from typing import Protocol


class AuthenticationFailed(Exception):
    """The exchange failed; str(self) goes to the client."""


class InvalidSaslMessage(Exception):
    """The exchange failed; the client gets Kafka's generic message, not this one."""


class SaslServer(Protocol):
    mechanism: str

    def evaluate(self, token: bytes) -> bytes:
        """The answer to the client's next token; raises one of the failures above."""

    @property
    def complete(self) -> bool:
        """Whether the exchange has succeeded."""

    @property
    def authorization_id(self) -> str:
        """The authenticated name (once complete): the principal is User:<it>."""

    @property
    def credential_expiry_ms(self) -> int | None:
        """When the credential expires (epoch ms), for mechanisms whose credentials do
        (OAUTHBEARER tokens); None otherwise."""
