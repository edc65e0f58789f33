"""AddOffsetsToTxn (api key 25), versions 0-3.

A transactional producer about to send a consumer group's offsets (TxnOffsetCommit) adds the
group's __consumer_offsets partition to its transaction, so the transaction's marker reaches it
and the offsets become visible on commit. Answers once __transaction_state holds it.

Errors: as AddPartitionsToTxn (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
COORDINATOR_LOAD_IN_PROGRESS, INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED (INVALID_PRODUCER_EPOCH
before v2), CONCURRENT_TRANSACTIONS, INVALID_TXN_STATE); COORDINATOR_NOT_AVAILABLE when
__consumer_offsets cannot be created.

Version notes: v1 is v0; v2 may answer PRODUCER_FENCED; v3 is flexible.

Authorization (with an authorizer, as Kafka's KafkaApis): WRITE on the transactional id (else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then READ on the group (else GROUP_AUTHORIZATION_FAILED).
"""

import datetime

from kio.schema.add_offsets_to_txn.v3.request import AddOffsetsToTxnRequest
from kio.schema.add_offsets_to_txn.v3.response import AddOffsetsToTxnResponse

from coordinator.group_coordinator import OFFSETS_TOPIC
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from storage.topic_partition import TopicPartition

from broker.handlers.authorization import group_operation, requires
from broker.handlers.registry import RequestContext, api
from broker.security.acl import AclOperation, ResourceType
from broker.handlers.txn_errors import for_version

FIRST_FENCED_VERSION = 2


@api(ApiKey.ADD_OFFSETS_TO_TXN, versions=(0, 3))
@requires(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, lambda request: request.transactional_id)
@group_operation(AclOperation.READ)
async def handle_add_offsets_to_txn(ctx: RequestContext, request: AddOffsetsToTxnRequest) -> AddOffsetsToTxnResponse:
    groups = ctx.broker.group_coordinator
    error = await groups.find_coordinator()
    if error is ErrorCode.none:
        offsets_partition = TopicPartition(OFFSETS_TOPIC, groups.partition_for(request.group_id))
        error = await ctx.broker.transaction_coordinator.add_partitions(
            request.transactional_id, request.producer_id, request.producer_epoch, [offsets_partition]
        )
    return AddOffsetsToTxnResponse(
        throttle_time=datetime.timedelta(0), error_code=for_version(error, ctx.api_version, FIRST_FENCED_VERSION)
    )
