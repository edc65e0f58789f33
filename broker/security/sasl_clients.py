"""The client side of SASL for this broker's own connections to other brokers (followers'
fetches, the controller's requests, transaction markers, controlled shutdown): the mechanism
sasl.mechanism.inter.broker.protocol names, logging in with the username and password of the
inter-broker listener's JAAS entry, as Kafka's brokers do. replication/broker_client.py runs
the exchange; `client_factory` makes one fresh exchange per connection."""

from collections.abc import Callable

from broker.security import scram
from broker.security.sasl_config import InterBrokerSasl


class PlainClient:
    mechanism = "PLAIN"

    def __init__(self, username: str, password: str) -> None:
        self._token = f"\0{username}\0{password}".encode()

    def first_token(self) -> bytes:
        return self._token

    def next_token(self, challenge: bytes) -> bytes | None:
        return None


class ScramExchange:
    def __init__(self, mechanism: scram.ScramMechanism, username: str, password: str) -> None:
        self.mechanism = mechanism.name
        self._client = scram.ScramClient(mechanism, username, password)
        self._step = 0

    def first_token(self) -> bytes:
        return self._client.first_message()

    def next_token(self, challenge: bytes) -> bytes | None:
        self._step += 1
        if self._step == 1:
            return self._client.final_message(challenge)
        self._client.verify_server_final(challenge)
        return None


def client_factory(login: InterBrokerSasl) -> Callable[[], PlainClient | ScramExchange]:
    if login.mechanism == "PLAIN":
        return lambda: PlainClient(login.username, login.password)
    mechanism = scram.MECHANISMS[login.mechanism]
    return lambda: ScramExchange(mechanism, login.username, login.password)
