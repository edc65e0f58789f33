"""OffsetDelete (api key 47), version 0.

Deletes some committed offsets of a group, writing their tombstones to __consumer_offsets; the
answer comes once they are in the log. Any offset of a group without members may go; a consumer
group with members keeps those of the topics its members subscribe to. A group without members
left with no offsets is deleted too, as Kafka does.

Errors: for the request, INVALID_GROUP_ID (an empty group id), GROUP_ID_NOT_FOUND,
NON_EMPTY_GROUP (a group with members that is not a consumer group), COORDINATOR_NOT_AVAILABLE,
NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS; per partition, GROUP_SUBSCRIBED_TO_TOPIC.

Authorization (with an authorizer, as Kafka's KafkaApis): DELETE on the group, else GROUP_AUTHORIZATION_FAILED; READ on each topic, else its partitions answer TOPIC_AUTHORIZATION_FAILED.
"""

import datetime

from kio.schema.offset_delete.v0.request import OffsetDeleteRequest
from kio.schema.offset_delete.v0.response import (
    OffsetDeleteResponse,
    OffsetDeleteResponsePartition,
    OffsetDeleteResponseTopic,
)

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from storage.topic_partition import TopicPartition

from broker.handlers.authorization import authorized_names, group_operation
from broker.handlers.registry import RequestContext, api
from broker.security.acl import AclOperation, ResourceType


@api(ApiKey.OFFSET_DELETE, versions=(0, 0))
@group_operation(AclOperation.DELETE)
async def handle_offset_delete(ctx: RequestContext, request: OffsetDeleteRequest) -> OffsetDeleteResponse:
    readable = authorized_names(ctx, AclOperation.READ, ResourceType.TOPIC, (t.name for t in request.topics))
    partitions = [
        TopicPartition(t.name, p.partition_index) for t in request.topics if t.name in readable for p in t.partitions
    ]
    error, errors = await ctx.broker.group_coordinator.delete_offsets(request.group_id, partitions)
    errors = {
        **errors,
        **{
            TopicPartition(t.name, p.partition_index): ErrorCode.topic_authorization_failed
            for t in request.topics if t.name not in readable for p in t.partitions
        },
    }
    topics = ()
    if error is ErrorCode.none:
        topics = tuple(
            OffsetDeleteResponseTopic(
                name=topic.name,
                partitions=tuple(
                    OffsetDeleteResponsePartition(
                        partition_index=p.partition_index,
                        error_code=errors[TopicPartition(topic.name, p.partition_index)],
                    )
                    for p in topic.partitions
                ),
            )
            for topic in request.topics
        )
    return OffsetDeleteResponse(error_code=error, throttle_time=datetime.timedelta(0), topics=topics)
