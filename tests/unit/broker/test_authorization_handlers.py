"""Authorization in the request handlers (broker/handlers/authorization.py and the handlers that
call it), through the dispatcher of an in-process broker with the ACL authorizer: sessions of
User:alice are denied, then granted, per resource type (topic, group, cluster, transactional
id), as Kafka's KafkaApis answers."""

import asyncio
import dataclasses
import datetime

from kio.schema.alter_user_scram_credentials.v0.request import (
    AlterUserScramCredentialsRequest,
    ScramCredentialUpsertion,
)
from kio.schema.describe_user_scram_credentials.v0.request import DescribeUserScramCredentialsRequest
from kio.schema.envelope.v0.request import EnvelopeRequest
from kio.schema.add_offsets_to_txn.v3.request import AddOffsetsToTxnRequest
from kio.schema.add_partitions_to_txn.v3.request import AddPartitionsToTxnRequest, AddPartitionsToTxnTopic
from kio.schema.alter_configs.v2.request import AlterableConfig, AlterConfigsRequest, AlterConfigsResource
from kio.schema.alter_partition_reassignments.v0.request import AlterPartitionReassignmentsRequest
from kio.schema.alter_replica_log_dirs.v2.request import (
    AlterReplicaLogDir,
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirTopic,
)
from kio.schema.create_acls.v3.request import AclCreation, CreateAclsRequest
from kio.schema.create_partitions.v3.request import CreatePartitionsRequest, CreatePartitionsTopic
from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
from kio.schema.delete_records.v2.request import DeleteRecordsPartition, DeleteRecordsRequest, DeleteRecordsTopic
from kio.schema.delete_topics.v6.request import DeleteTopicsRequest, DeleteTopicState
from kio.schema.describe_cluster.v1.request import DescribeClusterRequest
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
from kio.schema.describe_log_dirs.v4.request import DescribeLogDirsRequest
from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.elect_leaders.v2.request import ElectLeadersRequest, TopicPartitions
from kio.schema.end_txn.v3.request import EndTxnRequest
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.incremental_alter_configs.v1.request import AlterConfigsResource as IncrementalResource
from kio.schema.incremental_alter_configs.v1.request import IncrementalAlterConfigsRequest
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.join_group.v9.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.leave_group.v5.request import LeaveGroupRequest, MemberIdentity
from kio.schema.list_groups.v4.request import ListGroupsRequest
from kio.schema.list_offsets.v7.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from kio.schema.list_partition_reassignments.v0.request import ListPartitionReassignmentsRequest
from kio.schema.metadata.v10.request import MetadataRequest as MetadataV10
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.offset_commit.v8.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.offset_delete.v0.request import OffsetDeleteRequest
from kio.schema.offset_fetch.v8.request import OffsetFetchRequest, OffsetFetchRequestGroup
from kio.schema.offset_for_leader_epoch.v4.request import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
)
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.sync_group.v5.request import SyncGroupRequest
from kio.schema.txn_offset_commit.v3.request import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
)
from kio.schema.write_txn_markers.v1.request import WritableTxnMarker, WritableTxnMarkerTopic, WriteTxnMarkersRequest

from broker.security.acl import AclOperation as Op
from broker.security.acl import AclPermissionType, PatternType, ResourceType
from broker.session import KafkaPrincipal, Session
from protocol.api_keys import ApiKey
from kio.schema.alter_client_quotas.v1.request import AlterClientQuotasRequest
from kio.schema.alter_client_quotas.v1.request import EntityData as QuotaEntity
from kio.schema.alter_client_quotas.v1.request import EntryData as QuotaEntry
from kio.schema.alter_client_quotas.v1.request import OpData as QuotaOp
from kio.schema.describe_client_quotas.v1.request import DescribeClientQuotasRequest
from protocol.config_types import ConfigResourceType
from protocol.errors import ErrorCode
from protocol.legacy import (
    ControlledShutdownRequest,
    LeaderAndIsrRequest,
    StopReplicaRequest,
    UpdateMetadataBroker,
    UpdateMetadataEndpoint,
    UpdateMetadataRequest,
)
from protocol.records import Record, build_batch
from tests.in_process import CLIENT_ADDRESS, Client, running_broker

