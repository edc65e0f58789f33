"""Kafka requests made in-process: how the HTTP API produces, fetches and joins groups.

An HTTP request becomes Kafka requests (Produce, Fetch, JoinGroup ...) encoded as a client
would encode them and handed to the broker's Dispatcher, as a connection hands it a frame: the
same parsing, authorization (the HTTP user's principal), quotas, request metrics and handlers
as the Kafka protocol, and no second implementation of any of them. The response frame is
decoded as a client would decode it.
"""

import asyncio
import inspect
from typing import TYPE_CHECKING, Any

from protocol import schemas
from protocol.headers import encode_request_header
from protocol.primitives import INT32
from replication.broker_client import decode_response
from storage.records_file import FileRegion

from broker.session import ANONYMOUS, KafkaPrincipal, Session

if TYPE_CHECKING:
    from broker.dispatch import Dispatcher

CLIENT_ID = "logway-http"
HTTP_LISTENER = "HTTP"


class Loopback:
    def __init__(self, dispatcher: "Dispatcher") -> None:
        self._dispatcher = dispatcher
        self._correlation_id = 0

    async def send(
        self, api_key: int, version: int, request: Any, principal: KafkaPrincipal = ANONYMOUS,
        client_address: str = "127.0.0.1:0",
    ) -> Any:
        """The decoded response to `request`, or None for a request answered with nothing
        (Produce with acks=0)."""
        self._correlation_id = (self._correlation_id + 1) & 0x7FFFFFFF
        flexible = schemas.is_flexible(api_key, version)
        header = encode_request_header(api_key, version, self._correlation_id, CLIENT_ID, flexible)
        body = schemas.encode(schemas.adapt(request, schemas.request_type(api_key, version)))
        # Writable, as a connection's receive buffer is: Produce sets offsets in place.
        frame = memoryview(bytearray(header + body))
        session = Session(client_address, HTTP_LISTENER, principal=principal)
        chunks = self._dispatcher.dispatch(frame, session)
        if inspect.isawaitable(chunks):
            chunks = await chunks
        if session.send_timer is not None:
            session.send_timer.sent(0.0)
        if chunks is None:
            return None
        # Fetched records come as file regions (a connection sends them with sendfile): read on
        # a thread, as the log's other disk reads are, not on the loop.
        data = b"".join([
            await asyncio.to_thread(chunk.read) if isinstance(chunk, FileRegion) else bytes(chunk) for chunk in chunks
        ])
        return decode_response(api_key, version, memoryview(data)[INT32.size :])
