"""AddPartitionsToTxn (api key 24), versions 0-3.

A transactional producer names the partitions it is about to write in its transaction; the
transaction coordinator (coordinator.transaction_coordinator) records them in
__transaction_state, beginning the transaction if none is open, and answers once written.

Errors, the same for every partition of the request (Kafka's): UNKNOWN_TOPIC_OR_PARTITION for
partitions not in this broker's metadata (the others OPERATION_NOT_ATTEMPTED); NOT_COORDINATOR,
COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS; INVALID_PRODUCER_ID_MAPPING for an
unknown transactional id or another producer id; PRODUCER_FENCED for an old epoch
(INVALID_PRODUCER_EPOCH before v2); CONCURRENT_TRANSACTIONS while the previous transaction is
still ending; INVALID_TXN_STATE.

Version notes: v1 is v0; v2 may answer PRODUCER_FENCED; v3 is flexible. v4+ (batched, from
brokers, KIP-890) is not served.

Authorization (with an authorizer, as Kafka's KafkaApis): WRITE on the transactional id (else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED everywhere) and on each topic (else its partitions answer
TOPIC_AUTHORIZATION_FAILED and the others OPERATION_NOT_ATTEMPTED).
"""

import datetime

from kio.schema.add_partitions_to_txn.v3.request import AddPartitionsToTxnRequest
from kio.schema.add_partitions_to_txn.v3.response import (
    AddPartitionsToTxnPartitionResult,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnTopicResult,
)

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from storage.topic_partition import TopicPartition

from broker.handlers.authorization import authorized_names, requires
from broker.handlers.registry import RequestContext, api
from broker.security.acl import AclOperation, ResourceType
from broker.handlers.txn_errors import for_version

FIRST_FENCED_VERSION = 2


@api(ApiKey.ADD_PARTITIONS_TO_TXN, versions=(0, 3))
@requires(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, lambda request: request.v3_and_below_transactional_id)
async def handle_add_partitions_to_txn(
    ctx: RequestContext, request: AddPartitionsToTxnRequest
) -> AddPartitionsToTxnResponse:
    wanted = [TopicPartition(t.name, p) for t in request.v3_and_below_topics for p in t.partitions]
    metadata = ctx.broker.metadata_cache
    writable = authorized_names(ctx, AclOperation.WRITE, ResourceType.TOPIC, {tp.topic for tp in wanted})
    denied = {tp for tp in wanted if tp.topic not in writable}
    unknown = {tp for tp in wanted if tp not in denied and metadata.partition(tp) is None}
    if unknown or denied:
        errors = {
            tp: ErrorCode.topic_authorization_failed if tp in denied
            else ErrorCode.unknown_topic_or_partition if tp in unknown
            else ErrorCode.operation_not_attempted
            for tp in wanted
        }
    else:
        error = await ctx.broker.transaction_coordinator.add_partitions(
            request.v3_and_below_transactional_id,
            request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch,
            wanted,
        )
        errors = dict.fromkeys(wanted, for_version(error, ctx.api_version, FIRST_FENCED_VERSION))
    return AddPartitionsToTxnResponse(
        throttle_time=datetime.timedelta(0),
        results_by_topic_v3_and_below=tuple(
            AddPartitionsToTxnTopicResult(
                name=topic.name,
                results_by_partition=tuple(
                    AddPartitionsToTxnPartitionResult(
                        partition_index=p, partition_error_code=errors[TopicPartition(topic.name, p)]
                    )
                    for p in topic.partitions
                ),
            )
            for topic in request.v3_and_below_topics
        ),
    )
