"""The ACL authorizer on three brokers and a real ZooKeeper: ACLs created through one broker are
kept in Kafka's znodes and enforced by every broker at once (the change notifications), and
brokers whose principal is a super user keep replicating under the authorizer.

Over PLAINTEXT every connection is User:ANONYMOUS, the brokers' own included (docs/security.md).
"""

import json
import socket

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from tests.cluster.clients import SMALL_INDEXES, admin_client, create_topic, full_isrs, wait_formed
from tests.cluster.harness import wait_until
from tests.harness import unique_topic
from tests.kafka_wire import call

pytestmark = pytest.mark.slow

TIMEOUT_S = 60
PROPAGATION_S = 5  # "at once": a ZooKeeper notification and one read
AUTHORIZER = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"}


def topic_error(cluster, broker_id: int, topic: str) -> ErrorCode:
    broker = cluster.broker(broker_id)
    request = MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name=topic),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    with socket.create_connection((broker.host, broker.port), timeout=TIMEOUT_S) as sock:
        return call(sock, ApiKey.METADATA, 12, request).topics[0].error_code


def test_acls_made_through_one_broker_are_enforced_by_every_broker_at_once(cluster_factory):
    # No ACL names the cluster, so allow.everyone.if.no.acl.found lets the brokers' CLUSTER_ACTION
    # through; the DENY below is on one topic, which inter-broker requests do not need.
    cluster = cluster_factory(overrides={**SMALL_INDEXES, **AUTHORIZER, "allow.everyone.if.no.acl.found": "true"})
    wait_formed(cluster)
    topic = unique_topic("guarded")
    create_topic(cluster, topic, 1, 3)
    wait_until(lambda: full_isrs(cluster, topic, 1), TIMEOUT_S, "full ISRs")
    assert {topic_error(cluster, b, topic) for b in (1, 2, 3)} == {ErrorCode.none}

    admin = admin_client(cluster.broker(1).bootstrap)
    deny = AclBinding(
        ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:ANONYMOUS", "*", AclOperation.ALL, AclPermissionType.DENY
    )
    for future in admin.create_acls([deny], request_timeout=TIMEOUT_S).values():
        future.result(TIMEOUT_S)
    for broker_id in (1, 2, 3):
        wait_until(
            lambda b=broker_id: topic_error(cluster, b, topic) == ErrorCode.topic_authorization_failed,
            PROPAGATION_S,
            f"broker {broker_id} enforcing the DENY",
        )
    with cluster.zookeeper_client() as zk:
        data, _ = zk.get(f"/kafka-acl/Topic/{topic}")
        assert json.loads(data) == {
            "version": 1,
            "acls": [{"principal": "User:ANONYMOUS", "permissionType": "Deny", "operation": "All", "host": "*"}],
        }
        assert zk.get_children("/kafka-acl-changes")

    every = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY
    )
    for future in admin.delete_acls([every], request_timeout=TIMEOUT_S).values():
        assert future.result(TIMEOUT_S) == [deny]
    for broker_id in (1, 2, 3):
        wait_until(
            lambda b=broker_id: topic_error(cluster, b, topic) == ErrorCode.none,
            PROPAGATION_S,
            f"broker {broker_id} lifting the DENY",
        )


def test_brokers_whose_principal_is_a_super_user_replicate_under_the_authorizer(cluster_factory):
    # allow.everyone.if.no.acl.found is false: only a super user's requests (the brokers' and,
    # over PLAINTEXT, this test's) get through.
    cluster = cluster_factory(overrides={**SMALL_INDEXES, **AUTHORIZER, "super.users": "User:ANONYMOUS"})
    wait_formed(cluster)
    topic = unique_topic("replicated")
    create_topic(cluster, topic, 1, 3)
    wait_until(lambda: full_isrs(cluster, topic, 1), TIMEOUT_S, "full ISRs")
    outcomes = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "message.timeout.ms": 30_000})
    for n in range(10):
        producer.produce(topic, f"v{n}".encode(), callback=lambda err, msg: outcomes.append(err))
    producer.flush(TIMEOUT_S)
    assert outcomes == [None] * 10
