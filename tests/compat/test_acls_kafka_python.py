"""ACLs with kafka-python's KafkaAdminClient over real sockets, at its newest ACL versions and,
pinned to an old broker, at v0 (literal patterns only), against a broker process with the ACL
authorizer and User:ANONYMOUS (every PLAINTEXT client) as a super user."""

import pytest
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from kafka.errors import NoError

from tests.harness import BrokerProcess

pytestmark = pytest.mark.compat


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory):
    broker = BrokerProcess(
        tmp_path_factory.mktemp("acls") / "data",
        {"authorizer.class.name": "logway.acl", "super.users": "User:ANONYMOUS"},
    ).start()
    yield broker
    broker.kill()
    assert "Traceback" not in broker.log()


def acl(name: str, pattern=ACLResourcePatternType.LITERAL, operation=ACLOperation.READ) -> ACL:
    return ACL(
        principal="User:alice", host="*", operation=operation, permission_type=ACLPermissionType.ALLOW,
        resource_pattern=ResourcePattern(ResourceType.TOPIC, name, pattern),
    )


def topic_filter(name: str | None, pattern=ACLResourcePatternType.ANY) -> ACLFilter:
    return ACLFilter(
        principal=None, host=None, operation=ACLOperation.ANY, permission_type=ACLPermissionType.ANY,
        resource_pattern=ResourcePatternFilter(ResourceType.TOPIC, name, pattern),
    )


def test_create_describe_and_delete_at_the_newest_versions(acl_broker):
    admin = KafkaAdminClient(bootstrap_servers=acl_broker.bootstrap)
    try:
        wanted = [acl("kp-orders"), acl("kp-sales-", ACLResourcePatternType.PREFIXED, ACLOperation.WRITE)]
        created = admin.create_acls(wanted)
        assert created["failed"] == [] and len(created["succeeded"]) == 2
        described, error = admin.describe_acls(topic_filter(None))
        assert error is NoError
        assert {(a.resource_pattern.resource_name, a.resource_pattern.pattern_type, a.operation) for a in described} >= {
            ("kp-orders", ACLResourcePatternType.LITERAL, ACLOperation.READ),
            ("kp-sales-", ACLResourcePatternType.PREFIXED, ACLOperation.WRITE),
        }
        ((_, deleted, error),) = admin.delete_acls([topic_filter("kp-sales-", ACLResourcePatternType.PREFIXED)])
        assert error is NoError
        assert [(a.resource_pattern.resource_name, a.operation) for a in deleted] == [("kp-sales-", ACLOperation.WRITE)]
    finally:
        admin.close()


def test_v0_of_an_old_client_sees_literal_acls(acl_broker):
    admin = KafkaAdminClient(bootstrap_servers=acl_broker.bootstrap, api_version=(1, 0, 0))
    try:
        assert admin.create_acls([acl("kp-v0")])["failed"] == []
        described, error = admin.describe_acls(topic_filter("kp-v0", ACLResourcePatternType.LITERAL))
        assert error is NoError
        assert [(a.resource_pattern.resource_name, a.principal) for a in described] == [("kp-v0", "User:alice")]
        ((_, deleted, error),) = admin.delete_acls([topic_filter("kp-v0", ACLResourcePatternType.LITERAL)])
        assert error is NoError and len(deleted) == 1
    finally:
        admin.close()
