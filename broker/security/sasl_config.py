"""SASL settings of each listener, resolved from server.properties as Kafka resolves them.

For a SASL_PLAINTEXT or SASL_SSL listener L:
- mechanisms: `listener.name.<l>.sasl.enabled.mechanisms`, else `sasl.enabled.mechanisms`
  (Kafka's default is GSSAPI, which logway does not serve: a SASL listener needs the key set).
- each mechanism M's JAAS entry: `listener.name.<l>.<m>.sasl.jaas.config` (l and m lower case),
  exactly one login module, the one of M. Kafka brokers ignore an unprefixed `sasl.jaas.config`
  (they log "should be prefixed with SASL mechanism name"); logway refuses it rather than
  accept and ignore it. Kafka's other source, a JAAS file named by the JVM's
  java.security.auth.login.config, does not exist for logway: a mechanism without the prefixed
  key is refused at start with Kafka's message.
- connections.max.reauth.ms per mechanism: `listener.name.<l>.<m>.connections.max.reauth.ms`,
  else `listener.name.<l>.connections.max.reauth.ms`, else `connections.max.reauth.ms`.
The inter-broker listener, when SASL, must enable sasl.mechanism.inter.broker.protocol, and
that mechanism's JAAS entry must carry the `username` and `password` this broker logs in with.
Keys set that nothing would read (no SASL listener, standalone, a mechanism not enabled, a
plain key every listener overrides) are refused, where Kafka ignores them.
"""

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from broker.security import oauthbearer, plain, scram
from protocol.jaas import (
    OAUTHBEARER_LOGIN_MODULE,
    PLAIN_LOGIN_MODULE,
    SCRAM_LOGIN_MODULE,
    JaasConfigError,
    JaasEntry,
    parse_jaas_config,
)
from broker.security.mechanism import SaslServer

SERVED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
INTER_BROKER_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_LOGIN_MODULES = {
    "PLAIN": PLAIN_LOGIN_MODULE,
    "SCRAM-SHA-256": SCRAM_LOGIN_MODULE,
    "SCRAM-SHA-512": SCRAM_LOGIN_MODULE,
    "OAUTHBEARER": OAUTHBEARER_LOGIN_MODULE,
}
_MECHANISM_PREFIXES = "|".join(re.escape(m.lower()) for m in (*SERVED_MECHANISMS, "GSSAPI"))
# The listener-prefixed keys logway knows: group 1 the listener, 2 the mechanism, 3 the key.
LISTENER_KEY = re.compile(
    rf"listener\.name\.([^.]+)\.(?:({_MECHANISM_PREFIXES})\.(sasl\.jaas\.config|connections\.max\.reauth\.ms)"
    r"|()(sasl\.enabled\.mechanisms|connections\.max\.reauth\.ms))"
)


class SaslConfigError(ValueError):
    pass


def is_listener_sasl_key(name: str) -> bool:
    return LISTENER_KEY.fullmatch(name) is not None


def unknown_key_reason(name: str) -> str | None:
    """Why a SASL key logway does not take is refused, when there is more to say than that it
    is unknown."""
    if name == "sasl.jaas.config":
        return (
            "sasl.jaas.config is ignored by Kafka brokers (\"Server config sasl.jaas.config should be "
            "prefixed with SASL mechanism name\"), so logway refuses it: set "
            "listener.name.<listener>.<mechanism>.sasl.jaas.config instead"
        )
    if name.startswith("listener.name.") and name.endswith(".sasl.jaas.config"):
        return (
            f"{name}: the JAAS configuration of a listener must name its SASL mechanism, "
            "listener.name.<listener>.<mechanism>.sasl.jaas.config (Kafka ignores it otherwise)"
        )
    return None


@dataclass(frozen=True)
class SaslListener:
    listener: str
    mechanisms: tuple[str, ...]
    jaas: Mapping[str, JaasEntry]
    max_reauth_ms: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class InterBrokerSasl:
    """What this broker logs in with to other brokers' inter-broker listener."""

    mechanism: str
    username: str
    password: str


def resolve(
    settings: Mapping[str, str],
    get: Callable[[str], object],
    listeners: Sequence[tuple[str, str]],
    inter_broker_listener: str | None,
    changed: Callable[[str], bool],
) -> tuple[dict[str, SaslListener], InterBrokerSasl | None]:
    """Per SASL listener its settings, and the inter-broker login when that listener is SASL.
    `settings`: the raw keys set; `get`: typed values of plain keys; `listeners`: (name,
    security protocol) pairs; `changed`: whether a plain key is set to other than its default.
    SaslConfigError for anything Kafka would refuse or logway cannot honour, and for keys set
    that would have no effect."""
    names = {name for name, _ in listeners}
    for key in settings:
        match = LISTENER_KEY.fullmatch(key)
        if match is not None and match[1].upper() not in names:
            raise SaslConfigError(f"{key} names listener {match[1].upper()}, which is not in listeners")
    result: dict[str, SaslListener] = {}
    for name, protocol in listeners:
        if protocol in SASL_PROTOCOLS:
            result[name] = _listener(settings, get, name)
        else:
            for key in settings:
                match = LISTENER_KEY.fullmatch(key)
                if match is not None and match[1].upper() == name:
                    raise SaslConfigError(f"{key} is set, but listener {name} uses {protocol}, not SASL")
    _refuse_unused(settings, changed, result, inter_broker_listener)
    inter_broker = None
    if inter_broker_listener is not None and inter_broker_listener in result:
        inter_broker = _inter_broker(get, result[inter_broker_listener])
    return result, inter_broker


