"""ListGroups (api key 16), versions 0-4.

Every group this broker coordinates, with its protocol type ("consumer" for consumer groups, ""
for groups that only store offsets) and, from v4, its state; v4 may ask for only the groups in
some states (matched ignoring case).

Errors: COORDINATOR_NOT_AVAILABLE while the broker shuts down; COORDINATOR_LOAD_IN_PROGRESS, with
the groups known so far, while __consumer_offsets partitions are loading.

Version notes: v1 adds throttle time; v3 is flexible; v4 adds the state and the states filter.

Authorization (with an authorizer, as Kafka's KafkaApis): with DESCRIBE on the cluster every group is listed; otherwise only the groups the caller may DESCRIBE.
"""

import datetime

from kio.schema.list_groups.v4.request import ListGroupsRequest
from kio.schema.list_groups.v4.response import ListedGroup, ListGroupsResponse

from protocol.api_keys import ApiKey

from broker.handlers.authorization import authorized, authorized_names
from broker.handlers.registry import RequestContext, api
from broker.security.acl import AclOperation, ResourceType


@api(ApiKey.LIST_GROUPS, versions=(0, 4))
def handle_list_groups(ctx: RequestContext, request: ListGroupsRequest) -> ListGroupsResponse:
    error, groups = ctx.broker.group_coordinator.list_groups(request.states_filter)
    if not authorized(ctx, AclOperation.DESCRIBE, log_denied=False):
        visible = authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, (g.group_id for g in groups), log_denied=False)
        groups = [group for group in groups if group.group_id in visible]
    return ListGroupsResponse(
        throttle_time=datetime.timedelta(0),
        error_code=error,
        groups=tuple(
            ListedGroup(group_id=group.group_id, protocol_type=group.protocol_type, group_state=group.state)
            for group in groups
        ),
    )