ADMIN = Session(CLIENT_ADDRESS, "PLAINTEXT", principal=KafkaPrincipal("User", "admin"))
ALICE = Session(CLIENT_ADDRESS, "PLAINTEXT", principal=KafkaPrincipal("User", "alice"))
SETTINGS = {
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    "super.users": "User:admin",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "1",
}
MINUTE = datetime.timedelta(minutes=1)
MS = datetime.timedelta(milliseconds=1)


def scenario(tmp_path, body, extra: dict | None = None):
    async def main():
        async with running_broker(tmp_path, {**SETTINGS, **(extra or {})}) as broker:
            await broker.topics.create("orders", 1, {})
            await broker.topics.create("secret", 1, {})
            return await body(Client(broker, session=ADMIN), Client(broker, session=ALICE))

    return asyncio.run(main())


async def grant(admin: Client, resource_type: ResourceType, name: str, *operations: Op,
                pattern=PatternType.LITERAL, permission=AclPermissionType.ALLOW) -> None:
    response = await admin.call(ApiKey.CREATE_ACLS, 3, CreateAclsRequest(creations=tuple(
        AclCreation(
            resource_type=resource_type, resource_name=name, resource_pattern_type=pattern,
            principal="User:alice", host="*", operation=op, permission_type=permission,
        )
        for op in operations
    )))
    assert {r.error_code for r in response.results} == {ErrorCode.none}


async def produce(client: Client, topic: str, transactional_id: str | None = None) -> ErrorCode:
    batch = build_batch([Record(0, 1_700_000_000_000, None, b"v")], producer_id=-1 if transactional_id is None else 5,
                        producer_epoch=0, base_sequence=-1 if transactional_id is None else 0,
                        is_transactional=transactional_id is not None)
    response = await client.call(ApiKey.PRODUCE, 9, ProduceRequest(
        transactional_id=transactional_id, acks=1, timeout=MINUTE,
        topic_data=(TopicProduceData(name=topic, partition_data=(PartitionProduceData(index=0, records=batch),)),),
    ))
    return response.responses[0].partition_responses[0].error_code


async def fetch(client: Client, topic: str, replica_id: int = -1) -> ErrorCode:
    response = await client.call(ApiKey.FETCH, 12, FetchRequest(
        replica_id=replica_id, max_wait=datetime.timedelta(0), min_bytes=0, max_bytes=1 << 20,
        isolation_level=0, forgotten_topics_data=(),
        topics=(FetchTopic(topic=topic, partitions=(FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20),)),),
    ))
    return response.responses[0].partitions[0].error_code


def metadata(*names: str, auto_create=False, all_topics=False) -> MetadataRequest:
    return MetadataRequest(
        topics=None if all_topics else tuple(MetadataRequestTopic(topic_id=None, name=n) for n in names),
        allow_auto_topic_creation=auto_create, include_topic_authorized_operations=True,
    )


# ------------------------------------------------------------------------------------ topics


def test_produce_and_fetch_need_write_and_read_on_the_topic(tmp_path):
    async def body(admin, alice):
        assert await produce(alice, "orders") == ErrorCode.topic_authorization_failed
        assert await fetch(alice, "orders") == ErrorCode.topic_authorization_failed
        # a topic that does not exist is denied the same way: its existence is not disclosed
        assert await produce(alice, "nowhere") == ErrorCode.topic_authorization_failed
        await grant(admin, ResourceType.TOPIC, "ord", Op.WRITE, Op.READ, pattern=PatternType.PREFIXED)
        assert await produce(alice, "orders") == ErrorCode.none
        assert await fetch(alice, "orders") == ErrorCode.none
        assert await fetch(alice, "secret") == ErrorCode.topic_authorization_failed

    scenario(tmp_path, body)


def test_a_follower_fetch_needs_cluster_action(tmp_path):
    async def body(admin, alice):
        assert await fetch(alice, "orders", replica_id=7) == ErrorCode.topic_authorization_failed
        await grant(admin, ResourceType.TOPIC, "orders", Op.READ)
        assert await fetch(alice, "orders", replica_id=7) == ErrorCode.topic_authorization_failed

    scenario(tmp_path, body)


