"""OffsetForLeaderEpoch (api key 23), versions 0-4.

Per partition: the end offset of the requested leader epoch in this replica's log, from its
leader epoch cache (storage.leader_epoch, Kafka's semantics): the largest epoch at or below the
requested one and the offset where the next epoch starts (the log end offset for the latest
epoch); UNDEFINED (-1, -1) for an epoch above every known one. Followers ask it before fetching,
to truncate where their log diverged from the leader's (replication.fetcher); consumers ask it
after a leader change (KIP-320) to detect a truncated log.

Who answers: requests from a follower (replica_id >= 0) or a consumer (-1) need the leader
(NOT_LEADER_OR_FOLLOWER otherwise); the debugging id -2, which is also what v0-2 requests carry,
may read any replica.

Errors, in the order they are checked (Kafka's): KAFKA_STORAGE_ERROR; for a partition not hosted
here NOT_LEADER_OR_FOLLOWER when the broker's metadata knows it, UNKNOWN_TOPIC_OR_PARTITION when
it does not; current_leader_epoch (v2+) against the replica's: FENCED_LEADER_EPOCH when older,
UNKNOWN_LEADER_EPOCH when newer; then NOT_LEADER_OR_FOLLOWER.

Version notes: v0-1 are declared in protocol.legacy (v0 answers no epoch); v2 adds
current_leader_epoch and the throttle time, v3 replica_id, v4 is flexible.

Authorization (with an authorizer, as Kafka's KafkaApis): CLUSTER_ACTION on the cluster (a
follower) or DESCRIBE on the topic (a consumer, KIP-320), else its partitions answer
TOPIC_AUTHORIZATION_FAILED.
"""

import datetime

from kio.schema.offset_for_leader_epoch.v4.request import OffsetForLeaderEpochRequest, OffsetForLeaderPartition
from kio.schema.offset_for_leader_epoch.v4.response import (
    EpochEndOffset,
    OffsetForLeaderEpochResponse,
    OffsetForLeaderTopicResult,
)

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, KafkaError
from storage.topic_partition import TopicPartition

from broker.handlers.authorization import authorized, authorized_names
from broker.handlers.registry import RequestContext, api
from broker.security.acl import AclOperation, ResourceType

DEBUGGING_REPLICA_ID = -2


@api(ApiKey.OFFSET_FOR_LEADER_EPOCH, versions=(0, 4))
def handle_offset_for_leader_epoch(
    ctx: RequestContext, request: OffsetForLeaderEpochRequest
) -> OffsetForLeaderEpochResponse:
    leader_only = request.replica_id != DEBUGGING_REPLICA_ID
    names = {topic.topic for topic in request.topics}
    if authorized(ctx, AclOperation.CLUSTER_ACTION, log_denied=False):
        visible = names
    else:
        visible = authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
    return OffsetForLeaderEpochResponse(
        throttle_time=datetime.timedelta(0),
        topics=tuple(
            OffsetForLeaderTopicResult(
                topic=topic.topic,
                partitions=tuple(
                    _end_offset(ctx, TopicPartition(topic.topic, p.partition), p, leader_only)
                    if topic.topic in visible
                    else EpochEndOffset(error_code=ErrorCode.topic_authorization_failed, partition=p.partition)
                    for p in topic.partitions
                ),
            )
            for topic in request.topics
        ),
    )


def _end_offset(
    ctx: RequestContext, tp: TopicPartition, wanted: OffsetForLeaderPartition, leader_only: bool
) -> EpochEndOffset:
    try:
        partition = ctx.broker.replica_manager.partition_at_epoch(tp, wanted.current_leader_epoch, leader_only)
    except KafkaError as exc:
        return EpochEndOffset(error_code=exc.error_code, partition=tp.partition)
    epoch, end_offset = partition.end_offset_for_epoch(wanted.leader_epoch)
    return EpochEndOffset(
        error_code=ErrorCode.none, partition=tp.partition, leader_epoch=epoch, end_offset=end_offset
    )
