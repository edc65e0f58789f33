"""From a request frame to the chunks of its response frame.

Steps: read the fixed header fields, find the API's handler, parse the rest of the header and the
body, call the handler, and encode what it returns with the response header of the client's
version. What cannot be parsed raises ProtocolError, which closes the connection, as Kafka does
for an unknown API key or an unsupported version of any API but ApiVersions. ApiVersions with a
version beyond ours is answered UNSUPPORTED_VERSION in the v0 layout, so the client can retry
with one we serve.

Client quotas (broker/security/throttling.py): once the response is ready, the request's bytes
and handler time are recorded against the client's quotas; a client over one gets its response
at once with throttle_time_ms set, as a ThrottledResponse that mutes the connection that long.
On a SASL listener the session's SaslAuthenticator (broker/security/sasl_server.py) decides
first whether a request is served: until authentication completes only ApiVersions,
SaslHandshake and SaslAuthenticate are; after SaslHandshake v0 frames are raw SASL tokens
(no request header) answered by raw tokens. A request refused in the middle of an exchange is
answered ILLEGAL_SASL_STATE, and a failed exchange's answer is the connection's last
(CloseAfterResponse).

A handler that fails unexpectedly (a bug) gets its request answered UNKNOWN_SERVER_ERROR, as
Kafka does: every error code of the response, for every entry the request named; the failure is
logged with its traceback and the connection stays open (a ProtocolError a handler raises,
for a request it finds malformed, still closes it). The exception is Produce with acks=0,
which has no response: its connection is closed, as Kafka closes it, so the producer notices.

The request log: each request answered (or left unanswered, as acks=0 Produce) gets one DEBUG
line on the kafka.request.logger logger (broker/logging_setup.py): API, version, correlation
id, client id, client address, principal, listener, latency from the frame's arrival to its
response being ready, and response size. When that logger is above DEBUG a request costs one
level check (cached by the logging module) and nothing is formatted.
"""

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, Final, cast

from protocol import schemas
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, ProtocolError
from protocol.fetch import FetchRequest
from protocol.headers import encode_response_header, parse_request_header, peek_request
from protocol.primitives import INT16, INT32
from storage.records_file import FileRegion

from broker.deferred import Deferred
from broker.handlers import HANDLERS
from broker.logging_setup import REQUEST_LOGGER
from broker.metrics.stats import RequestStats, SendTimer, request_name
from broker.handlers.sasl_handshake import answer_raw_token
from broker.responses import Chunks, CloseAfterResponse, ThrottledResponse
from broker.security.sasl_server import Admission
from broker.security import throttling
from broker.security.quotas import ClientQuotas
from broker.session import Session
from broker.handlers.registry import (
    NO_RESPONSE,
    ApiHandler,
    BrokerServices,
    EncodedResponse,
    RequestContext,
)

if TYPE_CHECKING:
    from broker.server import Broker

log: Final = logging.getLogger(__name__)
_request_log: Final = logging.getLogger(REQUEST_LOGGER)
# The request logger's answers to isEnabledFor, which logging keeps in the logger's `_cache` and
# empties whenever a level changes (setLevel, logging.disable). Asking the logger runs its
# method in the interpreter, twice a request; a cached False is read here instead. (An empty
# dict if a Python keeps no such cache: the logger is asked every time.)
_request_log_answers: Final[dict[int, bool]] = getattr(_request_log, "_cache", {})
_DEBUG: Final = logging.DEBUG

_SASL_APIS: Final = (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE)
# C integers, compared on every request (an attribute read on an enum class costs about 100 ns)
_API_VERSIONS: Final = int(ApiKey.API_VERSIONS)
_FETCH: Final = int(ApiKey.FETCH)
_REQUEST_NAMES: Final[dict[int, str]] = {key: request_name(key.name) for key in ApiKey}
_monotonic: Final = time.monotonic
_pack_size: Final = INT32.pack  # a response's size; bound once, as compiled code looks `S.pack` up at each call


