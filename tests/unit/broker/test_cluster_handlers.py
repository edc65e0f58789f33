"""The cluster-mode handlers through the dispatcher of in-process brokers: the inter-broker
requests' epoch fencing, the controller-only admin requests, and what a standalone broker
answers to them. Cluster brokers run against a real ZooKeeper; a one-broker cluster is its own
controller."""

import asyncio
import datetime

import pytest
from kio.schema.alter_configs.v2 import request as alter_configs
from kio.schema.alter_configs.v2.request import AlterConfigsRequest
from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.delete_topics.v6.request import DeleteTopicsRequest, DeleteTopicState
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.elect_leaders.v2.request import ElectLeadersRequest, TopicPartitions
from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from kio.schema.list_partition_reassignments.v0.request import ListPartitionReassignmentsRequest
from kio.schema.metadata.v12.request import MetadataRequest

from broker.server import Broker
from protocol.api_keys import ApiKey
from protocol.config_types import ConfigResourceType
from protocol.errors import ErrorCode, KafkaError
from protocol.legacy import (
    ControlledShutdownRequest,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    LeaderAndIsrTopicState,
    StopReplicaRequest,
    StopReplicaTopic,
    UpdateMetadataBroker,
    UpdateMetadataEndpoint,
    UpdateMetadataRequest,
)
from storage.topic_partition import TopicPartition
from tests.in_process import Client
from tests.unit.broker.test_admin_handlers import Admin, settings
from tests.unit.coordinator.test_group_coordinator import TOPIC as COMMITTED_TOPIC, commit, fetch
from tests.unit.coordinator.test_transaction_coordinator import add_partitions, init

TIMEOUT = datetime.timedelta(seconds=5)


def run_cluster_broker(tmp_path, zookeeper, scenario):
    """A one-broker cluster (broker 1, its own controller) in a fresh chroot."""

    async def main():
        broker = Broker(settings(tmp_path, {
            "broker.id": "1",
            "zookeeper.connect": f"{zookeeper.connect_string}/{tmp_path.name}",
            "zookeeper.session.timeout.ms": "6000",
            # Connecting may take longer than a session on a loaded machine (CI: not within 6 s).
            "zookeeper.connection.timeout.ms": "30000",
            "controlled.shutdown.enable": "false",
        }))
        await broker.start()
        try:
            await broker.metadata_cache.wait_until(lambda: broker.metadata_cache.controller_id == 1, 20)
            return await scenario(Admin(broker))
        finally:
            await broker.stop()

    return asyncio.run(asyncio.wait_for(main(), 120))


def run_standalone(tmp_path, scenario):
    async def main():
        broker = Broker(settings(tmp_path))
        await broker.start()
        try:
            return await scenario(Admin(broker))
        finally:
            await broker.stop()

    return asyncio.run(main())


async def once_loaded(call):
    """The answer of `call` once its coordinator has loaded its partition: in cluster mode the
    internal topic is made on first use and loaded after the controller's LeaderAndIsr, and
    clients retry COORDINATOR_LOAD_IN_PROGRESS as this does."""
    for _ in range(200):
        answer = await call()
        codes = answer if isinstance(answer, list) else [answer[0]]
        if ErrorCode.coordinator_load_in_progress not in codes:
            return answer
        await asyncio.sleep(0.05)
    return answer


def _update_metadata(controller_epoch: int, broker_epoch: int = -1) -> UpdateMetadataRequest:
    return UpdateMetadataRequest(
        controller_id=1, controller_epoch=controller_epoch, broker_epoch=broker_epoch, topic_states=(),
        live_brokers=(UpdateMetadataBroker(
            id=1, endpoints=(UpdateMetadataEndpoint(port=1, host="h", listener="PLAINTEXT", security_protocol=0),),
        ),),
    )


def _leader_and_isr(controller_epoch: int, broker_epoch: int = -1) -> LeaderAndIsrRequest:
    state = LeaderAndIsrPartitionState(
        partition_index=0, controller_epoch=controller_epoch, leader=1, leader_epoch=0, isr=(1,),
        zk_version=0, replicas=(1,),
    )
    return LeaderAndIsrRequest(
        controller_id=1, controller_epoch=controller_epoch, broker_epoch=broker_epoch,
        topic_states=(LeaderAndIsrTopicState(topic_name="fenced", partition_states=(state,)),), live_leaders=(),
    )


