"""Envelope (api key 58), version 0: a client's request forwarded by another broker (KIP-590).

`request_data` is the client's request (header and body), `request_principal` its principal
(Kafka's DefaultPrincipalData, prefixed by its version as Kafka's
DefaultKafkaPrincipalBuilder.serialize writes it), `client_host_address` its address (4 or 16
bytes). The request is served as if that client had sent it on this connection's listener:
through the broker's dispatcher, with the same handlers, authorization (as the forwarded
principal), quotas and request metrics. The answer carries its response (header and body) in
`response_data`.

Kafka 3.9 forwards to the active controller only (and answers NOT_CONTROLLER elsewhere);
logway's brokers forward the HTTP API's requests with it to partition leaders and group
coordinators (broker/http/routing.py), so every broker serves it.

Errors: the connection is closed for an Envelope on another listener than the inter-broker
listener (as Kafka closes it), or whose request cannot be read; INVALID_REQUEST for an unreadable
principal or address, and for an Envelope in an Envelope; the request's own errors are in its
response.

Authorization (with an authorizer, as Kafka's KafkaApis): CLUSTER_ACTION on the cluster (the
forwarding broker's principal), else CLUSTER_AUTHORIZATION_FAILED; then the request's own, as the
forwarded principal.
"""

import ipaddress

from kio.schema.default_principal_data.v0.data import DefaultPrincipalData
from kio.schema.envelope.v0.request import EnvelopeRequest
from kio.schema.envelope.v0.response import EnvelopeResponse

from protocol import schemas
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, ProtocolError
from protocol.primitives import INT16

from broker.handlers.authorization import cluster_action
from broker.handlers.registry import RequestContext, api
from broker.session import KafkaPrincipal, Session

PRINCIPAL_DATA_VERSION = 0


def encode_principal(principal: KafkaPrincipal) -> bytes:
    """`request_principal` for `principal`."""
    data = DefaultPrincipalData(type_=principal.type, name=principal.name, token_authenticated=False)
    return INT16.pack(PRINCIPAL_DATA_VERSION) + schemas.encode(data)


def decode_principal(data: bytes) -> KafkaPrincipal:
    """The principal of `request_principal`; ValueError when it cannot be read."""
    view = memoryview(data)
    if len(view) < INT16.size or INT16.unpack_from(view)[0] != PRINCIPAL_DATA_VERSION:
        raise ValueError("not a DefaultPrincipalData v0")
    try:
        decoded = schemas.decode(DefaultPrincipalData, view, INT16.size)
    except ProtocolError as exc:
        raise ValueError(str(exc)) from exc
    return KafkaPrincipal(decoded.type_, decoded.name)


def encode_address(host: str) -> bytes:
    """`client_host_address` for an IP address."""
    return ipaddress.ip_address(host).packed


@api(ApiKey.ENVELOPE, versions=(0, 0))
@cluster_action
async def handle_envelope(ctx: RequestContext, request: EnvelopeRequest) -> EnvelopeResponse:
    if ctx.session.listener != ctx.broker.config.inter_broker_listener_name:
        raise ProtocolError(f"an Envelope is served on the inter-broker listener only, not {ctx.session.listener}")
    try:
        principal = decode_principal(request.request_principal or b"")
        address = ipaddress.ip_address(request.client_host_address)
    except ValueError:
        return EnvelopeResponse(response_data=None, error_code=ErrorCode.invalid_request)
    frame = memoryview(bytearray(request.request_data))
    if len(frame) >= INT16.size and INT16.unpack_from(frame)[0] == ApiKey.ENVELOPE:
        return EnvelopeResponse(response_data=None, error_code=ErrorCode.invalid_request)
    session = Session(f"{address}:0", ctx.session.listener, ctx.session.security_protocol, principal=principal)
    response = await ctx.broker.dispatcher.serve(frame, session)
    return EnvelopeResponse(response_data=response, error_code=ErrorCode.none)
