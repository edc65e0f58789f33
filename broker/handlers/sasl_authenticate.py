"""SaslAuthenticate (api key 36), versions 0-2.

Carries the SASL tokens of the exchange SaslHandshake v1 began (broker/security/sasl_server.py
runs it). Each token is answered with the mechanism's next one; once the exchange completes
the session's principal becomes User:<authorized name> and v1+ answers session_lifetime_ms
(KIP-368: connections.max.reauth.ms, bounded by the credential's expiry; 0 when the session
does not expire). A failed exchange is SASL_AUTHENTICATION_FAILED with Kafka's message ("Authentication
failed: Invalid username or password" for PLAIN; "Authentication failed during authentication
due to invalid credentials with SASL mechanism SCRAM-SHA-256" for SCRAM, which tells no more),
and the connection closes after the answer.

Outside an exchange (no SASL on the listener, or the session is authenticated) the answer is
ILLEGAL_SASL_STATE, "SaslAuthenticate request received after successful authentication", as
KafkaApis answers.

Version notes: v1 adds session_lifetime_ms; v2 is the flexible encoding.
"""

import datetime

from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_authenticate.v2.response import SaslAuthenticateResponse

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode

from broker.handlers.registry import RequestContext, api
from broker.session import KafkaPrincipal


@api(ApiKey.SASL_AUTHENTICATE, versions=(0, 2))
def handle_sasl_authenticate(ctx: RequestContext, request: SaslAuthenticateRequest) -> SaslAuthenticateResponse:
    sasl = ctx.session.sasl
    if sasl is None or not sasl.in_progress:
        return SaslAuthenticateResponse(
            error_code=ErrorCode.illegal_sasl_state,
            error_message="SaslAuthenticate request received after successful authentication",
            auth_bytes=b"",
        )
    error, message, answer, lifetime_ms = sasl.authenticate(request.auth_bytes)
    if error is ErrorCode.none and not sasl.in_progress:
        ctx.session.principal = KafkaPrincipal("User", sasl.authorization_id)
    return SaslAuthenticateResponse(
        error_code=error,
        error_message=message,
        auth_bytes=answer,
        session_lifetime=datetime.timedelta(milliseconds=lifetime_ms),
    )
