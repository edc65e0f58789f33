"""CreateAcls, DescribeAcls and DeleteAcls through the dispatcher of an in-process broker, with
sessions of several principals: cluster ALTER/DESCRIBE needed, SECURITY_DISABLED without an
authorizer, Kafka's per-creation validation, filters, and v0 against v3."""

import asyncio

import pytest
from kio.schema.create_acls.v3.request import AclCreation, CreateAclsRequest
from kio.schema.delete_acls.v3.request import DeleteAclsFilter, DeleteAclsRequest
from kio.schema.describe_acls.v3.request import DescribeAclsRequest

from broker.security.acl import AclOperation as Op
from broker.security.acl import AclPermissionType, PatternType, ResourceType
from broker.session import KafkaPrincipal, Session
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from tests.in_process import CLIENT_ADDRESS, Client, running_broker

ADMIN = Session(CLIENT_ADDRESS, "PLAINTEXT", principal=KafkaPrincipal("User", "admin"))
ALICE = Session(CLIENT_ADDRESS, "PLAINTEXT", principal=KafkaPrincipal("User", "alice"))
AUTHORIZER = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "super.users": "User:admin"}
ALLOW = AclPermissionType.ALLOW


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 60))


def creation(name="orders", principal="User:alice", op=Op.READ, resource_type=ResourceType.TOPIC,
             pattern=PatternType.LITERAL, permission=ALLOW, host="*") -> AclCreation:
    return AclCreation(
        resource_type=resource_type, resource_name=name, resource_pattern_type=pattern, principal=principal,
        host=host, operation=op, permission_type=permission,
    )


def describe_all(**overrides) -> DescribeAclsRequest:
    fields = dict(
        resource_type_filter=ResourceType.ANY, resource_name_filter=None, pattern_type_filter=PatternType.ANY,
        principal_filter=None, host_filter=None, operation=Op.ANY, permission_type=AclPermissionType.ANY,
    )
    return DescribeAclsRequest(**{**fields, **overrides})


def delete_filter(**overrides) -> DeleteAclsFilter:
    return DeleteAclsFilter(
        **{f: getattr(describe_all(**overrides), f) for f in (
            "resource_type_filter", "resource_name_filter", "pattern_type_filter", "principal_filter",
            "host_filter", "operation", "permission_type",
        )}
    )


def test_a_super_user_creates_describes_and_deletes_acls(tmp_path):
    async def scenario():
        async with running_broker(tmp_path, AUTHORIZER) as broker:
            admin = Client(broker, session=ADMIN)
            created = await admin.call(ApiKey.CREATE_ACLS, 3, CreateAclsRequest(creations=(
                creation(), creation("sales-", pattern=PatternType.PREFIXED, op=Op.WRITE),
                creation("app", resource_type=ResourceType.GROUP),
            )))
            assert [r.error_code for r in created.results] == [ErrorCode.none] * 3
            described = await admin.call(ApiKey.DESCRIBE_ACLS, 3, describe_all(resource_type_filter=ResourceType.TOPIC))
            assert described.error_code == ErrorCode.none
            assert {(r.resource_name, r.pattern_type, r.acls[0].operation) for r in described.resources} == {
                ("orders", PatternType.LITERAL, Op.READ), ("sales-", PatternType.PREFIXED, Op.WRITE),
            }
            matching = await admin.call(ApiKey.DESCRIBE_ACLS, 3, describe_all(
                resource_type_filter=ResourceType.TOPIC, resource_name_filter="sales-eu", pattern_type_filter=PatternType.MATCH,
            ))
            assert [r.resource_name for r in matching.resources] == ["sales-"]
            deleted = await admin.call(ApiKey.DELETE_ACLS, 3, DeleteAclsRequest(filters=(
                delete_filter(resource_type_filter=ResourceType.GROUP), delete_filter(principal_filter="User:nobody"),
            )))
            (group_result, nobody_result) = deleted.filter_results
            assert [(m.resource_name, m.principal, m.operation) for m in group_result.matching_acls] == [("app", "User:alice", Op.READ)]
            assert nobody_result.matching_acls == ()
            left = await admin.call(ApiKey.DESCRIBE_ACLS, 3, describe_all())
            assert len(left.resources) == 2

    run(scenario())


