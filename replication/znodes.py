"""The ZooKeeper layout of the cluster and its JSON values, as Kafka's ZooKeeper mode writes them
(Kafka's ZkData), so Kafka's own tools can read a logway cluster's ZooKeeper and the other way.

Pure functions: paths, and encode/decode of each znode's value. docs/cluster.md lists the
znodes.
"""

import base64
import json
import urllib.parse
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from storage.topic_partition import TopicPartition

CLUSTER_ID = "/cluster/id"
BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
BROKER_SEQUENCE_ID = "/brokers/seqid"  # its version numbers generated broker ids
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
DELETE_TOPICS = "/admin/delete_topics"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
ISR_CHANGE_PREFIX = "isr_change_"
LOG_DIR_EVENT_NOTIFICATION = "/log_dir_event_notification"
LOG_DIR_EVENT_PREFIX = "log_dir_event_"
LOG_DIR_FAILURE_EVENT = 1
CONFIG_TOPICS = "/config/topics"
CONFIG_USERS = "/config/users"
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
LATEST_PRODUCER_ID_BLOCK = "/latest_producer_id_block"  # JSON of coordinator.producer_ids

# Created at start by every broker, as Kafka's persistent paths are.
PERSISTENT_PATHS = (
    BROKER_IDS,
    BROKER_TOPICS,
    BROKER_SEQUENCE_ID,
    DELETE_TOPICS,
    ISR_CHANGE_NOTIFICATION,
    LOG_DIR_EVENT_NOTIFICATION,
    CONFIG_TOPICS,
    CONFIG_CHANGES,
    "/config/brokers",
    CONFIG_USERS,
)

BROKER_INFO_VERSION = 5
TOPIC_VERSION = 3


