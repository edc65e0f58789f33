"""ControlledShutdown (api key 7), version 2: inter-broker, from a broker stopping cleanly to the
controller (cluster mode).

The controller moves the leadership of every partition the stopping broker leads to another
in-sync replica, takes the broker out of the ISR of the partitions it follows, tells the
replicas and every broker's metadata, and answers the partitions the broker still leads (no
other in-sync replica). The broker retries while some remain (controlled.shutdown.max.retries).

Errors: NOT_CONTROLLER on any broker but the controller (and standalone);
BROKER_NOT_AVAILABLE for a broker that is not registered; STALE_BROKER_EPOCH for a request
from an earlier registration of the broker.

Authorization (with an authorizer): the sender (a broker) needs CLUSTER_ACTION on the cluster, else CLUSTER_AUTHORIZATION_FAILED.
"""

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.legacy import ControlledShutdownRequest, ControlledShutdownResponse, RemainingPartition

from broker.handlers.authorization import cluster_action
from broker.handlers.registry import RequestContext, api


@api(ApiKey.CONTROLLED_SHUTDOWN, versions=(2, 2))
@cluster_action
async def handle_controlled_shutdown(ctx: RequestContext, request: ControlledShutdownRequest) -> ControlledShutdownResponse:
    cluster = ctx.broker.cluster
    if cluster is None or not cluster.controller.active:
        return ControlledShutdownResponse(error_code=ErrorCode.not_controller, remaining_partitions=())
    error, remaining = await cluster.controller.controlled_shutdown(request.broker_id, request.broker_epoch)
    return ControlledShutdownResponse(
        error_code=error,
        remaining_partitions=tuple(
            RemainingPartition(topic_name=tp.topic, partition_index=tp.partition) for tp in remaining
        ),
    )
