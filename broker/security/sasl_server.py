"""The SASL side of one connection on a SASL_PLAINTEXT or SASL_SSL listener: Kafka's
SaslServerAuthenticator as a state machine, with no I/O.

Until authentication completes only these requests are served, in this order (anything else
ends the connection, as in Kafka):
- ApiVersions, at most once, before the handshake; then SaslHandshake. Any other request is
  answered with its error response (ILLEGAL_SASL_STATE) and the connection closes ("Unexpected
  Kafka request of type X during SASL handshake"; Kafka closes without the answer, the issue
  asks for it: a misconfigured client learns why).
- After SaslHandshake v1: SaslAuthenticate requests carry the mechanism's tokens. Any other
  request is answered with its error response (ILLEGAL_SASL_STATE) and the connection closes.
- After SaslHandshake v0: the tokens come raw, size-prefixed without request headers, and the
  answers go back the same way (`raw_token`); a failure closes the connection with no answer.
A mechanism not enabled is answered UNSUPPORTED_SASL_MECHANISM, a failed exchange
SASL_AUTHENTICATION_FAILED with Kafka's message; the connection closes after that answer.

Re-authentication (KIP-368): a completed exchange gets a session lifetime: the listener's
connections.max.reauth.ms for the mechanism (0: none), bounded by the credential's own expiry
(OAUTHBEARER tokens). SaslAuthenticate v1+ tells the client, which re-authenticates before it
ends with SaslHandshake + SaslAuthenticate on the same connection (same mechanism and principal,
at most once a second). A request arriving on an expired session closes the connection. A
SaslHandshake or SaslAuthenticate on a completed session that cannot re-authenticate is served
by its handler, which answers ILLEGAL_SASL_STATE, as KafkaApis does.
"""

import enum
import logging
import time
from collections.abc import Callable, Mapping

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode

from broker.security.mechanism import AuthenticationFailed, InvalidSaslMessage, SaslServer

log = logging.getLogger(__name__)

_MIN_REAUTH_INTERVAL_NS = 1_000_000_000


class State(enum.Enum):
    HANDSHAKE_OR_VERSIONS = "handshake or versions"
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    RAW_AUTHENTICATE = "authenticate (raw tokens)"
    REAUTH_BAD_MECHANISM = "re-authentication with another mechanism"
    COMPLETE = "complete"
    FAILED = "failed"


class Admission(enum.Enum):
    SERVE = "serve"
    CLOSE = "close"  # the connection closes without an answer
    ILLEGAL_STATE = "illegal state"  # answered with ILLEGAL_SASL_STATE, then closed


