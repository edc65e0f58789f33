"""Admin clients against a real broker process, over real sockets: confluent-kafka's AdminClient
(librdkafka) for every admin API, and kafka-python's KafkaAdminClient, which picks its versions
its own way (and with api_version pinned to an old broker, the oldest layouts), for the common
ones."""


import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType as KpConfigResourceType
from kafka.admin import KafkaAdminClient
from kafka.admin import NewTopic as KpNewTopic
from kafka.errors import TopicAlreadyExistsError, UnknownTopicOrPartitionError

from tests.harness import unique_topic

pytestmark = pytest.mark.compat

TIMEOUT_S = 20


def admin_for(broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap, "socket.timeout.ms": 10_000})


@pytest.fixture
def admin(shared_broker) -> AdminClient:
    return admin_for(shared_broker)


def create(admin: AdminClient, *topics: NewTopic, validate_only: bool = False) -> None:
    futures = admin.create_topics(
        list(topics), operation_timeout=TIMEOUT_S, request_timeout=TIMEOUT_S, validate_only=validate_only
    )
    for future in futures.values():
        future.result(TIMEOUT_S)


def create_error(admin: AdminClient, topic: NewTopic) -> KafkaError:
    with pytest.raises(KafkaException) as raised:
        create(admin, topic)
    return raised.value.args[0]


def topic_names(admin: AdminClient) -> set[str]:
    return set(admin.list_topics(timeout=TIMEOUT_S).topics)


def partition_count(admin: AdminClient, topic: str) -> int:
    return len(admin.list_topics(topic, timeout=TIMEOUT_S).topics[topic].partitions)


def describe(admin: AdminClient, resource_type: str, name: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource(resource_type, name)
    return admin.describe_configs([resource], request_timeout=TIMEOUT_S)[resource].result(TIMEOUT_S)


def produce(broker, topic: str, count: int, **extra) -> list:
    """Produce `count` records to partition 0; the delivery errors (None for a success)."""
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "message.timeout.ms": 8_000,
            "socket.timeout.ms": 10_000,
            **extra,
        }
    )
    errors = []
    for i in range(count):
        producer.produce(topic, value=b"v%d" % i, partition=0, on_delivery=lambda err, msg: errors.append(err))
    producer.flush(TIMEOUT_S)
    assert len(errors) == count, "deliveries still pending"
    return errors


# --------------------------------------------------------------------------------------------
# CreateTopics, Metadata, CreatePartitions
# --------------------------------------------------------------------------------------------


def test_create_topics_with_configs(admin):
    topic = unique_topic("configs")
    create(admin, NewTopic(topic, 3, 1, config={"retention.ms": "1000", "cleanup.policy": "compact"}))
    assert partition_count(admin, topic) == 3
    configs = describe(admin, "topic", topic)
    assert (configs["retention.ms"].value, configs["retention.ms"].source) == (
        "1000",
        ConfigSource.DYNAMIC_TOPIC_CONFIG.value,
    )
    assert configs["cleanup.policy"].value == "compact"
    assert configs["segment.bytes"].is_default


def test_create_topics_validate_only_creates_nothing(admin):
    topic = unique_topic("validate")
    create(admin, NewTopic(topic, 2, 1), validate_only=True)
    assert topic not in topic_names(admin)


def test_create_topics_errors(admin):
    topic = unique_topic("exists")
    create(admin, NewTopic(topic, 1, 1))
    assert create_error(admin, NewTopic(topic, 1, 1)).code() == KafkaError.TOPIC_ALREADY_EXISTS
    assert create_error(admin, NewTopic("bad name!", 1, 1)).code() == KafkaError.TOPIC_EXCEPTION
    bad_config = create_error(admin, NewTopic(unique_topic("bad-config"), 1, 1, config={"retention.ms": "soon"}))
    assert bad_config.code() == KafkaError.INVALID_CONFIG
    assert "retention.ms" in bad_config.str()
    too_many = create_error(admin, NewTopic(unique_topic("rf"), 1, 3))
    assert too_many.code() == KafkaError.INVALID_REPLICATION_FACTOR


def test_create_partitions(admin):
    topic = unique_topic("grow")
    create(admin, NewTopic(topic, 1, 1))

    def grow(count: int, validate_only: bool = False) -> None:
        futures = admin.create_partitions(
            [NewPartitions(topic, count)], request_timeout=TIMEOUT_S, validate_only=validate_only
        )
        futures[topic].result(TIMEOUT_S)

    grow(5, validate_only=True)
    assert partition_count(admin, topic) == 1
    grow(3)
    assert partition_count(admin, topic) == 3
    with pytest.raises(KafkaException) as raised:
        grow(2)
    assert raised.value.args[0].code() == KafkaError.INVALID_PARTITIONS
    missing = unique_topic("missing")
    futures = admin.create_partitions([NewPartitions(missing, 2)], request_timeout=TIMEOUT_S)
    with pytest.raises(KafkaException) as raised:
        futures[missing].result(TIMEOUT_S)
    assert raised.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