class Dispatcher:
    def __init__(self, broker: "Broker") -> None:
        self._broker = broker
        # What every request uses, held here: the broker's attributes are generic lookups in
        # compiled code, several a request. Its metrics come after the dispatcher.
        self._client_quotas: ClientQuotas = broker.client_quotas
        self._request_stats: RequestStats | None = None
        self._services: BrokerServices | None = None
        # Whether each (API, version) served so far is flexible, keyed api_key << 8 | version:
        # kio's answer costs an interpreted call and two lookups, asked for every request. Only
        # versions a handler serves get in, so it stays small.
        self._flexible: dict[int, bool] = {}

    def for_session(self, session: Session) -> "SessionDispatch":
        """`dispatch` for one connection's requests (what broker.network's Connection calls)."""
        return SessionDispatch(self, session)

    async def serve(self, frame: memoryview, session: Session) -> bytes | None:
        """The response (header and body, without its size) to one request frame (header and
        body, writable: Produce sets offsets in place) served in-process as a connection would
        serve it, or None for a request answered with nothing (acks=0 Produce): the HTTP API's
        requests (broker/http/loopback.py) and the requests in Envelopes. A throttled response
        comes at once (nothing to mute)."""
        chunks = self.dispatch(frame, session)
        if inspect.isawaitable(chunks):
            chunks = await chunks
        if session.send_timer is not None:
            session.send_timer.sent(0.0)
        if chunks is None:
            return None
        # Fetched records come as file regions (a connection sends them with sendfile): read on
        # a thread, as the log's other disk reads are, not on the loop.
        data = b"".join([
            await asyncio.to_thread(chunk.read) if isinstance(chunk, FileRegion) else bytes(chunk)  # type: ignore[call-overload]
            for chunk in chunks
        ])
        return data[INT32.size :]

    def dispatch(
        self, frame: memoryview, session: Session
    ) -> Chunks | None | Deferred[Chunks | None] | Awaitable[Chunks | None]:
        """The response frame's chunks, None when nothing is sent, or either to come: a Deferred
        (a long-poll Fetch or an acks=all Produce: broker.deferred) or another awaitable."""
        sasl = session.sasl
        if sasl is not None and sasl.expects_raw_token:
            return cast(Chunks, answer_raw_token(session, frame))  # list[bytes] is a Chunks
        # One clock for the request log's latency, the quotas' handler time and the metrics'
        # times (loop time, as the connection's arrival stamps).
        started = dispatched = _monotonic()
        api_key, version, correlation_id = peek_request(frame)
        handler = HANDLERS.get(api_key)
        if handler is None:
            raise ProtocolError(f"unknown api key {api_key}")
        if not handler.min_version <= version <= handler.max_version:
            if api_key == ApiKey.API_VERSIONS:
                return _frame(encode_response_header(correlation_id, False), [_unsupported_api_versions(handler)])
            raise ProtocolError(
                f"{ApiKey(api_key).name} v{version} is not supported "
                f"(v{handler.min_version}-v{handler.max_version} are)"
            )
        # Without SASL every request is served; the enum's members are not even looked up.
        admission = None if sasl is None else sasl.admit(api_key)
        if admission is not None and admission is Admission.CLOSE:
            raise ProtocolError(sasl.failure if sasl is not None and sasl.failure else "SASL session expired")
        flexible = self._is_flexible(api_key, version)
        header, body_start = parse_request_header(frame, flexible)
        request = self._parse(handler, version, frame, body_start)
        services = self._services
        if services is None:
            services = self._services = BrokerServices(self._broker)
        context = RequestContext(self._broker, services, header, session)
        response_header = encode_response_header(correlation_id, flexible and api_key != _API_VERSIONS)
        if admission is not None and admission is Admission.ILLEGAL_STATE:
            response = schemas.error_response(
                request, schemas.response_type(api_key, version), ErrorCode.illegal_sasl_state
            )
            reason = sasl.failure if sasl is not None and sasl.failure else "illegal SASL state"
            raise CloseAfterResponse(reason, _frame(response_header, [schemas.encode(response)]))
        if sasl is not None and api_key in _SASL_APIS:
            # Synchronous handlers: a failed exchange's answer is the connection's last.
            chunks = _encode(handler.handle(context, request), api_key, version, response_header)
            if sasl.failed:
                raise CloseAfterResponse(sasl.failure or "SASL authentication failed", chunks or [])
            return _logged(chunks, context, started)
        try:
            result = handler.handle(context, request)
            if type(result) is EncodedResponse and not self._client_quotas.enabled:
                chunks = _frame(response_header, result.chunks)  # the hot paths' answer
            elif type(result) is Deferred:  # a long-poll Fetch, an acks=all Produce
                return self._answer_when_done(
                    result, request, context, response_header, len(frame), _monotonic() - started, started, dispatched
                )
            elif inspect.isawaitable(result):
                handler_s = _monotonic() - started
                return self._finish_later(
                    result, request, context, response_header, len(frame), handler_s, started, dispatched
                )
            else:
                chunks = self._respond(result, request, context, response_header, len(frame), _monotonic() - started)
        except ProtocolError:
            raise  # a request the handler found malformed: the connection closes
        except Exception as exc:
            chunks = self._failed(exc, request, context, response_header, _monotonic() - started)
        self._record(context, request, dispatched, _monotonic() - dispatched, 0.0, chunks)
        if _logging_requests():
            _log_request(chunks, context, started)
        return chunks

    def _is_flexible(self, api_key: int, version: int) -> bool:
        key = api_key << 8 | version
        flexible = self._flexible.get(key)
        if flexible is None:
            flexible = self._flexible[key] = schemas.is_flexible(api_key, version)
        return flexible

    @staticmethod
    def _parse(handler: ApiHandler, version: int, frame: memoryview, body_start: int) -> Any:
        body = frame[body_start:]
        if handler.parse is not None:
            return handler.parse(version, body)
        request = schemas.decode(schemas.request_type(handler.api_key, version), body)
        return schemas.adapt(request, schemas.request_type(handler.api_key, handler.max_version))

    async def _finish_later(
        self,
        pending: Awaitable[Any],
        request: Any,
        context: RequestContext,
        response_header: bytes,
        request_bytes: int,
        handler_s: float,
        started: float,
        dispatched: float,
    ) -> Chunks | None:
        waiting = _monotonic()
        try:
            result = await pending
        except ProtocolError:
            raise
        except Exception as exc:
            return self._answer_late(
                None, exc, waiting, request, context, response_header, request_bytes, handler_s, started, dispatched
            )
        return self._answer_late(
            result, None, waiting, request, context, response_header, request_bytes, handler_s, started, dispatched
        )

    def _answer_when_done(
        self,
        pending: Deferred[Any],
        request: Any,
        context: RequestContext,
        response_header: bytes,
        request_bytes: int,
        handler_s: float,
        started: float,
        dispatched: float,
    ) -> Deferred[Chunks | None]:
        """The response, as a Deferred done in the turn `pending` (the handler's) is done in;
        cancelling it cancels `pending`."""
        waiting = _monotonic()
        answer: Deferred[Chunks | None] = Deferred(pending.cancel)

        def done(handled: Deferred[Any]) -> None:
            exc = handled.exception()
            if exc is not None and (isinstance(exc, ProtocolError) or not isinstance(exc, Exception)):
                answer.fail(exc)
                return
            try:
                chunks = self._answer_late(
                    None if exc is not None else handled.result(), exc, waiting, request, context, response_header,
                    request_bytes, handler_s, started, dispatched,
                )
            except Exception as failure:  # the connection closes, as for a coroutine's
                answer.fail(failure)
                return
            answer.resolve(chunks)

        pending.when_done(done)
        return answer

    def _answer_late(
        self,
        result: Any,
        exc: Exception | None,
        waiting: float,
        request: Any,
        context: RequestContext,
        response_header: bytes,
        request_bytes: int,
        handler_s: float,
        started: float,
        dispatched: float,
    ) -> Chunks | None:
        """The response to a request whose handler's result (`result`, or the exception `exc`)
        came after waiting since `waiting`: the wait is the request's remote time."""
        woken = _monotonic()
        if exc is None:
            try:
                chunks = self._respond(result, request, context, response_header, request_bytes, handler_s)
            except ProtocolError:
                raise
            except Exception as failure:
                exc = failure
        if exc is not None:
            chunks = self._failed(exc, request, context, response_header, handler_s)
        local_s = (waiting - dispatched) + (_monotonic() - woken)
        self._record(context, request, dispatched, local_s, woken - waiting, chunks)
        return _logged(chunks, context, started)

    def _record(
        self, context: RequestContext, request: Any, dispatched: float, local_s: float, remote_s: float,
        response: Chunks | None,
    ) -> None:
        """The request's count and times (RequestMetrics). A Fetch is recorded under
        FetchConsumer or FetchFollower only; the scrape adds the two up as Fetch, which Kafka
        records as well (one record and one send timing a fetch, where both were twice). The
        send and total times come once the connection has sent the response (the session's
        send_timer); without a response, now."""
        session = context.session
        api_key, version = context.header.api_key, context.api_version
        queue_ms = max(dispatched - session.received_at, 0.0) * 1000 if session.received_at else 0.0
        local_ms, remote_ms = local_s * 1000, remote_s * 1000
        requests = self._request_stats
        if requests is None:
            requests = self._request_stats = self._broker.metrics.requests
        if api_key == _FETCH:
            fetch: FetchRequest = request
            name = "FetchFollower" if fetch.replica_id >= 0 else "FetchConsumer"
        else:
            name = _REQUEST_NAMES[api_key]
        times = requests.record(name, version, queue_ms, local_ms, remote_ms)
        timer = SendTimer(times, queue_ms + local_ms + remote_ms)
        if response is None:
            timer.sent(0.0)
        else:
            session.send_timer = timer

    def _respond(
        self, result: Any, request: Any, context: RequestContext, response_header: bytes,
        request_bytes: int, handler_s: float,
    ) -> Chunks | None:
        """The response's chunks, after the client's quotas have had their say."""
        api_key, version = context.header.api_key, context.api_version
        quotas = self._client_quotas
        if not quotas.enabled:
            return _encode(result, api_key, version, response_header)
        result, throttle_ms = throttling.settle(quotas, context, request, result, request_bytes, handler_s)
        chunks = _encode(result, api_key, version, response_header)
        if throttle_ms > 0:
            return ThrottledResponse(chunks or [], throttle_ms / 1000)
        return chunks

    def _failed(
        self, exc: Exception, request: Any, context: RequestContext, response_header: bytes, handler_s: float
    ) -> Chunks:
        """UNKNOWN_SERVER_ERROR for a request whose handler failed; re-raised (closing the
        connection) for an acks=0 Produce, which has no response to carry it."""
        api_key, version = context.header.api_key, context.api_version
        if api_key == ApiKey.PRODUCE and request.acks == 0:
            raise exc
        log.error(
            "%s v%d from %s failed; answering UNKNOWN_SERVER_ERROR",
            ApiKey(api_key).name, version, context.client_address, exc_info=exc,
        )
        response = schemas.error_response(
            request, schemas.response_type(api_key, version), ErrorCode.unknown_server_error
        )
        quotas = self._client_quotas
        throttle_ms = throttling.record_error_response(quotas, context, request, handler_s) if quotas.enabled else 0
        if throttle_ms > 0:
            response = throttling.with_throttle_time(response, throttle_ms)
            return ThrottledResponse(_frame(response_header, [schemas.encode(response)]), throttle_ms / 1000)
        return _frame(response_header, [schemas.encode(response)])


