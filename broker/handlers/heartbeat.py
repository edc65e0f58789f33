"""Heartbeat (api key 12), versions 0-4.

A member's sign of life between polls: it keeps its session (session.timeout.ms) from expiring,
and tells it to rejoin when a rebalance has started.

Errors: INVALID_GROUP_ID, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, UNKNOWN_MEMBER_ID (the
member, or the whole group, is unknown: join again), ILLEGAL_GENERATION, FENCED_INSTANCE_ID (v3+),
REBALANCE_IN_PROGRESS (rejoin now). While the group's partition is loading the answer is NONE, as
Kafka answers: the member cannot be judged until the group is loaded, and its session counts from
then.

Version notes: v1 adds throttle time; v3 group instance ids; v4 is flexible.

Authorization (with an authorizer): needs READ on the group, else GROUP_AUTHORIZATION_FAILED (Kafka's KafkaApis).
"""

import datetime

from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.heartbeat.v4.response import HeartbeatResponse

from protocol.api_keys import ApiKey

from broker.handlers.authorization import group_operation
from broker.handlers.registry import RequestContext, api
from broker.security.acl import AclOperation


@api(ApiKey.HEARTBEAT, versions=(0, 4))
@group_operation(AclOperation.READ)
async def handle_heartbeat(ctx: RequestContext, request: HeartbeatRequest) -> HeartbeatResponse:
    error = await ctx.broker.group_coordinator.heartbeat(
        request.group_id, request.member_id, request.group_instance_id, request.generation_id
    )
    return HeartbeatResponse(throttle_time=datetime.timedelta(0), error_code=error)
