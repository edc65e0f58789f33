"""SASL/OAUTHBEARER (RFC 7628) with Kafka's default validator for development: unsecured JWS.

The client's message is `n,[a=<authzid>],\\x01auth=Bearer <token>\\x01[<key>=<value>\\x01...]\\x01`.
The token is validated as Kafka's OAuthBearerUnsecuredValidatorCallbackHandler does: a JWS
with header `"alg":"none"` and an empty signature (`<header>.<claims>.`), a string principal
claim (`sub`, or the JAAS option unsecuredValidatorPrincipalClaimName), a numeric `exp` in
seconds not yet reached, `iat` if present not in the future and before `exp`, each with
unsecuredValidatorAllowableClockSkewMs of slack, and every scope of
unsecuredValidatorRequiredScope (space separated) in the scope claim (`scope`, or
unsecuredValidatorScopeClaimName; a string or a list). Extensions are accepted, as Kafka's
unsecured handler accepts them.

A token that fails is answered as RFC 7628 and Kafka do: a challenge `{"status":"invalid_token"}`
(`insufficient_scope` for a missing scope) to which the client replies with a lone \\x01, and
only then the failure, whose message is that JSON. The token's `exp` bounds the session
(re-authentication, KIP-368).
"""

import base64
import binascii
import json
import logging
import re
import time
from collections.abc import Callable, Mapping

from broker.security.mechanism import AuthenticationFailed, InvalidSaslMessage

log = logging.getLogger(__name__)

MECHANISM = "OAUTHBEARER"
_SEPARATOR = "\x01"
_SASL_NAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
_INITIAL = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASL_NAME}))?,\x01(?P<kvpairs>(?:[A-Za-z]+=[\x21-\x7e \t\r\n]+\x01)*)\x01"
)
_AUTH = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_~+/.a-zA-Z0-9]+=*)")

PRINCIPAL_CLAIM_OPTION = "unsecuredValidatorPrincipalClaimName"
SCOPE_CLAIM_OPTION = "unsecuredValidatorScopeClaimName"
REQUIRED_SCOPE_OPTION = "unsecuredValidatorRequiredScope"
CLOCK_SKEW_OPTION = "unsecuredValidatorAllowableClockSkewMs"


class TokenInvalid(Exception):
    def __init__(self, reason: str, scope_failed: bool = False) -> None:
        super().__init__(reason)
        self.status = "insufficient_scope" if scope_failed else "invalid_token"


