"""OffsetCommit (api key 8), versions 0-8.

Stores, per partition, the offset a consumer group has processed up to, in the group's
__consumer_offsets partition; the answer comes once the records are in the log. A member of the
group commits with its member id and generation. A consumer without group membership (assign())
commits with generation -1 and no member id: a "simple" commit, accepted while the group has no
members (a group that does not exist yet is created for it).

Per partition: UNKNOWN_TOPIC_OR_PARTITION (no such partition in this broker's metadata, which
Kafka's KafkaApis checks too), OFFSET_METADATA_TOO_LARGE (over offset.metadata.max.bytes),
INVALID_COMMIT_OFFSET_SIZE (the records do not fit a batch); for the request, given to every
partition: COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS,
ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID (also a simple commit to a group with members),
FENCED_INSTANCE_ID (v7+), REBALANCE_IN_PROGRESS (a member between JoinGroup and SyncGroup). The
empty group id is allowed, as Kafka allows it for old clients.

Version notes: v0 has no generation or member id; v1 adds them and a commit timestamp per
partition (-1: now); v2-4 carry a retention time: -1 lets offsets.retention.minutes apply, another
value makes the offsets expire that long after the commit, as Kafka does (the record is then
written as OffsetCommitValue v1, which holds the expiry); v3 adds throttle time; v5 drops the
retention time; v6 adds leader epochs; v7 group instance ids; v8 is flexible.

Authorization (with an authorizer, as Kafka's KafkaApis): READ on the group, else every partition answers GROUP_AUTHORIZATION_FAILED; READ on each topic, else its partitions answer TOPIC_AUTHORIZATION_FAILED (before their existence is checked).
"""

import datetime

from kio.schema.offset_commit.v8.request import OffsetCommitRequest
from kio.schema.offset_commit.v8.response import (
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)

from coordinator.group import CommittedOffset
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.schemas import adapt
from storage.topic_partition import TopicPartition

from broker.handlers.authorization import authorized_names, group_operation
from broker.handlers.registry import RequestContext, api, as_sent
from broker.security.acl import AclOperation, ResourceType

MILLISECOND = datetime.timedelta(milliseconds=1)
VERSION_WITH_COMMIT_TIMESTAMP = 1
VERSIONS_WITH_RETENTION_TIME = range(2, 5)
DEFAULT = -1


# v1's commit timestamps and v2-4's retention time are not in the newest version: the request is
# kept as sent to read them, and adapted for the rest.
@api(ApiKey.OFFSET_COMMIT, versions=(0, 8), parse=as_sent(ApiKey.OFFSET_COMMIT))
@group_operation(AclOperation.READ)
async def handle_offset_commit(ctx: RequestContext, sent) -> OffsetCommitResponse:
    version = ctx.api_version
    coordinator = ctx.broker.group_coordinator
    request = adapt(sent, OffsetCommitRequest)
    now = coordinator.clock()
    expire_timestamp = None
    if version in VERSIONS_WITH_RETENTION_TIME and sent.retention_time // MILLISECOND != DEFAULT:
        expire_timestamp = now + sent.retention_time // MILLISECOND
    offsets: dict[TopicPartition, CommittedOffset] = {}
    unknown: set[TopicPartition] = set()
    readable = authorized_names(ctx, AclOperation.READ, ResourceType.TOPIC, (t.name for t in request.topics))
    denied: set[TopicPartition] = set()
    for sent_topic, topic in zip(sent.topics, request.topics):
        for sent_partition, partition in zip(sent_topic.partitions, topic.partitions):
            tp = TopicPartition(topic.name, partition.partition_index)
            if topic.name not in readable:
                denied.add(tp)
                continue
            if ctx.broker.metadata_cache.partition(tp) is None:
                unknown.add(tp)
                continue
            commit_timestamp = sent_partition.commit_timestamp if version == VERSION_WITH_COMMIT_TIMESTAMP else DEFAULT
            offsets[tp] = CommittedOffset(
                offset=partition.committed_offset,
                leader_epoch=partition.committed_leader_epoch,
                metadata=partition.committed_metadata or "",
                commit_timestamp=now if commit_timestamp == DEFAULT else commit_timestamp,
                expire_timestamp=expire_timestamp,
            )
    errors = dict.fromkeys(unknown, ErrorCode.unknown_topic_or_partition)
    errors |= dict.fromkeys(denied, ErrorCode.topic_authorization_failed)
    if offsets:
        errors |= await coordinator.commit_offsets(
            request.group_id,
            request.member_id,
            request.group_instance_id,
            request.generation_id_or_member_epoch,
            offsets,
        )
    return OffsetCommitResponse(
        throttle_time=datetime.timedelta(0),
        topics=tuple(
            OffsetCommitResponseTopic(
                name=topic.name,
                partitions=tuple(
                    OffsetCommitResponsePartition(
                        partition_index=partition.partition_index,
                        error_code=errors[TopicPartition(topic.name, partition.partition_index)],
                    )
                    for partition in topic.partitions
                ),
            )
            for topic in request.topics
        ),
    )