# --------------------------------------------------------------------------------------------
# DescribeConfigs, AlterConfigs, IncrementalAlterConfigs
# --------------------------------------------------------------------------------------------


def test_describe_configs_of_a_topic_and_of_the_broker(admin, shared_broker):
    topic = unique_topic("describe")
    create(admin, NewTopic(topic, 1, 1, config={"segment.ms": "60000"}))
    configs = describe(admin, "topic", topic)
    assert configs["segment.ms"].value == "60000"
    assert configs["segment.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert (configs["retention.ms"].value, configs["retention.ms"].source) == (
        "604800000",
        ConfigSource.DEFAULT_CONFIG.value,
    )
    assert not configs["retention.ms"].is_read_only

    broker_configs = describe(admin, "broker", "0")
    log_dirs = broker_configs["log.dirs"]
    assert (log_dirs.value, log_dirs.source) == (str(shared_broker.data_dir), ConfigSource.STATIC_BROKER_CONFIG.value)
    assert log_dirs.is_read_only
    assert broker_configs["log.segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value

    with pytest.raises(KafkaException) as raised:
        describe(admin, "topic", unique_topic("missing"))
    assert raised.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_alter_configs_then_incremental_alter_configs(admin):
    topic = unique_topic("alter")
    create(admin, NewTopic(topic, 1, 1, config={"segment.ms": "60000"}))
    resource = ConfigResource("topic", topic, set_config={"retention.ms": "2000"})
    with pytest.warns(DeprecationWarning):
        futures = admin.alter_configs([resource], request_timeout=TIMEOUT_S)
    futures[resource].result(TIMEOUT_S)
    configs = describe(admin, "topic", topic)
    assert configs["retention.ms"].value == "2000"
    assert configs["segment.ms"].is_default  # AlterConfigs replaces the whole set

    resource = ConfigResource(
        "topic",
        topic,
        incremental_configs=[
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
            ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
            ConfigEntry("max.message.bytes", "2000", incremental_operation=AlterConfigOpType.SET),
        ],
    )
    admin.incremental_alter_configs([resource], request_timeout=TIMEOUT_S)[resource].result(TIMEOUT_S)
    configs = describe(admin, "topic", topic)
    assert configs["cleanup.policy"].value == "delete,compact"
    assert configs["retention.ms"].is_default
    assert configs["max.message.bytes"].value == "2000"

    bad = ConfigResource(
        "topic",
        topic,
        incremental_configs=[ConfigEntry("retention.ms", "-5", incremental_operation=AlterConfigOpType.SET)],
    )
    with pytest.raises(KafkaException) as raised:
        admin.incremental_alter_configs([bad], request_timeout=TIMEOUT_S)[bad].result(TIMEOUT_S)
    assert raised.value.args[0].code() == KafkaError.INVALID_CONFIG


def test_static_broker_configs_cannot_be_altered(admin):
    resource = ConfigResource(
        "broker",
        "0",
        incremental_configs=[ConfigEntry("num.io.threads", "4", incremental_operation=AlterConfigOpType.SET)],
    )
    with pytest.raises(KafkaException) as raised:
        admin.incremental_alter_configs([resource], request_timeout=TIMEOUT_S)[resource].result(TIMEOUT_S)
    error = raised.value.args[0]
    assert error.code() == KafkaError.INVALID_CONFIG
    assert "Cannot update these configs dynamically: Set(num.io.threads)" in error.str()


def test_config_changes_and_partition_counts_survive_a_restart(broker):
    admin = admin_for(broker)
    topic = unique_topic("restart")
    create(admin, NewTopic(topic, 1, 1))
    resource = ConfigResource("topic", topic, set_config={"retention.ms": "3000"})
    with pytest.warns(DeprecationWarning):
        admin.alter_configs([resource], request_timeout=TIMEOUT_S)[resource].result(TIMEOUT_S)
    resource = ConfigResource(
        "topic",
        topic,
        incremental_configs=[ConfigEntry("segment.ms", "90000", incremental_operation=AlterConfigOpType.SET)],
    )
    admin.incremental_alter_configs([resource], request_timeout=TIMEOUT_S)[resource].result(TIMEOUT_S)
    admin.create_partitions([NewPartitions(topic, 4)], request_timeout=TIMEOUT_S)[topic].result(TIMEOUT_S)

    broker.restart()
    admin = admin_for(broker)
    configs = describe(admin, "topic", topic)
    assert (configs["retention.ms"].value, configs["segment.ms"].value) == ("3000", "90000")
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert partition_count(admin, topic) == 4


# --------------------------------------------------------------------------------------------
# DeleteRecords, DeleteTopics, DescribeCluster
# --------------------------------------------------------------------------------------------


def test_delete_records(admin, shared_broker):
    topic = unique_topic("records")
    create(admin, NewTopic(topic, 1, 1))
    assert produce(shared_broker, topic, 5) == [None] * 5
    futures = admin.delete_records(
        [TopicPartition(topic, 0, 3)], request_timeout=TIMEOUT_S, operation_timeout=TIMEOUT_S
    )
    (deleted,) = [future.result(TIMEOUT_S) for future in futures.values()]
    assert deleted.low_watermark == 3
    consumer = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": "logway-compat-unused"})
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT_S) == (3, 5)
    finally:
        consumer.close()
    beyond = TopicPartition(topic, 0, 9)
    futures = admin.delete_records([beyond], request_timeout=TIMEOUT_S, operation_timeout=TIMEOUT_S)
    with pytest.raises(KafkaException) as raised:
        futures[beyond].result(TIMEOUT_S)
    assert raised.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE


