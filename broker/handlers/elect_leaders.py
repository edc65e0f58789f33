"""ElectLeaders (api key 43), versions 0-2 (cluster mode; served by the controller).

Elects a leader for each partition named (all partitions when the list is null): the preferred
replica (election type 0, the only one before v1) or, for partitions without a live leader, the
first live replica even out of sync (type 1, unclean, v1+). The controller writes the new state
and tells the replicas and every broker's metadata (replication/controller.py).

Errors, per partition: ELECTION_NOT_NEEDED (the preferred replica leads already; unclean: the
leader is alive), PREFERRED_LEADER_NOT_AVAILABLE (it is not alive or not in sync),
ELIGIBLE_LEADERS_NOT_AVAILABLE (unclean: no live replica), UNKNOWN_TOPIC_OR_PARTITION,
NOT_CONTROLLER on any broker but the controller (and standalone). INVALID_REQUEST (top level)
for an unknown election type. With a null list only the partitions that changed are answered.

Version notes: v1 adds election_type and a top-level error code; v2 is flexible.

Authorization (with an authorizer): needs ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED for the request and every partition.
"""

import datetime

from kio.schema.elect_leaders.v2.request import ElectLeadersRequest
from kio.schema.elect_leaders.v2.response import ElectLeadersResponse, PartitionResult, ReplicaElectionResult

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from storage.topic_partition import TopicPartition

from broker.handlers.authorization import cluster_operation
from broker.handlers.registry import RequestContext, api
from broker.security.acl import AclOperation

PREFERRED = 0
UNCLEAN = 1


@api(ApiKey.ELECT_LEADERS, versions=(0, 2))
@cluster_operation(AclOperation.ALTER)
async def handle_elect_leaders(ctx: RequestContext, request: ElectLeadersRequest) -> ElectLeadersResponse:
    election_type = request.election_type if ctx.api_version >= 1 else PREFERRED
    if election_type not in (PREFERRED, UNCLEAN):
        return _response(ErrorCode.invalid_request, {})
    cluster = ctx.broker.cluster
    if request.topic_partitions is None:
        wanted = None
    else:
        wanted = [TopicPartition(t.topic, p) for t in request.topic_partitions for p in t.partitions]
    if cluster is None or not cluster.controller.active:
        return _response(ErrorCode.none, {tp: (ErrorCode.not_controller, None) for tp in wanted or ()})
    controller = cluster.controller
    partitions = wanted if wanted is not None else controller.known_partitions()
    results = await controller.elect_leaders(partitions, election_type == UNCLEAN)
    if wanted is None:
        results = {tp: r for tp, r in results.items() if r[0] is not ErrorCode.election_not_needed}
    return _response(ErrorCode.none, results)


def _response(error: ErrorCode, results: dict[TopicPartition, tuple[ErrorCode, str | None]]) -> ElectLeadersResponse:
    by_topic: dict[str, list[PartitionResult]] = {}
    for tp, (code, message) in results.items():
        by_topic.setdefault(tp.topic, []).append(
            PartitionResult(partition_id=tp.partition, error_code=code, error_message=message)
        )
    return ElectLeadersResponse(
        throttle_time=datetime.timedelta(0),
        error_code=error,
        replica_election_results=tuple(
            ReplicaElectionResult(topic=topic, partition_result=tuple(partitions))
            for topic, partitions in by_topic.items()
        ),
    )
