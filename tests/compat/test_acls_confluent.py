"""ACLs with real clients over real sockets against a broker process with the ACL authorizer:
confluent-kafka's AdminClient (librdkafka) creates, describes and deletes ACLs, which survive a
restart (the standalone file store), and a producer and consumer are refused a topic a DENY ACL
closes. Over PLAINTEXT every client is User:ANONYMOUS, so the admin is made a super user, and
the denial is shown with DENY ACLs for User:ANONYMOUS while allow.everyone.if.no.acl.found opens
the rest."""

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from tests.harness import BrokerProcess, unique_topic

pytestmark = pytest.mark.compat

TIMEOUT_S = 20
AUTHORIZER = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"}


def admin_for(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap, "socket.timeout.ms": 10_000})


def results(futures) -> list:
    return [future.result(TIMEOUT_S) for future in (futures.values() if isinstance(futures, dict) else futures)]


def every_acl() -> AclBindingFilter:
    return AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY
    )


def test_acls_are_created_described_and_deleted_and_survive_a_restart(tmp_path):
    read_orders = AclBinding(
        ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW
    )
    app_groups = AclBinding(
        ResourceType.GROUP, "app-", ResourcePatternType.PREFIXED, "User:alice", "10.0.0.1", AclOperation.READ, AclPermissionType.ALLOW
    )
    deny_cluster = AclBinding(
        ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, "User:bob", "*", AclOperation.ALTER, AclPermissionType.DENY
    )
    broker = BrokerProcess(tmp_path / "data", {**AUTHORIZER, "super.users": "User:ANONYMOUS"}).start()
    try:
        admin = admin_for(broker)
        results(admin.create_acls([read_orders, app_groups, deny_cluster], request_timeout=TIMEOUT_S))
        described = admin.describe_acls(every_acl(), request_timeout=TIMEOUT_S).result(TIMEOUT_S)
        assert set(described) == {read_orders, app_groups, deny_cluster}
        groups_only = AclBindingFilter(
            ResourceType.GROUP, "app-1", ResourcePatternType.MATCH, None, None, AclOperation.ANY, AclPermissionType.ANY
        )
        assert admin.describe_acls(groups_only, request_timeout=TIMEOUT_S).result(TIMEOUT_S) == [app_groups]

        broker.restart()
        admin = admin_for(broker)
        assert set(admin.describe_acls(every_acl(), request_timeout=TIMEOUT_S).result(TIMEOUT_S)) == {
            read_orders, app_groups, deny_cluster,
        }
        topic_filter = AclBindingFilter(
            ResourceType.TOPIC, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY
        )
        (deleted,) = results(admin.delete_acls([topic_filter], request_timeout=TIMEOUT_S))
        assert deleted == [read_orders]
        assert set(admin.describe_acls(every_acl(), request_timeout=TIMEOUT_S).result(TIMEOUT_S)) == {app_groups, deny_cluster}
        assert "Traceback" not in broker.log()
    finally:
        broker.kill()


def test_a_deny_acl_refuses_a_producer_and_a_consumer_that_others_let_through(tmp_path):
    closed, open_topic = unique_topic("closed"), unique_topic("open")
    broker = BrokerProcess(tmp_path / "data", {**AUTHORIZER, "allow.everyone.if.no.acl.found": "true"}).start()
    try:
        admin = admin_for(broker)
        results(admin.create_topics([NewTopic(closed, 1, 1), NewTopic(open_topic, 1, 1)], operation_timeout=TIMEOUT_S))
        results(admin.create_acls([
            AclBinding(ResourceType.TOPIC, closed, ResourcePatternType.LITERAL, "User:ANONYMOUS", "*", operation, AclPermissionType.DENY)
            for operation in (AclOperation.WRITE, AclOperation.READ)
        ], request_timeout=TIMEOUT_S))

        outcomes = {}
        producer = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 10_000})
        for topic in (closed, open_topic):
            producer.produce(topic, b"value", callback=lambda err, msg, t=topic: outcomes.__setitem__(t, err))
        producer.flush(TIMEOUT_S)
        assert outcomes[open_topic] is None
        assert outcomes[closed].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

        consumer = Consumer({
            "bootstrap.servers": broker.bootstrap, "group.id": unique_topic("g"), "auto.offset.reset": "earliest",
        })
        try:
            consumer.subscribe([closed])
            error = None
            for _ in range(20):
                message = consumer.poll(1)
                if message is not None and message.error() is not None:
                    error = message.error()
                    break
            assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        finally:
            consumer.close()
    finally:
        broker.kill()


def test_without_an_authorizer_acl_creation_is_refused_as_security_disabled(shared_broker):
    # (librdkafka drops DescribeAcls' top-level error, so CreateAcls' per-ACL one is checked)
    admin = admin_for(shared_broker)
    binding = AclBinding(
        ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, "User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW
    )
    with pytest.raises(KafkaException) as raised:
        results(admin.create_acls([binding], request_timeout=TIMEOUT_S))
    assert raised.value.args[0].code() == KafkaError.SECURITY_DISABLED
