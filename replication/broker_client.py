"""A client of another broker: Kafka requests over one connection, as followers and the
controller send them.

    client = BrokerClient("10.0.0.2", 9092, "broker-1-fetcher", connect_timeout_s=10, request_timeout_s=30)
    response = await client.send(ApiKey.FETCH, 12, FetchRequest(...))
    await client.close()

`send` encodes the request (header v1, or v2 for flexible versions; bodies of kio entities or
protocol/legacy.py declarations, adapted to the version sent), writes it at once and waits for
the response with the same correlation id: several sends may be in flight on the connection
(pipelining), and the broker answers them in order. A follower's Fetch comes as
protocol.fetch's FetchRequest, encoded by hand (v12 only). Responses are decoded as the entity of the
version sent; Fetch responses with protocol.fetch's decoder, so each partition's records are a
memoryview slice of the received frame (the frame buffer is never reused while a slice of it
lives).

Failures raise `BrokerClientError`: `BrokerConnectionError` when the connection cannot be made or
is lost (every request in flight on it fails), `BrokerRequestTimeoutError` when a response takes
longer than request_timeout_s; a timeout closes the connection, as Kafka's NetworkClient does,
since later responses on it could not be matched any more. The next `send` connects again.
A TLS handshake failure (an untrusted certificate) is a BrokerConnectionError too.

With `sasl` (the inter-broker listener is SASL_PLAINTEXT or SASL_SSL), each new connection
authenticates before its first request: SaslHandshake v1 with the mechanism, then
SaslAuthenticate v2 with the tokens of a fresh `SaslClient` the factory makes (the broker builds
it from broker/security: replication does not know the mechanisms). A failed authentication
is a BrokerConnectionError. When the broker answered a session lifetime (KIP-368), a connection
whose session is past 90% of it is replaced by a newly authenticated one before the next
request, while none is in flight on it, rather than re-authenticated in place.

Not thread-safe: used from the event loop.
"""

import asyncio
import itertools
import logging
import ssl
import time
from collections.abc import Callable
from typing import Any, Protocol

from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from protocol import schemas
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, ProtocolError
from protocol.fetch import FetchRequest, decode_fetch_response, encode_fetch_request_v12
from protocol.framing import FrameReader
from protocol.headers import encode_request_header, parse_response_header, response_header_is_flexible
from protocol.primitives import INT32

log = logging.getLogger(__name__)

MAX_RESPONSE_BYTES = 1 << 30


class BrokerClientError(Exception):
    """A request to another broker failed without an answer."""


class BrokerConnectionError(BrokerClientError):
    pass


class BrokerRequestTimeoutError(BrokerClientError):
    pass


class SaslClient(Protocol):
    """The client side of one SASL exchange."""

    mechanism: str

    def first_token(self) -> bytes:
        """The first token the client sends."""

    def next_token(self, challenge: bytes) -> bytes | None:
        """The answer to the server's token, or None once the exchange is done (raising when the
        server's last token is wrong)."""


SaslClientFactory = Callable[[], SaslClient]
SASL_HANDSHAKE_VERSION = 1
SASL_AUTHENTICATE_VERSION = 2
_REAUTH_AT = 0.9  # of the session lifetime


class _Pending:
    __slots__ = ("api_key", "version", "future")

    def __init__(self, api_key: int, version: int, future: asyncio.Future) -> None:
        self.api_key, self.version, self.future = api_key, version, future


class _ResponseProtocol(asyncio.BufferedProtocol):
    """Receives straight into a FrameReader's buffer and hands each response frame over."""

    def __init__(self, on_frame, on_lost) -> None:
        self._frames = FrameReader(MAX_RESPONSE_BYTES)
        self._on_frame = on_frame
        self._on_lost = on_lost

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._frames.writable()

    def buffer_updated(self, nbytes: int) -> None:
        # Frames are never released: a frame's records may be kept (a follower appends them),
        # so its buffer is left to the garbage collector once no slice of it is alive.
        try:
            frames = self._frames.received(nbytes)
        except ProtocolError as exc:
            self._on_lost(BrokerConnectionError(f"unreadable response: {exc}"))
            return
        for frame in frames:
            self._on_frame(frame)

    def connection_lost(self, exc: Exception | None) -> None:
        self._on_lost(BrokerConnectionError(f"connection lost: {exc or 'closed by the broker'}"))


def _encode_body(api_key: int, version: int, request: Any) -> bytes:
    if isinstance(request, FetchRequest):
        if api_key != ApiKey.FETCH or version != 12:
            raise ValueError(f"a hand-built Fetch request goes as Fetch v12, not {ApiKey(api_key).name} v{version}")
        return encode_fetch_request_v12(request)
    return schemas.encode(schemas.adapt(request, schemas.request_type(api_key, version)))


