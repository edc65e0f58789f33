"""Broker configuration: a Java .properties file with Kafka's key names, types and defaults.

    cfg = BrokerConfig.load("config/server.properties", ["log.retention.hours=1"])
    cfg.listeners, cfg.advertised_listeners, cfg.log_dirs, cfg.log_config()

Every key logway knows is typed and checked when the config is built; a bad value stops startup
with a ConfigError naming the key and the value. So does a key logway does not know: Kafka logs
such keys and ignores them, but a setting that is silently not honoured (a topic-level key such
as file.delete.delay.ms in server.properties, a feature not built yet) is worse than a refusal. Topic-level defaults come from the broker keys that stand for
them (`log.retention.hours` for `retention.ms`, ...), resolved by `storage.log_config`.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

from broker.security.ssl_principal_mapper import SslPrincipalMapper
from protocol.config_types import ConfigEntry, ConfigSource, ConfigSynonym, ConfigType
from protocol.properties import PropertiesError
from protocol.properties import parse_properties as _parse_properties
from broker.security import sasl_config
from storage.log_config import (
    INT_MAX,
    LONG_MAX,
    PREALLOCATE_REFUSAL,
    TOPIC_CONFIGS,
    InvalidConfigError,
    LogConfig,
    check_local_retention,
    check_value,
    format_value,
    parse_value,
)

from broker.security.authorizer import authorizer_enabled, parse_super_users
from replication.replica_selector import replica_selector
from storage.remote.storage_manager import fs_options

__all__ = [
    "parse_properties",
    "ConfigError",
    "Listener",
    "SECURITY_PROTOCOLS",
    "TLS_PROTOCOLS",
    "parse_security_protocol_map",
    "parse_listeners",
    "BrokerConfigDef",
    "BROKER_CONFIGS",
    "BrokerConfig",
]



class ConfigError(Exception):
    """The broker configuration is invalid; the broker must not start."""


# --------------------------------------------------------------------------------------------
# Java .properties
# --------------------------------------------------------------------------------------------


def parse_properties(text: str) -> dict[str, str]:
    """protocol.properties.parse_properties, its errors as ConfigError."""
    try:
        return _parse_properties(text)
    except PropertiesError as exc:
        raise ConfigError(str(exc)) from None


def _read_text(path: str | os.PathLike[str]) -> str:
    try:
        with open(path, "rb") as file:
            data = file.read()
    except OSError as exc:
        raise ConfigError(f"Cannot read broker config file {os.fspath(path)}: {exc}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")  # what java.util.Properties reads from a byte stream


# --------------------------------------------------------------------------------------------
# Listeners
# --------------------------------------------------------------------------------------------

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
TLS_PROTOCOLS = ("SSL", "SASL_SSL")  # the security protocols whose listeners speak TLS
_LISTENER_RE = re.compile(
    r"(?P<name>[^:/]*)://(?:\[(?P<v6>[0-9A-Za-z%._:-]*)\]|(?P<host>[0-9A-Za-z%._:-]*))"
    r":(?P<port>-?[0-9]+)",
    re.ASCII,
)
_WILDCARD_HOSTS = ("", "0.0.0.0", "::")


@dataclass(frozen=True)
class Listener:
    """One endpoint: a listener name (upper case), a host ("" = all interfaces) and a port."""

    name: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


def parse_security_protocol_map(text: str) -> dict[str, str]:
    """Parse "NAME:PROTOCOL,..." into {NAME: PROTOCOL}, both upper-cased and checked."""
    result: dict[str, str] = {}
    for item in _split_csv(text):
        name, sep, protocol = item.rpartition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not name or not protocol:
            raise ConfigError(
                f"Invalid value {text} for configuration listener.security.protocol.map: "
                f"'{item}' is not of the form LISTENER_NAME:SECURITY_PROTOCOL"
            )
        if protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(
                f"Invalid value {text} for configuration listener.security.protocol.map: "
                f"unknown security protocol {protocol} (known: {', '.join(SECURITY_PROTOCOLS)})"
            )
        if name in result:
            raise ConfigError(
                f"Invalid value {text} for configuration listener.security.protocol.map: "
                f"listener {name} appears more than once"
            )
        result[name] = protocol
    return result


def parse_listeners(
    text: str,
    protocol_map: Mapping[str, str],
    *,
    config_name: str = "listeners",
    require_distinct_ports: bool = True,
) -> list[Listener]:
    """Parse "NAME://host:port,..." (host may be empty; IPv6 in brackets).

    Listener names are case-insensitive (kept upper case) and must be distinct and present in
    `protocol_map` (every security protocol of Kafka is served).
    """
    listeners: list[Listener] = []
    for item in _split_csv(text):
        match = _LISTENER_RE.fullmatch(item)
        if match is None or not match["name"]:
            raise ConfigError(
                f"Invalid value {text} for configuration {config_name}: cannot parse '{item}' "
                "as LISTENER_NAME://host:port"
            )
        name = match["name"].upper()
        host = match["v6"] if match["v6"] is not None else match["host"]
        port = int(match["port"])
        if not 0 <= port <= 65535:
            raise ConfigError(
                f"Invalid value {text} for configuration {config_name}: port {port} of "
                f"listener {name} is out of range 0..65535"
            )
        protocol = protocol_map.get(name)
        if protocol is None:
            raise ConfigError(
                f"Invalid value {text} for configuration {config_name}: no security protocol "
                f"defined for listener {name} in listener.security.protocol.map"
            )
        if any(other.name == name for other in listeners):
            raise ConfigError(
                f"Invalid value {text} for configuration {config_name}: each listener must "
                f"have a different name, {name} appears more than once"
            )
        listeners.append(Listener(name, host, port))
    if require_distinct_ports:
        _check_distinct_ports(text, config_name, listeners)
    return listeners


def _check_distinct_ports(text: str, config_name: str, listeners: list[Listener]) -> None:
    """Ports must differ, except 0 (any free port) and one IPv4 + one IPv6 literal sharing one."""
    by_port: dict[int, list[Listener]] = {}
    for listener in listeners:
        if listener.port != 0:
            by_port.setdefault(listener.port, []).append(listener)
    for port, group in by_port.items():
        if len(group) == 1:
            continue
        versions = sorted(_ip_version(listener.host) for listener in group)
        if versions != [4, 6]:
            raise ConfigError(
                f"Invalid value {text} for configuration {config_name}: each listener must "
                f"have a different port, {port} is used by "
                + ", ".join(listener.name for listener in group)
            )


def _ip_version(host: str) -> int:
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).version
    except ValueError:
        return 0


def _split_csv(text: str) -> list[str]:
    return [item for item in (part.strip() for part in text.split(",")) if item]


# --------------------------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BrokerConfigDef:
    """One broker key: Kafka's name, type and default (typed; None = no default), checks, docs.

    `dynamic` marks keys Kafka lets AlterConfigs change at runtime; the others are reported
    read-only.
    """

    name: str
    type: ConfigType
    default: Any
    documentation: str
    minimum: int | float | None = None
    maximum: int | float | None = None
    allowed: tuple[str, ...] | None = None
    dynamic: bool = False

    def parse(self, raw: Any) -> Any:
        """Type and check a raw value; ConfigError naming the key and value otherwise."""
        try:
            value = parse_value(self.type, str(raw))
            check_value(value, minimum=self.minimum, maximum=self.maximum, allowed=self.allowed)
        except ValueError as exc:
            raise ConfigError(
                f"Invalid value {raw} for configuration {self.name}: {exc}"
            ) from None
        return value

    def format(self, value: Any) -> str | None:
        return format_value(self.type, value)


_B, _S, _I, _SH, _L, _D, _LIST, _PW = (
    ConfigType.BOOLEAN,
    ConfigType.STRING,
    ConfigType.INT,
    ConfigType.SHORT,
    ConfigType.LONG,
    ConfigType.DOUBLE,
    ConfigType.LIST,
    ConfigType.PASSWORD,
)
_COMPRESSION = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
_DEFAULT_PROTOCOL_MAP = (
    "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
)


def _c(name: str, ctype: ConfigType, default: Any, doc: str, **kw: Any) -> BrokerConfigDef:
    return BrokerConfigDef(name, ctype, default, doc, **kw)


_DEFS: tuple[BrokerConfigDef, ...] = (
    # --- identity and cluster
    _c("broker.id", _I, -1,
       "Id of this broker, unique in the cluster. -1 means none was configured.", minimum=-1),
    _c("broker.id.generation.enable", _B, True,
       "Cluster mode: a broker without broker.id (and without one stored in meta.properties) "
       "gets reserved.broker.max.id + a sequence number from ZooKeeper (/brokers/seqid)."),
    _c("reserved.broker.max.id", _I, 1000,
       "The largest broker.id that can be configured; generated ids start above it.", minimum=0),
    _c("broker.rack", _S, None,
       "Rack or availability zone of this broker; replicas are spread across racks, and with "
       "replica.selector.class consumers of the same client.rack read from this broker."),
    _c("replica.selector.class", _S, None,
       "The replica selector that picks the replica a consumer reads from (KIP-392): unset, "
       "the leader; org.apache.kafka.common.replica.RackAwareReplicaSelector, a replica in the "
       "consumer's client.rack. Any other class is refused."),
    _c("zookeeper.connect", _S, None,
       "ZooKeeper hosts as host:port[,host:port...][/chroot]. When absent, logway runs as a "
       "standalone broker."),
    _c("zookeeper.session.timeout.ms", _I, 18000, "ZooKeeper session timeout."),
    _c("zookeeper.connection.timeout.ms", _I, None,
       "Longest wait for the ZooKeeper connection; zookeeper.session.timeout.ms when unset."),
    # --- network
    _c("listeners", _S, "PLAINTEXT://:9092",
       "Comma separated NAME://host:port endpoints the broker listens on. An empty host binds "
       "every interface; IPv6 hosts go in brackets.", dynamic=True),
    _c("advertised.listeners", _S, None,
       "Endpoints given to clients in metadata, when they differ from listeners. Unset means "
       "listeners; an empty or wildcard host is replaced by this machine's hostname.",
       dynamic=True),
    _c("listener.security.protocol.map", _S, _DEFAULT_PROTOCOL_MAP,
       "NAME:PROTOCOL pairs giving the security protocol of each listener name. logway "
       "serves PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL.", dynamic=True),
    _c("inter.broker.listener.name", _S, None,
       "Listener that brokers use to talk to each other; must be an advertised listener. "
       "Only one of it and security.inter.broker.protocol may be set."),
    _c("security.inter.broker.protocol", _S, "PLAINTEXT",
       "Security protocol brokers use to talk to each other, naming the listener of that name. "
       "When neither it nor inter.broker.listener.name is set, logway uses the first "
       "advertised listener (Kafka: the one named PLAINTEXT).", allowed=SECURITY_PROTOCOLS),
    # --- SASL (broker/security/sasl_config.py resolves the listener.name.<l>. prefixed keys)
    _c("sasl.enabled.mechanisms", _LIST, ["GSSAPI"],
       "SASL mechanisms served on SASL listeners (listener.name.<l>.sasl.enabled.mechanisms "
       "overrides it per listener). Kafka's default GSSAPI is refused on a SASL listener: logway "
       "serves PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER."),
    _c("sasl.mechanism.inter.broker.protocol", _S, "GSSAPI",
       "SASL mechanism brokers log in to each other with when the inter-broker listener is SASL "
       "(PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512); the listener's JAAS entry for it gives the "
       "username and password. Refused when set otherwise, or on a standalone broker."),
    _c("connections.max.reauth.ms", _L, 0,
       "Lifetime of a SASL session (KIP-368) after which a client must re-authenticate or have "
       "its connection closed; 0: sessions do not expire (OAUTHBEARER tokens still bound them)."),
    _c("num.network.threads", _I, 3,
       "Kafka's network threads; logway serves all connections on one event loop, so only the "
       "default is accepted.", minimum=1, dynamic=True),
    _c("num.io.threads", _I, 8,
       "Kafka's request handler threads; logway handles requests on one event loop (disk work "
       "on its own threads), so only the default is accepted.", minimum=1, dynamic=True),
    # Kafka's defaults are 102400 for both; a fixed buffer turns off Linux's autotuning, which
    # halved the throughput of 1 MiB produce requests over loopback (benchmarks/RESULTS.md).
    _c("socket.send.buffer.bytes", _I, -1,
       "SO_SNDBUF of the server sockets; -1 (logway's default) keeps the OS's, autotuned."),
    _c("socket.receive.buffer.bytes", _I, -1,
       "SO_RCVBUF of the server sockets; -1 (logway's default) keeps the OS's, autotuned."),
    _c("socket.request.max.bytes", _I, 104857600,
       "Largest request the broker reads; bigger ones close the connection.", minimum=1),
    _c("queued.max.request.bytes", _L, -1,
       "Bytes of requests read and not yet answered, over all connections, before no more "
       "requests are read; -1 (or any value up to 0) for no limit."),
    _c("queued.max.requests", _I, 500,
       "Requests that may wait for an I/O thread before the network threads stop reading.",
       minimum=1),
    _c("quota.window.num", _I, 11,
       "The number of samples to retain in memory for client quotas.", minimum=1),
    _c("quota.window.size.seconds", _I, 1,
       "The time span of each sample for client quotas.", minimum=1),
    _c("connections.max.idle.ms", _L, 600000,
       "A connection with no request being served and no bytes read or written for this long "
       "is closed; negative: never."),
    _c("max.connections", _I, INT_MAX,
       "Connections the broker holds at once; more are closed as soon as accepted (those on "
       "the inter-broker listener excepted).", minimum=0, dynamic=True),
    _c("max.connections.per.ip", _I, INT_MAX,
       "Connections one IP address may hold; more are closed as soon as accepted.",
       minimum=0, dynamic=True),
    _c("max.connections.per.ip.overrides", _S, "",
       "host:count or ip:count pairs, comma separated, overriding max.connections.per.ip.",
       dynamic=True),
    # --- TLS (Kafka's names and defaults; broker.security.tls builds the contexts). Each may be
    # overridden for one listener as listener.name.<lower-case listener name>.<key>. Dynamic:
    # the keystore and truststore keys, which IncrementalAlterConfigs may change at runtime.
    _c("ssl.protocol", _S, "TLSv1.3",
       "Kafka's SSLContext protocol (TLS, TLSv1.2, TLSv1.3, ...). As in Kafka, which versions "
       "are offered is ssl.enabled.protocols'; this one is only checked."),
    _c("ssl.enabled.protocols", _LIST, ["TLSv1.2", "TLSv1.3"],
       "TLS versions offered: consecutive ones among TLSv1, TLSv1.1, TLSv1.2, TLSv1.3."),
    _c("ssl.cipher.suites", _LIST, None,
       "Cipher suites, by IANA (Java) or OpenSSL name; unset, OpenSSL's defaults. Without a TLS "
       "1.3 suite TLS 1.3 is off (as in Java); TLS 1.3 suites can only be listed all together."),
    _c("ssl.keystore.type", _S, "JKS",
       "PEM or PKCS12. JKS (Kafka's default) cannot be read: set one of the others.", dynamic=True),
    _c("ssl.keystore.location", _S, None,
       "The keystore file: PKCS12, or for PEM the private key and certificate chain.", dynamic=True),
    _c("ssl.keystore.password", _PW, None, "Password of a PKCS12 keystore.", dynamic=True),
    _c("ssl.key.password", _PW, None, "Password of an encrypted PEM private key.", dynamic=True),
    _c("ssl.keystore.key", _PW, None,
       "The private key in PEM (PKCS#8, possibly encrypted), inline; with ssl.keystore.type=PEM.",
       dynamic=True),
    _c("ssl.keystore.certificate.chain", _PW, None,
       "The certificate chain in PEM, inline; with ssl.keystore.key.", dynamic=True),
    _c("ssl.truststore.type", _S, "JKS",
       "PEM or PKCS12. JKS (Kafka's default) cannot be read: set one of the others.", dynamic=True),
    _c("ssl.truststore.location", _S, None,
       "The truststore file: PKCS12 or PEM certificates. Unset: the system's CAs.", dynamic=True),
    _c("ssl.truststore.password", _PW, None,
       "Password of a PKCS12 truststore (optional).", dynamic=True),
    _c("ssl.truststore.certificates", _PW, None,
       "Trusted certificates in PEM, inline; with ssl.truststore.type=PEM.", dynamic=True),
    _c("ssl.client.auth", _S, "none",
       "Client certificates: none, requested (checked when sent) or required.",
       allowed=("required", "requested", "none")),
    _c("ssl.endpoint.identification.algorithm", _S, "https",
       "https: the inter-broker client checks the other broker's host name against its "
       "certificate; empty: it does not."),
    _c("ssl.principal.mapping.rules", _S, "DEFAULT",
       "Rules mapping a client certificate's subject DN to its principal name (Kafka's syntax: "
       "RULE:pattern/replacement/[LU], DEFAULT)."),
    _c("ssl.allow.dn.changes", _B, False,
       "Whether a keystore changed at runtime may carry a certificate of another subject DN."),
    _c("ssl.allow.san.changes", _B, False,
       "Whether a keystore changed at runtime may drop subject alternative names."),
    _c("ssl.keymanager.algorithm", _S, "SunX509",
       "Java's key manager; logway (OpenSSL) has none, so only the default is accepted."),
    _c("ssl.trustmanager.algorithm", _S, "PKIX",
       "Java's trust manager; logway (OpenSSL) has none, so only the default is accepted."),
    _c("ssl.provider", _S, None, "Java's security provider; refused when set."),
    _c("ssl.secure.random.implementation", _S, None, "Java's SecureRandom; refused when set."),
    _c("ssl.engine.factory.class", _S, None, "Java's SslEngineFactory; refused when set."),
    # --- log basics
    _c("log.dir", _S, "/tmp/kafka-logs",
       "Directory holding the log data; used when log.dirs is not set."),
    _c("log.dirs", _S, None,
       "Comma separated directories holding the log data; takes precedence over log.dir."),
    _c("num.partitions", _I, 1,
       "Partitions of a topic created without a partition count.", minimum=1),
    _c("default.replication.factor", _I, 1,
       "Replication factor of a topic created without one."),
    _c("auto.create.topics.enable", _B, True,
       "Create a topic on first use (metadata request or produce) when it does not exist."),
    _c("delete.topic.enable", _B, True,
       "Allow DeleteTopics; when false, topic deletion is refused."),
    _c("num.recovery.threads.per.data.dir", _I, 1,
       "Threads of each data directory that load (and recover) its logs at startup, each its "
       "share one log after another; the directory's other disk work (fsyncs, checkpoint "
       "writes, file deletions, the flush at shutdown) has that many threads, at least two.",
       minimum=1, dynamic=True),
    _c("message.max.bytes", _I, 1048588,
       "Largest record batch, after compression, the broker accepts; default of the topic's "
       "max.message.bytes.", minimum=0, dynamic=True),
    _c("log.segment.bytes", _I, 1073741824,
       "Size at which a segment is rolled; default of the topic's segment.bytes.",
       minimum=14, dynamic=True),
    _c("log.roll.ms", _L, None,
       "Time after which a segment is rolled even if not full; log.roll.hours when unset. "
       "Default of the topic's segment.ms.", dynamic=True),
    _c("log.roll.hours", _I, 168,
       "Like log.roll.ms, in hours; used when log.roll.ms is not set.", minimum=1, dynamic=True),
    _c("log.roll.jitter.ms", _L, None,
       "Largest random amount taken off the roll time; log.roll.jitter.hours when unset. "
       "Default of the topic's segment.jitter.ms.", dynamic=True),
    _c("log.roll.jitter.hours", _I, 0,
       "Like log.roll.jitter.ms, in hours; used when log.roll.jitter.ms is not set.",
       minimum=0, dynamic=True),
    _c("log.index.interval.bytes", _I, 4096,
       "Bytes of records between two offset index entries; default of index.interval.bytes.",
       minimum=0, dynamic=True),
    _c("log.index.size.max.bytes", _I, 10485760,
       "Size of each segment's index files; default of the topic's segment.index.bytes.",
       minimum=4, dynamic=True),
    _c("log.retention.ms", _L, None,
       "How long a segment is kept before deletion; -1 (or any negative) keeps it forever. "
       "Takes precedence over log.retention.minutes and log.retention.hours. Default of the "
       "topic's retention.ms.", dynamic=True),
    _c("log.retention.minutes", _I, None,
       "Like log.retention.ms, in minutes; used when log.retention.ms is not set.",
       dynamic=True),
    _c("log.retention.hours", _I, 168,
       "Like log.retention.ms, in hours; used when neither log.retention.ms nor "
       "log.retention.minutes is set.", dynamic=True),
    _c("log.retention.bytes", _L, -1,
       "Size a partition may reach before old segments are deleted; -1 for no limit. Default "
       "of the topic's retention.bytes.", dynamic=True),
    _c("log.retention.check.interval.ms", _L, 300000,
       "How often the broker looks for segments to delete under the retention rules.",
       minimum=1),
    _c("log.segment.delete.delay.ms", _L, 60000,
       "Wait before a deleted segment's files are removed; default of file.delete.delay.ms.",
       minimum=0, dynamic=True),
    _c("log.cleanup.policy", _LIST, ["delete"],
       "Default cleanup policy of topics: delete, compact or both.",
       allowed=("compact", "delete"), dynamic=True),
    _c("log.flush.interval.messages", _L, LONG_MAX,
       "Records appended to a partition before it is fsynced; default of flush.messages.",
       minimum=1, dynamic=True),
    _c("log.flush.interval.ms", _L, None,
       "Longest time a record waits in memory before an fsync; log.flush.scheduler.interval.ms "
       "when unset. Default of the topic's flush.ms.", dynamic=True),
    _c("log.flush.scheduler.interval.ms", _L, LONG_MAX,
       "How often the flusher checks whether a log is due for an fsync.", dynamic=True),
    _c("log.flush.offset.checkpoint.interval.ms", _I, 60000,
       "How often the recovery point of each log is written to disk.", minimum=0),
    _c("log.flush.start.offset.checkpoint.interval.ms", _I, 60000,
       "How often the log start offset of each log is written to disk.", minimum=0),
    _c("log.message.timestamp.type", _S, "CreateTime",
       "CreateTime or LogAppendTime; default of the topic's message.timestamp.type.",
       allowed=("CreateTime", "LogAppendTime"), dynamic=True),
    _c("log.message.timestamp.difference.max.ms", _L, LONG_MAX,
       "Deprecated: largest gap, either way, between a CreateTime timestamp and the broker's "
       "clock; default of message.timestamp.difference.max.ms.", minimum=0, dynamic=True),
    _c("log.message.timestamp.before.max.ms", _L, LONG_MAX,
       "How far in the past a CreateTime timestamp may be; default of "
       "message.timestamp.before.max.ms.", minimum=0, dynamic=True),
    _c("log.message.timestamp.after.max.ms", _L, LONG_MAX,
       "How far in the future a CreateTime timestamp may be; default of "
       "message.timestamp.after.max.ms.", minimum=0, dynamic=True),
    _c("log.message.downconversion.enable", _B, True,
       "Whether fetches from old consumers may get batches converted to an old format; default "
       "of message.downconversion.enable. Without effect, as in Kafka 4: every Fetch version "
       "served reads the current format.", dynamic=True),
    _c("log.preallocate", _B, False,
       "Reserve a new segment's full size on disk; default of the topic's preallocate. logway "
       "does not, so only false is accepted.",
       dynamic=True),
    _c("compression.type", _S, "producer",
       "Codec for stored batches (uncompressed, zstd, lz4, snappy, gzip), or producer to keep "
       "the producer's; default of the topic's compression.type.",
       allowed=_COMPRESSION, dynamic=True),
    _c("min.insync.replicas", _I, 1,
       "In-sync replicas needed for an acks=all write to succeed; default of the topic's "
       "min.insync.replicas.", minimum=1, dynamic=True),
    _c("unclean.leader.election.enable", _B, False,
       "Let an out-of-sync replica become leader when no in-sync one is left, losing data.",
       dynamic=True),
    # --- log cleaner
    _c("log.cleaner.enable", _B, True,
       "Run the log cleaner, which compacts topics with the compact policy."),
    _c("log.cleaner.threads", _I, 1,
       "Threads compacting logs.", minimum=0, dynamic=True),
    _c("log.cleaner.dedupe.buffer.size", _L, 134217728,
       "Memory, over all cleaner threads, for the key map used to deduplicate.", dynamic=True),
    _c("log.cleaner.io.buffer.size", _I, 524288,
       "Memory, over all cleaner threads, for read and write buffers.", minimum=0, dynamic=True),
    _c("log.cleaner.backoff.ms", _L, 15000,
       "Pause of a cleaner thread that found nothing to clean.", minimum=0, dynamic=True),
    _c("log.cleaner.min.cleanable.ratio", _D, 0.5,
       "Dirty share of a log above which it is compacted; default of "
       "min.cleanable.dirty.ratio.", minimum=0, maximum=1, dynamic=True),
    _c("log.cleaner.min.compaction.lag.ms", _L, 0,
       "Shortest time a record stays uncompacted; default of min.compaction.lag.ms.",
       minimum=0, dynamic=True),
    _c("log.cleaner.max.compaction.lag.ms", _L, LONG_MAX,
       "Longest time a record may stay uncompacted; default of max.compaction.lag.ms.",
       minimum=1, dynamic=True),
    _c("log.cleaner.delete.retention.ms", _L, 86400000,
       "How long tombstones survive compaction; default of delete.retention.ms.",
       minimum=0, dynamic=True),
    # --- tiered storage (KIP-405; storage/remote, docs/tiered-storage.md)
    _c("remote.log.storage.system.enable", _B, False,
       "Tiered storage on this broker: topics with remote.storage.enable copy their closed "
       "segments to the remote store (rsm.config.url) and serve old offsets from it."),
    _c("remote.log.storage.manager.class.name", _S, None,
       "The remote storage manager. logway has one, over fsspec (a directory, S3 through s3fs, "
       "HDFS through pyarrow), used when this is unset or names it "
       "(logway.storage.remote.FsspecRemoteStorageManager); Java classes are refused."),
    _c("remote.log.metadata.manager.class.name", _S,
       "org.apache.kafka.server.log.remote.metadata.storage.TopicBasedRemoteLogMetadataManager",
       "The remote log metadata manager: only Kafka's topic-based one (the __remote_log_metadata "
       "topic) is served.",
       allowed=("org.apache.kafka.server.log.remote.metadata.storage.TopicBasedRemoteLogMetadataManager",)),
    _c("rlmm.config.remote.log.metadata.topic.num.partitions", _I, 50,
       "Partitions of __remote_log_metadata (fixed once the topic exists).", minimum=1),
    _c("rlmm.config.remote.log.metadata.topic.replication.factor", _SH, 3,
       "Replication factor of __remote_log_metadata (capped by the live brokers when it is made).",
       minimum=1),
    _c("remote.log.manager.task.interval.ms", _L, 30000,
       "How often the leader of each tiered partition copies its rolled segments, deletes local "
       "and remote segments past their retention and removes orphans from the store.", minimum=1),
    _c("remote.log.manager.copier.thread.pool.size", _I, 10,
       "Threads writing to and deleting from the remote store (copies, retention, orphans).",
       minimum=1),
    _c("remote.log.reader.threads", _I, 10,
       "Threads reading from the remote store for fetches below the local log start.", minimum=1),
    _c("remote.log.index.file.cache.total.size.bytes", _L, 1073741824,
       "Bytes of remote index files and record chunks kept in memory (least recently used go "
       "first) for fetches from the remote store.", minimum=1),
    _c("log.local.retention.ms", _L, -2,
       "Default of the topics' local.retention.ms: -2 takes log.retention.ms.", minimum=-2, dynamic=True),
    _c("log.local.retention.bytes", _L, -2,
       "Default of the topics' local.retention.bytes: -2 takes log.retention.bytes.", minimum=-2,
       dynamic=True),
    # --- consumer groups and offsets
    _c("offsets.topic.num.partitions", _I, 50,
       "Partitions of __consumer_offsets (fixed once the topic exists).", minimum=1),
    _c("offsets.topic.replication.factor", _SH, 3,
       "Replication factor of __consumer_offsets; creating it fails until that many brokers "
       "are up.", minimum=1),
    _c("offsets.topic.segment.bytes", _I, 104857600,
       "Segment size of __consumer_offsets, kept small for fast compaction and loading.",
       minimum=1),
    _c("offsets.retention.minutes", _I, 10080,
       "How long committed offsets of an empty group are kept.", minimum=1),
    _c("offsets.retention.check.interval.ms", _L, 600000,
       "How often expired offsets are looked for.", minimum=1),
    _c("offsets.commit.timeout.ms", _I, 5000,
       "Longest wait for an offset commit to be replicated before it fails.", minimum=1),
    _c("offsets.load.buffer.size", _I, 5242880,
       "Batch size for reading __consumer_offsets when a broker becomes coordinator.",
       minimum=1),
    _c("offset.metadata.max.bytes", _I, 4096,
       "Longest metadata string a committed offset may carry."),
    _c("group.initial.rebalance.delay.ms", _I, 3000,
       "Wait for more members before the first rebalance of an empty group."),
    _c("group.min.session.timeout.ms", _I, 6000,
       "Smallest session timeout a group member may ask for."),
    _c("group.max.session.timeout.ms", _I, 1800000,
       "Largest session timeout a group member may ask for."),
    _c("group.max.size", _I, INT_MAX,
       "Most members a consumer group may have.", minimum=1),
    # --- transactions and producer ids
    _c("transaction.state.log.num.partitions", _I, 50,
       "Partitions of __transaction_state (fixed once the topic exists).", minimum=1),
    _c("transaction.state.log.replication.factor", _SH, 3,
       "Replication factor of __transaction_state.", minimum=1),
    _c("transaction.state.log.min.isr", _I, 2,
       "min.insync.replicas of __transaction_state.", minimum=1),
    _c("transaction.state.log.segment.bytes", _I, 104857600,
       "Segment size of __transaction_state (kept small for fast loading).", minimum=1),
    _c("transaction.state.log.load.buffer.size", _I, 5242880,
       "Batch size for reading __transaction_state when a broker becomes coordinator.", minimum=1),
    _c("transaction.abort.timed.out.transaction.cleanup.interval.ms", _I, 10000,
       "How often the coordinator aborts transactions past their timeout.", minimum=1),
    _c("transaction.remove.expired.transaction.cleanup.interval.ms", _I, 3600000,
       "How often the coordinator removes expired transactional ids.", minimum=1),
    _c("transaction.max.timeout.ms", _I, 900000,
       "Largest transaction timeout a producer may ask for.", minimum=1),
    _c("transactional.id.expiration.ms", _I, 604800000,
       "A transactional id with no activity for this long is forgotten.", minimum=1),
    _c("producer.id.expiration.ms", _I, 86400000,
       "Idempotence state of a producer id unused for this long is dropped.",
       minimum=1, dynamic=True),
    _c("producer.id.expiration.check.interval.ms", _I, 600000,
       "How often partitions drop the state of expired producer ids.", minimum=1),
    # --- replication
    _c("replica.lag.time.max.ms", _L, 10000,
       "A follower that has not caught up within this time is removed from the ISR "
       "(10 s, the product's design; Kafka's default is 30 s since KIP-537)."),
    _c("replica.fetch.wait.max.ms", _I, 500,
       "Longest wait of a follower's fetch; at most replica.lag.time.max.ms."),
    _c("replica.fetch.min.bytes", _I, 1,
       "Bytes a follower's fetch waits for before it is answered."),
    _c("replica.fetch.max.bytes", _I, 1048576,
       "Bytes a follower asks for per partition (a larger first batch is still returned).",
       minimum=0),
    _c("replica.fetch.response.max.bytes", _I, 10485760,
       "Bytes a follower asks for per fetch over all partitions (a larger first batch is "
       "still returned).", minimum=0),
    _c("max.incremental.fetch.session.cache.slots", _I, 1000,
       "Incremental fetch sessions (KIP-227) the broker keeps for consumers and followers; 0 "
       "turns them off (every fetch is then a full one).", minimum=0),
    _c("leader.replication.throttled.rate", _L, LONG_MAX,
       "Bytes per second a leader sends to the replicas of the topics' "
       "leader.replication.throttled.replicas that are not in the ISR (replication quota).",
       minimum=0, dynamic=True),
    _c("follower.replication.throttled.rate", _L, LONG_MAX,
       "Bytes per second a follower fetches for the replicas of the topics' "
       "follower.replication.throttled.replicas while it is not in the ISR (replication quota).",
       minimum=0, dynamic=True),
    _c("replica.alter.log.dirs.io.max.bytes.per.second", _L, LONG_MAX,
       "Bytes per second all moves of replicas between this broker's log dirs copy "
       "(AlterReplicaLogDirs).", minimum=0, dynamic=True),
    _c("replication.quota.window.num", _I, 11,
       "The number of samples to retain in memory for replication quotas.", minimum=1),
    _c("replication.quota.window.size.seconds", _I, 1,
       "The time span of each sample for replication quotas.", minimum=1),
    _c("replica.fetch.backoff.ms", _I, 1000,
       "How long a follower waits after a failed fetch before fetching again.", minimum=0),
    _c("replica.high.watermark.checkpoint.interval.ms", _L, 5000,
       "How often high watermarks are written to replication-offset-checkpoint.", minimum=1),
    _c("replica.socket.timeout.ms", _I, 30000,
       "Socket timeout of follower fetches; at least replica.fetch.wait.max.ms."),
    _c("num.replica.fetchers", _I, 1,
       "Fetchers per source broker on a follower (each fetches a share of its partitions).",
       minimum=1, dynamic=True),
    _c("controlled.shutdown.enable", _B, True,
       "Move leadership away from this broker before it shuts down."),
    _c("auto.leader.rebalance.enable", _B, True,
       "Periodically move leadership back to the preferred replicas."),
    _c("leader.imbalance.check.interval.seconds", _L, 300,
       "How often leadership balance is checked.", minimum=1),
    _c("leader.imbalance.per.broker.percentage", _I, 10,
       "Share of a broker's preferred partitions it may not lead before a rebalance.", minimum=0),
    _c("controlled.shutdown.max.retries", _I, 3,
       "How often a stopping broker asks the controller to move its leaderships away.",
       minimum=0),
    _c("controlled.shutdown.retry.backoff.ms", _L, 5000,
       "Wait between controlled shutdown attempts.", minimum=0),
    _c("controller.socket.timeout.ms", _I, 30000,
       "Timeout of the controller's requests to brokers.", minimum=0),
    # --- metrics (broker/metrics); logway's own keys: Kafka reports through JMX
    _c("metrics.listener", _S, None,
       "Where to serve Prometheus metrics (GET /metrics) and readiness (GET /health): "
       "http://host:port, an empty host for every interface, port 0 for any free one. Unset: "
       "no endpoint."),
    _c("metrics.graphite.host", _S, None,
       "Graphite host to push the metrics to (its plaintext protocol); unset: no pushing."),
    _c("metrics.graphite.port", _I, 2003, "Graphite's plaintext port.", minimum=1, maximum=65535),
    _c("metrics.graphite.interval.ms", _L, 60000, "How often metrics are pushed to graphite.",
       minimum=1000),
    _c("metrics.graphite.prefix", _S, None,
       "Prefix of the pushed metric paths; unset: logway.broker<broker.id>."),
    # --- HTTP API (broker/http, docs/http.md); Confluent REST Proxy's keys with an http. prefix
    _c("http.listeners", _S, None,
       "Comma separated http://host:port or https://host:port URLs serving the Confluent REST "
       "Proxy API (v2 and v3); https uses the ssl.* settings. Unset: no HTTP API."),
    _c("http.authentication.method", _S, "NONE",
       "NONE, or BASIC: HTTP basic authentication checked against the SASL users (SCRAM "
       "credentials, PLAIN JAAS users); the principal User:<name> is what ACLs decide on."),
    _c("http.consumer.instance.timeout.ms", _I, 300000,
       "How long a v2 consumer instance may sit idle before it is removed (REST Proxy's "
       "consumer.instance.timeout.ms).", minimum=1),
    _c("http.consumer.request.timeout.ms", _I, 1000,
       "The longest a v2 GET records waits for records (REST Proxy's "
       "consumer.request.timeout.ms); a request's timeout parameter may shorten it.", minimum=0),
    _c("http.max.request.bytes", _I, 1048576,
       "Largest HTTP request body accepted; larger ones are answered 413.", minimum=1),
    # --- authorization (broker/security/authorizer.py)
    _c("authorizer.class.name", _S, "",
       "kafka.security.authorizer.AclAuthorizer (or its alias logway.acl) authorizes every "
       "request by ACLs; empty authorizes nothing (everything is allowed). Other classes are "
       "refused."),
    _c("super.users", _S, None,
       "Semicolon separated principals (User:admin;User:ANONYMOUS) allowed everything by the "
       "ACL authorizer."),
    _c("allow.everyone.if.no.acl.found", _B, False,
       "With the ACL authorizer: a resource no ACL applies to is open to everyone (else to "
       "nobody but super users)."),
)

BROKER_CONFIGS: Mapping[str, BrokerConfigDef] = MappingProxyType({d.name: d for d in _DEFS})


def _synonym_groups() -> dict[str, tuple[str, ...]]:
    """Broker keys that are one setting in several units (log.retention.ms/minutes/hours...)."""
    groups: dict[str, tuple[str, ...]] = {}
    for topic_def in TOPIC_CONFIGS.values():
        names = tuple(s.name for s in topic_def.synonyms)
        if len(names) > 1:
            for name in names:
                groups[name] = names
    return groups


_SYNONYM_GROUPS = _synonym_groups()


# --------------------------------------------------------------------------------------------
# BrokerConfig
# --------------------------------------------------------------------------------------------


class BrokerConfig:
    """The broker's typed, validated configuration. Immutable; `with_overrides` makes copies.

    `BrokerConfig()` is the all-default config.
    """

    __slots__ = (
        "_settings", "_values", "_listeners", "_advertised", "_log_config", "_protocol_map",
        "_listener_overrides", "_sasl_listeners", "_inter_broker_sasl", "_metrics_listener", "_http_listeners",
    )

    def __init__(self, props: Mapping[str, Any] | None = None) -> None:
        settings = {str(k): str(v) for k, v in (props or {}).items()}
        _refuse_unknown(settings)
        self._build(settings)

    # --- construction

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> BrokerConfig:
        """Type and check every key; an unknown one is a ConfigError."""
        return cls(props)

    @classmethod
    def load(
        cls, path: str | os.PathLike[str] | None, overrides: Sequence[str] = ()
    ) -> BrokerConfig:
        """Read a .properties file (when `path` is given), then apply "key=value" overrides."""
        props = parse_properties(_read_text(path)) if path is not None else {}
        for override in overrides:
            key, sep, value = override.partition("=")
            if not sep or not key.strip():
                raise ConfigError(f"Invalid override {override!r}: expected key=value")
            props[key.strip()] = value.strip()
        return cls(props)

    def with_overrides(self, settings: Mapping[str, Any]) -> BrokerConfig:
        """A copy with more explicit settings (later ones win)."""
        extra = {str(k): str(v) for k, v in settings.items()}
        _refuse_unknown(extra)
        copy = BrokerConfig.__new__(BrokerConfig)
        copy._build({**self._settings, **extra})
        return copy

    def _build(self, settings: dict[str, str]) -> None:
        self._settings = MappingProxyType(settings)
        self._values = {
            name: (definition.parse(settings[name]) if name in settings else definition.default)
            for name, definition in BROKER_CONFIGS.items()
        }
        protocol_map = parse_security_protocol_map(self._values["listener.security.protocol.map"])
        self._protocol_map = protocol_map
        self._listeners = tuple(parse_listeners(self._values["listeners"], protocol_map))
        advertised_text = self._values["advertised.listeners"]
        if advertised_text is None:
            self._advertised = self._listeners
        else:
            self._advertised = tuple(
                parse_listeners(
                    advertised_text,
                    protocol_map,
                    config_name="advertised.listeners",
                    require_distinct_ports=False,
                )
            )
        self._check_listener_names()
        self._listener_overrides = self._parse_listener_overrides(settings)
        self._check_tls_listeners()
        self._resolve_sasl(settings)
        if self._values["broker.id"] > self._values["reserved.broker.max.id"]:
            raise ConfigError("broker.id must be greater than or equal to -1 and not greater than reserved.broker.max.id")
        if not self.log_dirs:
            raise ConfigError("At least one log directory must be defined via log.dirs or log.dir")
        self._check_replica_timeouts()
        self._check_connection_limits()
        _refuse_thread_counts(self._values)
        _refuse_preallocation(self._values)
        _check_authorizer(self._values)
        self._metrics_listener = _parse_metrics_listener(self._values["metrics.listener"])
        self._http_listeners = parse_http_listeners(self._values["http.listeners"])
        self._refuse_unused_tls_keys(settings)
        if self._values["http.authentication.method"] not in ("NONE", "BASIC"):
            raise ConfigError(
                f"Invalid value {self._values['http.authentication.method']} for configuration "
                "http.authentication.method: expected NONE or BASIC"
            )
        _check_graphite(self._values)
        _check_remote_storage(self._values, settings)
        try:
            replica_selector(self._values["replica.selector.class"])
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        try:
            self._log_config = LogConfig.resolve({}, settings)
        except InvalidConfigError as exc:
            raise ConfigError(str(exc)) from None

    def security_protocol(self, listener_name: str) -> str:
        """The security protocol of a listener, from listener.security.protocol.map."""
        return self._protocol_map[listener_name]

    @property
    def inter_broker_listener_name(self) -> str:
        """inter.broker.listener.name; else the listener named by security.inter.broker.protocol
        when that is set; else the first advertised listener."""
        name = self._values["inter.broker.listener.name"]
        if name is None and self.is_set("security.inter.broker.protocol"):
            name = self._values["security.inter.broker.protocol"]
        return (name or self._advertised[0].name).upper()

    def ssl_settings(self, listener_name: str) -> dict[str, Any]:
        """The ssl.* settings of a listener, typed: listener.name.<name>.<key> where set, else
        <key> (Kafka's lookup, key by key). A SASL_SSL listener asks for client certificates
        only through its own listener.name.<name>.ssl.client.auth (KIP-684): the broker-wide
        ssl.client.auth is for SSL listeners, whose clients authenticate with certificates."""
        overrides = self._listener_overrides.get(listener_name.upper(), {})
        settings = {
            name: overrides.get(name, value)
            for name, value in self._values.items()
            if name.startswith("ssl.")
        }
        if self._protocol_map.get(listener_name.upper()) == "SASL_SSL" and "ssl.client.auth" not in overrides:
            settings["ssl.client.auth"] = "none"
        return settings

    def _parse_listener_overrides(self, settings: Mapping[str, str]) -> dict[str, dict[str, Any]]:
        """listener.name.<listener>.<key> settings by listener name (upper case) and key."""
        names = {listener.name for listener in self._listeners}
        overrides: dict[str, dict[str, Any]] = {}
        for key, raw in settings.items():
            match = _LISTENER_OVERRIDE_RE.fullmatch(key)
            if match is None:
                continue
            listener, name = match["listener"], match["key"]
            if listener != listener.lower() or listener.upper() not in names:
                raise ConfigError(
                    f"{key}: listener.name.<listener>.{name} must name a listener of listeners "
                    f"({', '.join(sorted(names))}) in lower case"
                )
            overrides.setdefault(listener.upper(), {})[name] = BROKER_CONFIGS[name].parse(raw)
        return overrides

    def _check_tls_listeners(self) -> None:
        """Every listener's ssl.* settings are checked at start (types, refused values and
        combinations); those of TLS listeners must also name a keystore. The files are read
        when the broker builds its contexts."""
        from broker.security import tls  # broker.security.tls imports this module

        for listener in self._listeners:
            settings = self.ssl_settings(listener.name)
            tls.check_settings(settings)
            try:
                SslPrincipalMapper(settings["ssl.principal.mapping.rules"])
            except ValueError as exc:
                raise ConfigError(
                    f"Invalid value {settings['ssl.principal.mapping.rules']} for configuration "
                    f"ssl.principal.mapping.rules: {exc}"
                ) from None
            if self._protocol_map[listener.name] in TLS_PROTOCOLS and not tls.keystore_given(settings):
                raise ConfigError(
                    f"Listener {listener.name} uses security protocol {self._protocol_map[listener.name]} "
                    "but has no keystore: set ssl.keystore.location (or ssl.keystore.key and "
                    f"ssl.keystore.certificate.chain), or listener.name.{listener.name.lower()}.ssl.keystore.location"
                )

    def _changed(self, name: str) -> bool:
        """Whether the operator set `name` to other than its default: what counts for refusing
        a key that would have no effect (a copy of Kafka's server.properties may spell out
        defaults, which change nothing)."""
        return name in self._settings and self._values[name] != BROKER_CONFIGS[name].default

    def _tls_readers(self) -> list[str]:
        """The names ssl_settings is called with: the SSL and SASL_SSL listeners, and HTTPS for
        the HTTP API when http.listeners has an https one (broker/http/app.py)."""
        readers = [listener.name for listener in self._listeners if self._protocol_map[listener.name] in TLS_PROTOCOLS]
        if any(scheme == "https" for scheme, _, _ in self._http_listeners) and "HTTPS" not in readers:
            readers.append("HTTPS")
        return readers

    def _why_plain_ssl_key_unread(self, reader: str, key: str) -> str | None:
        """None when ssl_settings(reader) takes the broker-wide `key`, else why not: the reader
        has its own listener.name. value, or it is a SASL_SSL listener, which never takes the
        broker-wide ssl.client.auth (KIP-684)."""
        if key in self._listener_overrides.get(reader, {}):
            return f"{reader} takes listener.name.{reader.lower()}.{key}"
        if key == "ssl.client.auth" and self._protocol_map.get(reader) == "SASL_SSL":
            return (
                f"{reader} is SASL_SSL, which asks for client certificates only through "
                f"listener.name.{reader.lower()}.ssl.client.auth (KIP-684)"
            )
        return None

    def _refuse_unused_tls_keys(self, settings: Mapping[str, str]) -> None:
        """ssl.* keys set (to other than their defaults) where nothing reads them are refused
        (Kafka ignores them): a key is honoured, or refused at start."""
        readers = self._tls_readers()
        if not readers:
            unused = [key for key in settings if key.startswith("ssl.") and self._changed(key)]
            if unused:
                raise ConfigError(
                    f"{', '.join(unused)} {'is' if len(unused) == 1 else 'are'} set but no listener uses SSL or "
                    "SASL_SSL (listener.security.protocol.map) and no http.listeners is https: it would have no "
                    f"effect; remove {'it' if len(unused) == 1 else 'them'}, or add a TLS listener or an https:// "
                    "http.listeners"
                )
        for key in settings:
            # A key IncrementalAlterConfigs may change (keystores, truststores) is not refused
            # for being overridden: Kafka's renewal sets listener.name.<l>.ssl.keystore.location
            # at run time over the server.properties one, which must not refuse the renewal.
            if key.startswith("ssl.") and self._changed(key) and not BROKER_CONFIGS[key].dynamic:
                unread = [self._why_plain_ssl_key_unread(reader, key) for reader in readers]
                if all(unread):
                    raise ConfigError(
                        f"{key} is set but no TLS listener takes it ({'; '.join(filter(None, unread))}): "
                        "it would have no effect; remove it"
                    )
            match = _LISTENER_OVERRIDE_RE.fullmatch(key)
            if (
                match is not None
                and match["listener"].upper() not in readers
                and self._listener_overrides[match["listener"].upper()][match["key"]] != BROKER_CONFIGS[match["key"]].default
            ):
                name = match["listener"].upper()
                raise ConfigError(
                    f"{key} is set but listener {name} uses {self._protocol_map[name]}, not SSL or "
                    f"SASL_SSL: it would have no effect; remove it, or map {name} to SSL or SASL_SSL in "
                    "listener.security.protocol.map"
                )

    def _check_listener_names(self) -> None:
        names = [listener.name for listener in self._listeners]
        for listener in self._advertised:
            if listener.name not in names:
                raise ConfigError(
                    f"advertised.listeners listener {listener.name} is not defined in listeners "
                    f"({', '.join(names)}); advertised listener names must be a subset of them"
                )
        inter_broker = self._values["inter.broker.listener.name"]
        if inter_broker is not None and self.is_set("security.inter.broker.protocol"):
            raise ConfigError(
                "Only one of inter.broker.listener.name and security.inter.broker.protocol should be set."
            )
        if inter_broker is None and self.is_set("security.inter.broker.protocol"):
            inter_broker = self._values["security.inter.broker.protocol"]
        if inter_broker is not None:
            advertised_names = [listener.name for listener in self._advertised]
            if inter_broker.upper() not in advertised_names:
                raise ConfigError(
                    f"inter.broker.listener.name must be a listener name defined in "
                    f"advertised.listeners; {inter_broker} is not one of "
                    f"{', '.join(advertised_names)}"
                )

    def _resolve_sasl(self, settings: Mapping[str, str]) -> None:
        try:
            self._sasl_listeners, self._inter_broker_sasl = sasl_config.resolve(
                settings,
                self.get,
                [(listener.name, self._protocol_map[listener.name]) for listener in self._listeners],
                # Standalone, no broker logs in to this one.
                self.inter_broker_listener_name if self._values["zookeeper.connect"] else None,
                self._changed,
            )
        except sasl_config.SaslConfigError as exc:
            raise ConfigError(str(exc)) from None

    def sasl_listener(self, listener_name: str) -> "sasl_config.SaslListener | None":
        """The SASL settings of a SASL_* listener; None for the others."""
        return self._sasl_listeners.get(listener_name)

    @property
    def inter_broker_sasl(self) -> "sasl_config.InterBrokerSasl | None":
        """The login for other brokers' inter-broker listener, when it is SASL."""
        return self._inter_broker_sasl

    def _check_replica_timeouts(self) -> None:
        wait = self._values["replica.fetch.wait.max.ms"]
        if wait > self._values["replica.socket.timeout.ms"]:
            raise ConfigError(
                "replica.socket.timeout.ms should always be at least replica.fetch.wait.max.ms "
                f"({wait}) to prevent unnecessary socket timeouts"
            )
        if wait > self._values["replica.lag.time.max.ms"]:
            raise ConfigError(
                "replica.fetch.wait.max.ms should always be at most replica.lag.time.max.ms "
                "to prevent frequent changes in ISR"
            )

    def _check_connection_limits(self) -> None:
        overrides = self.max_connections_per_ip_overrides
        if self._values["max.connections.per.ip"] == 0 and not overrides:
            raise ConfigError(
                "max.connections.per.ip is 0 and max.connections.per.ip.overrides names no host: "
                "no client could connect"
            )

    # --- generic access

    def get(self, name: str) -> Any:
        """The typed value of a known key (its default when unset); KeyError for others."""
        try:
            value = self._values[name]
        except KeyError:
            raise KeyError(f"Unknown broker config: {name}") from None
        return list(value) if isinstance(value, list) else value

    def is_set(self, name: str) -> bool:
        """Whether the operator set this key explicitly."""
        return name in self._settings

    @property
    def explicit_settings(self) -> Mapping[str, str]:
        """Raw strings of everything the operator set."""
        return self._settings

    # --- typed conveniences

    @property
    def broker_id(self) -> int:
        return self._values["broker.id"]

    @property
    def listeners(self) -> list[Listener]:
        """Where the broker binds, as configured (host "" = all interfaces)."""
        return list(self._listeners)

    @property
    def http_listeners(self) -> list[tuple[str, str, int]]:
        """http.listeners as (scheme, host, port); host "" = every interface."""
        return self._http_listeners

    @property
    def metrics_listener(self) -> tuple[str, int] | None:
        """metrics.listener as (host, port); host "" = every interface. None when unset."""
        return self._metrics_listener

    @property
    def metrics_graphite(self) -> GraphiteSettings | None:
        """Where and how often to push metrics to graphite; None when no host is set."""
        host = self._values["metrics.graphite.host"]
        if host is None:
            return None
        return GraphiteSettings(
            host,
            self._values["metrics.graphite.port"],
            self._values["metrics.graphite.interval.ms"],
            self._values["metrics.graphite.prefix"],
        )

    @property
    def advertised_listeners(self) -> list[Listener]:
        """What clients are told: advertised.listeners, else listeners; a wildcard host ("",
        0.0.0.0 or ::) is replaced by this machine's hostname."""
        hostname: str | None = None
        result = []
        for listener in self._advertised:
            if listener.host in _WILDCARD_HOSTS:
                if hostname is None:
                    hostname = socket.gethostname()
                listener = Listener(listener.name, hostname, listener.port)
            result.append(listener)
        return result

    @property
    def log_dirs(self) -> list[str]:
        """log.dirs split on commas when set, else log.dir."""
        text = self._values["log.dirs"]
        if text is None:
            text = self._values["log.dir"]
        return _split_csv(text)

    @property
    def max_connections_per_ip_overrides(self) -> dict[str, int]:
        """max.connections.per.ip.overrides as {host or ip: count}."""
        text = self._values["max.connections.per.ip.overrides"]
        overrides: dict[str, int] = {}
        for item in _split_csv(text):
            host, _, count = item.rpartition(":")
            host = host.strip().strip("[]")
            try:
                overrides[host] = int(count)
            except ValueError:
                host = ""
            if not host or overrides.get(host, -1) < 0:
                raise ConfigError(
                    f"Invalid value {text} for configuration max.connections.per.ip.overrides: "
                    f"'{item}' is not of the form host:count with a count of 0 or more"
                )
        return overrides

    def log_config(self) -> LogConfig:
        """The topic-level defaults this broker gives topics without overrides."""
        return self._log_config

    # --- DescribeConfigs

    def describe(
        self,
        include_synonyms: bool = True,
        layers: Sequence[tuple[Mapping[str, str], ConfigSource]] | None = None,
    ) -> list[ConfigEntry]:
        """Entries for every known key, with the value in effect.

        `layers`: where settings come from, highest precedence first (Kafka's dynamic per-broker
        and cluster-default configs, then server.properties); by default only this config's
        explicit settings, as STATIC_BROKER_CONFIG. Synonyms follow Kafka's ConfigHelper: for
        each layer in turn the set keys of the key's group (e.g. log.retention.ms, .minutes,
        .hours), then the defaults of the group, all from the first naming this key on; the
        source is that first one's, else DEFAULT_CONFIG.
        """
        if layers is None:
            layers = ((self._settings, ConfigSource.STATIC_BROKER_CONFIG),)
        entries = []
        for name, definition in BROKER_CONFIGS.items():
            synonyms = tuple(self._broker_synonyms(name, layers))
            entries.append(
                ConfigEntry(
                    name=name,
                    # Kafka never sends a password's value.
                    value=None if definition.type is ConfigType.PASSWORD else definition.format(self._values[name]),
                    source=synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG,
                    type=definition.type,
                    documentation=definition.documentation,
                    read_only=not definition.dynamic,
                    is_sensitive=definition.type is ConfigType.PASSWORD,
                    synonyms=synonyms if include_synonyms else (),
                )
            )
        return entries

    @staticmethod
    def _broker_synonyms(
        name: str, layers: Sequence[tuple[Mapping[str, str], ConfigSource]]
    ) -> list[ConfigSynonym]:
        group = _SYNONYM_GROUPS.get(name, (name,))
        found: list[ConfigSynonym] = []
        for settings, source in layers:
            for member in group:
                if member in settings:
                    raw = None if BROKER_CONFIGS[member].type is ConfigType.PASSWORD else settings[member]
                    found.append(ConfigSynonym(member, raw, source))
        for member in group:
            definition = BROKER_CONFIGS[member]
            if definition.default is not None:
                found.append(
                    ConfigSynonym(
                        member,
                        definition.format(definition.default),
                        ConfigSource.DEFAULT_CONFIG,
                    )
                )
        for position, synonym in enumerate(found):
            if synonym.name == name:
                return found[position:]
        return []

    # --- misc

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BrokerConfig):
            return NotImplemented
        return dict(self._settings) == dict(other._settings)

    def __hash__(self) -> int:
        return hash(frozenset(self._settings.items()))

    def __repr__(self) -> str:
        return f"BrokerConfig({dict(self._settings)!r})"