def test_delete_topics(broker_factory):
    broker = broker_factory("no-auto-create", auto_create_topics_enable="false")
    admin = admin_for(broker)
    topic = unique_topic("doomed")
    create(admin, NewTopic(topic, 2, 1))
    assert produce(broker, topic, 3) == [None] * 3

    admin.delete_topics([topic], operation_timeout=TIMEOUT_S, request_timeout=TIMEOUT_S)[topic].result(TIMEOUT_S)
    assert topic not in topic_names(admin)
    assert all(error is not None for error in produce(broker, topic, 1))
    with pytest.raises(KafkaException) as raised:
        admin.delete_topics([topic], request_timeout=TIMEOUT_S)[topic].result(TIMEOUT_S)
    assert raised.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    create(admin, NewTopic(topic, 1, 1))
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "logway-compat-unused"})
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT_S) == (0, 0)
    finally:
        consumer.close()
    assert produce(broker, topic, 1) == [None]


def test_describe_cluster(admin, shared_broker):
    cluster = admin.describe_cluster(request_timeout=TIMEOUT_S).result(TIMEOUT_S)
    assert cluster.cluster_id
    assert cluster.controller.id == 0
    assert [(node.id, node.host, node.port) for node in cluster.nodes] == [(0, "127.0.0.1", shared_broker.port)]


# --------------------------------------------------------------------------------------------
# kafka-python
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("pinned", [None, (1, 0, 0)], ids=["negotiated", "kafka-1.0"])
def test_kafka_python_admin(shared_broker, pinned):
    extra = {"api_version": pinned} if pinned else {}
    admin = KafkaAdminClient(bootstrap_servers=shared_broker.bootstrap, request_timeout_ms=TIMEOUT_S * 1000, **extra)
    try:
        topic = unique_topic("kp")
        admin.create_topics(
            [KpNewTopic(topic, 2, 1, topic_configs={"retention.ms": "1000"})], timeout_ms=TIMEOUT_S * 1000
        )
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics([KpNewTopic(topic, 2, 1)], timeout_ms=TIMEOUT_S * 1000)

        described = admin.describe_configs([KpConfigResource(KpConfigResourceType.TOPIC, topic)])
        modified = described["topic"][topic]
        # DescribeConfigs v0 (Kafka 1.0) has only is_default: a static broker config, such as the
        # test brokers' index size (tests/harness.py), counts as modified too.
        static = {"segment.index.bytes"} if pinned else set()
        assert set(modified) == {"retention.ms", *static}
        assert (modified["retention.ms"]["value"], modified["retention.ms"]["config_source"]) == (
            "1000",
            "DYNAMIC_TOPIC_CONFIG",
        )
        described = admin.describe_configs([KpConfigResource(KpConfigResourceType.BROKER, "0")], config_filter="all")
        assert described["broker"]["0"]["log.dirs"]["value"] == str(shared_broker.data_dir)

        admin.delete_topics([topic], timeout_ms=TIMEOUT_S * 1000)
        assert topic not in admin.list_topics()
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.delete_topics([topic], timeout_ms=TIMEOUT_S * 1000)
    finally:
        admin.close()