def _refuse_unused(
    settings: Mapping[str, str],
    changed: Callable[[str], bool],
    sasl_listeners: Mapping[str, SaslListener],
    inter_broker_listener: str | None,
) -> None:
    """SASL keys set where nothing reads them are refused (Kafka ignores them): a key is
    honoured, or refused at start. Plain keys count when `changed` from their defaults (a
    copy of Kafka's server.properties may spell defaults out), listener-prefixed ones when
    set. `sasl_listeners`: the resolved SASL listeners."""
    add = "remove it, or add a SASL_PLAINTEXT or SASL_SSL listener (listener.security.protocol.map)"
    for key in ("sasl.enabled.mechanisms", "connections.max.reauth.ms"):
        if changed(key) and not sasl_listeners:
            raise SaslConfigError(
                f"{key} is set but no listener uses SASL_PLAINTEXT or SASL_SSL: it would have no effect; {add}"
            )
    if changed("sasl.enabled.mechanisms") and all(
        f"listener.name.{name.lower()}.sasl.enabled.mechanisms" in settings for name in sasl_listeners
    ):
        raise SaslConfigError(
            "sasl.enabled.mechanisms is set but every SASL listener takes its own "
            "listener.name.<listener>.sasl.enabled.mechanisms: it would have no effect; remove it"
        )
    for name, listener in sasl_listeners.items():
        prefix = f"listener.name.{name.lower()}."
        for key in settings:
            match = LISTENER_KEY.fullmatch(key)
            if match is None or match[1].upper() != name or not match[2]:
                continue
            mechanism = match[2].upper()
            if mechanism not in listener.mechanisms:
                raise SaslConfigError(
                    f"{key} is set but SASL mechanism {mechanism} is not enabled on listener {name} "
                    f"(it serves {', '.join(listener.mechanisms)}): it would have no effect; remove it, or "
                    f"enable {mechanism} ({prefix}sasl.enabled.mechanisms or sasl.enabled.mechanisms)"
                )
        if prefix + "connections.max.reauth.ms" in settings and all(
            f"{prefix}{m.lower()}.connections.max.reauth.ms" in settings for m in listener.mechanisms
        ):
            raise SaslConfigError(
                f"{prefix}connections.max.reauth.ms is set but every mechanism of listener {name} takes its own "
                f"{prefix}<mechanism>.connections.max.reauth.ms: it would have no effect; remove it"
            )
    if changed("connections.max.reauth.ms") and all(
        any(key in settings for key in (f"listener.name.{name.lower()}.{m.lower()}.connections.max.reauth.ms",
                                        f"listener.name.{name.lower()}.connections.max.reauth.ms"))
        for name, listener in sasl_listeners.items()
        for m in listener.mechanisms
    ):
        raise SaslConfigError(
            "connections.max.reauth.ms is set but every SASL listener takes its own "
            "listener.name.<listener>[.<mechanism>].connections.max.reauth.ms: it would have no effect; remove it"
        )
    if changed("sasl.mechanism.inter.broker.protocol"):
        if inter_broker_listener is None:
            raise SaslConfigError(
                "sasl.mechanism.inter.broker.protocol is set but this broker is standalone (no "
                "zookeeper.connect): no broker logs in to another, so it would have no effect; remove it, "
                "or set zookeeper.connect"
            )
        if inter_broker_listener not in sasl_listeners:
            raise SaslConfigError(
                f"sasl.mechanism.inter.broker.protocol is set but the inter-broker listener "
                f"{inter_broker_listener} does not use SASL: it would have no effect; remove it, or make "
                "inter.broker.listener.name a SASL_PLAINTEXT or SASL_SSL listener"
            )


def _listener(settings: Mapping[str, str], get: Callable[[str], object], name: str) -> SaslListener:
    prefix = f"listener.name.{name.lower()}."
    raw_mechanisms = settings.get(prefix + "sasl.enabled.mechanisms")
    if raw_mechanisms is not None:
        mechanisms = [m.strip() for m in raw_mechanisms.split(",") if m.strip()]
    else:
        mechanisms = list(get("sasl.enabled.mechanisms"))
    if not mechanisms:
        raise SaslConfigError(f"listener {name} uses SASL but sasl.enabled.mechanisms is empty")
    for mechanism in mechanisms:
        if mechanism == "GSSAPI":
            raise SaslConfigError(
                f"listener {name}: sasl.enabled.mechanisms includes GSSAPI (Kerberos; Kafka's default), "
                f"which logway does not serve; enable some of {', '.join(SERVED_MECHANISMS)} instead"
            )
        if mechanism not in SERVED_MECHANISMS:
            raise SaslConfigError(
                f"listener {name}: SASL mechanism {mechanism} is not served by logway "
                f"(it serves {', '.join(SERVED_MECHANISMS)})"
            )
    jaas: dict[str, JaasEntry] = {}
    max_reauth: dict[str, int] = {}
    for mechanism in mechanisms:
        jaas[mechanism] = _jaas_entry(settings, name, mechanism)
        max_reauth[mechanism] = _max_reauth(settings, get, prefix, mechanism)
    return SaslListener(name, tuple(mechanisms), jaas, max_reauth)