# Kafka's thread pools have no counterpart in logway, which serves connections and requests on
# one event loop. Their defaults, as copied from Kafka's server.properties, are accepted; any
# other value is refused, since it would be accepted and not honoured.
_THREAD_COUNTS_WITHOUT_EFFECT = ("num.network.threads", "num.io.threads")


def _refuse_thread_counts(values: Mapping[str, Any]) -> None:
    for name in _THREAD_COUNTS_WITHOUT_EFFECT:
        default = BROKER_CONFIGS[name].default
        if values[name] != default:
            raise ConfigError(
                f"{name}={values[name]} cannot be honoured: logway serves every connection and "
                f"request on one event loop, so it has no such threads; leave {name} unset "
                f"(or at Kafka's default, {default})"
            )


def _refuse_preallocation(values: Mapping[str, Any]) -> None:
    # Accepting true would accept a setting that is not acted on (topics refuse preallocate too).
    if values["log.preallocate"]:
        raise ConfigError(f"Invalid value true for configuration log.preallocate: {PREALLOCATE_REFUSAL}")


# listener.name.<listener>.<key>: a per-listener value of one of the keys below.
_LISTENER_OVERRIDE_RE = re.compile(r"listener\.name\.(?P<listener>[^.]+)\.(?P<key>ssl\..+)")