class SaslAuthenticator:
    """`mechanisms`: each enabled mechanism's factory of a fresh SaslServer, in the order of
    sasl.enabled.mechanisms. `max_reauth_ms`: connections.max.reauth.ms per mechanism."""

    def __init__(
        self,
        mechanisms: Mapping[str, Callable[[], SaslServer]],
        max_reauth_ms: Mapping[str, int],
        clock_ns: Callable[[], int] = time.monotonic_ns,
        wall_clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self._factories = dict(mechanisms)
        self._max_reauth_ms = dict(max_reauth_ms)
        self._clock_ns = clock_ns
        self._wall_clock_ms = wall_clock_ms
        self.state = State.HANDSHAKE_OR_VERSIONS
        self.mechanism: str | None = None
        self.authorization_id: str | None = None
        self.session_expiry_ns: int | None = None
        self._server: SaslServer | None = None
        self._reauthenticating = False
        self._last_reauth_start_ns = 0
        self.failure: str | None = None

    @property
    def enabled_mechanisms(self) -> list[str]:
        return list(self._factories)

    @property
    def expects_raw_token(self) -> bool:
        return self.state is State.RAW_AUTHENTICATE

    @property
    def failed(self) -> bool:
        return self.state is State.FAILED

    @property
    def _activity(self) -> str:
        return "re-authentication" if self._reauthenticating else "authentication"

    # ------------------------------------------------------------------ the gate

    def admit(self, api_key: int) -> Admission:
        """What to do with a request (it has a Kafka header) in the current state."""
        state = self.state
        if state is State.HANDSHAKE_OR_VERSIONS:
            if api_key == ApiKey.API_VERSIONS:
                self.state = State.HANDSHAKE
                return Admission.SERVE
            return self._handshake_only(api_key)
        if state is State.HANDSHAKE:
            return self._handshake_only(api_key)
        if state is State.AUTHENTICATE:
            if api_key == ApiKey.SASL_AUTHENTICATE:
                return Admission.SERVE
            self._fail(f"Unexpected Kafka request of type {ApiKey(api_key).name} during SASL {self._activity}.")
            return Admission.ILLEGAL_STATE
        if state is State.COMPLETE:
            now = self._clock_ns()
            if api_key == ApiKey.SASL_HANDSHAKE and self._may_reauthenticate(now):
                self._begin_reauthentication(now)
                return Admission.SERVE
            if self.session_expiry_ns is not None and now > self.session_expiry_ns:
                log.debug("closing a connection whose SASL session expired")
                self.state = State.FAILED
                return Admission.CLOSE
            return Admission.SERVE
        return Admission.CLOSE  # FAILED, REAUTH_BAD_MECHANISM, RAW_AUTHENTICATE (headers unexpected)

    def _handshake_only(self, api_key: int) -> Admission:
        if api_key == ApiKey.SASL_HANDSHAKE:
            return Admission.SERVE
        name = ApiKey(api_key).name if api_key in ApiKey._value2member_map_ else str(api_key)
        self._fail(f"Unexpected Kafka request of type {name} during SASL handshake.")
        return Admission.ILLEGAL_STATE

    def _may_reauthenticate(self, now_ns: int) -> bool:
        if self.session_expiry_ns is None:
            return False
        return self._last_reauth_start_ns == 0 or now_ns - self._last_reauth_start_ns >= _MIN_REAUTH_INTERVAL_NS

    def _begin_reauthentication(self, now_ns: int) -> None:
        log.debug("SASL re-authentication of %s begins", self.authorization_id)
        self._last_reauth_start_ns = now_ns
        self._reauthenticating = True
        self.state = State.HANDSHAKE

    @property
    def in_progress(self) -> bool:
        """Whether SaslHandshake/SaslAuthenticate requests belong to an exchange (else their
        handlers answer ILLEGAL_SASL_STATE: the session is complete)."""
        return self.state is not State.COMPLETE

    # ------------------------------------------------------------------ SaslHandshake

    def handshake(self, mechanism: str, version: int) -> ErrorCode:
        """Start an exchange with `mechanism`; UNSUPPORTED_SASL_MECHANISM fails the connection."""
        if mechanism not in self._factories:
            self._fail(f"Unsupported SASL mechanism {mechanism}")
            return ErrorCode.unsupported_sasl_mechanism
        if self._reauthenticating and mechanism != self.mechanism:
            self.failure = (
                f"SASL mechanism '{mechanism}' requested by client is not supported for "
                f"re-authentication of mechanism '{self.mechanism}'"
            )
            self.state = State.REAUTH_BAD_MECHANISM
            return ErrorCode.none
        self.mechanism = mechanism
        self._server = self._factories[mechanism]()
        self.state = State.AUTHENTICATE if version >= 1 else State.RAW_AUTHENTICATE
        return ErrorCode.none

    # ------------------------------------------------------------------ SaslAuthenticate

    def authenticate(self, token: bytes) -> tuple[ErrorCode, str | None, bytes, int]:
        """(error code, error message, answer token, session lifetime ms) of one token."""
        try:
            answer = self._evaluate(token)
        except AuthenticationFailed as exc:
            return ErrorCode.sasl_authentication_failed, str(exc), b"", 0
        lifetime_ms = self._complete() if self._server is not None and self._server.complete else 0
        if self.failed:
            return ErrorCode.sasl_authentication_failed, self.failure, b"", 0
        return ErrorCode.none, None, answer, lifetime_ms

    def raw_token(self, token: bytes) -> bytes:
        """The answer to a raw token (after SaslHandshake v0); AuthenticationFailed closes."""
        answer = self._evaluate(token)
        if self._server is not None and self._server.complete:
            self._complete()
            if self.failed:
                raise AuthenticationFailed(self.failure or "authentication failed")
        return answer

    def _evaluate(self, token: bytes) -> bytes:
        assert self._server is not None
        try:
            return self._server.evaluate(token)
        except AuthenticationFailed as exc:
            self._fail(str(exc))
            raise
        except InvalidSaslMessage as exc:
            log.debug("SASL %s failed: %s", self.mechanism, exc)
            message = (
                f"Authentication failed during {self._activity} due to invalid credentials with "
                f"SASL mechanism {self.mechanism}"
            )
            self._fail(message)
            raise AuthenticationFailed(message) from None

    def _complete(self) -> int:
        assert self._server is not None
        name = self._server.authorization_id
        if self._reauthenticating and name != self.authorization_id:
            self._fail(
                f"Cannot change principals during re-authentication from User.{self.authorization_id}: User.{name}"
            )
            return 0
        self.authorization_id = name
        lifetime_ms = self._session_lifetime_ms()
        self.session_expiry_ns = None if lifetime_ms is None else self._clock_ns() + lifetime_ms * 1_000_000
        self.state = State.COMPLETE
        self._reauthenticating = False
        self._server = None
        return lifetime_ms or 0

    def _session_lifetime_ms(self) -> int | None:
        """Kafka's calcCompletionTimesAndReturnSessionLifetimeMs: the smaller of
        connections.max.reauth.ms (when > 0) and the time left on the credential."""
        assert self._server is not None and self.mechanism is not None
        max_reauth = self._max_reauth_ms.get(self.mechanism, 0)
        expiry_ms = self._server.credential_expiry_ms
        candidates = [] if max_reauth <= 0 else [max_reauth]
        if expiry_ms is not None:
            candidates.append(expiry_ms - self._wall_clock_ms())
        return max(0, min(candidates)) if candidates else None

    def _fail(self, reason: str) -> None:
        log.debug("SASL %s failed: %s", self._activity, reason)
        self.failure = reason
        self.state = State.FAILED