def test_controller_requests_are_fenced_by_epochs(tmp_path, zookeeper):
    async def scenario(admin: Admin):
        broker = admin.broker
        epoch = broker.cluster.controller_epoch
        own = broker.cluster.broker_epoch
        newer = await admin.call(ApiKey.UPDATE_METADATA, 5, _update_metadata(epoch + 5))
        assert newer.error_code == ErrorCode.none
        assert broker.metadata_cache.endpoint(1) == ("h", 1)
        older = await admin.call(ApiKey.UPDATE_METADATA, 5, _update_metadata(epoch + 4))
        assert older.error_code == ErrorCode.stale_controller_epoch
        stale_broker = await admin.call(ApiKey.UPDATE_METADATA, 5, _update_metadata(epoch + 5, own - 1))
        assert stale_broker.error_code == ErrorCode.stale_broker_epoch
        fenced = await admin.call(ApiKey.LEADER_AND_ISR, 3, _leader_and_isr(epoch))
        assert fenced.error_code == ErrorCode.stale_controller_epoch
        assert [p.error_code for p in fenced.partition_errors] == [ErrorCode.stale_controller_epoch]
        stop = await admin.call(ApiKey.STOP_REPLICA, 1, StopReplicaRequest(
            controller_id=1, controller_epoch=epoch + 5, broker_epoch=own - 1, delete_partitions=True,
            topics=(StopReplicaTopic(name="fenced", partition_indexes=(0,)),),
        ))
        assert stop.error_code == ErrorCode.stale_broker_epoch

    run_cluster_broker(tmp_path, zookeeper, scenario)


def test_the_controller_serves_admin_requests(tmp_path, zookeeper):
    async def scenario(admin: Admin):
        created = await admin.call(ApiKey.CREATE_TOPICS, 7, CreateTopicsRequest(
            topics=(
                CreatableTopic(name="one", num_partitions=2, replication_factor=1, assignments=(), configs=()),
                CreatableTopic(name="two", num_partitions=1, replication_factor=2, assignments=(), configs=()),
            ),
            timeout=TIMEOUT, validate_only=False,
        ))
        assert [t.error_code for t in created.topics] == [ErrorCode.none, ErrorCode.invalid_replication_factor]
        assert admin.broker.metadata_cache.leader_of(TopicPartition("one", 1)) == 1
        # A creation that gets past the metadata cache (an auto-creation on a broker not told of
        # the topic yet) finds it in ZooKeeper before it counts the live brokers.
        with pytest.raises(KafkaError) as existing:
            await admin.broker.topics.cluster_admin.create("one", 2, 2, {}, {})
        assert existing.value.error_code == ErrorCode.topic_already_exists
        elected = await admin.call(ApiKey.ELECT_LEADERS, 2, ElectLeadersRequest(
            election_type=0, topic_partitions=(TopicPartitions(topic="one", partitions=(0, 7)),), timeout=TIMEOUT,
        ))
        results = {p.partition_id: p.error_code for r in elected.replica_election_results for p in r.partition_result}
        assert results == {0: ErrorCode.election_not_needed, 7: ErrorCode.unknown_topic_or_partition}
        listed = await admin.call(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0,
                                  ListPartitionReassignmentsRequest(timeout=TIMEOUT, topics=None))
        assert listed.error_code == ErrorCode.none and listed.topics == ()
        shutdown = await admin.call(ApiKey.CONTROLLED_SHUTDOWN, 2, ControlledShutdownRequest(broker_id=9, broker_epoch=1))
        assert shutdown.error_code == ErrorCode.broker_not_available

    run_cluster_broker(tmp_path, zookeeper, scenario)


def test_a_topic_deleted_through_the_controller_leaves_no_committed_offsets(tmp_path, zookeeper):
    # Cluster mode: the controller's UpdateMetadata removing the partitions tells the group
    # coordinator, as Kafka's KafkaApis does.
    async def scenario(admin: Admin):
        client = Client(admin.broker)
        await admin.create_topic(COMMITTED_TOPIC, 2)
        assert await once_loaded(lambda: commit(client, "g", {0: 5, 1: 6})) == [ErrorCode.none] * 2
        await admin.broker.topics.delete(COMMITTED_TOPIC)
        for _ in range(200):
            if await fetch(client, "g") == (ErrorCode.none, {}):
                break
            await asyncio.sleep(0.05)
        assert await fetch(client, "g") == (ErrorCode.none, {})

    run_cluster_broker(tmp_path, zookeeper, scenario)


def test_a_standalone_broker_has_no_controller_to_obey(tmp_path):
    async def scenario(admin: Admin):
        fenced = await admin.call(ApiKey.LEADER_AND_ISR, 3, _leader_and_isr(1))
        assert fenced.error_code == ErrorCode.stale_controller_epoch
        update = await admin.call(ApiKey.UPDATE_METADATA, 5, _update_metadata(1))
        assert update.error_code == ErrorCode.stale_controller_epoch
        shutdown = await admin.call(ApiKey.CONTROLLED_SHUTDOWN, 2, ControlledShutdownRequest(broker_id=0, broker_epoch=1))
        assert shutdown.error_code == ErrorCode.not_controller
        listed = await admin.call(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0,
                                  ListPartitionReassignmentsRequest(timeout=TIMEOUT, topics=None))
        assert listed.error_code == ErrorCode.not_controller

    run_standalone(tmp_path, scenario)