def _time_out(future: asyncio.Future) -> None:
    """A request's time is up: its wait ends with TimeoutError unless its answer came."""
    if not future.done():
        future.set_exception(TimeoutError())


class BrokerClient:
    def __init__(
        self,
        host: str,
        port: int,
        client_id: str,
        connect_timeout_s: float = 10.0,
        request_timeout_s: float = 30.0,
        ssl_context: ssl.SSLContext | None = None,
        sasl: SaslClientFactory | None = None,
    ) -> None:
        """`ssl_context`: connect over TLS with it (the broker's inter-broker listener is SSL);
        the host name is checked when the context says so (check_hostname)."""
        self.host, self.port = host, port
        self.ssl_context = ssl_context
        self._sasl = sasl
        self._session_renewal_at: float | None = None  # monotonic time to re-authenticate
        self.client_id = client_id
        self.connect_timeout_s = connect_timeout_s
        self.request_timeout_s = request_timeout_s
        self._transport: asyncio.Transport | None = None
        self._connecting: asyncio.Lock = asyncio.Lock()
        self._pending: dict[int, _Pending] = {}
        self._correlation_ids = itertools.count(1)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def send(self, api_key: int, version: int, request: Any) -> Any:
        """The decoded response to `request` sent as `version` of `api_key`."""
        return await self._request(await self._connected(), api_key, version, request)

    async def _request(self, transport: asyncio.Transport, api_key: int, version: int, request: Any) -> Any:
        correlation_id = next(self._correlation_ids) & 0x7FFFFFFF
        flexible = schemas.is_flexible(api_key, version)
        header = encode_request_header(api_key, version, correlation_id, self.client_id, flexible)
        body = _encode_body(api_key, version, request)
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        timer: asyncio.TimerHandle | None = None
        try:
            self._write(transport, INT32.pack(len(header) + len(body)) + header + body)
            # Pending only once written (no answer can come before the loop runs again), so a
            # failed write leaves no future behind.
            self._pending[correlation_id] = _Pending(api_key, version, future)
            # A timer of its own rather than asyncio.wait_for, which wraps the wait in a second
            # future and callbacks: a few microseconds a request, and a follower sends one or
            # two a record at acks=all.
            timer = loop.call_later(self.request_timeout_s, _time_out, future)
            return await future
        except TimeoutError:
            timeout = BrokerRequestTimeoutError(
                f"{ApiKey(api_key).name} to {self.address} had no answer in {self.request_timeout_s}s"
            )
            self._disconnect(transport, timeout)
            raise timeout from None
        finally:
            if timer is not None:
                timer.cancel()
            self._pending.pop(correlation_id, None)

    def _write(self, transport: asyncio.Transport, frame: bytes) -> None:
        try:
            transport.write(frame)
        except RuntimeError as exc:  # uvloop: the connection closed before its loss was reported
            lost = BrokerConnectionError(f"connection to {self.address} lost: {exc}")
            self._disconnect(transport, lost)
            raise lost from exc

    async def close(self) -> None:
        if self._transport is not None:
            self._disconnect(self._transport, BrokerConnectionError(f"client to {self.address} closed"))

    async def _connected(self) -> asyncio.Transport:
        async with self._connecting:
            if self._transport is not None and self._session_renewal_at is not None:
                if time.monotonic() >= self._session_renewal_at and not self._pending:
                    self._disconnect(self._transport, BrokerConnectionError("SASL session renewed"))
            if self._transport is not None and not self._transport.is_closing():
                return self._transport
            loop = asyncio.get_running_loop()
            holder: list[asyncio.Transport] = []
            try:
                transport, _protocol = await asyncio.wait_for(
                    loop.create_connection(
                        lambda: _ResponseProtocol(self._on_frame, lambda exc: self._on_lost(holder, exc)),
                        self.host,
                        self.port,
                        ssl=self.ssl_context,
                        server_hostname=self.host if self.ssl_context is not None else None,
                        ssl_handshake_timeout=self.connect_timeout_s if self.ssl_context is not None else None,
                    ),
                    self.connect_timeout_s,
                )
            except (OSError, TimeoutError) as exc:
                raise BrokerConnectionError(f"cannot connect to {self.address}: {exc or 'timed out'}") from exc
            holder.append(transport)
            self._transport = transport
            self._session_renewal_at = None
            if self._sasl is not None:
                await self._authenticate(transport)
            return transport

    async def _authenticate(self, transport: asyncio.Transport) -> None:
        client = self._sasl()
        handshake = await self._request(
            transport, ApiKey.SASL_HANDSHAKE, SASL_HANDSHAKE_VERSION, SaslHandshakeRequest(mechanism=client.mechanism)
        )
        if handshake.error_code != ErrorCode.none:
            self._fail_authentication(
                transport, f"SaslHandshake {client.mechanism}: {ErrorCode(handshake.error_code).name}, "
                f"enabled: {', '.join(handshake.mechanisms)}"
            )
        token: bytes | None = client.first_token()
        while token is not None:
            answer = await self._request(
                transport, ApiKey.SASL_AUTHENTICATE, SASL_AUTHENTICATE_VERSION, SaslAuthenticateRequest(auth_bytes=token)
            )
            if answer.error_code != ErrorCode.none:
                self._fail_authentication(transport, answer.error_message or ErrorCode(answer.error_code).name)
            try:
                token = client.next_token(answer.auth_bytes)
            except Exception as exc:  # noqa: BLE001 - the mechanism refused the server's answer
                self._fail_authentication(transport, str(exc))
        lifetime_ms = answer.session_lifetime.total_seconds() * 1000
        if lifetime_ms > 0:
            self._session_renewal_at = time.monotonic() + lifetime_ms * _REAUTH_AT / 1000

    def _fail_authentication(self, transport: asyncio.Transport, reason: str) -> None:
        failure = BrokerConnectionError(f"SASL authentication to {self.address} failed: {reason}")
        self._disconnect(transport, failure)
        raise failure

    def _on_frame(self, frame: memoryview) -> None:
        try:
            correlation_id, _ = parse_response_header(frame, False)
        except ProtocolError:
            return
        pending = self._pending.pop(correlation_id, None)
        if pending is None or pending.future.done():
            return  # the request timed out meanwhile
        try:
            response = decode_response(pending.api_key, pending.version, frame)
        except ProtocolError as exc:
            pending.future.set_exception(BrokerConnectionError(f"malformed response from {self.address}: {exc}"))
        else:
            pending.future.set_result(response)

    def _on_lost(self, holder: list[asyncio.Transport], exc: BrokerClientError) -> None:
        if holder:
            self._disconnect(holder[0], exc)

    def _disconnect(self, transport: asyncio.Transport, exc: BrokerClientError) -> None:
        """Close `transport` and fail every request in flight on it."""
        transport.abort()
        if self._transport is not transport:
            return
        self._transport = None
        pending, self._pending = self._pending, {}
        for request in pending.values():
            if not request.future.done():
                request.future.set_exception(exc)


