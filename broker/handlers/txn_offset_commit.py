"""TxnOffsetCommit (api key 28), versions 0-3.

A transactional producer commits a consumer group's offsets inside its transaction (after
AddOffsetsToTxn). The group coordinator writes them to __consumer_offsets as a transactional
batch of the producer and keeps them pending: they become the group's committed offsets when
the transaction's COMMIT marker reaches that partition, and are dropped on ABORT.

Errors, per partition: NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS,
INVALID_GROUP_ID; with a generation (v3+) the member checks of OffsetCommit
(UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, FENCED_INSTANCE_ID, REBALANCE_IN_PROGRESS).

Version notes: v1 is v0; v2 adds committed_leader_epoch; v3 is flexible and adds
generation_id, member_id and group_instance_id.

Authorization (with an authorizer, as Kafka's KafkaApis): WRITE on the transactional id (else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED everywhere), READ on the group (else
GROUP_AUTHORIZATION_FAILED everywhere), READ on each topic (else its partitions answer
TOPIC_AUTHORIZATION_FAILED).
"""

import datetime

from kio.schema.txn_offset_commit.v3.request import TxnOffsetCommitRequest
from kio.schema.txn_offset_commit.v3.response import (
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
)

from coordinator.group import CommittedOffset
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from storage.topic_partition import TopicPartition

from broker.handlers.authorization import authorized_names, group_operation, requires
from broker.handlers.registry import RequestContext, api
from broker.security.acl import AclOperation, ResourceType


@api(ApiKey.TXN_OFFSET_COMMIT, versions=(0, 3))
@requires(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, lambda request: request.transactional_id)
@group_operation(AclOperation.READ)
async def handle_txn_offset_commit(ctx: RequestContext, request: TxnOffsetCommitRequest) -> TxnOffsetCommitResponse:
    groups = ctx.broker.group_coordinator
    now = groups.clock()
    readable = authorized_names(ctx, AclOperation.READ, ResourceType.TOPIC, (t.name for t in request.topics))
    offsets = {
        TopicPartition(topic.name, p.partition_index): CommittedOffset(
            p.committed_offset, p.committed_leader_epoch, p.committed_metadata or "", now
        )
        for topic in request.topics
        if topic.name in readable
        for p in topic.partitions
    }
    denied = {
        TopicPartition(topic.name, p.partition_index): ErrorCode.topic_authorization_failed
        for topic in request.topics
        if topic.name not in readable
        for p in topic.partitions
    }
    errors = denied
    if offsets:
        errors = denied | await groups.commit_transactional_offsets(
            request.group_id,
            request.producer_id,
            request.producer_epoch,
            request.member_id,
            request.group_instance_id,
            request.generation_id,
            offsets,
        )
    return TxnOffsetCommitResponse(
        throttle_time=datetime.timedelta(0),
        topics=tuple(
            TxnOffsetCommitResponseTopic(
                name=topic.name,
                partitions=tuple(
                    TxnOffsetCommitResponsePartition(
                        partition_index=p.partition_index,
                        error_code=errors[TopicPartition(topic.name, p.partition_index)],
                    )
                    for p in topic.partitions
                ),
            )
            for topic in request.topics
        ),
    )
