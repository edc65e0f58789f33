"""StopReplica (api key 5), version 1: inter-broker, from the controller (cluster mode).

Stops serving the partitions listed (`ReplicaManager.stop_replicas`): with delete_partitions
(topic deletion, a replica moved away by a reassignment) their logs are deleted too, and for a
tiered topic being deleted the leader's remote data (broker/remote_log.py); without, they stay on
disk (a controlled shutdown). Answers each partition's error.

Fencing as LeaderAndIsr (broker/handlers/leader_and_isr.py): STALE_CONTROLLER_EPOCH,
STALE_BROKER_EPOCH for the whole request.

Authorization (with an authorizer): the sender (a controller) needs CLUSTER_ACTION on the cluster, else CLUSTER_AUTHORIZATION_FAILED.
"""

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, KafkaError
from protocol.legacy import StopReplicaPartitionError, StopReplicaRequest, StopReplicaResponse
from storage.topic_partition import TopicPartition

from broker.handlers.leader_and_isr import check_controller_request
from broker.handlers.authorization import cluster_action
from broker.handlers.registry import RequestContext, api


@api(ApiKey.STOP_REPLICA, versions=(1, 1))
@cluster_action
def handle_stop_replica(ctx: RequestContext, request: StopReplicaRequest) -> StopReplicaResponse:
    partitions = [TopicPartition(t.name, p) for t in request.topics for p in t.partition_indexes]
    try:
        check_controller_request(ctx, request.controller_epoch, request.broker_epoch)
    except KafkaError as exc:
        return _response(exc.error_code, {tp: exc.error_code for tp in partitions})
    errors = ctx.broker.replica_manager.stop_replicas(partitions, request.delete_partitions)
    return _response(ErrorCode.none, errors)


def _response(error: ErrorCode, errors: dict[TopicPartition, ErrorCode]) -> StopReplicaResponse:
    return StopReplicaResponse(
        error_code=error,
        partition_errors=tuple(
            StopReplicaPartitionError(topic_name=tp.topic, partition_index=tp.partition, error_code=code)
            for tp, code in errors.items()
        ),
    )
