"""SyncGroup (api key 14), versions 0-5.

The second step of a rebalance: the leader sends the assignment it computed, every member
(leader included) receives its own part. Followers' requests wait for the leader's; the
assignment is stored in __consumer_offsets before anyone is answered, and the group becomes
Stable. In a Stable group the member's current assignment is answered at once.

Errors: INVALID_GROUP_ID, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, UNKNOWN_MEMBER_ID,
ILLEGAL_GENERATION, FENCED_INSTANCE_ID (v3+), INCONSISTENT_GROUP_PROTOCOL (v5: a protocol type
or name other than the group's), REBALANCE_IN_PROGRESS (a rebalance started: rejoin; also while
the group's partition is loading, since the rebalance's state is lost with the old coordinator,
as Kafka answers clients that predate COORDINATOR_LOAD_IN_PROGRESS here), and the error of a
failed write of the assignment.

Version notes: v1 adds throttle time; v3 group instance ids; v4 is flexible; v5 adds the protocol
type and name, checked in the request and returned in the response.

Authorization (with an authorizer): needs READ on the group, else GROUP_AUTHORIZATION_FAILED (Kafka's KafkaApis).
"""

import datetime

from kio.schema.sync_group.v5.request import SyncGroupRequest
from kio.schema.sync_group.v5.response import SyncGroupResponse

from protocol.api_keys import ApiKey

from broker.handlers.authorization import group_operation
from broker.handlers.registry import RequestContext, api
from broker.security.acl import AclOperation


@api(ApiKey.SYNC_GROUP, versions=(0, 5))
@group_operation(AclOperation.READ)
async def handle_sync_group(ctx: RequestContext, request: SyncGroupRequest) -> SyncGroupResponse:
    result = await ctx.broker.group_coordinator.sync_group(
        request.group_id,
        request.member_id,
        request.group_instance_id,
        request.generation_id,
        request.protocol_type,
        request.protocol_name,
        {assignment.member_id: assignment.assignment for assignment in request.assignments},
    )
    return SyncGroupResponse(
        throttle_time=datetime.timedelta(0),
        error_code=result.error,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name,
        assignment=result.assignment,
    )
