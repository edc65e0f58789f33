"""ListOffsets (api key 2), versions 0-9.

Per partition, by the requested timestamp:
- -2 (earliest): the log start offset;
- -1 (latest): the high watermark (the last stable offset for read_committed, v2+); the log end
  offset for a follower (replica_id >= 0);
- -3 (max timestamp, v7+): the offset and timestamp of the record with the largest timestamp;
- -4 (earliest local, v8+, KIP-405): the first offset on this broker's disk, above the log start
  of a tiered log whose older segments are in the remote store only (-2 answers that log start);
- -5 (latest tiered, v9+, KIP-1005): the last offset the remote store holds, -1 when the topic is
  not tiered or nothing is copied yet;
- a timestamp >= 0: the first record stamped at or after it, found through the time index, or
  offset -1 when there is none.

A tiered log (remote.storage.enable) whose older segments are in the remote store only looks a
timestamp up in its remote segments first (their time and offset indexes, then their batches, on
the remote reader threads), as Kafka does; such an answer makes the response wait for it.

Only the leader answers (NOT_LEADER_OR_FOLLOWER), except to the debugging replica id -2. A
leader whose high watermark lags behind the start offset of its leader epoch (just elected, its
followers not caught up with it yet) answers a client (v1+) OFFSET_NOT_AVAILABLE, retriable, as
Kafka does: its offsets could be below what was acknowledged before.

Errors, in the order they are checked (Kafka's): KAFKA_STORAGE_ERROR; for a partition not hosted
here NOT_LEADER_OR_FOLLOWER when the broker's metadata knows it, UNKNOWN_TOPIC_OR_PARTITION when
it does not; FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH for a current_leader_epoch (v4+) older or
newer than the replica's; NOT_LEADER_OR_FOLLOWER; INVALID_REQUEST for an unknown negative
timestamp.

Version notes: v0 answers with a list of offsets ("old style": at most max_num_offsets, here the
one offset found) instead of an offset and timestamp; v2 adds isolation_level; v4 adds
current_leader_epoch and the leader epoch in answers; v6 is flexible; v7 allows -3, v8 -4 and
v9 -5 (their layouts are those of v7; as Kafka's broker, -4 and -5 are answered whatever the
version).

Authorization (with an authorizer, as Kafka's KafkaApis): DESCRIBE on the topic, else its
partitions answer TOPIC_AUTHORIZATION_FAILED.
"""

import datetime
import inspect
from collections.abc import Callable

from kio.schema.list_offsets.v9.request import ListOffsetsRequest
from kio.schema.list_offsets.v9.response import (
    ListOffsetsPartitionResponse,
    ListOffsetsResponse,
    ListOffsetsTopicResponse,
)

from protocol import legacy
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, KafkaError
from protocol.fetch import READ_COMMITTED
from protocol.schemas import adapt
from replication.partition import Partition
from storage.topic_partition import TopicPartition

from broker.handlers.authorization import authorized
from broker.handlers.registry import RequestContext, api, as_sent
from broker.security.acl import AclOperation, ResourceType

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
CONSUMER_REPLICA_ID = -1
DEBUGGING_REPLICA_ID = -2


@api(ApiKey.LIST_OFFSETS, versions=(0, 9), parse=as_sent(ApiKey.LIST_OFFSETS))
def handle_list_offsets(ctx: RequestContext, request):
    # v0's partitions carry max_num_offsets, which the newest version lacks.
    if ctx.api_version == 0:
        return _answer_v0(ctx, request)
    request = adapt(request, ListOffsetsRequest)
    read_committed = request.isolation_level == READ_COMMITTED
    answers = [
        (
            topic.name,
            [
                _answer(
                    ctx, topic.name, p.partition_index, p.timestamp, p.current_leader_epoch, read_committed,
                    request.replica_id,
                )
                for p in topic.partitions
            ],
        )
        for topic in request.topics
    ]

    def response(found: list[tuple[str, list[ListOffsetsPartitionResponse]]]) -> ListOffsetsResponse:
        return ListOffsetsResponse(
            throttle_time=datetime.timedelta(0),
            topics=tuple(ListOffsetsTopicResponse(name=name, partitions=tuple(partitions)) for name, partitions in found),
        )

    return _when_answered(answers, response)


def _when_answered(answers: list[tuple[str, list]], respond: Callable):
    """`respond(answers)` at once, or, when some answers wait for the remote store (timestamp
    lookups in a tiered log's remote part), an awaitable of it once they are in."""
    if not any(inspect.isawaitable(answer) for _, partitions in answers for answer in partitions):
        return respond(answers)

    async def later():
        return respond([
            (name, [await answer if inspect.isawaitable(answer) else answer for answer in partitions])
            for name, partitions in answers
        ])

    return later()


