"""DeleteRecords (api key 21), versions 0-2.

Per partition, makes every record below the given offset unreadable by raising the log start
offset to it (offset -1 stands for the high watermark); segments wholly below it are deleted in
the background. An offset at or below the current log start changes nothing. The answer gives
the partition's low watermark: the lowest log start offset of its replicas on live brokers.

It is given once that low watermark reaches the offset (Kafka's DelayedDeleteRecords): followers
take the leader's log start as they fetch, so the records stay deleted whichever replica leads
next. The new log start offsets are on disk by then, the leader's and each follower's (their
log dir's log-start-offset-checkpoint written), so a crash right after cannot bring deleted
records back either; Kafka leaves that to its periodic checkpoint.

Errors, per partition (low watermark -1): KAFKA_STORAGE_ERROR when the partition's log dir has
failed or fails on the way (the dir is then taken offline); for a partition not hosted here
NOT_LEADER_OR_FOLLOWER when the broker's metadata knows it, UNKNOWN_TOPIC_OR_PARTITION when it
does not; NOT_LEADER_OR_FOLLOWER on a replica that does not lead, or stops leading while the
followers catch up; OFFSET_OUT_OF_RANGE for an offset beyond the high watermark or negative
(other than -1); REQUEST_TIMED_OUT when the low watermark has not reached the offset within
the request's timeout (the leader's log start has moved all the same, as in Kafka).

Version notes: v1 is v0 (its answers may be throttled); v2 is flexible.

Authorization (with an authorizer, as Kafka's KafkaApis): DELETE on the topic, else its
partitions answer TOPIC_AUTHORIZATION_FAILED.
"""

import asyncio
import datetime

from kio.schema.delete_records.v2.request import DeleteRecordsRequest
from kio.schema.delete_records.v2.response import (
    DeleteRecordsPartitionResult,
    DeleteRecordsResponse,
    DeleteRecordsTopicResult,
)

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, KafkaError
from storage.errors import OffsetOutOfRangeError
from storage.topic_partition import TopicPartition

from broker.handlers.authorization import authorized_names
from broker.handlers.registry import RequestContext, api
from broker.security.acl import AclOperation, ResourceType

HIGH_WATERMARK = -1
INVALID_LOW_WATERMARK = -1


@api(ApiKey.DELETE_RECORDS, versions=(0, 2))
async def handle_delete_records(ctx: RequestContext, request: DeleteRecordsRequest) -> DeleteRecordsResponse:
    deletable = authorized_names(ctx, AclOperation.DELETE, ResourceType.TOPIC, (t.name for t in request.topics))
    # per partition asked for, in order: the offset its low watermark must reach, or its failed answer
    outcomes: list[tuple[TopicPartition, int | DeleteRecordsPartitionResult]] = []
    for topic in request.topics:
        for p in topic.partitions:
            tp = TopicPartition(topic.name, p.partition_index)
            if topic.name in deletable:
                outcomes.append((tp, _delete(ctx, tp, p.offset)))
            else:
                outcomes.append((tp, _failed(tp.partition, ErrorCode.topic_authorization_failed)))
    deleted = {tp for tp, outcome in outcomes if isinstance(outcome, int)}
    try:
        await ctx.broker.replica_manager.log_manager.write_checkpoints_of(deleted)
    except KafkaError as exc:
        outcomes = [(tp, _failed(tp.partition, exc.error_code) if isinstance(o, int) else o) for tp, o in outcomes]
    timeout_s = request.timeout.total_seconds()
    answers = await asyncio.gather(*(_replicated(ctx, tp, outcome, timeout_s) for tp, outcome in outcomes))
    by_topic: dict[str, list[DeleteRecordsPartitionResult]] = {}
    for (tp, _outcome), answer in zip(outcomes, answers):
        by_topic.setdefault(tp.topic, []).append(answer)
    return DeleteRecordsResponse(
        throttle_time=datetime.timedelta(0),
        topics=tuple(DeleteRecordsTopicResult(name=name, partitions=tuple(rs)) for name, rs in by_topic.items()),
    )


def _delete(ctx: RequestContext, tp: TopicPartition, offset: int) -> int | DeleteRecordsPartitionResult:
    """Raise the leader's log start; the offset the low watermark must then reach, or the
    failed answer."""
    replica_manager = ctx.broker.replica_manager
    try:
        partition = replica_manager.leader_partition(tp)
        before = partition.high_watermark if offset == HIGH_WATERMARK else offset
        if before < 0:
            raise OffsetOutOfRangeError(f"The offset {offset} for partition {tp} is not valid")
        replica_manager.delete_records_before(tp, before)
    except KafkaError as exc:
        return _failed(tp.partition, exc.error_code)
    return before


async def _replicated(
    ctx: RequestContext, tp: TopicPartition, outcome: int | DeleteRecordsPartitionResult, timeout_s: float
) -> DeleteRecordsPartitionResult:
    """The answer once the partition's low watermark reaches the offset `outcome` names (a
    failed answer as it is)."""
    if not isinstance(outcome, int):
        return outcome
    try:
        low_watermark = await ctx.broker.replica_manager.wait_for_low_watermark(tp, outcome, timeout_s)
    except KafkaError as exc:
        return _failed(tp.partition, exc.error_code)
    return DeleteRecordsPartitionResult(partition_index=tp.partition, low_watermark=low_watermark, error_code=ErrorCode.none)


def _failed(partition: int, error_code: ErrorCode) -> DeleteRecordsPartitionResult:
    return DeleteRecordsPartitionResult(
        partition_index=partition, low_watermark=INVALID_LOW_WATERMARK, error_code=error_code
    )
