"""DeleteGroups (api key 42), versions 0-2.

Deletes groups that have no members, with all their committed offsets: tombstones for each
offset and for the group's metadata go to __consumer_offsets, and the answer comes once they are
in the log. The empty group id is allowed, as Kafka allows it.

Errors, per group: GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP (members are still in it),
COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS.

Version notes: v1 is v0; v2 is flexible.

Authorization (with an authorizer, as Kafka's KafkaApis): a group the caller may not DELETE answers GROUP_AUTHORIZATION_FAILED.
"""

import datetime

from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
from kio.schema.delete_groups.v2.response import DeletableGroupResult, DeleteGroupsResponse

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode

from broker.handlers.authorization import authorized_names
from broker.handlers.registry import RequestContext, api
from broker.security.acl import AclOperation, ResourceType


@api(ApiKey.DELETE_GROUPS, versions=(0, 2))
async def handle_delete_groups(ctx: RequestContext, request: DeleteGroupsRequest) -> DeleteGroupsResponse:
    allowed = authorized_names(ctx, AclOperation.DELETE, ResourceType.GROUP, request.groups_names)
    errors = await ctx.broker.group_coordinator.delete_groups([g for g in request.groups_names if g in allowed])
    errors |= {group: ErrorCode.group_authorization_failed for group in request.groups_names if group not in allowed}
    return DeleteGroupsResponse(
        throttle_time=datetime.timedelta(0),
        results=tuple(
            DeletableGroupResult(group_id=group_id, error_code=errors[group_id]) for group_id in request.groups_names
        ),
    )