def _answer(
    ctx: RequestContext,
    topic: str,
    index: int,
    timestamp: int,
    leader_epoch: int,
    read_committed: bool,
    replica_id: int,
) -> ListOffsetsPartitionResponse:
    if not authorized(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, topic):
        return ListOffsetsPartitionResponse(partition_index=index, error_code=ErrorCode.topic_authorization_failed)
    try:
        partition = ctx.broker.replica_manager.partition_at_epoch(
            TopicPartition(topic, index), leader_epoch, leader_only=replica_id != DEBUGGING_REPLICA_ID
        )
        if replica_id == CONSUMER_REPLICA_ID and ctx.api_version >= 1:
            _check_high_watermark_caught_up(partition)
        if replica_id >= 0 and timestamp == LATEST_TIMESTAMP:
            found_timestamp, offset = -1, partition.log.log_end_offset
        elif _in_remote_log(ctx, partition, timestamp):
            return _answer_from_remote(ctx, partition, index, timestamp, read_committed)
        else:
            found_timestamp, offset = _lookup(partition, timestamp, read_committed)
    except KafkaError as exc:
        return ListOffsetsPartitionResponse(partition_index=index, error_code=exc.error_code)
    return ListOffsetsPartitionResponse(
        partition_index=index,
        error_code=ErrorCode.none,
        timestamp=found_timestamp,
        offset=offset,
        leader_epoch=partition.leader_epoch,
    )


def _check_high_watermark_caught_up(partition: Partition) -> None:
    """A leader's high watermark behind the start of its own epoch (a leader just elected, whose
    followers have not fetched from it yet, or one restarted with an older checkpoint) would
    answer offsets below what was acknowledged before: OFFSET_NOT_AVAILABLE, which clients
    retry, as Kafka's Partition.fetchOffsetForTimestamp answers a client then."""
    start = partition.leader_epoch_start_offset
    high_watermark = partition.log.high_watermark
    if start > high_watermark:
        raise KafkaError(
            f"Failed to fetch offsets for partition {partition.topic_partition} with leader epoch "
            f"{partition.leader_epoch} as this partition's high watermark ({high_watermark}) is lagging "
            f"behind the start offset from the beginning of this epoch ({start}).",
            ErrorCode.offset_not_available,
        )


def _in_remote_log(ctx: RequestContext, partition: Partition, timestamp: int) -> bool:
    """Whether a timestamp lookup starts in the remote part of a tiered log (as Kafka's, which
    looks there first)."""
    log = partition.log
    return (
        timestamp >= 0
        and ctx.broker.remote_log is not None
        and log.config.remote_storage_enable
        and log.log_start_offset < log.local_log_start_offset
    )


async def _answer_from_remote(
    ctx: RequestContext, partition: Partition, index: int, timestamp: int, read_committed: bool
) -> ListOffsetsPartitionResponse:
    """A timestamp lookup of a tiered log: the remote segments first, then the local log."""
    log = partition.log
    try:
        found = await ctx.broker.remote_log.offset_for_timestamp(partition.topic_partition, timestamp, log.log_start_offset)
        if found is None or found[1] >= partition.high_watermark:
            found = _lookup(partition, timestamp, read_committed)
    except KafkaError as exc:
        return ListOffsetsPartitionResponse(partition_index=index, error_code=exc.error_code)
    return ListOffsetsPartitionResponse(
        partition_index=index, error_code=ErrorCode.none, timestamp=found[0], offset=found[1],
        leader_epoch=partition.leader_epoch,
    )


def _lookup(partition: Partition, timestamp: int, read_committed: bool) -> tuple[int, int]:
    """(timestamp, offset) answering a request for `timestamp`; (-1, -1) when none matches."""
    log = partition.log
    if timestamp == EARLIEST_TIMESTAMP:
        return -1, log.log_start_offset
    if timestamp == LATEST_TIMESTAMP:
        return -1, partition.last_stable_offset if read_committed else partition.high_watermark
    if timestamp == EARLIEST_LOCAL_TIMESTAMP:
        return -1, log.local_log_start_offset
    if timestamp == LATEST_TIERED_TIMESTAMP:
        return -1, log.highest_remote_offset if log.config.remote_storage_enable else -1
    if timestamp == MAX_TIMESTAMP:
        found = log.max_timestamp_and_offset()
    elif timestamp < 0:
        raise KafkaError(f"unknown special timestamp {timestamp}", ErrorCode.invalid_request)
    else:
        found = log.offset_for_timestamp(timestamp)
    if found is None or found[1] >= partition.high_watermark:
        return -1, -1
    return found


def _answer_v0(ctx: RequestContext, request: legacy.ListOffsetsRequestV0):
    answers = [
        (topic.name, [_answer(ctx, topic.name, p.partition_index, p.timestamp, -1, False, request.replica_id) for p in topic.partitions])
        for topic in request.topics
    ]

    def response(found: list[tuple[str, list[ListOffsetsPartitionResponse]]]) -> legacy.ListOffsetsResponseV0:
        topics = []
        for topic, (name, partitions) in zip(request.topics, found):
            answers_v0 = tuple(
                legacy.ListOffsetsPartitionResponseV0(
                    partition_index=answer.partition_index,
                    error_code=answer.error_code,
                    old_style_offsets=(answer.offset,) if answer.offset >= 0 and asked.max_num_offsets > 0 else (),
                )
                for asked, answer in zip(topic.partitions, partitions)
            )
            topics.append(legacy.ListOffsetsTopicResponseV0(name=name, partitions=answers_v0))
        return legacy.ListOffsetsResponseV0(topics=tuple(topics))

    return _when_answered(answers, response)
