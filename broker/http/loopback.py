"""Kafka requests made in-process: how the HTTP API produces, fetches and joins groups.

An HTTP request becomes Kafka requests (Produce, Fetch, JoinGroup ...) encoded as a client
would encode them and handed to the broker's Dispatcher, as a connection hands it a frame: the
same parsing, authorization (the HTTP user's principal), quotas, request metrics and handlers
as the Kafka protocol, and no second implementation of any of them. The response frame is
decoded as a client would decode it. The same frames go to other brokers in Envelopes
(broker/http/routing.py).
"""

from typing import TYPE_CHECKING, Any

from protocol import schemas
from protocol.headers import encode_request_header
from replication.broker_client import decode_response

from broker.session import ANONYMOUS, KafkaPrincipal, Session

if TYPE_CHECKING:
    from broker.dispatch import Dispatcher

CLIENT_ID = "logway-http"
HTTP_LISTENER = "HTTP"
CLIENT_ADDRESS = "127.0.0.1:0"


class Loopback:
    def __init__(self, dispatcher: "Dispatcher") -> None:
        self._dispatcher = dispatcher
        self._correlation_id = 0

    def frame(self, api_key: int, version: int, request: Any) -> bytes:
        """`request` as a client sends it (header and body, without the size)."""
        self._correlation_id = (self._correlation_id + 1) & 0x7FFFFFFF
        flexible = schemas.is_flexible(api_key, version)
        header = encode_request_header(api_key, version, self._correlation_id, CLIENT_ID, flexible)
        return header + schemas.encode(schemas.adapt(request, schemas.request_type(api_key, version)))

    async def send(
        self, api_key: int, version: int, request: Any, principal: KafkaPrincipal = ANONYMOUS,
        client_address: str = CLIENT_ADDRESS,
    ) -> Any:
        """The decoded response to `request`, or None for a request answered with nothing
        (Produce with acks=0)."""
        # Writable, as a connection's receive buffer is: Produce sets offsets in place.
        frame = memoryview(bytearray(self.frame(api_key, version, request)))
        response = await self._dispatcher.serve(frame, Session(client_address, HTTP_LISTENER, principal=principal))
        return None if response is None else decode_response(api_key, version, memoryview(response))
