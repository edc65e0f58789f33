"""Dynamic broker configs on three brokers and a real ZooKeeper: the cluster-wide default set
through one broker is in /config/brokers/<default> in Kafka's layout, reaches every broker
through the /config/changes notification (followers' logs roll at the new segment size too),
a per-broker value stays on its broker, and both are in effect again after the whole cluster
restarts."""

import json
import socket

import pytest
from confluent_kafka import Producer
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)

from protocol.api_keys import ApiKey
from protocol.config_types import ConfigResourceType, ConfigSource
from protocol.errors import ErrorCode
from tests.cluster.clients import SMALL_INDEXES, TIMEOUT_S, create_topic, full_isrs, wait_formed
from tests.cluster.harness import kazoo_client, wait_until
from tests.kafka_wire import call

pytestmark = pytest.mark.slow

BROKER = ConfigResourceType.BROKER
SET = 0


def on(cluster, broker_id: int, api_key: ApiKey, version: int, request):
    broker = cluster.broker(broker_id)
    with socket.create_connection((broker.host, broker.port), timeout=30) as sock:
        return call(sock, api_key, version, request)


def set_config(cluster, through: int, resource_name: str, key: str, value: str) -> None:
    request = IncrementalAlterConfigsRequest(
        resources=(
            AlterConfigsResource(
                resource_type=BROKER,
                resource_name=resource_name,
                configs=(AlterableConfig(name=key, config_operation=SET, value=value),),
            ),
        ),
        validate_only=False,
    )
    response = on(cluster, through, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, request)
    assert response.responses[0].error_code == ErrorCode.none, response.responses[0].error_message


def in_effect(cluster, broker_id: int, key: str) -> tuple[str, int]:
    """(value, source) of `key` as broker `broker_id` describes itself."""
    request = DescribeConfigsRequest(
        resources=(DescribeConfigsResource(resource_type=BROKER, resource_name=str(broker_id), configuration_keys=(key,)),),
        include_synonyms=False,
        include_documentation=False,
    )
    [entry] = on(cluster, broker_id, ApiKey.DESCRIBE_CONFIGS, 4, request).results[0].configs
    return entry.value, entry.config_source


def segment_count(cluster, broker_id: int, topic: str) -> int:
    return sum(len(list((d / f"{topic}-0").glob("*.log"))) for d in cluster.broker(broker_id).data_dirs)


def test_the_cluster_default_reaches_every_broker_and_survives_a_restart(cluster_factory):
    cluster = cluster_factory(overrides=SMALL_INDEXES)
    wait_formed(cluster)
    topic = "rolled"
    create_topic(cluster, topic, 1, 3)
    wait_until(lambda: full_isrs(cluster, topic, 1), TIMEOUT_S, "the ISR is full")

    set_config(cluster, 2, "", "log.segment.bytes", "20000")
    set_config(cluster, 3, "3", "message.max.bytes", "500000")
    with kazoo_client(cluster.zookeeper_connect) as zk:
        data, _ = zk.get("/config/brokers/<default>")
        assert json.loads(data) == {"version": 1, "config": {"log.segment.bytes": "20000"}}
        data, _ = zk.get("/config/brokers/3")
        assert json.loads(data) == {"version": 1, "config": {"message.max.bytes": "500000"}}
        changes = [json.loads(zk.get(f"/config/changes/{name}")[0]) for name in zk.get_children("/config/changes")]
        assert {"version": 2, "entity_path": "brokers/<default>"} in changes
        assert {"version": 2, "entity_path": "brokers/3"} in changes

    expected_default = ("20000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    for broker_id in (1, 2, 3):
        wait_until(lambda: in_effect(cluster, broker_id, "log.segment.bytes") == expected_default, TIMEOUT_S,
                   f"broker {broker_id} has the default")
    assert in_effect(cluster, 3, "message.max.bytes") == ("500000", ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert in_effect(cluster, 1, "message.max.bytes") == ("1048588", ConfigSource.DEFAULT_CONFIG)

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for _ in range(8):
        producer.produce(topic, b"z" * 6000)
        producer.flush(TIMEOUT_S)  # a batch each: the segments roll between them
    # Leader and followers alike roll at 20000 bytes.
    for broker_id in (1, 2, 3):
        wait_until(lambda: segment_count(cluster, broker_id, topic) >= 2, TIMEOUT_S, f"broker {broker_id} rolled")

    cluster.stop()
    cluster.start_brokers()
    wait_formed(cluster)
    for broker_id in (1, 2, 3):
        assert in_effect(cluster, broker_id, "log.segment.bytes") == expected_default
    assert in_effect(cluster, 3, "message.max.bytes") == ("500000", ConfigSource.DYNAMIC_BROKER_CONFIG)
