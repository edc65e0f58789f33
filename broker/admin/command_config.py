"""--command-config: a client properties file as Kafka's tools take it, turned into what the
admin client connects with.

    security.protocol=SASL_SSL
    sasl.mechanism=SCRAM-SHA-512
    sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\
        username="admin" password="admin-secret";
    ssl.truststore.type=PEM
    ssl.truststore.location=/etc/kafka/ca.pem

- security.protocol: PLAINTEXT (default), SSL, SASL_PLAINTEXT, SASL_SSL.
- ssl.*: the keys and meaning of the broker's (broker.security.tls builds the context: PEM or
  PKCS12 stores, the system's CAs without a truststore, host name checked unless
  ssl.endpoint.identification.algorithm is empty); a keystore is the client certificate.
- sasl.mechanism: PLAIN (Kafka's client default is GSSAPI, which logway-admin does not speak, so
  a SASL protocol needs the key), SCRAM-SHA-256 or SCRAM-SHA-512. The login comes from
  sasl.jaas.config (the PlainLoginModule's or ScramLoginModule's username and password), or
  from sasl.username and sasl.password (librdkafka's names).
- client.id (default logway-admin), request.timeout.ms (default 30000).

Other keys of Kafka's admin client (retries, metadata ages, buffer sizes ...) change nothing
here: as Kafka's clients do with keys they do not use, a warning names them. A key that would
change security (sasl.*, ssl.* not understood) is refused.
"""

import ssl
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from broker.config import BROKER_CONFIGS, ConfigError, parse_properties
from broker.security import scram, tls
from protocol.jaas import PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE, JaasConfigError, parse_jaas_config
from broker.security.sasl_clients import PlainClient, ScramExchange

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_LOGIN_MODULES = {"PLAIN": PLAIN_LOGIN_MODULE, "SCRAM-SHA-256": SCRAM_LOGIN_MODULE, "SCRAM-SHA-512": SCRAM_LOGIN_MODULE}
_OWN_KEYS = frozenset({
    "security.protocol", "sasl.mechanism", "sasl.jaas.config", "sasl.username", "sasl.password",
    "client.id", "request.timeout.ms", "bootstrap.servers",
})
_SSL_KEYS = frozenset(name for name in BROKER_CONFIGS if name.startswith("ssl."))


@dataclass(frozen=True)
class ClientSettings:
    protocol: str = "PLAINTEXT"
    client_id: str = "logway-admin"
    request_timeout_s: float = 30.0
    ssl_context: ssl.SSLContext | None = None
    sasl: Callable[[], PlainClient | ScramExchange] | None = None


def load(path: str | None) -> ClientSettings:
    """The settings of the properties file at `path` (None: PLAINTEXT, defaults); ConfigError
    saying what is wrong otherwise."""
    if path is None:
        return ClientSettings()
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    except OSError as exc:
        raise ConfigError(f"cannot read --command-config {path}: {exc.strerror}") from None
    return settings(parse_properties(text))


def settings(props: Mapping[str, str]) -> ClientSettings:
    unknown = [key for key in props if key not in _OWN_KEYS and key not in _SSL_KEYS]
    refused = [key for key in unknown if key.startswith(("ssl.", "sasl."))]
    if refused:
        raise ConfigError(f"logway-admin cannot honour {', '.join(sorted(refused))} (unknown security settings)")
    for key in sorted(unknown):
        print(f"WARN The configuration '{key}' was supplied but isn't used by logway-admin.", file=sys.stderr)
    protocol = props.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in PROTOCOLS:
        raise ConfigError(f"Invalid value {protocol} for configuration security.protocol: expected one of {', '.join(PROTOCOLS)}")
    try:
        timeout_ms = int(props.get("request.timeout.ms", "30000"))
    except ValueError:
        raise ConfigError(f"Invalid value {props['request.timeout.ms']} for configuration request.timeout.ms") from None
    context = _ssl_context(props) if protocol in ("SSL", "SASL_SSL") else None
    sasl = _sasl(props) if protocol.startswith("SASL_") else None
    return ClientSettings(protocol, props.get("client.id", "logway-admin"), timeout_ms / 1000, context, sasl)


def _ssl_context(props: Mapping[str, str]) -> ssl.SSLContext:
    values = {name: definition.default for name, definition in BROKER_CONFIGS.items() if name in _SSL_KEYS}
    for key in _SSL_KEYS & props.keys():
        values[key] = BROKER_CONFIGS[key].parse(props[key])
    return tls.client_context(values)


def _sasl(props: Mapping[str, str]) -> Callable[[], PlainClient | ScramExchange]:
    mechanism = props.get("sasl.mechanism", "GSSAPI").upper()
    if mechanism not in MECHANISMS:
        raise ConfigError(
            f"sasl.mechanism {mechanism} is not supported by logway-admin: set one of {', '.join(MECHANISMS)}"
        )
    username, password = _login(props, mechanism)
    if mechanism == "PLAIN":
        return lambda: PlainClient(username, password)
    scram_mechanism = scram.MECHANISMS[mechanism]
    return lambda: ScramExchange(scram_mechanism, username, password)


def _login(props: Mapping[str, str], mechanism: str) -> tuple[str, str]:
    if "sasl.jaas.config" in props:
        try:
            entries = parse_jaas_config(props["sasl.jaas.config"])
        except JaasConfigError as exc:
            raise ConfigError(f"sasl.jaas.config: {exc}") from None
        if len(entries) != 1 or entries[0].login_module != _LOGIN_MODULES[mechanism]:
            raise ConfigError(f"sasl.jaas.config must hold one entry, of {_LOGIN_MODULES[mechanism]} for {mechanism}")
        options = entries[0].options
    else:
        options = {"username": props.get("sasl.username"), "password": props.get("sasl.password")}
    if options.get("username") is None or options.get("password") is None:
        raise ConfigError(
            f"{mechanism} needs a username and a password: sasl.jaas.config, or sasl.username and sasl.password"
        )
    return options["username"], options["password"]
