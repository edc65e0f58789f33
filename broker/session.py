"""What the broker knows of the peer at the other end of one connection.

A Session is made when a connection is accepted and lives as long as it does. The listener
fixes the security protocol; the principal starts as User:ANONYMOUS and is what authorization
(issue 15) decides on: a TLS client certificate's mapped subject or an authenticated SASL name
replaces it. Handlers read it through RequestContext.session; only the connection's security
layer (TLS handshake, SASL exchange) writes it, on the event loop.
"""

from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from broker.security.sasl_server import SaslAuthenticator


class KafkaPrincipal(NamedTuple):
    """Kafka's principal: a type (always "User" for the built-in builders) and a name."""

    type: str
    name: str

    def __str__(self) -> str:
        return f"{self.type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> "KafkaPrincipal":
        """"User:alice" -> KafkaPrincipal("User", "alice"); the name may hold colons."""
        principal_type, colon, name = text.partition(":")
        if not colon or not principal_type or not name:
            raise ValueError(f"expected a principal of the form <type>:<name>, got {text!r}")
        return cls(principal_type, name)


ANONYMOUS: Final = KafkaPrincipal("User", "ANONYMOUS")


@dataclass(slots=True, init=False)  # compiled (setup.py): its own __init__, called directly
class Session:
    client_address: str  # "host:port" as the socket gave it
    listener: str  # the name of the listener the connection came in on
    security_protocol: str
    # The advertised listener whose endpoints Metadata, DescribeCluster and FindCoordinator
    # answer with; None: the broker's client listener (a connection on a listener that is not
    # advertised).
    advertised_listener: str | None
    principal: KafkaPrincipal
    # On a SASL_PLAINTEXT or SASL_SSL listener: the connection's SASL exchange and session
    # (broker/security/sasl_server.py), which gates the requests served; None on the others.
    sasl: SaslAuthenticator | None
    # When the request being served was read whole (loop time), set by the connection before
    # dispatching it: the request metrics' queue time.
    received_at: float
    # The response just made, for the request metrics' send and total times: set by the
    # dispatcher, taken by the connection when it queues the response (broker.metrics.stats).
    send_timer: Any

    def __init__(
        self,
        client_address: str,
        listener: str,
        security_protocol: str = "PLAINTEXT",
        advertised_listener: str | None = None,
        principal: KafkaPrincipal = ANONYMOUS,
        sasl: SaslAuthenticator | None = None,
        received_at: float = 0.0,
        send_timer: Any = None,
    ) -> None:
        self.client_address = client_address
        self.listener = listener
        self.security_protocol = security_protocol
        self.advertised_listener = advertised_listener
        self.principal = principal
        self.sasl = sasl
        self.received_at = received_at
        self.send_timer = send_timer

    @property
    def client_host(self) -> str:
        """The client's address without its port."""
        host, _, _port = self.client_address.rpartition(":")
        return host