def test_transactional_batches_need_write_on_the_transactional_id(tmp_path):
    async def body(admin, alice):
        await grant(admin, ResourceType.TOPIC, "orders", Op.WRITE)
        assert await produce(alice, "orders", "tx") == ErrorCode.transactional_id_authorization_failed

    scenario(tmp_path, body)


def test_metadata_hides_what_the_caller_may_not_describe(tmp_path):
    async def body(admin, alice):
        await grant(admin, ResourceType.TOPIC, "orders", Op.READ)
        everything = await alice.call(ApiKey.METADATA, 12, metadata(all_topics=True))
        assert [t.name for t in everything.topics] == ["orders"]
        named = await alice.call(ApiKey.METADATA, 12, metadata("orders", "secret"))
        assert [(t.name, t.error_code) for t in named.topics] == [
            ("orders", ErrorCode.none), ("secret", ErrorCode.topic_authorization_failed),
        ]
        # READ allows READ and DESCRIBE of the topic's operations
        assert named.topics[0].topic_authorized_operations == (1 << Op.READ) | (1 << Op.DESCRIBE)

    scenario(tmp_path, body)


def test_auto_creation_needs_create_on_the_cluster_or_the_topic(tmp_path):
    async def body(admin, alice):
        await grant(admin, ResourceType.TOPIC, "new-", Op.DESCRIBE, pattern=PatternType.PREFIXED)
        denied = await alice.call(ApiKey.METADATA, 12, metadata("new-a", auto_create=True))
        assert denied.topics[0].error_code == ErrorCode.topic_authorization_failed
        await grant(admin, ResourceType.TOPIC, "new-", Op.CREATE, pattern=PatternType.PREFIXED)
        created = await alice.call(ApiKey.METADATA, 12, metadata("new-a", auto_create=True))
        assert created.topics[0].error_code == ErrorCode.none and created.topics[0].partitions

    scenario(tmp_path, body)


def test_create_and_delete_topics_need_create_and_delete(tmp_path):
    async def body(admin, alice):
        def create(name):
            return CreateTopicsRequest(topics=(CreatableTopic(
                name=name, num_partitions=1, replication_factor=1, assignments=(), configs=()),), timeout=MINUTE, validate_only=False)

        refused = await alice.call(ApiKey.CREATE_TOPICS, 7, create("mine"))
        assert (refused.topics[0].error_code, refused.topics[0].error_message) == (
            ErrorCode.topic_authorization_failed, "Authorization failed.")
        await grant(admin, ResourceType.CLUSTER, "kafka-cluster", Op.CREATE)
        created = await alice.call(ApiKey.CREATE_TOPICS, 7, create("mine"))
        assert created.topics[0].error_code == ErrorCode.none
        # no DESCRIBE_CONFIGS on the topic: its configs are not shown
        assert created.topics[0].topic_config_error_code == ErrorCode.topic_authorization_failed
        delete = DeleteTopicsRequest(topics=(DeleteTopicState(name="mine", topic_id=None),), timeout=MINUTE)
        assert (await alice.call(ApiKey.DELETE_TOPICS, 6, delete)).responses[0].error_code == ErrorCode.topic_authorization_failed
        await grant(admin, ResourceType.TOPIC, "mine", Op.DELETE)
        assert (await alice.call(ApiKey.DELETE_TOPICS, 6, delete)).responses[0].error_code == ErrorCode.none

    scenario(tmp_path, body)


# ------------------------------------------------------------------------------------ groups


def join(group_id: str) -> JoinGroupRequest:
    return JoinGroupRequest(
        group_id=group_id, session_timeout=10_000 * MS, rebalance_timeout=10_000 * MS, member_id="",
        group_instance_id=None, protocol_type="consumer",
        protocols=(JoinGroupRequestProtocol(name="range", metadata=b""),),
    )


def test_group_apis_need_their_operation_on_the_group(tmp_path):
    async def body(admin, alice):
        find = FindCoordinatorRequest(key_type=0, coordinator_keys=("app",))
        assert (await alice.call(ApiKey.FIND_COORDINATOR, 4, find)).coordinators[0].error_code == ErrorCode.group_authorization_failed
        assert (await alice.call(ApiKey.JOIN_GROUP, 9, join("app"))).error_code == ErrorCode.group_authorization_failed
        await grant(admin, ResourceType.GROUP, "app", Op.READ)
        assert (await alice.call(ApiKey.FIND_COORDINATOR, 4, find)).coordinators[0].error_code == ErrorCode.none
        assert (await alice.call(ApiKey.JOIN_GROUP, 9, join("app"))).error_code == ErrorCode.member_id_required

    scenario(tmp_path, body)


