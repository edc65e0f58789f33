"""Where the Kafka requests of the HTTP API go: this broker, or the broker that serves them.

The HTTP listener of every broker serves the whole cluster, as the REST Proxy (a client of the
whole cluster) does. A request for partitions goes to their leader, a group request to the
group's coordinator, both as this broker's metadata cache knows them (the controller keeps it
current; FindCoordinator answers from it too). When that is this broker, the request goes
through the loopback (broker/http/loopback.py); otherwise, in an Envelope carrying the HTTP
user's principal (broker/handlers/envelope.py: Kafka's way of forwarding a client's request),
over the inter-broker client (replication.broker_client.BrokerClients, on the inter-broker
listener, as the controller and the transaction markers reach other brokers) to that broker's
own handlers, which authorize it as the HTTP user. Standalone, every request is local.

Callers follow leadership moves: an answer of NOT_LEADER_OR_FOLLOWER, NOT_COORDINATOR ... or a
request without an answer (`Unanswered`) is retried after RETRY_BACKOFF_S, with the metadata the
cache has by then, until a bound (the producer's delivery.timeout.ms, the consumer's
request.timeout.ms).
"""

import datetime
from typing import TYPE_CHECKING, Any

from kio.schema.envelope.v0.request import EnvelopeRequest
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from replication.broker_client import BrokerClientError, BrokerClients, BrokerRequestTimeoutError, decode_response
from storage.topic_partition import TopicPartition

from broker.handlers.envelope import encode_address, encode_principal
from broker.http.errors import kafka_error
from broker.http.loopback import CLIENT_ADDRESS, CLIENT_ID, Loopback
from broker.session import KafkaPrincipal

if TYPE_CHECKING:
    from broker.server import Broker

RETRY_BACKOFF_S = 0.1  # the Java clients' retry.backoff.ms
# The producer's and the consumer's request.timeout.ms: the longest wait for one answer.
REQUEST_TIMEOUT = datetime.timedelta(seconds=30)
GROUP_KEY_TYPE = 0
ENVELOPE_VERSION = 0
# Answers that mean: ask again, the leader or coordinator may have moved (Kafka's retriable
# errors for these requests).
RETRIABLE = frozenset({
    ErrorCode.not_leader_or_follower,
    ErrorCode.leader_not_available,
    ErrorCode.request_timed_out,
    ErrorCode.network_exception,
    ErrorCode.not_coordinator,
    ErrorCode.coordinator_not_available,
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.offset_not_available,  # ListOffsets from a leader whose HW lags its epoch's start
})


class Unanswered(Exception):
    """A request sent to another broker got no answer (connection lost, timed out, broker gone):
    it may or may not have been served."""

    def __init__(self, broker_id: int, cause: Exception) -> None:
        super().__init__(f"broker {broker_id}: {cause}")
        self.broker_id = broker_id
        timed_out = isinstance(cause, BrokerRequestTimeoutError)
        self.error = ErrorCode.request_timed_out if timed_out else ErrorCode.network_exception


class Router:
    def __init__(self, broker: "Broker", loopback: Loopback) -> None:
        self._broker = broker
        self.loopback = loopback

    @property
    def broker_id(self) -> int:
        return self._broker.broker_id

    @property
    def forwards(self) -> bool:
        """Whether requests for other brokers are sent to them (a cluster)."""
        return self._broker.cluster is not None

    def clients(self, purpose: str, request_timeout_s: float) -> BrokerClients | None:
        """A pool of connections to the other brokers (None when nothing is forwarded); each
        user (the producer, each consumer instance, as each Java client has its own) has its
        own, so a long poll of one does not hold up the answers of another."""
        if not self.forwards:
            return None
        broker = self._broker
        return BrokerClients(
            broker.metadata_cache, broker.cluster.inter_broker_listener, f"{CLIENT_ID}-{purpose}",
            request_timeout_s, broker.inter_broker_ssl_context, sasl=broker.inter_broker_sasl,
        )

    def leader(self, topic: str, partition: int) -> int | None:
        """The broker to send the partition's requests to: its leader as the metadata cache
        knows it (this broker when nothing is forwarded; None when it has no live leader)."""
        if not self.forwards:
            return self.broker_id
        return self._broker.metadata_cache.leader_of(TopicPartition(topic, partition))

    async def coordinator(self, group: str, principal: KafkaPrincipal) -> tuple[ErrorCode, int]:
        """(error, broker id) of the group's coordinator, by this broker's FindCoordinator."""
        answer = await self.loopback.send(
            ApiKey.FIND_COORDINATOR, 3, FindCoordinatorRequest(key=group, key_type=GROUP_KEY_TYPE), principal
        )
        if answer.error_code != ErrorCode.none:
            return ErrorCode(answer.error_code), -1
        return ErrorCode.none, answer.node_id

    async def send(
        self, broker_id: int, api_key: int, version: int, request: Any, principal: KafkaPrincipal,
        clients: BrokerClients | None,
    ) -> Any:
        """`request` served by `broker_id` as `principal`; Unanswered when another broker gave
        no answer."""
        if broker_id == self.broker_id or clients is None:
            return await self.loopback.send(api_key, version, request, principal)
        envelope = EnvelopeRequest(
            request_data=self.loopback.frame(api_key, version, request),
            request_principal=encode_principal(principal),
            client_host_address=encode_address(CLIENT_ADDRESS.rpartition(":")[0]),
        )
        try:
            answer = await clients.send_to(broker_id, ApiKey.ENVELOPE, ENVELOPE_VERSION, envelope)
        except BrokerClientError as exc:
            raise Unanswered(broker_id, exc) from exc
        if answer.error_code != ErrorCode.none or answer.response_data is None:
            raise kafka_error(answer.error_code or ErrorCode.unknown_server_error)
        return decode_response(api_key, version, memoryview(answer.response_data))
