"""LeaderAndIsr (api key 4), version 3: inter-broker, from the controller (cluster mode).

Tells this broker, per partition, the leader, leader epoch, ISR, replicas (and replicas being
added or removed by a reassignment) and the state znode version; the replica manager becomes
leader or follower of each (`ReplicaManager.become_leader_or_follower`), following the leaders
at the endpoints the request lists (live_leaders). Answers each partition's error.

Fencing (broker/cluster.py): a controller epoch older than the newest seen is
STALE_CONTROLLER_EPOCH, a broker epoch older than this broker's registration
STALE_BROKER_EPOCH, both for the whole request; a standalone broker answers
STALE_CONTROLLER_EPOCH (it has no controller). Version 3 is the one Kafka's ZooKeeper-mode
controllers of 2.4 to 2.8 send; only brokers send it.

Authorization (with an authorizer): the sender (a controller) needs CLUSTER_ACTION on the cluster, else CLUSTER_AUTHORIZATION_FAILED; the brokers' own principal must be a super user or be granted it (docs/security.md).
"""

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, KafkaError
from protocol.legacy import LeaderAndIsrPartitionError, LeaderAndIsrRequest, LeaderAndIsrResponse
from replication.partition_state import LeaderEndpoint, PartitionState
from storage.topic_partition import TopicPartition

from broker.handlers.authorization import cluster_action
from broker.handlers.registry import RequestContext, api


@api(ApiKey.LEADER_AND_ISR, versions=(3, 3))
@cluster_action
def handle_leader_and_isr(ctx: RequestContext, request: LeaderAndIsrRequest) -> LeaderAndIsrResponse:
    states = [
        PartitionState(
            topic_partition=TopicPartition(topic.topic_name, p.partition_index),
            controller_epoch=p.controller_epoch,
            leader=p.leader,
            leader_epoch=p.leader_epoch,
            isr=tuple(p.isr),
            zk_version=p.zk_version,
            replicas=tuple(p.replicas),
            adding_replicas=tuple(p.adding_replicas),
            removing_replicas=tuple(p.removing_replicas),
            is_new=p.is_new,
        )
        for topic in request.topic_states
        for p in topic.partition_states
    ]
    broker = ctx.broker
    try:
        check_controller_request(ctx, request.controller_epoch, request.broker_epoch)
    except KafkaError as exc:
        return _response(exc.error_code, {state.topic_partition: exc.error_code for state in states})
    leaders = {
        leader.broker_id: LeaderEndpoint(leader.broker_id, leader.host_name, leader.port)
        for leader in request.live_leaders
    }
    errors = broker.replica_manager.become_leader_or_follower(
        request.controller_epoch, states, leaders, broker.broker_id
    )
    return _response(ErrorCode.none, errors)


def check_controller_request(ctx: RequestContext, controller_epoch: int, broker_epoch: int) -> None:
    """The epochs check every controller request goes through (LeaderAndIsr, UpdateMetadata,
    StopReplica)."""
    cluster = ctx.broker.cluster
    if cluster is None:
        raise KafkaError("this broker runs standalone: it has no controller", ErrorCode.stale_controller_epoch)
    cluster.check_epochs(controller_epoch, broker_epoch)


def _response(error: ErrorCode, errors: dict[TopicPartition, ErrorCode]) -> LeaderAndIsrResponse:
    return LeaderAndIsrResponse(
        error_code=error,
        partition_errors=tuple(
            LeaderAndIsrPartitionError(topic_name=tp.topic, partition_index=tp.partition, error_code=code)
            for tp, code in errors.items()
        ),
    )