def test_offset_commit_needs_read_on_the_group_and_each_topic(tmp_path):
    async def body(admin, alice):
        commit = OffsetCommitRequest(
            group_id="app", generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
            topics=tuple(
                OffsetCommitRequestTopic(name=name, partitions=(OffsetCommitRequestPartition(
                    partition_index=0, committed_offset=1, committed_leader_epoch=-1, committed_metadata=None),))
                for name in ("orders", "secret")
            ),
        )
        refused = await alice.call(ApiKey.OFFSET_COMMIT, 8, commit)
        assert {t.partitions[0].error_code for t in refused.topics} == {ErrorCode.group_authorization_failed}
        await grant(admin, ResourceType.GROUP, "app", Op.READ)
        await grant(admin, ResourceType.TOPIC, "orders", Op.READ)
        answered = await alice.call(ApiKey.OFFSET_COMMIT, 8, commit)
        assert [(t.name, t.partitions[0].error_code) for t in answered.topics] == [
            ("orders", ErrorCode.none), ("secret", ErrorCode.topic_authorization_failed),
        ]

    scenario(tmp_path, body)


def test_list_groups_shows_only_describable_groups_without_cluster_describe(tmp_path):
    async def body(admin, alice):
        for group in ("app", "other"):
            await admin.call(ApiKey.JOIN_GROUP, 9, join(group))
        listed = await alice.call(ApiKey.LIST_GROUPS, 4, ListGroupsRequest(states_filter=()))
        assert listed.groups == ()
        await grant(admin, ResourceType.GROUP, "app", Op.DESCRIBE)
        listed = await alice.call(ApiKey.LIST_GROUPS, 4, ListGroupsRequest(states_filter=()))
        assert [g.group_id for g in listed.groups] == ["app"]
        await grant(admin, ResourceType.CLUSTER, "kafka-cluster", Op.DESCRIBE)
        listed = await alice.call(ApiKey.LIST_GROUPS, 4, ListGroupsRequest(states_filter=()))
        assert sorted(g.group_id for g in listed.groups) == ["app", "other"]

    scenario(tmp_path, body)


# ------------------------------------------------------------------------------------ cluster


def test_inter_broker_requests_need_cluster_action(tmp_path):
    update = UpdateMetadataRequest(
        controller_id=1, controller_epoch=1, broker_epoch=-1, topic_states=(),
        live_brokers=(UpdateMetadataBroker(
            id=1, endpoints=(UpdateMetadataEndpoint(port=1, host="h", listener="PLAINTEXT", security_protocol=0),),
        ),),
    )

    async def body(admin, alice):
        response = await alice.call(ApiKey.UPDATE_METADATA, 5, update)
        assert response.error_code == ErrorCode.cluster_authorization_failed

    scenario(tmp_path, body)


def test_broker_configs_need_describe_configs_on_the_cluster(tmp_path):
    async def body(admin, alice):
        request = DescribeConfigsRequest(resources=(
            DescribeConfigsResource(resource_type=ConfigResourceType.BROKER, resource_name="0", configuration_keys=None),
            DescribeConfigsResource(resource_type=ConfigResourceType.TOPIC, resource_name="orders", configuration_keys=None),
        ), include_synonyms=False, include_documentation=False)
        refused = await alice.call(ApiKey.DESCRIBE_CONFIGS, 4, request)
        assert [r.error_code for r in refused.results] == [ErrorCode.cluster_authorization_failed, ErrorCode.topic_authorization_failed]
        await grant(admin, ResourceType.CLUSTER, "kafka-cluster", Op.ALTER_CONFIGS)
        await grant(admin, ResourceType.TOPIC, "orders", Op.DESCRIBE_CONFIGS)
        granted = await alice.call(ApiKey.DESCRIBE_CONFIGS, 4, request)
        assert [r.error_code for r in granted.results] == [ErrorCode.none, ErrorCode.none]

    scenario(tmp_path, body)