def _jaas_entry(settings: Mapping[str, str], listener: str, mechanism: str) -> JaasEntry:
    key = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
    text = settings.get(key)
    if text is None:
        raise SaslConfigError(
            f"Could not find a 'KafkaServer' or '{listener.lower()}.KafkaServer' entry in the JAAS "
            f"configuration. System property 'java.security.auth.login.config' is not set "
            f"(logway reads the JAAS configuration of SASL mechanism {mechanism} on listener "
            f"{listener} from {key} only)"
        )
    try:
        entries = parse_jaas_config(text)
    except JaasConfigError as exc:
        raise SaslConfigError(f"Invalid value for configuration {key}: {exc}") from None
    if not entries:
        raise SaslConfigError(f"{key}: JAAS config property does not contain any login modules")
    if len(entries) != 1:
        raise SaslConfigError(f"{key}: JAAS config property contains {len(entries)} login modules, should be 1 module")
    entry = entries[0]
    if entry.login_module != _LOGIN_MODULES[mechanism]:
        raise SaslConfigError(
            f"{key}: SASL mechanism {mechanism} needs login module {_LOGIN_MODULES[mechanism]}, "
            f"not {entry.login_module}"
        )
    if mechanism == "OAUTHBEARER":
        try:
            oauthbearer.UnsecuredValidator(entry.options)
        except ValueError as exc:
            raise SaslConfigError(f"{key}: {exc}") from None
    return entry


def _max_reauth(settings: Mapping[str, str], get: Callable[[str], object], prefix: str, mechanism: str) -> int:
    for key in (f"{prefix}{mechanism.lower()}.connections.max.reauth.ms", f"{prefix}connections.max.reauth.ms"):
        raw = settings.get(key)
        if raw is not None:
            try:
                return int(raw.strip())
            except ValueError:
                raise SaslConfigError(
                    f"Invalid value {raw} for configuration {key}: Not a number of type LONG"
                ) from None
    return int(get("connections.max.reauth.ms"))  # type: ignore[arg-type]


def _inter_broker(get: Callable[[str], object], listener: SaslListener) -> InterBrokerSasl:
    mechanism = str(get("sasl.mechanism.inter.broker.protocol"))
    if mechanism not in listener.mechanisms:
        raise SaslConfigError(
            "sasl.mechanism.inter.broker.protocol must be included in sasl.enabled.mechanisms when "
            f"SASL is used for inter-broker communication ({mechanism} is not enabled on listener "
            f"{listener.listener})"
        )
    if mechanism not in INTER_BROKER_MECHANISMS:
        raise SaslConfigError(
            f"sasl.mechanism.inter.broker.protocol={mechanism}: logway's brokers log in to each other "
            f"with {', '.join(INTER_BROKER_MECHANISMS)} only"
        )
    options = listener.jaas[mechanism].options
    username, password = options.get("username"), options.get("password")
    if not username or password is None:
        raise SaslConfigError(
            f"listener.name.{listener.listener.lower()}.{mechanism.lower()}.sasl.jaas.config must set "
            "username and password: the broker logs in with them to the other brokers' inter-broker listener"
        )
    return InterBrokerSasl(mechanism, username, password)


def server_factories(
    listener: SaslListener, scram_lookup: scram.CredentialLookup
) -> dict[str, Callable[[], SaslServer]]:
    """Per enabled mechanism of `listener`, a maker of a fresh server side of one exchange:
    PLAIN's users from its JAAS entry, SCRAM's credentials from `scram_lookup`, OAUTHBEARER's
    unsecured validator configured by its JAAS options."""
    factories: dict[str, Callable[[], SaslServer]] = {}
    for mechanism in listener.mechanisms:
        options = listener.jaas[mechanism].options
        if mechanism == "PLAIN":
            users = plain.users_from_jaas_options(options)
            factories[mechanism] = lambda users=users: plain.PlainServer(users)
        elif mechanism in scram.MECHANISMS:
            scram_mechanism = scram.MECHANISMS[mechanism]
            factories[mechanism] = lambda m=scram_mechanism: scram.ScramServer(m, scram_lookup)
        else:
            validator = oauthbearer.UnsecuredValidator(options)
            factories[mechanism] = lambda v=validator: oauthbearer.OAuthBearerServer(v)
    return factories
