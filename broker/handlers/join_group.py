"""JoinGroup (api key 11), versions 0-9.

A member joins, or rejoins, a consumer group under the classic rebalance protocol
(coordinator.group). The answer comes when the rebalance completes: the generation, the
protocol chosen by the members' votes, and the leader; the leader's answer also lists every
member with its metadata for that protocol, from which it computes the assignment it then sends
in SyncGroup. The group's state is in coordinator.group_coordinator.

Errors: INVALID_GROUP_ID (an empty group id), COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS (retry), INVALID_SESSION_TIMEOUT (outside
group.min.session.timeout.ms and group.max.session.timeout.ms), INCONSISTENT_GROUP_PROTOCOL
(another protocol type than the group's, no protocol in common with the other members, or none
at all), UNKNOWN_MEMBER_ID, MEMBER_ID_REQUIRED (v4+: a new member receives its member id and
joins again with it), GROUP_MAX_SIZE_REACHED (group.max.size), FENCED_INSTANCE_ID (v5+: a
member id that is no longer its group instance id's), REBALANCE_IN_PROGRESS (a JoinGroup
superseded by the same member's retry), NOT_COORDINATOR while the broker shuts down.

Version notes: v0 has no rebalance timeout (the session timeout serves as both); v1 adds it; v2
throttle time; v4 MEMBER_ID_REQUIRED; v5 group instance ids (static membership); v6 is flexible;
v7 answers with the protocol type, and a null protocol name rather than an empty one; v8 adds a
reason (not used); v9 tells a static leader that rejoins a stable group to skip the assignment
(skip_assignment, KIP-814).

Authorization (with an authorizer): needs READ on the group, else GROUP_AUTHORIZATION_FAILED (Kafka's KafkaApis).
"""

import datetime

from kio.schema.join_group.v9.request import JoinGroupRequest
from kio.schema.join_group.v9.response import JoinGroupResponse, JoinGroupResponseMember

from coordinator.group import JoinRequest
from protocol.api_keys import ApiKey

from broker.handlers.authorization import group_operation
from broker.handlers.registry import RequestContext, api
from broker.security.acl import AclOperation

MILLISECOND = datetime.timedelta(milliseconds=1)
FIRST_VERSION_WITH_REBALANCE_TIMEOUT = 1
FIRST_VERSION_REQUIRING_MEMBER_ID = 4
FIRST_VERSION_WITH_NULL_PROTOCOL_NAME = 7
FIRST_VERSION_SKIPPING_ASSIGNMENT = 9


@api(ApiKey.JOIN_GROUP, versions=(0, 9))
@group_operation(AclOperation.READ)
async def handle_join_group(ctx: RequestContext, request: JoinGroupRequest) -> JoinGroupResponse:
    version = ctx.api_version
    session_timeout_ms = request.session_timeout // MILLISECOND
    rebalance_timeout_ms = (
        request.rebalance_timeout // MILLISECOND
        if version >= FIRST_VERSION_WITH_REBALANCE_TIMEOUT
        else session_timeout_ms
    )
    result = await ctx.broker.group_coordinator.join_group(
        request.group_id,
        JoinRequest(
            member_id=request.member_id,
            group_instance_id=request.group_instance_id,
            client_id=ctx.header.client_id or "",
            client_host=client_host(ctx.client_address),
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=tuple((protocol.name, protocol.metadata) for protocol in request.protocols),
            require_known_member_id=version >= FIRST_VERSION_REQUIRING_MEMBER_ID,
            supports_skip_assignment=version >= FIRST_VERSION_SKIPPING_ASSIGNMENT,
        ),
    )
    protocol_name = result.protocol_name
    if protocol_name is None and version < FIRST_VERSION_WITH_NULL_PROTOCOL_NAME:
        protocol_name = ""
    return JoinGroupResponse(
        throttle_time=datetime.timedelta(0),
        error_code=result.error,
        generation_id=result.generation_id,
        protocol_type=result.protocol_type,
        protocol_name=protocol_name,
        leader=result.leader_id,
        skip_assignment=result.skip_assignment,
        member_id=result.member_id,
        members=tuple(
            JoinGroupResponseMember(
                member_id=member.member_id,
                group_instance_id=member.group_instance_id,
                metadata=member.metadata,
            )
            for member in result.members
        ),
    )


def client_host(address: str) -> str:
    """The member's host as Kafka shows it (an InetAddress printed without its host name)."""
    host, _, _port = address.rpartition(":")
    return "/" + host
