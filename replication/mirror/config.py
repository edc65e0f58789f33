"""The mirror's configuration: a properties file in MirrorMaker 2's vocabulary (KIP-382,
connect/mirror's MirrorMakerConfig).

    clusters = A, B
    A.bootstrap.servers = a1:9092
    B.bootstrap.servers = b1:9092
    A->B.enabled = true
    A->B.topics = orders.*, payments
    replication.factor = 3

Keys, each at the top level (a default for every flow) or prefixed with a flow `A->B.`:
`topics` and `topics.exclude` (comma-separated regular expressions, each matching a whole topic
name), `replication.factor`, `emit.heartbeats.enabled`, `emit.heartbeats.interval.seconds`,
`refresh.topics.enabled`, `refresh.topics.interval.seconds`, `sync.topic.configs.enabled`,
`sync.topic.configs.interval.seconds`, `groups`, `groups.exclude`, `emit.checkpoints.enabled`,
`emit.checkpoints.interval.seconds`, `sync.group.offsets.enabled`,
`sync.group.offsets.interval.seconds`. Per flow only: `enabled`. Top level only: `clusters`,
`replication.policy.separator`. Per cluster (`A.`): `bootstrap.servers` (required) and the client
settings in CLIENT_KEYS. Defaults are MirrorMaker 2's (MirrorSourceConfig,
MirrorCheckpointConfig, MirrorHeartbeatConfig).

A key this module does not know, or knows and does not implement (`tasks.max`, `A.consumer.*`,
`A->B.offset-syncs.topic.location`, ...), stops the mirror at start with a message naming it,
never accepted and ignored.
"""

import re
from dataclasses import dataclass, field

from protocol.jaas import PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE, JaasConfigError, parse_jaas_config
from protocol.properties import PropertiesError, parse_properties

__all__ = ["MirrorConfigError", "ClusterConfig", "FlowConfig", "MirrorConfig", "parse_mirror_config", "load"]

# MirrorSourceConfig / DefaultTopicFilter defaults (Kafka 3.9).
TOPICS_DEFAULT = ".*"
TOPICS_EXCLUDE_DEFAULT = r".*[\-\.]internal, .*\.replica, __.*"
REPLICATION_FACTOR_DEFAULT = 2
EMIT_HEARTBEATS_INTERVAL_S_DEFAULT = 1
REFRESH_TOPICS_INTERVAL_S_DEFAULT = 600
SYNC_TOPIC_CONFIGS_INTERVAL_S_DEFAULT = 600
# MirrorCheckpointConfig / DefaultGroupFilter defaults (Kafka 3.9).
GROUPS_DEFAULT = ".*"
GROUPS_EXCLUDE_DEFAULT = "console-consumer-.*, connect-.*, __.*"
EMIT_CHECKPOINTS_INTERVAL_S_DEFAULT = 60
SYNC_GROUP_OFFSETS_INTERVAL_S_DEFAULT = 60

# Client settings a cluster may carry, in the Java clients' names. Each maps to librdkafka's
# name for the same thing (None: the same name).
CLIENT_KEYS: dict[str, str | None] = {
    "security.protocol": None,
    "sasl.mechanism": "sasl.mechanisms",
    "sasl.jaas.config": None,  # split into sasl.username / sasl.password, see _jaas_credentials
    "ssl.truststore.location": "ssl.ca.location",  # PEM only (ssl.truststore.type=PEM)
    "ssl.truststore.type": None,
    "ssl.endpoint.identification.algorithm": None,
    "client.id": None,
}

_FLOW_KEYS = {
    "topics",
    "topics.exclude",
    "replication.factor",
    "emit.heartbeats.enabled",
    "emit.heartbeats.interval.seconds",
    "refresh.topics.enabled",
    "refresh.topics.interval.seconds",
    "sync.topic.configs.enabled",
    "sync.topic.configs.interval.seconds",
    "groups",
    "groups.exclude",
    "emit.checkpoints.enabled",
    "emit.checkpoints.interval.seconds",
    "sync.group.offsets.enabled",
    "sync.group.offsets.interval.seconds",
}
_ALIAS_RE = re.compile(r"[A-Za-z0-9_-]+")
_FLOW_RE = re.compile(r"([^.>]+)->([^.]+)\.(.+)")


class MirrorConfigError(Exception):
    """The mirror's configuration is invalid; the mirror must not start."""


@dataclass(frozen=True)
class ClusterConfig:
    alias: str
    bootstrap_servers: str
    # librdkafka settings for every client of this cluster (bootstrap.servers included)
    client: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class FlowConfig:
    source: ClusterConfig
    target: ClusterConfig
    topics: re.Pattern
    topics_exclude: re.Pattern
    replication_factor: int
    emit_heartbeats: bool
    heartbeats_interval_s: int
    refresh_topics: bool
    refresh_topics_interval_s: int
    sync_topic_configs: bool
    sync_topic_configs_interval_s: int
    groups: re.Pattern
    groups_exclude: re.Pattern
    emit_checkpoints: bool
    emit_checkpoints_interval_s: int
    sync_group_offsets: bool
    sync_group_offsets_interval_s: int

    @property
    def name(self) -> str:
        return f"{self.source.alias}->{self.target.alias}"


