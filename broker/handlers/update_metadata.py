"""UpdateMetadata (api key 6), version 5: inter-broker, from the controller (cluster mode).

Replaces this broker's view of the live brokers (each with every listener's endpoint and its
rack) and updates the partitions listed (leader, leader epoch, ISR, replicas, offline
replicas); a partition whose leader is -2 is being deleted and leaves the metadata cache, and
its committed offsets leave the groups this broker coordinates (as Kafka's KafkaApis tells its
group coordinator). The topic manager's live brokers (replication factor checks) follow the
cache, and DeleteRecords waiting on a follower whose broker is gone now answer.

Fencing as LeaderAndIsr (broker/handlers/leader_and_isr.py): STALE_CONTROLLER_EPOCH,
STALE_BROKER_EPOCH. Version 5 is the one Kafka's ZooKeeper-mode controllers of 2.4 to 2.8 send.

Authorization (with an authorizer): the sender (a controller) needs CLUSTER_ACTION on the cluster, else CLUSTER_AUTHORIZATION_FAILED.
"""

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, KafkaError
from protocol.legacy import UpdateMetadataRequest, UpdateMetadataResponse
from storage.topic_partition import TopicPartition

from broker.handlers.leader_and_isr import check_controller_request
from broker.handlers.authorization import cluster_action
from broker.handlers.registry import RequestContext, api
from broker.metadata_cache import BrokerNode, PartitionInfo


@api(ApiKey.UPDATE_METADATA, versions=(5, 5))
@cluster_action
def handle_update_metadata(ctx: RequestContext, request: UpdateMetadataRequest) -> UpdateMetadataResponse:
    try:
        check_controller_request(ctx, request.controller_epoch, request.broker_epoch)
    except KafkaError as exc:
        return UpdateMetadataResponse(error_code=exc.error_code)
    brokers = [
        BrokerNode(b.id, {e.listener: (e.host, e.port) for e in b.endpoints}, b.rack)
        for b in request.live_brokers
    ]
    partitions = {
        TopicPartition(topic.topic_name, p.partition_index): PartitionInfo(
            leader=p.leader,
            leader_epoch=p.leader_epoch,
            replicas=tuple(p.replicas),
            isr=tuple(p.isr),
            offline_replicas=tuple(p.offline_replicas),
            zk_version=p.zk_version,
        )
        for topic in request.topic_states
        for p in topic.partition_states
    }
    removed = ctx.broker.metadata_cache.update(request.controller_id, request.controller_epoch, brokers, partitions)
    ctx.broker.topics.partitions_deleted(removed)
    ctx.broker.replica_manager.check_low_watermarks()
    return UpdateMetadataResponse(error_code=ErrorCode.none)
