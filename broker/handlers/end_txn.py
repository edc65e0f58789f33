"""EndTxn (api key 26), versions 0-3.

Commit or abort the producer's open transaction: the coordinator writes PrepareCommit /
PrepareAbort to __transaction_state and answers; the markers and CompleteCommit / CompleteAbort
follow in the background (coordinator.transaction_coordinator). A retry of an end already done
answers NONE; one under way, CONCURRENT_TRANSACTIONS.

Errors: NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS,
INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED (INVALID_PRODUCER_EPOCH before v2),
CONCURRENT_TRANSACTIONS, INVALID_TXN_STATE (no transaction, or the other end under way).

Version notes: v1 is v0; v2 may answer PRODUCER_FENCED; v3 is flexible.

Authorization (with an authorizer, as Kafka's KafkaApis): WRITE on the transactional id, else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
"""

import datetime

from kio.schema.end_txn.v3.request import EndTxnRequest
from kio.schema.end_txn.v3.response import EndTxnResponse

from protocol.api_keys import ApiKey

from broker.handlers.authorization import requires
from broker.handlers.registry import RequestContext, api
from broker.security.acl import AclOperation, ResourceType
from broker.handlers.txn_errors import for_version

FIRST_FENCED_VERSION = 2


@api(ApiKey.END_TXN, versions=(0, 3))
@requires(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, lambda request: request.transactional_id)
async def handle_end_txn(ctx: RequestContext, request: EndTxnRequest) -> EndTxnResponse:
    error = await ctx.broker.transaction_coordinator.end_transaction(
        request.transactional_id, request.producer_id, request.producer_epoch, request.committed
    )
    error = for_version(error, ctx.api_version, FIRST_FENCED_VERSION)
    return EndTxnResponse(throttle_time=datetime.timedelta(0), error_code=error)