def test_describe_cluster_reports_the_callers_cluster_operations(tmp_path):
    async def body(admin, alice):
        request = DescribeClusterRequest(include_cluster_authorized_operations=True, endpoint_type=1)
        assert (await alice.call(ApiKey.DESCRIBE_CLUSTER, 1, request)).cluster_authorized_operations == 0
        await grant(admin, ResourceType.CLUSTER, "kafka-cluster", Op.ALTER)
        answer = await alice.call(ApiKey.DESCRIBE_CLUSTER, 1, request)
        assert answer.cluster_authorized_operations == (1 << Op.ALTER) | (1 << Op.DESCRIBE)

    scenario(tmp_path, body)


def test_metadata_v10_reports_the_callers_cluster_operations_when_asked(tmp_path):
    async def body(admin, alice):
        request = MetadataV10(
            topics=None, allow_auto_topic_creation=False,
            include_cluster_authorized_operations=True, include_topic_authorized_operations=False,
        )
        assert (await alice.call(ApiKey.METADATA, 10, request)).cluster_authorized_operations == 0
        await grant(admin, ResourceType.CLUSTER, "kafka-cluster", Op.DESCRIBE)
        answer = await alice.call(ApiKey.METADATA, 10, request)
        assert answer.cluster_authorized_operations == 1 << Op.DESCRIBE
        unasked = await alice.call(ApiKey.METADATA, 10, dataclasses.replace(request, include_cluster_authorized_operations=False))
        assert unasked.cluster_authorized_operations == -(2**31)

    scenario(tmp_path, body)


def test_idempotent_producers_need_idempotent_write_or_write_on_some_topic(tmp_path):
    async def body(admin, alice):
        init = InitProducerIdRequest(transactional_id=None, transaction_timeout=MINUTE, producer_id=-1, producer_epoch=-1)
        assert (await alice.call(ApiKey.INIT_PRODUCER_ID, 4, init)).error_code == ErrorCode.cluster_authorization_failed
        await grant(admin, ResourceType.TOPIC, "orders", Op.WRITE)
        assert (await alice.call(ApiKey.INIT_PRODUCER_ID, 4, init)).error_code == ErrorCode.none

    scenario(tmp_path, body)


# ------------------------------------------------------------------------------------ transactional ids


def test_transactional_apis_need_write_on_the_transactional_id(tmp_path):
    async def body(admin, alice):
        init = InitProducerIdRequest(transactional_id="tx", transaction_timeout=MINUTE, producer_id=-1, producer_epoch=-1)
        assert (await alice.call(ApiKey.INIT_PRODUCER_ID, 4, init)).error_code == ErrorCode.transactional_id_authorization_failed
        end = EndTxnRequest(transactional_id="tx", producer_id=1, producer_epoch=0, committed=True)
        assert (await alice.call(ApiKey.END_TXN, 3, end)).error_code == ErrorCode.transactional_id_authorization_failed
        find = FindCoordinatorRequest(key_type=1, coordinator_keys=("tx",))
        assert (await alice.call(ApiKey.FIND_COORDINATOR, 4, find)).coordinators[0].error_code == ErrorCode.transactional_id_authorization_failed
        await grant(admin, ResourceType.TRANSACTIONAL_ID, "tx", Op.WRITE)
        assert (await alice.call(ApiKey.FIND_COORDINATOR, 4, find)).coordinators[0].error_code != ErrorCode.transactional_id_authorization_failed
        assert (await alice.call(ApiKey.INIT_PRODUCER_ID, 4, init)).error_code != ErrorCode.transactional_id_authorization_failed

    scenario(tmp_path, body, {"transaction.state.log.num.partitions": "1", "transaction.state.log.replication.factor": "1", "transaction.state.log.min.isr": "1"})


def test_without_an_authorizer_everything_is_allowed(tmp_path):
    async def main():
        async with running_broker(tmp_path) as broker:
            await broker.topics.create("orders", 1, {})
            alice = Client(broker, session=ALICE)
            assert await produce(alice, "orders") == ErrorCode.none
            assert await fetch(alice, "orders") == ErrorCode.none

    asyncio.run(main())


# ------------------------------------------------------------------------------------ every API