def test_v0_requests_see_literal_acls_only(tmp_path):
    async def scenario():
        async with running_broker(tmp_path, AUTHORIZER) as broker:
            admin = Client(broker, session=ADMIN)
            await admin.call(ApiKey.CREATE_ACLS, 0, CreateAclsRequest(creations=(creation(),)))
            await admin.call(ApiKey.CREATE_ACLS, 3, CreateAclsRequest(creations=(creation("o", pattern=PatternType.PREFIXED),)))
            described = await admin.call(ApiKey.DESCRIBE_ACLS, 0, describe_all(pattern_type_filter=PatternType.LITERAL))
            assert [r.resource_name for r in described.resources] == ["orders"]

    run(scenario())


def test_without_alter_or_describe_on_the_cluster_acl_requests_are_refused(tmp_path):
    async def scenario():
        async with running_broker(tmp_path, AUTHORIZER) as broker:
            alice = Client(broker, session=ALICE)
            created = await alice.call(ApiKey.CREATE_ACLS, 3, CreateAclsRequest(creations=(creation(), creation("x"))))
            assert [r.error_code for r in created.results] == [ErrorCode.cluster_authorization_failed] * 2
            described = await alice.call(ApiKey.DESCRIBE_ACLS, 3, describe_all())
            assert described.error_code == ErrorCode.cluster_authorization_failed
            deleted = await alice.call(ApiKey.DELETE_ACLS, 3, DeleteAclsRequest(filters=(delete_filter(),)))
            assert deleted.filter_results[0].error_code == ErrorCode.cluster_authorization_failed
            # DESCRIBE on the cluster is implied by ALTER, and enough for DescribeAcls only
            admin = Client(broker, session=ADMIN)
            await admin.call(ApiKey.CREATE_ACLS, 3, CreateAclsRequest(creations=(
                creation("kafka-cluster", resource_type=ResourceType.CLUSTER, op=Op.DESCRIBE),
            )))
            assert (await alice.call(ApiKey.DESCRIBE_ACLS, 3, describe_all())).error_code == ErrorCode.none
            created = await alice.call(ApiKey.CREATE_ACLS, 3, CreateAclsRequest(creations=(creation(),)))
            assert created.results[0].error_code == ErrorCode.cluster_authorization_failed

    run(scenario())


def test_without_an_authorizer_acl_requests_answer_security_disabled(tmp_path):
    async def scenario():
        async with running_broker(tmp_path) as broker:
            client = Client(broker)
            created = await client.call(ApiKey.CREATE_ACLS, 3, CreateAclsRequest(creations=(creation(),)))
            assert created.results[0].error_code == ErrorCode.security_disabled
            assert created.results[0].error_message == "No Authorizer is configured."
            described = await client.call(ApiKey.DESCRIBE_ACLS, 1, describe_all())
            assert described.error_code == ErrorCode.security_disabled
            deleted = await client.call(ApiKey.DELETE_ACLS, 2, DeleteAclsRequest(filters=(delete_filter(),)))
            assert deleted.filter_results[0].error_code == ErrorCode.security_disabled

    run(scenario())


def test_creations_are_validated_one_by_one(tmp_path):
    async def scenario():
        async with running_broker(tmp_path, AUTHORIZER) as broker:
            admin = Client(broker, session=ADMIN)
            created = await admin.call(ApiKey.CREATE_ACLS, 3, CreateAclsRequest(creations=(
                creation("my-cluster", resource_type=ResourceType.CLUSTER, op=Op.ALTER),
                creation(""),
                creation("a/b"),
                creation(op=Op.ANY),
                creation(pattern=PatternType.MATCH),
                creation(principal="alice"),
                creation(),
            )))
            assert [r.error_code for r in created.results] == [ErrorCode.invalid_request] * 6 + [ErrorCode.none]
            assert created.results[0].error_message == "The only valid name for the CLUSTER resource is kafka-cluster"
            assert created.results[1].error_message == "Invalid empty resource name"

    run(scenario())


def test_unknown_acl_elements_close_the_connection(tmp_path):
    from protocol.errors import ProtocolError

    async def scenario():
        async with running_broker(tmp_path, AUTHORIZER) as broker:
            with pytest.raises(ProtocolError):
                await Client(broker, session=ADMIN).call(ApiKey.DESCRIBE_ACLS, 3, describe_all(operation=42))

    run(scenario())