class Endpoints(Protocol):
    """Where live brokers listen (the broker's metadata cache)."""

    def endpoint(self, broker_id: int, listener_name: str | None = None) -> tuple[str, int] | None:
        """(host, port) of the live broker on the listener, or None."""


class BrokerClients:
    """One BrokerClient per broker, found by broker id on one listener (the inter-broker
    listener) in `endpoints`, and connected again when the broker's endpoint changes.

    `send_to` raises BrokerConnectionError for a broker that is not alive or lacks the
    listener. Not thread-safe: used from the event loop."""

    def __init__(
        self,
        endpoints: Endpoints,
        listener_name: str,
        client_id: str,
        request_timeout_s: float,
        ssl_context: ssl.SSLContext | None = None,
        sasl: SaslClientFactory | None = None,
    ) -> None:
        self._endpoints = endpoints
        self._listener_name = listener_name
        self._client_id = client_id
        self._request_timeout_s = request_timeout_s
        self._ssl_context = ssl_context
        self._sasl = sasl
        self._clients: dict[int, tuple[tuple[str, int], BrokerClient]] = {}

    async def send_to(self, broker_id: int, api_key: int, version: int, request: Any) -> Any:
        return await self.client(broker_id).send(api_key, version, request)

    def client(self, broker_id: int) -> BrokerClient:
        endpoint = self._endpoints.endpoint(broker_id, self._listener_name)
        if endpoint is None:
            raise BrokerConnectionError(f"broker {broker_id} has no {self._listener_name} endpoint")
        known = self._clients.get(broker_id)
        if known is not None and known[0] == endpoint:
            return known[1]
        if known is not None:
            asyncio.get_running_loop().create_task(known[1].close())
        client = BrokerClient(
            endpoint[0], endpoint[1], self._client_id,
            connect_timeout_s=self._request_timeout_s, request_timeout_s=self._request_timeout_s,
            ssl_context=self._ssl_context, sasl=self._sasl,
        )
        self._clients[broker_id] = (endpoint, client)
        return client

    async def close(self) -> None:
        clients = [client for _, client in self._clients.values()]
        self._clients.clear()
        await asyncio.gather(*(client.close() for client in clients))


def decode_response(api_key: int, version: int, frame: memoryview) -> Any:
    """A response frame (without its size) decoded as `version` of `api_key`'s response."""
    flexible = response_header_is_flexible(api_key, schemas.is_flexible(api_key, version))
    _, body_start = parse_response_header(frame, flexible)
    body = frame[body_start:]
    if api_key == ApiKey.FETCH:
        return decode_fetch_response(version, body)
    return schemas.decode(schemas.response_type(api_key, version), body)