@dataclass(frozen=True)
class MirrorConfig:
    clusters: dict[str, ClusterConfig]
    flows: list[FlowConfig]  # the enabled ones
    separator: str


def load(path: str) -> MirrorConfig:
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    except OSError as exc:
        raise MirrorConfigError(f"Cannot read mirror config file {path}: {exc}") from None
    try:
        props = parse_properties(text)
    except PropertiesError as exc:
        raise MirrorConfigError(str(exc)) from None
    return parse_mirror_config(props)


def compile_pattern_list(value: str, key: str) -> re.Pattern:
    """MirrorUtils.compilePatternList: a comma-separated list of regular expressions, matched
    against the whole name; an empty list matches nothing."""
    parts = [part.strip() for part in value.split(",") if part.strip()]
    try:
        for part in parts:
            re.compile(part)
        return re.compile("|".join(f"(?:{part})" for part in parts) if parts else "(?!)")
    except re.error as exc:
        raise MirrorConfigError(f"Invalid value {value!r} for configuration {key}: {exc}") from None


def parse_mirror_config(props: dict[str, str]) -> MirrorConfig:
    props = {key.strip(): value.strip() for key, value in props.items()}
    if "clusters" not in props:
        raise MirrorConfigError("Missing required configuration \"clusters\" which has no default value.")
    aliases = [alias.strip() for alias in props.pop("clusters").split(",") if alias.strip()]
    if not aliases:
        raise MirrorConfigError("Invalid value for configuration clusters: at least one cluster alias is required")
    for alias in aliases:
        if not _ALIAS_RE.fullmatch(alias):
            raise MirrorConfigError(f"Invalid cluster alias {alias!r}: letters, digits, '_' and '-' only")
    if len(set(aliases)) != len(aliases):
        raise MirrorConfigError(f"Invalid value for configuration clusters: an alias is listed twice in {aliases}")
    separator = props.pop("replication.policy.separator", ".")
    if not separator:
        raise MirrorConfigError("Invalid value for configuration replication.policy.separator: must not be empty")

    top: dict[str, str] = {}
    per_cluster: dict[str, dict[str, str]] = {alias: {} for alias in aliases}
    per_flow: dict[tuple[str, str], dict[str, str]] = {}
    for key, value in props.items():
        flow = _FLOW_RE.fullmatch(key)
        if flow:
            source, target, name = flow.groups()
            for alias in (source, target):
                if alias not in per_cluster:
                    raise MirrorConfigError(f"Configuration {key} names cluster {alias!r}, which is not in clusters")
            if source == target:
                raise MirrorConfigError(f"Configuration {key}: a flow needs two different clusters")
            if name != "enabled" and name not in _FLOW_KEYS:
                raise _unknown(key)
            per_flow.setdefault((source, target), {})[name] = value
            continue
        alias, _, name = key.partition(".")
        if alias in per_cluster and name:
            if name != "bootstrap.servers" and name not in CLIENT_KEYS:
                raise _unknown(key)
            per_cluster[alias][name] = value
        elif key in _FLOW_KEYS:
            top[key] = value
        else:
            raise _unknown(key)

    clusters = {alias: _cluster(alias, settings) for alias, settings in per_cluster.items()}
    flows = []
    for source in aliases:
        for target in aliases:
            if source == target:
                continue
            settings = {**top, **per_flow.get((source, target), {})}
            enabled = _bool(f"{source}->{target}.enabled", per_flow.get((source, target), {}).get("enabled", "false"))
            flow = _flow(clusters[source], clusters[target], settings)
            if enabled:
                flows.append(flow)
    return MirrorConfig(clusters=clusters, flows=flows, separator=separator)


def _unknown(key: str) -> MirrorConfigError:
    return MirrorConfigError(
        f"Unknown or unsupported configuration {key!r}: logway-mirror accepts clusters, "
        "replication.policy.separator, <alias>.bootstrap.servers, <alias>.{" + ", ".join(CLIENT_KEYS) + "}, "
        "<source>-><target>.enabled and, at the top level or per flow, " + ", ".join(sorted(_FLOW_KEYS))
    )


