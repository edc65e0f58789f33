"""DescribeCluster (api key 60), versions 0-1.

Answers from the metadata cache with the cluster id, the controller and the live brokers, each
at its advertised listener. ZooKeeper-mode brokers are their own controller candidates, so the
same brokers are listed whether the client asks for the brokers (endpoint type 1) or the
controllers (2); the type asked for is echoed (v1). Standalone, this broker is the whole cluster
and its own controller. Any other endpoint type is UNSUPPORTED_ENDPOINT_TYPE. Authorized operations are not
computed (no ACLs): the field keeps its "not provided" value.

Version notes: v1 adds endpoint_type.
"""

import datetime

from kio.schema.describe_cluster.v1.request import DescribeClusterRequest
from kio.schema.describe_cluster.v1.response import DescribeClusterBroker, DescribeClusterResponse

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode

from broker.handlers.registry import RequestContext, api

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
        brokers=tuple(
            DescribeClusterBroker(broker_id=node_id, host=host, port=port, rack=rack)
            for node_id, host, port, rack in broker.metadata_cache.alive_nodes(ctx.listener)
        ),
    )
