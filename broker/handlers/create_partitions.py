"""CreatePartitions (api key 37), versions 0-3.

Raises each topic's partition count to the one requested; the new partitions are served (empty)
as soon as the answer goes out. Counts only grow. The assignments, when given, must name one
replica list per new partition, each made of known brokers without repeats (standalone: this
broker alone). With validate_only nothing changes but the answer is the same.

Errors, per topic: INVALID_PARTITIONS for a count not above the current one,
UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT, INVALID_REQUEST for a topic named twice.

Cluster mode: served by the controller only (others: NOT_CONTROLLER); the new partitions'
replicas are assigned over the live brokers unless given, written to the topic's znode, and the
answer waits until they have leaders in the metadata.

Version notes: v1 is v0 (its answers may be throttled); v2 is flexible; v3 is v2.

Authorization (with an authorizer, as Kafka's KafkaApis): ALTER on the topic, else
TOPIC_AUTHORIZATION_FAILED ("The topic authorization is failed.").
"""

import datetime
from collections import Counter

from kio.schema.create_partitions.v3.request import CreatePartitionsRequest, CreatePartitionsTopic
from kio.schema.create_partitions.v3.response import (
    CreatePartitionsResponse,
    CreatePartitionsTopicResult,
)

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, KafkaError

from broker.handlers.authorization import authorized
from broker.handlers.registry import RequestContext, api
from broker.security.acl import AclOperation, ResourceType


@api(ApiKey.CREATE_PARTITIONS, versions=(0, 3))
async def handle_create_partitions(ctx: RequestContext, request: CreatePartitionsRequest) -> CreatePartitionsResponse:
    counts = Counter(topic.name for topic in request.topics)
    results = []
    for topic in request.topics:
        try:
            if counts[topic.name] > 1:
                raise KafkaError("Duplicate topic name.", ErrorCode.invalid_request)
            if not authorized(ctx, AclOperation.ALTER, ResourceType.TOPIC, topic.name):
                raise KafkaError("The topic authorization is failed.", ErrorCode.topic_authorization_failed)
            await _grow(ctx, topic, request.validate_only)
        except KafkaError as exc:
            results.append(_result(topic.name, exc.error_code, str(exc) or None))
        else:
            results.append(_result(topic.name, ErrorCode.none, None))
    return CreatePartitionsResponse(throttle_time=datetime.timedelta(0), results=tuple(results))


async def _grow(ctx: RequestContext, topic: CreatePartitionsTopic, validate_only: bool) -> None:
    ctx.broker.require_controller()
    topics = ctx.broker.topics
    assignments = None
    if topic.assignments is not None:
        assignments = [list(assignment.broker_ids) for assignment in topic.assignments]
    topics.check_new_partition_count(topic.name, topic.count, assignments)
    if not validate_only:
        await topics.create_partitions(topic.name, topic.count, assignments)


def _result(name: str, error_code: ErrorCode, message: str | None) -> CreatePartitionsTopicResult:
    return CreatePartitionsTopicResult(name=name, error_code=error_code, error_message=message)