def _is_listener_override(name: str) -> bool:
    match = _LISTENER_OVERRIDE_RE.fullmatch(name)
    return match is not None and match["key"] in BROKER_CONFIGS


@dataclass(frozen=True)
class GraphiteSettings:
    host: str
    port: int
    interval_ms: int
    prefix: str | None  # None: logway.broker<id>, the id the broker resolved


def parse_http_listeners(text: str | None) -> list[tuple[str, str, int]]:
    """http.listeners: "http://host:port,https://host:port" -> [(scheme, host, port)]."""
    if text is None or not text.strip():
        return []

    def refuse(reason: str) -> ConfigError:
        return ConfigError(f"Invalid value {text} for configuration http.listeners: {reason}")

    found = []
    for item in text.split(","):
        try:
            url = urlsplit(item.strip())
            port = url.port
        except ValueError as exc:
            raise refuse(str(exc)) from None
        if url.scheme not in ("http", "https"):
            raise refuse("expected http://host:port or https://host:port")
        if port is None:
            raise refuse("a port is required (0 for any free one)")
        if url.path not in ("", "/") or url.query or url.fragment or url.username is not None:
            raise refuse("expected http://host:port or https://host:port")
        found.append((url.scheme, url.hostname or "", port))
    return found


def _parse_metrics_listener(text: str | None) -> tuple[str, int] | None:
    """http://host:port (a trailing /metrics allowed) -> (host, port)."""
    if text is None:
        return None

    def refuse(reason: str) -> ConfigError:
        return ConfigError(f"Invalid value {text} for configuration metrics.listener: {reason}")

    try:
        url = urlsplit(text.strip())
        port = url.port
    except ValueError as exc:
        raise refuse(str(exc)) from None
    if url.scheme != "http":
        raise refuse("expected http://host:port")
    if port is None:
        raise refuse("a port is required (0 for any free one)")
    if url.path not in ("", "/", "/metrics") or url.query or url.fragment or url.username is not None:
        raise refuse("expected http://host:port, metrics being served at /metrics")
    return url.hostname or "", port