class UnsecuredValidator:
    """Kafka's OAuthBearerUnsecuredValidatorCallbackHandler, configured by the JAAS options."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.principal_claim = options.get(PRINCIPAL_CLAIM_OPTION, "").strip() or "sub"
        self.scope_claim = options.get(SCOPE_CLAIM_OPTION, "").strip() or "scope"
        self.required_scope = options.get(REQUIRED_SCOPE_OPTION, "").split()
        skew = options.get(CLOCK_SKEW_OPTION, "").strip() or "0"
        try:
            self.clock_skew_ms = int(skew)
        except ValueError:
            raise ValueError(f"Invalid value for {CLOCK_SKEW_OPTION}: {skew}") from None
        if self.clock_skew_ms < 0:
            raise ValueError(f"Allowable clock skew millis must not be negative: {skew}")

    def validate(self, token: str, now_ms: int) -> tuple[str, int]:
        """(principal name, expiry in epoch ms) of a valid token; TokenInvalid otherwise."""
        parts = token.split(".")
        if len(parts) != 3:
            raise TokenInvalid(
                f"An unsecured JWS must have 3 dot-separated Base64URL-encoded values, found {len(parts)}"
            )
        if parts[2]:
            raise TokenInvalid("Unsecured JWS must not contain a digital signature")
        header, claims = _json_part(parts[0]), _json_part(parts[1])
        if header.get("alg") != "none":
            raise TokenInvalid("Unsecured JWS must have alg=none")
        principal = claims.get(self.principal_claim)
        if principal is None:
            raise TokenInvalid(f"Required claim missing: {self.principal_claim}")
        if not isinstance(principal, str) or not principal.strip():
            raise TokenInvalid(f"The {self.principal_claim} claim had the incorrect type: {type(principal).__name__}")
        expiry = claims.get("exp")
        if expiry is None:
            raise TokenInvalid("Required claim missing: exp")
        if not _is_number(expiry):
            raise TokenInvalid(f"The exp claim had the incorrect type: {type(expiry).__name__}")
        issued = claims.get("iat")
        if issued is not None:
            if not _is_number(issued):
                raise TokenInvalid(f"The iat claim had the incorrect type: {type(issued).__name__}")
            if issued * 1000 > now_ms + self.clock_skew_ms:
                raise TokenInvalid(
                    f"The Issued At value ({issued} seconds) was after the indicated time ({now_ms} ms) "
                    f"plus allowable clock skew ({self.clock_skew_ms} ms)"
                )
            if expiry <= issued:
                raise TokenInvalid(
                    f"The Expiration Time time ({expiry} seconds) was not after the Issued At time ({issued} seconds)"
                )
        if now_ms - self.clock_skew_ms >= expiry * 1000:
            raise TokenInvalid(
                f"The indicated time ({now_ms} ms) minus allowable clock skew ({self.clock_skew_ms} ms) "
                f"was on or after the Expiration Time value ({expiry} seconds)"
            )
        scope = claims.get(self.scope_claim, [])
        scopes = set(scope.split() if isinstance(scope, str) else scope if isinstance(scope, list) else [])
        for required in self.required_scope:
            if required not in scopes:
                raise TokenInvalid(
                    f"The provided scope ({sorted(scopes)}) was missing a required scope ({required}). "
                    f"All required scope elements: {self.required_scope}",
                    scope_failed=True,
                )
        return principal, int(expiry * 1000)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _json_part(part: str) -> dict:
    try:
        decoded = json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
    except (binascii.Error, ValueError):
        raise TokenInvalid("malformed JSON") from None
    if not isinstance(decoded, dict):
        raise TokenInvalid("malformed JSON")
    return decoded


class OAuthBearerServer:
    mechanism = MECHANISM

    def __init__(
        self, validator: UnsecuredValidator, clock_ms: Callable[[], int] = lambda: int(time.time() * 1000)
    ) -> None:
        self._validator = validator
        self._clock_ms = clock_ms
        self._principal: str | None = None
        self._expiry_ms: int | None = None
        self._error: str | None = None

    @property
    def complete(self) -> bool:
        return self._principal is not None

    @property
    def authorization_id(self) -> str:
        if self._principal is None:
            raise RuntimeError("Authentication exchange has not completed")
        return self._principal

    @property
    def credential_expiry_ms(self) -> int | None:
        return self._expiry_ms

    def evaluate(self, token: bytes) -> bytes:
        if token == b"\x01" and self._error is not None:
            raise AuthenticationFailed(self._error)
        self._error = None
        match = _INITIAL.fullmatch(token.decode("utf-8", errors="replace"))
        if match is None:
            raise InvalidSaslMessage("Invalid OAUTHBEARER client first message")
        pairs = dict(item.split("=", 1) for item in match["kvpairs"].split(_SEPARATOR) if item)
        auth = _AUTH.fullmatch(pairs.get("auth", ""))
        if auth is None or auth["scheme"].lower() != "bearer":
            raise InvalidSaslMessage("Invalid OAUTHBEARER client first message: no bearer token")
        try:
            principal, expiry_ms = self._validator.validate(auth["token"], self._clock_ms())
        except TokenInvalid as exc:
            log.debug("OAUTHBEARER token refused: %s", exc)
            self._error = json.dumps({"status": exc.status}, separators=(",", ":"))
            return self._error.encode()
        authzid = match["authzid"]
        if authzid and authzid != principal:
            raise AuthenticationFailed(
                f"Authentication failed: Client requested an authorization id ({authzid}) that is "
                f"different from the token's principal name ({principal})"
            )
        self._principal, self._expiry_ms = principal, expiry_ms
        return b""
