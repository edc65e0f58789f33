"""DescribeGroups (api key 15), versions 0-5.

Per group: its state as Kafka names it (Empty, PreparingRebalance, CompletingRebalance, Stable,
Dead), protocol type, protocol (only when Stable) and members with their client id and host; a
Stable group's members also show their metadata for the group's protocol and their assignment.
A group that does not exist is answered Dead with no error, as Kafka answers before v6. The
empty group id is allowed, as Kafka allows it.

Errors, per group: COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS.

Version notes: v1 adds throttle time; v3 authorized operations; v4 group instance ids; v5 is flexible.

Authorization (with an authorizer, as Kafka's KafkaApis): a group the caller may not DESCRIBE
answers GROUP_AUTHORIZATION_FAILED; with include_authorized_operations (v3+) each described
group carries the operations the caller may do on it.
"""

import datetime

from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
from kio.schema.describe_groups.v5.response import (
    DescribedGroup,
    DescribedGroupMember,
    DescribeGroupsResponse,
)

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode

from broker.handlers.authorization import OPERATIONS_NOT_REQUESTED, authorized, authorized_operations
from broker.handlers.registry import RequestContext, api
from broker.security.acl import AclOperation, ResourceType


@api(ApiKey.DESCRIBE_GROUPS, versions=(0, 5))
async def handle_describe_groups(ctx: RequestContext, request: DescribeGroupsRequest) -> DescribeGroupsResponse:
    return DescribeGroupsResponse(
        throttle_time=datetime.timedelta(0),
        groups=tuple([
            await _describe(ctx, group_id, ctx.api_version >= 3 and request.include_authorized_operations)
            for group_id in request.groups
        ]),
    )


async def _describe(ctx: RequestContext, group_id: str, with_operations: bool) -> DescribedGroup:
    if not authorized(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
        return DescribedGroup(
            error_code=ErrorCode.group_authorization_failed, group_id=group_id, group_state="", protocol_type="",
            protocol_data="", members=(),
        )
    error, group = await ctx.broker.group_coordinator.describe_group(group_id)
    return DescribedGroup(
        authorized_operations=(
            authorized_operations(ctx, ResourceType.GROUP, group_id) if with_operations else OPERATIONS_NOT_REQUESTED
        ),
        error_code=error,
        group_id=group_id,
        group_state=group.state,
        protocol_type=group.protocol_type,
        protocol_data=group.protocol,
        members=tuple(
            DescribedGroupMember(
                member_id=member.member_id,
                group_instance_id=member.group_instance_id,
                client_id=member.client_id,
                client_host=member.client_host,
                member_metadata=member.metadata,
                member_assignment=member.assignment,
            )
            for member in group.members
        ),
    )