def _check_graphite(values: Mapping[str, Any]) -> None:
    """The other metrics.graphite.* keys mean nothing without a host: refused alone (unless
    given their defaults)."""
    host = values["metrics.graphite.host"]
    if host is not None:
        if not host.strip():
            raise ConfigError("Invalid value  for configuration metrics.graphite.host: a host name is required")
        return
    alone = sorted(
        name for name, value in values.items()
        if name.startswith("metrics.graphite.") and value != BROKER_CONFIGS[name].default
    )
    if alone:
        raise ConfigError(f"{', '.join(alone)} set without metrics.graphite.host: nothing would be pushed")


def _check_authorizer(values: Mapping[str, Any]) -> None:
    try:
        enabled = authorizer_enabled(values["authorizer.class.name"])
        parse_super_users(values["super.users"])
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if not enabled:
        # Kafka passes these to the authorizer; without one they would be set and not honoured.
        unused = [name for name, active in (
            ("super.users", bool((values["super.users"] or "").strip())),
            ("allow.everyone.if.no.acl.found", values["allow.everyone.if.no.acl.found"]),
        ) if active]
        if unused:
            raise ConfigError(
                f"{', '.join(unused)} cannot be honoured without an authorizer: set "
                "authorizer.class.name=kafka.security.authorizer.AclAuthorizer, or leave them unset"
            )


