"""DeleteRecords (api key 21), versions 0-2.

Per partition, makes every record below the given offset unreadable by raising the log start
offset to it (offset -1 stands for the high watermark); segments wholly below it are deleted in
the background. An offset at or below the current log start changes nothing. The answer gives
the partition's low watermark: its log start offset after the deletion. It is given once the
new log start offsets are on disk (the log dir's log-start-offset-checkpoint written), so a crash
right after cannot bring deleted records back; Kafka leaves that to its periodic checkpoint.

Errors, per partition (low watermark -1): KAFKA_STORAGE_ERROR when the partition's log dir has
failed or fails on the way (the dir is then taken offline); for a partition not hosted here
NOT_LEADER_OR_FOLLOWER when the broker's metadata knows it, UNKNOWN_TOPIC_OR_PARTITION when it
does not; NOT_LEADER_OR_FOLLOWER on a replica that does not lead; OFFSET_OUT_OF_RANGE for an
offset beyond the high watermark or negative (other than -1).

Version notes: v1 is v0 (its answers may be throttled); v2 is flexible.

Authorization (with an authorizer, as Kafka's KafkaApis): DELETE on the topic, else its
partitions answer TOPIC_AUTHORIZATION_FAILED.
"""

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
    results = {
        topic.name: [
            _delete(ctx, TopicPartition(topic.name, p.partition_index), p.offset)
            if topic.name in deletable
            else _failed(p.partition_index, ErrorCode.topic_authorization_failed)
            for p in topic.partitions
        ]
        for topic in request.topics
    }
    deleted = [
        TopicPartition(name, result.partition_index)
        for name, partitions in results.items()
        for result in partitions
        if result.error_code == ErrorCode.none
    ]
    try:
        await ctx.broker.replica_manager.log_manager.write_checkpoints_of(deleted)
    except KafkaError as exc:
        results = {
            name: [_failed(r.partition_index, exc.error_code) if r.error_code == ErrorCode.none else r for r in rs]
            for name, rs in results.items()
        }
    return DeleteRecordsResponse(
        throttle_time=datetime.timedelta(0),
        topics=tuple(DeleteRecordsTopicResult(name=name, partitions=tuple(rs)) for name, rs in results.items()),
    )


def _delete(ctx: RequestContext, tp: TopicPartition, offset: int) -> DeleteRecordsPartitionResult:
    replica_manager = ctx.broker.replica_manager
    try:
        partition = replica_manager.leader_partition(tp)
        before = partition.high_watermark if offset == HIGH_WATERMARK else offset
        if before < 0:
            raise OffsetOutOfRangeError(f"The offset {offset} for partition {tp} is not valid")
        low_watermark = replica_manager.delete_records_before(tp, before)
    except KafkaError as exc:
        return _failed(tp.partition, exc.error_code)
    return DeleteRecordsPartitionResult(
        partition_index=tp.partition, low_watermark=low_watermark, error_code=ErrorCode.none
    )


def _failed(partition: int, error_code: ErrorCode) -> DeleteRecordsPartitionResult:
    return DeleteRecordsPartitionResult(
        partition_index=partition, low_watermark=INVALID_LOW_WATERMARK, error_code=error_code
    )
