"""DescribeCluster (api key 60), versions 0-1.

Answers from the metadata cache with the cluster id, the controller and the live brokers, each
at its advertised listener. ZooKeeper-mode brokers are their own controller candidates, so the
same brokers are listed whether the client asks for the brokers (endpoint type 1) or the
controllers (2); the type asked for is echoed (v1). Standalone, this broker is the whole cluster
and its own controller. Any other endpoint type is UNSUPPORTED_ENDPOINT_TYPE.

Version notes: v1 adds endpoint_type.

Authorization (with an authorizer, as Kafka's AuthHelper): none needed; with
include_cluster_authorized_operations the operations the caller may do on the cluster (0
without DESCRIBE on it).
"""

import datetime

from kio.schema.describe_cluster.v1.request import DescribeClusterRequest
from kio.schema.describe_cluster.v1.response import DescribeClusterBroker, DescribeClusterResponse

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode

from broker.handlers.authorization import OPERATIONS_NOT_REQUESTED, authorized, authorized_operations
from broker.handlers.registry import RequestContext, api
from broker.security.acl import AclOperation, ResourceType

BROKERS = 1
CONTROLLERS = 2


@api(ApiKey.DESCRIBE_CLUSTER, versions=(0, 1))
def handle_describe_cluster(ctx: RequestContext, request: DescribeClusterRequest) -> DescribeClusterResponse:
    broker = ctx.broker
    if request.endpoint_type not in (BROKERS, CONTROLLERS):
        return DescribeClusterResponse(
            throttle_time=datetime.timedelta(0),
            error_code=ErrorCode.unsupported_endpoint_type,
            error_message=f"Unsupported endpoint type {request.endpoint_type}",
            endpoint_type=request.endpoint_type,
            cluster_id=broker.cluster_id,
            brokers=(),
        )
    return DescribeClusterResponse(
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        error_message=None,
        endpoint_type=request.endpoint_type,
        cluster_id=broker.cluster_id,
        controller_id=broker.controller_id,
        cluster_authorized_operations=_cluster_operations(ctx, request),
        brokers=tuple(
            DescribeClusterBroker(broker_id=node_id, host=host, port=port, rack=rack)
            for node_id, host, port, rack in broker.metadata_cache.alive_nodes(ctx.listener)
        ),
    )


def _cluster_operations(ctx: RequestContext, request: DescribeClusterRequest) -> int:
    """Kafka's: not asked, the schema's default; without DESCRIBE on the cluster, none."""
    if not request.include_cluster_authorized_operations:
        return OPERATIONS_NOT_REQUESTED
    if not authorized(ctx, AclOperation.DESCRIBE):
        return 0
    return authorized_operations(ctx, ResourceType.CLUSTER)
