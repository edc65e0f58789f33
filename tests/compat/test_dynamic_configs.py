"""Dynamic broker configs with real admin clients against a broker process: confluent-kafka's
AdminClient (IncrementalAlterConfigs, DescribeConfigs with synonyms) and kafka-python's
KafkaAdminClient (IncrementalAlterConfigs and the legacy AlterConfigs). Each change is shown
taking effect (produce refused, segments rolled, connections refused), and surviving a restart."""

import socket

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)
from kafka.admin import AlterConfigOp, KafkaAdminClient
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig,
    AlterConfigsResource as IncrementalResource,
    IncrementalAlterConfigsRequest,
)
from kafka.admin import ConfigResource as KpConfigResource

from protocol.api_keys import ApiKey
from protocol.config_types import ConfigResourceType
from tests.harness import BrokerProcess, unique_topic
from tests.kafka_wire import call

pytestmark = pytest.mark.compat

TIMEOUT_S = 20
BROKER = ConfigResourceType.BROKER


def admin_for(broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap, "socket.timeout.ms": 10_000})


def set_broker_configs(admin: AdminClient, name: str, **values: str | None) -> None:
    """SET each key (DELETE for None) on BROKER resource `name` ("0", or "" for the default)."""
    entries = [
        ConfigEntry(
            key.replace("_", "."), value,
            incremental_operation=AlterConfigOpType.DELETE if value is None else AlterConfigOpType.SET,
        )
        for key, value in values.items()
    ]
    resource = ConfigResource("broker", name, incremental_configs=entries)
    admin.incremental_alter_configs([resource], request_timeout=TIMEOUT_S)[resource].result(TIMEOUT_S)


def broker_configs(admin: AdminClient, name: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource("broker", name)
    return admin.describe_configs([resource], request_timeout=TIMEOUT_S)[resource].result(TIMEOUT_S)


def produce(broker, topic: str, value: bytes) -> KafkaError | None:
    """Produce one record; its delivery error (None for a success)."""
    errors = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "message.max.bytes": 10_000_000, "retries": 0})
    producer.produce(topic, value, on_delivery=lambda err, msg: errors.append(err))
    producer.flush(TIMEOUT_S)
    return errors[0]


def create(broker, topic: str) -> None:
    admin = admin_for(broker)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(TIMEOUT_S)


def test_message_max_bytes_changed_at_run_time_refuses_larger_batches(broker):
    admin = admin_for(broker)
    topic = unique_topic("max-bytes")
    create(broker, topic)
    assert produce(broker, topic, b"x" * 5000) is None

    set_broker_configs(admin, "0", message_max_bytes="1000")
    entry = broker_configs(admin, "0")["message.max.bytes"]
    assert (entry.value, entry.source, entry.is_read_only) == ("1000", ConfigSource.DYNAMIC_BROKER_CONFIG.value, False)
    error = produce(broker, topic, b"x" * 5000)
    assert error is not None and error.code() == KafkaError.MSG_SIZE_TOO_LARGE

    set_broker_configs(admin, "0", message_max_bytes=None)
    assert broker_configs(admin, "0")["message.max.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert produce(broker, topic, b"x" * 5000) is None


def set_cluster_default(broker, key: str, value: str) -> None:
    """IncrementalAlterConfigs on the BROKER resource "" (kafka-configs --entity-default), which
    neither confluent-kafka nor kafka-python can name: the request as Kafka's admin sends it."""
    request = IncrementalAlterConfigsRequest(
        resources=(
            IncrementalResource(
                resource_type=BROKER,
                resource_name="",
                configs=(AlterableConfig(name=key, config_operation=AlterConfigOpType.SET.value, value=value),),
            ),
        ),
        validate_only=False,
    )
    with socket.create_connection(("127.0.0.1", broker.port), timeout=TIMEOUT_S) as sock:
        response = call(sock, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, request)
    assert response.responses[0].error_code == 0, response.responses[0].error_message


def cluster_default(broker) -> dict[str, tuple[str, int]]:
    request = DescribeConfigsRequest(
        resources=(DescribeConfigsResource(resource_type=BROKER, resource_name="", configuration_keys=None),),
        include_synonyms=True,
        include_documentation=False,
    )
    with socket.create_connection(("127.0.0.1", broker.port), timeout=TIMEOUT_S) as sock:
        result = call(sock, ApiKey.DESCRIBE_CONFIGS, 4, request).results[0]
    return {entry.name: (entry.value, entry.config_source) for entry in result.configs}


def test_a_cluster_default_rolls_segments_and_survives_a_restart(broker):
    admin = admin_for(broker)
    topic = unique_topic("segments")
    create(broker, topic)
    set_cluster_default(broker, "log.segment.bytes", "20000")
    assert cluster_default(broker) == {
        "log.segment.bytes": ("20000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    }
    described = broker_configs(admin, "0")["log.segment.bytes"]
    assert (described.value, described.source) == ("20000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    for _ in range(8):
        assert produce(broker, topic, b"y" * 6000) is None
    segments = list((broker.data_dir / f"{topic}-0").glob("*.log"))
    assert len(segments) >= 2  # rolled at 20000 bytes, not Kafka's default 1 GiB

    broker.restart()
    admin = admin_for(broker)
    assert broker_configs(admin, "0")["log.segment.bytes"].value == "20000"
    before = len(list((broker.data_dir / f"{topic}-0").glob("*.log")))
    for _ in range(8):
        assert produce(broker, topic, b"y" * 6000) is None
    assert len(list((broker.data_dir / f"{topic}-0").glob("*.log"))) > before


def closed_by_broker(sock: socket.socket) -> bool:
    sock.settimeout(2)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def connections_held(port: int, limit: int) -> int:
    """How many new connections the broker keeps open, trying up to `limit` (each closed)."""
    held = []
    try:
        while len(held) < limit:
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            held.append(sock)
            if closed_by_broker(sock):
                return len(held) - 1
        return len(held)
    finally:
        for sock in held:
            sock.close()


def test_max_connections_per_ip_from_kafka_python_limits_new_connections(tmp_path):
    with BrokerProcess(tmp_path / "data") as broker:
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, client_id="limits")
        # The legacy AlterConfigs (kafka-python fills in the other dynamic keys set, as it
        # replaces the whole level).
        resource = KpConfigResource("BROKER", "0", {"max.connections.per.ip": "3"})
        assert admin.alter_configs([resource], raise_on_unknown=False, incremental=False) == {"broker": {"0": "OK"}}
        # The admin client holds a connection or two of its own: fewer than 3 are left.
        assert connections_held(broker.port, 5) < 3

        resource = KpConfigResource("BROKER", "0", {"max.connections.per.ip": (AlterConfigOp.DELETE, None)})
        assert admin.alter_configs([resource], raise_on_unknown=False, incremental=True) == {"broker": {"0": "OK"}}
        assert connections_held(broker.port, 5) == 5
        admin.close()


def test_keys_that_cannot_change_at_run_time_are_refused_as_kafka_refuses_them(broker):
    admin = admin_for(broker)
    with pytest.raises(KafkaException) as raised:
        set_broker_configs(admin, "0", log_cleaner_threads="2")
    assert raised.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert "Cannot update these configs dynamically: Set(log.cleaner.threads)" in raised.value.args[0].str()