def _dump(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _load(data: bytes) -> dict:
    return json.loads(data.decode())


def _now_ms() -> str:
    return str(int(time.time() * 1000))


# ------------------------------------------------------------------------------ /cluster/id


def encode_cluster_id(cluster_id: str) -> bytes:
    return _dump({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes) -> str:
    return _load(data)["id"]


# ------------------------------------------------------------------------- /brokers/ids/<id>


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


@dataclass(frozen=True)
class EndPoint:
    listener: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener}://{host}:{self.port}"


@dataclass(frozen=True)
class BrokerRegistration:
    broker_id: int
    endpoints: tuple[EndPoint, ...]
    rack: str | None = None
    timestamp: str = field(default_factory=_now_ms, compare=False)

    def endpoint(self, listener: str) -> EndPoint | None:
        for endpoint in self.endpoints:
            if endpoint.listener == listener:
                return endpoint
        return None


def encode_broker(registration: BrokerRegistration) -> bytes:
    """Version 5: listeners with their protocols, plus host and port of the PLAINTEXT listener
    (-1 and null without one) for old readers; rack only when set."""
    plaintext = registration.endpoint("PLAINTEXT")
    value: dict[str, object] = {
        "features": {},
        "listener_security_protocol_map": {e.listener: e.security_protocol for e in registration.endpoints},
        "endpoints": [e.url for e in registration.endpoints],
        "jmx_port": -1,
        "port": plaintext.port if plaintext else -1,
        "host": plaintext.host if plaintext else None,
        "version": BROKER_INFO_VERSION,
        "timestamp": registration.timestamp,
    }
    if registration.rack is not None:
        value["rack"] = registration.rack
    return _dump(value)


def decode_broker(broker_id: int, data: bytes) -> BrokerRegistration:
    value = _load(data)
    protocols = value.get("listener_security_protocol_map") or {}
    endpoints = []
    for url in value.get("endpoints", []):
        listener, _, address = url.partition("://")
        host, _, port = address.rpartition(":")
        endpoints.append(EndPoint(listener, host.strip("[]"), int(port), protocols.get(listener, listener)))
    return BrokerRegistration(broker_id, tuple(endpoints), value.get("rack"), str(value.get("timestamp", "")))


# ---------------------------------------------------------------------- /brokers/topics/<t>


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions"


def partition_state_path(tp: TopicPartition) -> str:
    return f"{BROKER_TOPICS}/{tp.topic}/partitions/{tp.partition}/state"


@dataclass(frozen=True)
class TopicAssignment:
    """A topic's replica assignment: partition -> replicas, first the preferred leader."""

    topic_id: uuid.UUID
    partitions: Mapping[int, tuple[int, ...]]
    adding_replicas: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    removing_replicas: Mapping[int, tuple[int, ...]] = field(default_factory=dict)


def _by_partition(mapping: Mapping[int, Iterable[int]]) -> dict[str, list[int]]:
    return {str(p): list(replicas) for p, replicas in sorted(mapping.items())}


def _from_partition_keys(value: Mapping[str, Iterable[int]] | None) -> dict[int, tuple[int, ...]]:
    return {int(p): tuple(replicas) for p, replicas in (value or {}).items()}


def encode_topic(assignment: TopicAssignment) -> bytes:
    return _dump(
        {
            "version": TOPIC_VERSION,
            "topic_id": _encode_topic_id(assignment.topic_id),
            "partitions": _by_partition(assignment.partitions),
            "adding_replicas": _by_partition(assignment.adding_replicas),
            "removing_replicas": _by_partition(assignment.removing_replicas),
        }
    )


def decode_topic(data: bytes) -> TopicAssignment:
    value = _load(data)
    topic_id = value.get("topic_id")
    return TopicAssignment(
        topic_id=_decode_topic_id(topic_id) if topic_id else uuid.uuid4(),
        partitions=_from_partition_keys(value.get("partitions")),
        adding_replicas=_from_partition_keys(value.get("adding_replicas")),
        removing_replicas=_from_partition_keys(value.get("removing_replicas")),
    )


def _encode_topic_id(topic_id: uuid.UUID) -> str:
    """Kafka writes topic ids as URL-safe base64 without padding (Uuid.toString)."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def _decode_topic_id(text: str) -> uuid.UUID:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


# ------------------------------------------------------------ partition state (leader, ISR)


@dataclass(frozen=True)
class LeaderIsr:
    """A partition's state znode value (and the znode version it was read at)."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    zk_version: int = field(default=0, compare=False)


def encode_partition_state(state: LeaderIsr) -> bytes:
    return _dump(
        {
            "controller_epoch": state.controller_epoch,
            "leader": state.leader,
            "version": 1,
            "leader_epoch": state.leader_epoch,
            "isr": list(state.isr),
        }
    )


def decode_partition_state(data: bytes, zk_version: int) -> LeaderIsr:
    value = _load(data)
    return LeaderIsr(
        leader=value["leader"],
        leader_epoch=value["leader_epoch"],
        isr=tuple(value["isr"]),
        controller_epoch=value["controller_epoch"],
        zk_version=zk_version,
    )


# -------------------------------------------------------------- /controller, /controller_epoch


def encode_controller(broker_id: int) -> bytes:
    return _dump({"version": 1, "brokerid": broker_id, "timestamp": _now_ms()})


def decode_controller(data: bytes) -> int:
    return int(_load(data)["brokerid"])


def encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode()


def decode_controller_epoch(data: bytes) -> int:
    return int(data.decode())


# ------------------------------------------------------------------------------------ /admin


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{topic}"


def encode_reassignment(reassignment: Mapping[TopicPartition, Iterable[int]]) -> bytes:
    return _dump(
        {
            "version": 1,
            "partitions": [
                {"topic": tp.topic, "partition": tp.partition, "replicas": list(replicas)}
                for tp, replicas in sorted(reassignment.items())
            ],
        }
    )


def decode_reassignment(data: bytes) -> dict[TopicPartition, tuple[int, ...]]:
    return {
        TopicPartition(entry["topic"], entry["partition"]): tuple(entry["replicas"])
        for entry in _load(data).get("partitions", [])
    }


# ---------------------------------------------------------------- /isr_change_notification


def encode_isr_change(partitions: Iterable[TopicPartition]) -> bytes:
    return _dump(
        {"version": 1, "partitions": [{"topic": tp.topic, "partition": tp.partition} for tp in sorted(partitions)]}
    )


def decode_isr_change(data: bytes) -> list[TopicPartition]:
    return [TopicPartition(e["topic"], e["partition"]) for e in _load(data).get("partitions", [])]


# ---------------------------------------------------------- /log_dir_event_notification


def encode_log_dir_event(broker_id: int) -> bytes:
    """A broker's log dir failed (the only event Kafka's ZooKeeper mode has)."""
    return _dump({"version": 1, "broker": broker_id, "event": LOG_DIR_FAILURE_EVENT})


def decode_log_dir_event(data: bytes) -> int:
    """The broker a log dir event notification is about."""
    return int(_load(data)["broker"])


# ---------------------------------------------------------------------------------- /config


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{topic}"


def encode_topic_config(config: Mapping[str, str]) -> bytes:
    return _dump({"version": 1, "config": dict(config)})


def decode_topic_config(data: bytes) -> dict[str, str]:
    return {k: str(v) for k, v in (_load(data).get("config") or {}).items()}


def encode_config_change(topic: str) -> bytes:
    """Version 2 of the change notification: the changed entity's path under /config."""
    return _dump({"version": 2, "entity_path": f"topics/{topic}"})


def encode_user_config_change(sanitized_user: str) -> bytes:
    """The notification of a change of /config/users/<sanitized user>."""
    return _dump({"version": 2, "entity_path": f"users/{sanitized_user}"})


BROKER_CONFIG_DEFAULT = "<default>"  # the cluster-wide default entity of /config/brokers


def broker_config_path(entity: str) -> str:
    """/config/brokers/<broker id>, or /config/brokers/<default>; the node holds
    encode_topic_config's {"version": 1, "config": {...}}, as every entity config does."""
    return f"/config/brokers/{entity}"


def encode_broker_config_change(entity: str) -> bytes:
    """The notification of a change of /config/brokers/<entity>."""
    return _dump({"version": 2, "entity_path": f"brokers/{entity}"})


def user_config_path(sanitized_user: str) -> str:
    return f"{CONFIG_USERS}/{sanitized_user}"


def sanitize(name: str) -> str:
    """Kafka's Sanitizer.sanitize: a user name as a ZooKeeper node name (URL-encoded UTF-8,
    with %20 for a space and %2A for '*')."""
    return urllib.parse.quote(name, safe="").replace("~", "%7E").replace("*", "%2A")


def desanitize(name: str) -> str:
    return urllib.parse.unquote(name)


def decode_config_change(data: bytes) -> tuple[str, str]:
    """(entity type, entity name), e.g. ("topics", "orders")."""
    entity_type, _, name = _load(data)["entity_path"].partition("/")
    return entity_type, name