def _every_api_denied() -> list:
    """(api key, version, request, the answer's error code, expected) for the APIs not shown
    above: a caller without any ACL is refused by each, with its resource type's error."""
    topic, group, cluster, txn = (
        ErrorCode.topic_authorization_failed, ErrorCode.group_authorization_failed,
        ErrorCode.cluster_authorization_failed, ErrorCode.transactional_id_authorization_failed,
    )
    return [
        (ApiKey.DELETE_RECORDS, 2, DeleteRecordsRequest(timeout=MINUTE, topics=(DeleteRecordsTopic(
            name="orders", partitions=(DeleteRecordsPartition(partition_index=0, offset=0),)),)),
         lambda r: r.topics[0].partitions[0].error_code, topic),
        (ApiKey.CREATE_PARTITIONS, 3, CreatePartitionsRequest(topics=(CreatePartitionsTopic(
            name="orders", count=2, assignments=None),), timeout=MINUTE, validate_only=True),
         lambda r: r.results[0].error_code, topic),
        (ApiKey.DESCRIBE_PRODUCERS, 0, DescribeProducersRequest(topics=(TopicRequest(name="orders", partition_indexes=(0,)),)),
         lambda r: r.topics[0].partitions[0].error_code, topic),
        (ApiKey.LIST_OFFSETS, 7, ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(ListOffsetsTopic(
            name="orders", partitions=(ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1),)),)),
         lambda r: r.topics[0].partitions[0].error_code, topic),
        (ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, OffsetForLeaderEpochRequest(replica_id=-1, topics=(OffsetForLeaderTopic(
            topic="orders", partitions=(OffsetForLeaderPartition(partition=0, current_leader_epoch=-1, leader_epoch=0),)),)),
         lambda r: r.topics[0].partitions[0].error_code, topic),
        (ApiKey.ALTER_CONFIGS, 2, AlterConfigsRequest(resources=(AlterConfigsResource(
            resource_type=ConfigResourceType.TOPIC, resource_name="orders",
            configs=(AlterableConfig(name="retention.ms", value="1000"),)),), validate_only=True),
         lambda r: r.responses[0].error_code, topic),
        (ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, IncrementalAlterConfigsRequest(resources=(IncrementalResource(
            resource_type=ConfigResourceType.BROKER, resource_name="0", configs=()),), validate_only=True),
         lambda r: r.responses[0].error_code, cluster),
        (ApiKey.SYNC_GROUP, 5, SyncGroupRequest(group_id="app", generation_id=1, member_id="m", group_instance_id=None,
                                                protocol_type=None, protocol_name=None, assignments=()),
         lambda r: r.error_code, group),
        (ApiKey.HEARTBEAT, 4, HeartbeatRequest(group_id="app", generation_id=1, member_id="m", group_instance_id=None),
         lambda r: r.error_code, group),
        (ApiKey.LEAVE_GROUP, 5, LeaveGroupRequest(group_id="app", members=(MemberIdentity(member_id="m", group_instance_id=None, reason=None),)),
         lambda r: r.error_code, group),
        (ApiKey.OFFSET_FETCH, 8, OffsetFetchRequest(groups=(OffsetFetchRequestGroup(group_id="app", topics=None),), require_stable=False),
         lambda r: r.groups[0].error_code, group),
        (ApiKey.DESCRIBE_GROUPS, 5, DescribeGroupsRequest(groups=("app",), include_authorized_operations=False),
         lambda r: r.groups[0].error_code, group),
        (ApiKey.DELETE_GROUPS, 2, DeleteGroupsRequest(groups_names=("app",)), lambda r: r.results[0].error_code, group),
        (ApiKey.OFFSET_DELETE, 0, OffsetDeleteRequest(group_id="app", topics=()), lambda r: r.error_code, group),
        (ApiKey.DESCRIBE_TRANSACTIONS, 0, DescribeTransactionsRequest(transactional_ids=("tx",)),
         lambda r: r.transaction_states[0].error_code, txn),
        (ApiKey.ADD_PARTITIONS_TO_TXN, 3, AddPartitionsToTxnRequest(
            v3_and_below_transactional_id="tx", v3_and_below_producer_id=1, v3_and_below_producer_epoch=0,
            v3_and_below_topics=(AddPartitionsToTxnTopic(name="orders", partitions=(0,)),)),
         lambda r: r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code, txn),
        (ApiKey.ADD_OFFSETS_TO_TXN, 3, AddOffsetsToTxnRequest(transactional_id="tx", producer_id=1, producer_epoch=0, group_id="app"),
         lambda r: r.error_code, txn),
        (ApiKey.TXN_OFFSET_COMMIT, 3, TxnOffsetCommitRequest(
            transactional_id="tx", group_id="app", producer_id=1, producer_epoch=0, generation_id=-1, member_id="",
            group_instance_id=None, topics=(TxnOffsetCommitRequestTopic(name="orders", partitions=(
                TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=1, committed_leader_epoch=-1,
                                                committed_metadata=None),)),)),
         lambda r: r.topics[0].partitions[0].error_code, txn),
        (ApiKey.ELECT_LEADERS, 2, ElectLeadersRequest(election_type=0, topic_partitions=(
            TopicPartitions(topic="orders", partitions=(0,)),), timeout=MINUTE),
         lambda r: r.error_code, cluster),
        (ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, AlterPartitionReassignmentsRequest(timeout=MINUTE, topics=()),
         lambda r: r.error_code, cluster),
        (ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, ListPartitionReassignmentsRequest(timeout=MINUTE, topics=None),
         lambda r: r.error_code, cluster),
        (ApiKey.WRITE_TXN_MARKERS, 1, WriteTxnMarkersRequest(markers=(WritableTxnMarker(
            producer_id=1, producer_epoch=0, transaction_result=True, coordinator_epoch=0,
            topics=(WritableTxnMarkerTopic(name="orders", partition_indexes=(0,)),)),)),
         lambda r: r.markers[0].topics[0].partitions[0].error_code, cluster),
        (ApiKey.DESCRIBE_LOG_DIRS, 4, DescribeLogDirsRequest(topics=None),
         lambda r: (r.error_code, r.results), (cluster, ())),
        (ApiKey.ALTER_REPLICA_LOG_DIRS, 2, AlterReplicaLogDirsRequest(dirs=(AlterReplicaLogDir(
            path="/elsewhere", topics=(AlterReplicaLogDirTopic(name="orders", partitions=(0,)),)),)),
         lambda r: r.results[0].partitions[0].error_code, cluster),
        (ApiKey.LEADER_AND_ISR, 3, LeaderAndIsrRequest(controller_id=1, controller_epoch=1, topic_states=(), live_leaders=()),
         lambda r: r.error_code, cluster),
        (ApiKey.STOP_REPLICA, 1, StopReplicaRequest(controller_id=1, controller_epoch=1, delete_partitions=False, topics=()),
         lambda r: r.error_code, cluster),
        (ApiKey.CONTROLLED_SHUTDOWN, 2, ControlledShutdownRequest(broker_id=1), lambda r: r.error_code, cluster),
        (ApiKey.ENVELOPE, 0, EnvelopeRequest(request_data=b"", request_principal=None, client_host_address=b"\x7f\0\0\x01"),
         lambda r: r.error_code, cluster),
        (ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, DescribeClientQuotasRequest(components=(), strict=False),
         lambda r: r.error_code, cluster),
        (ApiKey.ALTER_CLIENT_QUOTAS, 1, AlterClientQuotasRequest(entries=(QuotaEntry(
            entity=(QuotaEntity(entity_type="client-id", entity_name="app"),),
            ops=(QuotaOp(key="producer_byte_rate", value=1000.0, remove=False),)),), validate_only=True),
         lambda r: r.entries[0].error_code, cluster),
        (ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, DescribeUserScramCredentialsRequest(users=None),
         lambda r: r.error_code, cluster),
        (ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, AlterUserScramCredentialsRequest(deletions=(), upsertions=(
            ScramCredentialUpsertion(name="bob", mechanism=1, iterations=4096, salt=b"s", salted_password=b"p"),)),
         lambda r: r.results[0].error_code, cluster),
    ]


def test_every_api_refuses_a_caller_without_acls_with_its_resource_types_error(tmp_path):
    async def body(admin, alice):
        answers = []
        for api_key, version, request, error_of, _expected in _every_api_denied():
            answers.append((api_key.name, error_of(await alice.call(api_key, version, request))))
        return answers

    answers = scenario(tmp_path, body)
    assert answers == [(api_key.name, expected) for api_key, _, _, _, expected in _every_api_denied()]
