"""ListPartitionReassignments (api key 46), version 0 (cluster mode; served by the controller).

Lists the reassignments in progress (of the partitions named, or all when the list is null):
each partition's full replica set, and the replicas being added and removed.

Errors: NOT_CONTROLLER at the top on any broker but the controller (and standalone).

Authorization (with an authorizer): needs DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED.
"""

import datetime

from kio.schema.list_partition_reassignments.v0.request import ListPartitionReassignmentsRequest
from kio.schema.list_partition_reassignments.v0.response import (
    ListPartitionReassignmentsResponse,
    OngoingPartitionReassignment,
    OngoingTopicReassignment,
)

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from storage.topic_partition import TopicPartition

from broker.handlers.authorization import cluster_operation
from broker.handlers.registry import RequestContext, api
from broker.security.acl import AclOperation


@api(ApiKey.LIST_PARTITION_REASSIGNMENTS, versions=(0, 0))
@cluster_operation(AclOperation.DESCRIBE)
def handle_list_partition_reassignments(
    ctx: RequestContext, request: ListPartitionReassignmentsRequest
) -> ListPartitionReassignmentsResponse:
    cluster = ctx.broker.cluster
    if cluster is None or not cluster.controller.active:
        return ListPartitionReassignmentsResponse(
            throttle_time=datetime.timedelta(0),
            error_code=ErrorCode.not_controller,
            error_message="This is not the correct controller for this cluster.",
            topics=(),
        )
    wanted = None
    if request.topics is not None:
        wanted = [TopicPartition(t.name, p) for t in request.topics for p in t.partition_indexes]
    by_topic: dict[str, list[OngoingPartitionReassignment]] = {}
    for tp, plan in sorted(cluster.controller.list_reassignments(wanted).items()):
        by_topic.setdefault(tp.topic, []).append(
            OngoingPartitionReassignment(
                partition_index=tp.partition,
                replicas=plan.replicas,
                adding_replicas=plan.adding,
                removing_replicas=plan.removing,
            )
        )
    return ListPartitionReassignmentsResponse(
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        error_message=None,
        topics=tuple(OngoingTopicReassignment(name=t, partitions=tuple(p)) for t, p in by_topic.items()),
    )