class SessionDispatch:
    """`Dispatcher.dispatch` with a connection's session bound. A functools.partial with the
    session as a keyword made every request a generic call: the partial merged its keywords
    into a new dict, and the compiled dispatch parsed them back out. Compiled, this calls
    dispatch directly."""

    __slots__ = ("_dispatcher", "_session")

    def __init__(self, dispatcher: Dispatcher, session: Session) -> None:
        self._dispatcher = dispatcher
        self._session = session

    def __call__(self, frame: memoryview) -> Chunks | None | Deferred[Chunks | None] | Awaitable[Chunks | None]:
        return self._dispatcher.dispatch(frame, self._session)


def _logged(response: Chunks | None, context: RequestContext, started: float) -> Any:
    """`response`, after its line in the request log when that logger is at DEBUG (a level
    check per request, nothing more, when it is not)."""
    if _logging_requests():
        _log_request(response, context, started)
    return response


def _logging_requests() -> bool:
    """Whether the request logger is at DEBUG."""
    if _request_log_answers.get(_DEBUG) is False:
        return False
    return _request_log.isEnabledFor(_DEBUG)


def _log_request(response: Chunks | None, context: RequestContext, started: float) -> None:
    header = context.header
    session = context.session
    fields = {
        "api": ApiKey(header.api_key).name,
        "version": header.api_version,
        "correlationId": header.correlation_id,
        "clientId": header.client_id,
        "clientAddress": session.client_address,
        "principal": str(session.principal),
        "listener": session.listener,
        "latencyMs": round((_monotonic() - started) * 1000, 3),
        "responseBytes": sum(len(chunk) for chunk in response) if response else 0,
    }
    _request_log.debug(
        "Completed request: %s", " ".join(f"{key}={value}" for key, value in fields.items()), extra={"request": fields}
    )


