"""AlterPartitionReassignments (api key 45), version 0 (cluster mode; served by the controller).

Starts moving each named partition to the replicas given (null replicas cancel a reassignment
in progress, going back to the original replicas). The controller follows docs/cluster.md: the
new replicas are added and start following, once they are all in the ISR leadership moves to a
target replica if the leader is leaving, and the old replicas are removed (StopReplica with
delete). The answer comes once the reassignment has started; ListPartitionReassignments shows
those in progress.

Errors, per partition: INVALID_REPLICA_ASSIGNMENT (empty or repeated replicas, unknown or dead
brokers), NO_REASSIGNMENT_IN_PROGRESS (cancelling none), UNKNOWN_TOPIC_OR_PARTITION. At the top:
NOT_CONTROLLER on any broker but the controller (and standalone).

Authorization (with an authorizer): needs ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED.
"""

import datetime

from kio.schema.alter_partition_reassignments.v0.request import AlterPartitionReassignmentsRequest
from kio.schema.alter_partition_reassignments.v0.response import (
    AlterPartitionReassignmentsResponse,
    ReassignablePartitionResponse,
    ReassignableTopicResponse,
)

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from storage.topic_partition import TopicPartition

from broker.handlers.authorization import cluster_operation
from broker.handlers.registry import RequestContext, api
from broker.security.acl import AclOperation


@api(ApiKey.ALTER_PARTITION_REASSIGNMENTS, versions=(0, 0))
@cluster_operation(AclOperation.ALTER)
async def handle_alter_partition_reassignments(
    ctx: RequestContext, request: AlterPartitionReassignmentsRequest
) -> AlterPartitionReassignmentsResponse:
    cluster = ctx.broker.cluster
    if cluster is None or not cluster.controller.active:
        return AlterPartitionReassignmentsResponse(
            throttle_time=datetime.timedelta(0),
            error_code=ErrorCode.not_controller,
            error_message="This is not the correct controller for this cluster.",
            responses=(),
        )
    targets = {
        TopicPartition(topic.name, p.partition_index): (tuple(p.replicas) if p.replicas is not None else None)
        for topic in request.topics
        for p in topic.partitions
    }
    results = await cluster.controller.alter_reassignments(targets)
    by_topic: dict[str, list[ReassignablePartitionResponse]] = {}
    for tp, (code, message) in results.items():
        by_topic.setdefault(tp.topic, []).append(
            ReassignablePartitionResponse(partition_index=tp.partition, error_code=code, error_message=message)
        )
    return AlterPartitionReassignmentsResponse(
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        error_message=None,
        responses=tuple(ReassignableTopicResponse(name=t, partitions=tuple(p)) for t, p in by_topic.items()),
    )