# Settings of the remote store (Kafka's remote.log.storage.manager.impl.prefix): rsm.config.url
# names the store, every other rsm.config.<key> is one of its fsspec options.
RSM_CONFIG_PREFIX = "rsm.config."
RSM_URL = RSM_CONFIG_PREFIX + "url"
FSSPEC_STORAGE_MANAGER = "logway.storage.remote.FsspecRemoteStorageManager"


def remote_store_settings(settings: Mapping[str, str]) -> tuple[str | None, dict[str, str]]:
    """(rsm.config.url, the other rsm.config.* settings as fsspec options without the prefix)."""
    options = {
        name[len(RSM_CONFIG_PREFIX):]: value
        for name, value in settings.items()
        if name.startswith(RSM_CONFIG_PREFIX) and name != RSM_URL
    }
    return settings.get(RSM_URL), options


def _check_remote_storage(values: Mapping[str, Any], settings: Mapping[str, str]) -> None:
    manager = values["remote.log.storage.manager.class.name"]
    if manager is not None and manager != FSSPEC_STORAGE_MANAGER:
        raise ConfigError(
            f"Invalid value {manager} for configuration remote.log.storage.manager.class.name: logway's remote "
            f"storage manager is {FSSPEC_STORAGE_MANAGER} (unset picks it); it cannot load Java classes"
        )
    url, _options = remote_store_settings(settings)
    if not values["remote.log.storage.system.enable"]:
        tiered = sorted(name for name in settings if name.startswith(RSM_CONFIG_PREFIX))
        if tiered:
            raise ConfigError(f"{', '.join(tiered)} set without remote.log.storage.system.enable=true: nothing would use them")
        return
    if not url or not url.strip():
        raise ConfigError(
            f"remote.log.storage.system.enable=true needs {RSM_URL}: the store's URL (file:///a/directory, "
            "s3://bucket/prefix, hdfs://namenode/path)"
        )
    try:
        fs_options(url.strip(), _options)
    except ImportError as exc:
        raise ConfigError(f"{RSM_URL}: the store's file system cannot be loaded: {exc}") from None
    except ValueError as exc:
        # fsspec would take an unknown option and ignore it; the message names no value.
        raise ConfigError(f"{RSM_CONFIG_PREFIX}*: {exc}") from None
    config = LogConfig.resolve({}, settings)
    try:
        check_local_retention(config.retention_bytes, config.local_retention_bytes, config.retention_ms, config.local_retention_ms)
    except InvalidConfigError as exc:
        raise ConfigError(str(exc)) from None


def _refuse_unknown(settings: Mapping[str, str]) -> None:
    unknown = [
        name for name in settings
        if name not in BROKER_CONFIGS and not _is_listener_override(name) and not sasl_config.is_listener_sasl_key(name)
        and not name.startswith(RSM_CONFIG_PREFIX)
    ]
    if unknown:
        raise ConfigError("; ".join(_unknown_key_reason(name) for name in unknown))


def _unknown_key_reason(name: str) -> str:
    sasl_refusal = sasl_config.unknown_key_reason(name)
    if sasl_refusal is not None:
        return sasl_refusal
    topic_config = TOPIC_CONFIGS.get(name)
    if topic_config is not None and topic_config.synonyms:
        broker_key = topic_config.synonyms[-1].name
        return (
            f"{name} is a topic config, not a broker config: set it on a topic, or set its "
            f"broker-wide default {broker_key}"
        )
    return f"Unknown broker config {name!r}: logway does not honour it, so it refuses to start with it"