def _encode(result: Any, api_key: int, version: int, response_header: bytes) -> Chunks | None:
    if result is NO_RESPONSE:
        return None
    if isinstance(result, EncodedResponse):
        return _frame(response_header, result.chunks)
    body = schemas.encode(schemas.adapt(result, schemas.response_type(api_key, version)))
    return _frame(response_header, [body])


def _frame(response_header: bytes, body: Chunks) -> Chunks:
    """The response's chunks behind its size and header, the first bytes joined to them
    (written out: compiled, a generator for the sum and a starred list cost more than the rest)."""
    size = len(response_header)
    for chunk in body:
        size += len(chunk)
    head = _pack_size(size) + response_header
    if not body:
        return [head]
    first = body[0]
    framed: Chunks = [head + first] if isinstance(first, bytes) else [head, first]
    if len(body) > 1:
        framed.extend(body[1:])
    return framed


def _unsupported_api_versions(handler: ApiHandler) -> bytes:
    """ApiVersions v0 body: UNSUPPORTED_VERSION and the ApiVersions versions we serve."""
    return (
        INT16.pack(ErrorCode.unsupported_version)
        + INT32.pack(1)
        + INT16.pack(ApiKey.API_VERSIONS)
        + INT16.pack(handler.min_version)
        + INT16.pack(handler.max_version)
    )
