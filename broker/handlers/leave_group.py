"""LeaveGroup (api key 13), versions 0-5.

Members leave their group (a consumer closing), which rebalances without them. From v3 one
request may remove several members, each named by member id and group instance id; a static
member may be named by its group instance id alone (an administrator removing it).

Errors: the group-level INVALID_GROUP_ID, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS; per member UNKNOWN_MEMBER_ID and FENCED_INSTANCE_ID. Before v3 the
one member's error is the response's error.

Version notes: v1 adds throttle time; v3 lists members (with group instance ids) and answers per
member; v4 is flexible; v5 adds a reason per member (not used).

Authorization (with an authorizer): needs READ on the group, else GROUP_AUTHORIZATION_FAILED (Kafka's KafkaApis).
"""

import datetime

from kio.schema.leave_group.v5.response import LeaveGroupResponse, MemberResponse

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode

from broker.handlers.authorization import group_operation
from broker.handlers.registry import RequestContext, api, as_sent
from broker.security.acl import AclOperation

FIRST_BATCHED_VERSION = 3


# v0-2 name one member_id, v3+ a list of members: copying fields by name cannot map them.
@api(ApiKey.LEAVE_GROUP, versions=(0, 5), parse=as_sent(ApiKey.LEAVE_GROUP))
@group_operation(AclOperation.READ)
async def handle_leave_group(ctx: RequestContext, request) -> LeaveGroupResponse:
    if ctx.api_version < FIRST_BATCHED_VERSION:
        leaving = [(request.member_id, None)]
    else:
        leaving = [(member.member_id, member.group_instance_id) for member in request.members]
    error, member_errors = await ctx.broker.group_coordinator.leave_group(request.group_id, leaving)
    if ctx.api_version < FIRST_BATCHED_VERSION and error is ErrorCode.none and member_errors:
        error = member_errors[0]
    return LeaveGroupResponse(
        throttle_time=datetime.timedelta(0),
        error_code=error,
        members=tuple(
            MemberResponse(member_id=member_id, group_instance_id=instance_id, error_code=member_error)
            for (member_id, instance_id), member_error in zip(leaving, member_errors)
        ),
    )
