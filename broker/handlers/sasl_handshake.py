"""SaslHandshake (api key 17), versions 0-1.

On a SASL listener, before authentication (or to begin a re-authentication, KIP-368): the
client names its mechanism; if the listener enables it the answer is NONE with the enabled
mechanisms, and the exchange begins. v1: the tokens follow in SaslAuthenticate requests. v0:
they follow raw, size-prefixed without request headers, answered the same way
(`answer_raw_token`, called by dispatch), as Kafka serves clients older than KIP-152.
A mechanism not enabled is UNSUPPORTED_SASL_MECHANISM, and the connection closes after it.

Anywhere else (a listener without SASL, or a session already authenticated that cannot
re-authenticate) the answer is ILLEGAL_SASL_STATE with no mechanisms, as KafkaApis answers.
"""

from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from kio.schema.sasl_handshake.v1.response import SaslHandshakeResponse

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, ProtocolError
from protocol.primitives import INT32

from broker.handlers.registry import RequestContext, api
from broker.security.mechanism import AuthenticationFailed
from broker.session import KafkaPrincipal, Session


@api(ApiKey.SASL_HANDSHAKE, versions=(0, 1))
def handle_sasl_handshake(ctx: RequestContext, request: SaslHandshakeRequest) -> SaslHandshakeResponse:
    sasl = ctx.session.sasl
    if sasl is None or not sasl.in_progress:
        return SaslHandshakeResponse(error_code=ErrorCode.illegal_sasl_state, mechanisms=())
    error = sasl.handshake(request.mechanism, ctx.api_version)
    return SaslHandshakeResponse(error_code=error, mechanisms=tuple(sasl.enabled_mechanisms))


def answer_raw_token(session: Session, frame: memoryview) -> list[bytes]:
    """One raw token after SaslHandshake v0: the size-prefixed answer; a failure closes the
    connection without one, as Kafka does."""
    sasl = session.sasl
    assert sasl is not None
    try:
        answer = sasl.raw_token(bytes(frame))
    except AuthenticationFailed as exc:
        raise ProtocolError(str(exc)) from None
    if not sasl.in_progress:
        session.principal = KafkaPrincipal("User", sasl.authorization_id)
    return [INT32.pack(len(answer)) + answer]
