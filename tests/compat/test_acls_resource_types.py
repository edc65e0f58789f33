"""ACL denial, then grant, for each resource type with a real client (confluent-kafka) over
SASL: a consumer group (GROUP_AUTHORIZATION_FAILED), a transactional id
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED), the cluster (CLUSTER_AUTHORIZATION_FAILED for
CreateAcls; Create on the cluster lets CreateTopics through). The caller is User:alice (PLAIN);
the admin, User:admin, is a super user. Topics are covered by test_acls_confluent.py and
test_sasl.py::test_acls_decide_on_the_sasl_user."""

import time

import confluent_kafka
import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from tests.compat.test_sasl import ADMIN, PLAIN_USER, TIMEOUT_S, admin_client, create_topic, librdkafka_settings, start_sasl_broker
from tests.harness import unique_topic

pytestmark = pytest.mark.compat


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory):
    broker = start_sasl_broker(
        tmp_path_factory.mktemp("acl-types") / "data",
        **{"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "super.users": f"User:{ADMIN[0]}"},
    )
    yield broker
    broker.stop()
    assert "Traceback" not in broker.log()


def grant(broker, resource_type, name: str, operation) -> None:
    binding = AclBinding(
        resource_type, name, ResourcePatternType.LITERAL, f"User:{PLAIN_USER[0]}", "*", operation, AclPermissionType.ALLOW,
    )
    admin = admin_client(broker)  # kept alive until the futures are done
    for future in admin.create_acls([binding], request_timeout=TIMEOUT_S).values():
        future.result(TIMEOUT_S)


def alice(broker, **settings) -> dict[str, str]:
    return {"bootstrap.servers": broker.bootstrap, **librdkafka_settings("PLAIN", PLAIN_USER), **settings}


def test_a_consumer_group_is_refused_until_read_on_the_group_is_granted(acl_broker):
    topic, group = unique_topic("acl-group"), unique_topic("g")
    create_topic(acl_broker, topic)
    producer = confluent_kafka.Producer({"bootstrap.servers": acl_broker.bootstrap, **librdkafka_settings("PLAIN", ADMIN)})
    producer.produce(topic, b"v")
    assert producer.flush(TIMEOUT_S) == 0
    grant(acl_broker, ResourceType.TOPIC, topic, AclOperation.READ)

    def consume() -> tuple[list[bytes], confluent_kafka.KafkaError | None]:
        consumer = confluent_kafka.Consumer(alice(acl_broker, **{"group.id": group, "auto.offset.reset": "earliest"}))
        consumer.subscribe([topic])
        values, error = [], None
        deadline = time.monotonic() + TIMEOUT_S
        try:
            while not values and error is None and time.monotonic() < deadline:
                message = consumer.poll(1)
                if message is None:
                    continue
                if message.error() is None:
                    values.append(message.value())
                elif message.error().code() == confluent_kafka.KafkaError.GROUP_AUTHORIZATION_FAILED:
                    error = message.error()
        finally:
            consumer.close()
        return values, error

    values, error = consume()
    assert values == [] and error is not None
    grant(acl_broker, ResourceType.GROUP, group, AclOperation.READ)
    assert consume() == ([b"v"], None)


def test_a_transactional_producer_is_refused_until_write_on_its_id_is_granted(acl_broker):
    topic, transactional_id = unique_topic("acl-txn"), unique_topic("tid")
    create_topic(acl_broker, topic)
    grant(acl_broker, ResourceType.TOPIC, topic, AclOperation.WRITE)

    refused = confluent_kafka.Producer(alice(acl_broker, **{"transactional.id": transactional_id}))
    with pytest.raises(confluent_kafka.KafkaException) as raised:
        refused.init_transactions(TIMEOUT_S)
    assert raised.value.args[0].code() == confluent_kafka.KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

    grant(acl_broker, ResourceType.TRANSACTIONAL_ID, transactional_id, AclOperation.WRITE)
    producer = confluent_kafka.Producer(alice(acl_broker, **{"transactional.id": transactional_id}))
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(topic, b"in-txn")
    producer.commit_transaction(TIMEOUT_S)


def test_cluster_operations_are_refused_until_granted_on_the_cluster(acl_broker):
    admin = AdminClient(alice(acl_broker))
    binding = AclBinding(
        ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, "User:bob", "*", AclOperation.READ, AclPermissionType.ALLOW,
    )
    with pytest.raises(confluent_kafka.KafkaException) as raised:
        for future in admin.create_acls([binding], request_timeout=TIMEOUT_S).values():
            future.result(TIMEOUT_S)
    assert raised.value.args[0].code() == confluent_kafka.KafkaError.CLUSTER_AUTHORIZATION_FAILED

    topic = unique_topic("acl-create")
    with pytest.raises(confluent_kafka.KafkaException) as raised:
        for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
            future.result(TIMEOUT_S)
    assert raised.value.args[0].code() == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED

    grant(acl_broker, ResourceType.BROKER, "kafka-cluster", AclOperation.CREATE)
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(TIMEOUT_S)
    grant(acl_broker, ResourceType.BROKER, "kafka-cluster", AclOperation.ALTER)
    for future in admin.create_acls([binding], request_timeout=TIMEOUT_S).values():
        future.result(TIMEOUT_S)