def test_partitions_in_the_metadata_take_commits_before_the_topic_watch_reads_them(tmp_path, zookeeper):
    # CreateTopics answers once the controller's UpdateMetadata names the partitions; this
    # broker's own watch of the topic znodes may read the topic later (a ZooKeeper reconnect).
    # OffsetCommit and AddPartitionsToTxn check the metadata, as Kafka's KafkaApis does, so a
    # client that just created the topic is not told it does not exist.
    async def scenario(admin: Admin):
        client = Client(admin.broker)
        await admin.create_topic(COMMITTED_TOPIC, 2)
        admin.broker.topics.uninstall(COMMITTED_TOPIC)  # the watch not caught up yet
        assert await once_loaded(lambda: commit(client, "g", {0: 5, 1: 6})) == [ErrorCode.none] * 2
        assert await commit(client, "g", {2: 1}) == [ErrorCode.unknown_topic_or_partition]
        error, producer_id, epoch = await once_loaded(lambda: init(client))
        assert error == ErrorCode.none
        assert await add_partitions(client, producer_id, epoch, COMMITTED_TOPIC, (0, 2)) == [
            ErrorCode.operation_not_attempted, ErrorCode.unknown_topic_or_partition,
        ]
        assert await add_partitions(client, producer_id, epoch, COMMITTED_TOPIC, (0, 1)) == [ErrorCode.none] * 2

    run_cluster_broker(tmp_path, zookeeper, scenario)


def test_config_and_deletion_requests_wait_for_the_topic_watch_to_read_a_topic_in_the_metadata(tmp_path, zookeeper):
    # As for commits above: the topic store, filled by this broker's own ZooKeeper watch, may
    # lag behind the controller's UpdateMetadata. These requests need the topic's configs or id,
    # which only the store holds, so they wait for it instead of answering UNKNOWN_TOPIC_OR_PARTITION.
    async def scenario(admin: Admin):
        topics = admin.broker.topics
        loop = asyncio.get_running_loop()

        def lagging(name: str) -> None:
            info = topics.get(name)
            topics.uninstall(name)  # the watch not caught up yet
            loop.call_later(0.3, topics.install, info)  # ...until it reads the topic

        await admin.create_topic("late", 1, {"retention.ms": "60000"})
        # The creation is answered once the metadata has the topic: under load (a ZooKeeper
        # reconnect, CI) this broker's own watch may not have installed it yet.
        await topics.catch_up("late")
        lagging("late")
        described = await admin.call(ApiKey.DESCRIBE_CONFIGS, 4, DescribeConfigsRequest(
            resources=(DescribeConfigsResource(
                resource_type=ConfigResourceType.TOPIC, resource_name="late", configuration_keys=("retention.ms",),
            ),),
            include_synonyms=False, include_documentation=False,
        ))
        assert [(r.error_code, [(c.name, c.value) for c in r.configs]) for r in described.results] == [
            (ErrorCode.none, [("retention.ms", "60000")]),
        ]
        lagging("late")
        altered = await admin.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, IncrementalAlterConfigsRequest(
            resources=(AlterConfigsResource(
                resource_type=ConfigResourceType.TOPIC, resource_name="late",
                configs=(AlterableConfig(name="retention.ms", config_operation=0, value="70000"),),
            ),),
            validate_only=True,
        ))
        assert [r.error_code for r in altered.responses] == [ErrorCode.none]
        lagging("late")
        replaced = await admin.call(ApiKey.ALTER_CONFIGS, 2, AlterConfigsRequest(
            resources=(alter_configs.AlterConfigsResource(
                resource_type=ConfigResourceType.TOPIC, resource_name="late",
                configs=(alter_configs.AlterableConfig(name="retention.ms", value="80000"),),
            ),),
            validate_only=True,
        ))
        assert [r.error_code for r in replaced.responses] == [ErrorCode.none]
        lagging("late")
        deleted = await admin.call(ApiKey.DELETE_TOPICS, 6, DeleteTopicsRequest(
            topics=(DeleteTopicState(name="late", topic_id=None),), timeout=TIMEOUT,
        ))
        assert [t.error_code for t in deleted.responses] == [ErrorCode.none]
        # A topic the metadata does not have is not waited for.
        missing = await admin.call(ApiKey.DELETE_TOPICS, 6, DeleteTopicsRequest(
            topics=(DeleteTopicState(name="never", topic_id=None),), timeout=TIMEOUT,
        ))
        assert [t.error_code for t in missing.responses] == [ErrorCode.unknown_topic_or_partition]

    run_cluster_broker(tmp_path, zookeeper, scenario)


def test_a_broker_not_yet_told_by_a_controller_holds_metadata_until_the_first_update_metadata(tmp_path, zookeeper):
    # A just-restarted broker answering with no brokers made librdkafka (2.10+) drop every
    # broker it knew, and the producer stopped for good (librdkafka #5301).
    async def scenario(admin: Admin):
        broker = admin.broker
        epoch = broker.cluster.controller_epoch
        broker.metadata_cache.controller_epoch = -1  # as on a start, before the controller's word
        asked = asyncio.ensure_future(admin.call(ApiKey.METADATA, 12, MetadataRequest(
            topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False,
        )))
        await asyncio.sleep(0.3)
        assert not asked.done()
        told = await admin.call(ApiKey.UPDATE_METADATA, 5, _update_metadata(epoch))
        assert told.error_code == ErrorCode.none
        answer = await asyncio.wait_for(asked, 5)
        assert [(b.node_id, b.host, b.port) for b in answer.brokers] == [(1, "h", 1)]

    run_cluster_broker(tmp_path, zookeeper, scenario)