def _cluster(alias: str, settings: dict[str, str]) -> ClusterConfig:
    if not settings.get("bootstrap.servers"):
        raise MirrorConfigError(f"Missing required configuration \"{alias}.bootstrap.servers\" which has no default value.")
    client = {"bootstrap.servers": settings["bootstrap.servers"]}
    truststore_type = settings.get("ssl.truststore.type", "PEM")
    if truststore_type.upper() != "PEM":
        raise MirrorConfigError(
            f"Unsupported value {truststore_type!r} for configuration {alias}.ssl.truststore.type: only PEM"
        )
    for name, value in settings.items():
        if name in ("bootstrap.servers", "ssl.truststore.type"):
            continue
        if name == "sasl.jaas.config":
            client.update(_jaas_credentials(alias, value))
            continue
        if name == "ssl.endpoint.identification.algorithm" and value == "":
            value = "none"
        client[CLIENT_KEYS[name] or name] = value
    return ClusterConfig(alias=alias, bootstrap_servers=settings["bootstrap.servers"], client=client)


def _jaas_credentials(alias: str, value: str) -> dict[str, str]:
    """username and password of a PlainLoginModule or ScramLoginModule JAAS entry."""
    key = f"{alias}.sasl.jaas.config"
    try:
        entries = parse_jaas_config(value)
    except JaasConfigError as exc:
        raise MirrorConfigError(f"Invalid value for configuration {key}: {exc}") from None
    if len(entries) != 1 or entries[0].login_module not in (PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE):
        raise MirrorConfigError(
            f"Unsupported value for configuration {key}: one entry, of PlainLoginModule or ScramLoginModule"
        )
    options = entries[0].options
    if "username" not in options or "password" not in options:
        raise MirrorConfigError(f"Invalid value for configuration {key}: username and password are required")
    return {"sasl.username": options["username"], "sasl.password": options["password"]}


def _flow(source: ClusterConfig, target: ClusterConfig, settings: dict[str, str]) -> FlowConfig:
    prefix = f"{source.alias}->{target.alias}."
    replication_factor = _int(prefix + "replication.factor", settings.get("replication.factor", str(REPLICATION_FACTOR_DEFAULT)))
    if replication_factor < 1 and replication_factor != -1:
        raise MirrorConfigError(f"Invalid value {replication_factor} for configuration replication.factor: at least 1, or -1 for the target broker's default")
    return FlowConfig(
        source=source,
        target=target,
        topics=compile_pattern_list(settings.get("topics", TOPICS_DEFAULT), prefix + "topics"),
        topics_exclude=compile_pattern_list(settings.get("topics.exclude", TOPICS_EXCLUDE_DEFAULT), prefix + "topics.exclude"),
        replication_factor=replication_factor,
        emit_heartbeats=_bool(prefix + "emit.heartbeats.enabled", settings.get("emit.heartbeats.enabled", "true")),
        heartbeats_interval_s=_positive(prefix + "emit.heartbeats.interval.seconds", settings.get("emit.heartbeats.interval.seconds", str(EMIT_HEARTBEATS_INTERVAL_S_DEFAULT))),
        refresh_topics=_bool(prefix + "refresh.topics.enabled", settings.get("refresh.topics.enabled", "true")),
        refresh_topics_interval_s=_positive(prefix + "refresh.topics.interval.seconds", settings.get("refresh.topics.interval.seconds", str(REFRESH_TOPICS_INTERVAL_S_DEFAULT))),
        sync_topic_configs=_bool(prefix + "sync.topic.configs.enabled", settings.get("sync.topic.configs.enabled", "true")),
        sync_topic_configs_interval_s=_positive(prefix + "sync.topic.configs.interval.seconds", settings.get("sync.topic.configs.interval.seconds", str(SYNC_TOPIC_CONFIGS_INTERVAL_S_DEFAULT))),
        groups=compile_pattern_list(settings.get("groups", GROUPS_DEFAULT), prefix + "groups"),
        groups_exclude=compile_pattern_list(settings.get("groups.exclude", GROUPS_EXCLUDE_DEFAULT), prefix + "groups.exclude"),
        emit_checkpoints=_bool(prefix + "emit.checkpoints.enabled", settings.get("emit.checkpoints.enabled", "true")),
        emit_checkpoints_interval_s=_positive(prefix + "emit.checkpoints.interval.seconds", settings.get("emit.checkpoints.interval.seconds", str(EMIT_CHECKPOINTS_INTERVAL_S_DEFAULT))),
        sync_group_offsets=_bool(prefix + "sync.group.offsets.enabled", settings.get("sync.group.offsets.enabled", "false")),
        sync_group_offsets_interval_s=_positive(prefix + "sync.group.offsets.interval.seconds", settings.get("sync.group.offsets.interval.seconds", str(SYNC_GROUP_OFFSETS_INTERVAL_S_DEFAULT))),
    )


def _bool(key: str, value: str) -> bool:
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise MirrorConfigError(f"Invalid value {value} for configuration {key}: Expected value to be either true or false")


def _int(key: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise MirrorConfigError(f"Invalid value {value} for configuration {key}: Not a number of type INT") from None


def _positive(key: str, value: str) -> int:
    number = _int(key, value)
    if number < 1:
        raise MirrorConfigError(f"Invalid value {number} for configuration {key}: Value must be at least 1")
    return number
