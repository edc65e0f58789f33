"""Quota enforcement on responses, as Kafka's KafkaApis does since KIP-219.

`settle` runs once per request, when its response is ready (after a long poll or an acks=all
wait, as Kafka records in the completion callback):

- Produce records its request size against producer_byte_rate; Fetch from a consumer records
  its response size against consumer_byte_rate. Every request records its handler time against
  request_percentage, except those Kafka exempts: the inter-broker (cluster action) APIs
  LeaderAndIsr, StopReplica, UpdateMetadata, ControlledShutdown, WriteTxnMarkers, follower
  fetches (exempt from every client quota), and Produce with acks=0 (request quota only).
- The throttle time is the larger of the two; the response carries it in throttle_time_ms
  (when its version has the field) and is sent at once; the connection then reads no request
  for that long (broker.responses.ThrottledResponse).
- A throttled consumer fetch is answered with no partitions (Kafka's getThrottledResponse) and
  its bytes are taken back from the rate, since they were not sent. The fetch session the
  answer named (KIP-227) is closed, and the throttled answer names none: the session remembers
  what the dropped answer said, which the client never saw, so the client starts over with a
  full fetch. (Kafka keeps the session, having decided to throttle before it updated it.)

Handler time: logway serves every request on one event loop, so the time is the wall time the
request held the loop: parsing and the handler's synchronous work (for a handler that waits, the
part before it waits), in percent of one second as Kafka counts a thread's time. A quota of
request_percentage=100 is the whole event loop (in Kafka, one of its num.io.threads +
num.network.threads threads).
"""

import dataclasses
import datetime
from typing import Any

from protocol.api_keys import ApiKey
from protocol.fetch import encode_fetch_response, response_session_id
from protocol.primitives import INT32

from broker.handlers.registry import NO_RESPONSE, EncodedResponse, RequestContext
from broker.security.quotas import ClientQuotas

# Kafka's cluster actions among the APIs logway serves: answered without request quota.
EXEMPT_APIS = frozenset({
    ApiKey.LEADER_AND_ISR,
    ApiKey.STOP_REPLICA,
    ApiKey.UPDATE_METADATA,
    ApiKey.CONTROLLED_SHUTDOWN,
    ApiKey.WRITE_TXN_MARKERS,
    ApiKey.ENVELOPE,  # the request inside counts against its own principal's quotas
})


def _identity(context: RequestContext) -> tuple[str, str]:
    return context.session.principal.name, context.header.client_id or ""


def fetch_max_bytes(quotas: ClientQuotas, context: RequestContext, max_bytes: int) -> int:
    """A consumer's fetch takes at most what its consumer_byte_rate allows in the quota
    windows but one, so that one fetch cannot earn a throttle on its own (Kafka caps fetch
    max_bytes with getMaxValueInQuotaWindow)."""
    if not quotas.fetch.enabled:
        return max_bytes
    allowed = quotas.fetch.max_value_in_window(*_identity(context))
    return max_bytes if allowed >= max_bytes else int(allowed)


def settle(
    quotas: ClientQuotas, context: RequestContext, request: Any, result: Any, request_bytes: int, handler_s: float
) -> tuple[Any, int]:
    """Record the request's use of its quotas; returns the result to send, with its throttle
    time set, and the throttle time in ms (0: none)."""
    api_key = context.header.api_key
    user, client_id = _identity(context)
    follower_fetch = api_key == ApiKey.FETCH and request.replica_id >= 0
    request_throttle = 0
    if not _exempt_from_request_quota(api_key, request):
        request_throttle = quotas.request.record_and_get_throttle_ms(user, client_id, handler_s * 100)
    bandwidth_throttle = 0
    if api_key == ApiKey.PRODUCE:
        bandwidth_throttle = quotas.produce.record_and_get_throttle_ms(user, client_id, request_bytes)
    elif api_key == ApiKey.FETCH and not follower_fetch:
        response_bytes = sum(len(chunk) for chunk in result.chunks)
        bandwidth_throttle = quotas.fetch.record_and_get_throttle_ms(user, client_id, response_bytes)
        if max(bandwidth_throttle, request_throttle) > 0:
            quotas.fetch.record_no_throttle(user, client_id, -response_bytes)
            if context.api_version >= 7:
                context.services.fetch_sessions.remove(response_session_id(result.chunks[0]))
            result = EncodedResponse(encode_fetch_response(context.api_version, []), throttle_offset=0)
    throttle = max(request_throttle, bandwidth_throttle)
    if throttle > 0:
        result = with_throttle_time(result, throttle)
    return result, throttle


def record_error_response(quotas: ClientQuotas, context: RequestContext, request: Any, handler_s: float) -> int:
    """A request answered with an error (its handler failed) still pays its request time."""
    if _exempt_from_request_quota(context.header.api_key, request):
        return 0
    return quotas.request.record_and_get_throttle_ms(*_identity(context), handler_s * 100)


def _exempt_from_request_quota(api_key: int, request: Any) -> bool:
    return (
        api_key in EXEMPT_APIS
        or (api_key == ApiKey.FETCH and request.replica_id >= 0)
        or (api_key == ApiKey.PRODUCE and request.acks == 0)
    )


def with_throttle_time(result: Any, throttle_ms: int) -> Any:
    """The response with throttle_time_ms set, when it has the field."""
    if result is NO_RESPONSE:
        return result
    if isinstance(result, EncodedResponse):
        if result.throttle_offset is None:
            return result
        first = bytearray(result.chunks[0])
        INT32.pack_into(first, result.throttle_offset % len(first), throttle_ms)
        return EncodedResponse([bytes(first), *result.chunks[1:]], result.throttle_offset)
    if dataclasses.is_dataclass(result) and any(f.name == "throttle_time" for f in dataclasses.fields(result)):
        return dataclasses.replace(result, throttle_time=datetime.timedelta(milliseconds=throttle_ms))
    return result
