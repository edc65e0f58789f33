"""OffsetFetch (api key 9), versions 0-8.

A group's committed offsets, served from the coordinator's memory: for the partitions asked, or
(v2+, topics null) for every partition the group has an offset for. A partition without one
answers offset -1 and empty metadata, with no error. From v8 one request asks for several
groups. The empty group id is allowed, as Kafka allows it for old clients.

Errors: COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS (retry): before
v2 on every partition asked (offset -1), then as the response's error (v8: the group's).

Version notes: v0 is v1's layout (Kafka read v0's offsets from ZooKeeper; logway serves both
from the coordinator); v2 adds the top-level error and null topics; v3 throttle time; v5 leader
epochs; v6 is flexible; v7 require_stable: a partition with offsets of a transaction not yet
ended (TxnOffsetCommit) answers UNSTABLE_OFFSET_COMMIT and offset -1 (the client retries), as
without it the last committed offset would be answered; v8 lists groups.

Authorization (with an authorizer, as Kafka's KafkaApis): DESCRIBE on the group, else
GROUP_AUTHORIZATION_FAILED; a partition asked of a topic the caller may not DESCRIBE answers
TOPIC_AUTHORIZATION_FAILED (offset -1), and such topics are left out of an all-topics answer.
"""

import datetime

from kio.schema.offset_fetch.v7.request import OffsetFetchRequest as SingleGroupRequest
from kio.schema.offset_fetch.v7.response import (
    OffsetFetchResponse as SingleGroupResponse,
    OffsetFetchResponsePartition,
    OffsetFetchResponseTopic,
)
from kio.schema.offset_fetch.v8.response import (
    OffsetFetchResponse,
    OffsetFetchResponseGroup,
    OffsetFetchResponsePartitions,
    OffsetFetchResponseTopics,
)

from coordinator.group import CommittedOffset
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.schemas import adapt
from storage.topic_partition import TopicPartition

from broker.handlers.authorization import authorized, authorized_names
from broker.handlers.registry import RequestContext, api, as_sent
from broker.security.acl import AclOperation, ResourceType

FIRST_VERSION_WITH_TOP_LEVEL_ERROR = 2
FIRST_MULTI_GROUP_VERSION = 8
NO_OFFSET = -1
NO_LEADER_EPOCH = -1

Fetched = dict[TopicPartition, CommittedOffset | None]


# v0-7 ask for one group, v8 for a list of them: copying fields by name cannot map them.
@api(ApiKey.OFFSET_FETCH, versions=(0, 8), parse=as_sent(ApiKey.OFFSET_FETCH))
async def handle_offset_fetch(ctx: RequestContext, request):
    if ctx.api_version >= FIRST_MULTI_GROUP_VERSION:
        groups = [
            await _fetch_group(
                ctx,
                group.group_id,
                group.topics,
                request.require_stable,
                OffsetFetchResponsePartitions,
                OffsetFetchResponseTopics,
            )
            for group in request.groups
        ]
        return OffsetFetchResponse(
            throttle_time=datetime.timedelta(0),
            groups=tuple(
                OffsetFetchResponseGroup(group_id=group.group_id, topics=topics, error_code=error)
                for group, (error, topics) in zip(request.groups, groups)
            ),
        )
    request = adapt(request, SingleGroupRequest)
    error, topics = await _fetch_group(
        ctx,
        request.group_id,
        request.topics,
        request.require_stable,
        OffsetFetchResponsePartition,
        OffsetFetchResponseTopic,
    )
    if error is not ErrorCode.none and ctx.api_version < FIRST_VERSION_WITH_TOP_LEVEL_ERROR:
        topics = _errors_per_partition(request.topics, error)
    return SingleGroupResponse(throttle_time=datetime.timedelta(0), topics=topics, error_code=error)


async def _fetch_group(
    ctx: RequestContext, group_id: str, topics, require_stable: bool, partition_type: type, topic_type: type
):
    """(error, response topics) for one group, in the response classes given."""
    if not authorized(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
        return ErrorCode.group_authorization_failed, ()
    partitions = None
    denied: list = []
    if topics is not None:
        visible = authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, (t.name for t in topics))
        denied = [t for t in topics if t.name not in visible]
        partitions = [TopicPartition(t.name, index) for t in topics if t.name in visible for index in t.partition_indexes]
    coordinator = ctx.broker.group_coordinator
    error, fetched = await coordinator.fetch_offsets(group_id, partitions)
    if error is not ErrorCode.none:
        return error, ()
    if topics is None:  # every topic with offsets: those the caller may not describe are left out
        visible = authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, {tp.topic for tp in fetched})
        fetched = {tp: committed for tp, committed in fetched.items() if tp.topic in visible}
    unstable = coordinator.unstable_partitions(group_id) if require_stable else frozenset()
    answered = _response_topics(fetched, unstable, partition_type, topic_type)
    return ErrorCode.none, answered + _denied_topics(denied, partition_type, topic_type)


def _denied_topics(topics, partition_type: type, topic_type: type) -> tuple:
    return tuple(
        topic_type(
            name=topic.name,
            partitions=tuple(
                partition_type(
                    partition_index=index,
                    committed_offset=NO_OFFSET,
                    committed_leader_epoch=NO_LEADER_EPOCH,
                    metadata="",
                    error_code=ErrorCode.topic_authorization_failed,
                )
                for index in topic.partition_indexes
            ),
        )
        for topic in topics
    )


def _response_topics(fetched: Fetched, unstable, partition_type: type, topic_type: type) -> tuple:
    by_topic: dict[str, list] = {}
    for tp, committed in fetched.items():
        if tp in unstable:
            committed = None
        by_topic.setdefault(tp.topic, []).append(
            partition_type(
                partition_index=tp.partition,
                committed_offset=NO_OFFSET if committed is None else committed.offset,
                committed_leader_epoch=NO_LEADER_EPOCH if committed is None else committed.leader_epoch,
                metadata="" if committed is None else committed.metadata,
                error_code=ErrorCode.unstable_offset_commit if tp in unstable else ErrorCode.none,
            )
        )
    return tuple(topic_type(name=name, partitions=tuple(partitions)) for name, partitions in by_topic.items())


def _errors_per_partition(topics, error: ErrorCode) -> tuple[OffsetFetchResponseTopic, ...]:
    """Before v2 the only place for an error is each partition asked."""
    return tuple(
        OffsetFetchResponseTopic(
            name=topic.name,
            partitions=tuple(
                OffsetFetchResponsePartition(
                    partition_index=index,
                    committed_offset=NO_OFFSET,
                    committed_leader_epoch=NO_LEADER_EPOCH,
                    metadata="",
                    error_code=error,
                )
                for index in topic.partition_indexes
            ),
        )
        for topic in topics
    )
