"""InitProducerId (api key 22), versions 0-4.

An idempotent producer (transactional_id null) gets a new producer id with epoch 0, from the
broker's producer id manager (coordinator.producer_ids: ids from blocks claimed durably, never
handed out twice). As in Kafka, a producer id and epoch in the request (v3+: a producer bumping
its epoch after an error, KIP-360) do not change that: the answer is a fresh id.

With a transactional id, the transaction coordinator answers (coordinator.transaction_coordinator):
a new id gets a producer id and epoch 0; a known one gets its epoch bumped (a new producer id
once the epoch is exhausted), which fences the previous producer; an open transaction is aborted
first and the client answered CONCURRENT_TRANSACTIONS until that is done (it retries). Errors:
INVALID_REQUEST for an empty id, INVALID_TRANSACTION_TIMEOUT for a timeout outside
(0, transaction.max.timeout.ms], NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE /
COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS, PRODUCER_FENCED (INVALID_PRODUCER_EPOCH
before v4) when the v3+ expected producer id and epoch are not the current ones.

Errors (producer id and epoch -1): INVALID_REQUEST when only one of producer_id and
producer_epoch is -1 (v3+); COORDINATOR_LOAD_IN_PROGRESS when no new block of ids could be
claimed (every log dir failed to store it): retriable, as Kafka answers while it has no block.

Version notes: v1 is v0 (its answers may be throttled); v2 is flexible; v3 adds producer_id and
producer_epoch; v4 is v3 (a fenced transactional producer gets PRODUCER_FENCED instead of
INVALID_PRODUCER_EPOCH).

Authorization (with an authorizer, as Kafka's KafkaApis): a transactional producer needs WRITE
on its transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED); an idempotent one
IDEMPOTENT_WRITE on the cluster or WRITE on some topic (Kafka 3.x, KIP-679), else
CLUSTER_AUTHORIZATION_FAILED.
"""

import datetime
import logging

from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.init_producer_id.v4.response import InitProducerIdResponse

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.record_batch import NO_PRODUCER_EPOCH, NO_PRODUCER_ID

from broker.handlers.authorization import authorized, authorized_by_type
from broker.handlers.registry import RequestContext, api
from broker.security.acl import AclOperation, ResourceType
from broker.handlers.txn_errors import for_version

log = logging.getLogger(__name__)

FIRST_FENCED_VERSION = 4


@api(ApiKey.INIT_PRODUCER_ID, versions=(0, 4))
async def handle_init_producer_id(
    ctx: RequestContext, request: InitProducerIdRequest
) -> InitProducerIdResponse:
    if request.transactional_id is not None:
        if not authorized(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
            return _response(ErrorCode.transactional_id_authorization_failed)
    elif not authorized(ctx, AclOperation.IDEMPOTENT_WRITE, log_denied=False) and not authorized_by_type(
        ctx, AclOperation.WRITE, ResourceType.TOPIC
    ):
        return _response(ErrorCode.cluster_authorization_failed)
    error = _check(ctx, request)
    if error is not ErrorCode.none:
        return _response(error)
    if request.transactional_id is not None:
        error, producer_id, epoch = await ctx.broker.transaction_coordinator.init_producer_id(
            request.transactional_id,
            int(request.transaction_timeout.total_seconds() * 1000),
            request.producer_id,
            request.producer_epoch,
        )
        return _response(for_version(error, ctx.api_version, FIRST_FENCED_VERSION), producer_id, epoch)
    try:
        producer_id = await ctx.broker.producer_ids.generate()
    except OSError as exc:
        log.error("no producer id to give: %s", exc)
        return _response(ErrorCode.coordinator_load_in_progress)
    return _response(ErrorCode.none, producer_id, 0)


def _check(ctx: RequestContext, request: InitProducerIdRequest) -> ErrorCode:
    if (request.producer_id == NO_PRODUCER_ID) != (request.producer_epoch == NO_PRODUCER_EPOCH):
        return ErrorCode.invalid_request
    return ErrorCode.none


def _response(
    error: ErrorCode, producer_id: int = NO_PRODUCER_ID, epoch: int = NO_PRODUCER_EPOCH
) -> InitProducerIdResponse:
    return InitProducerIdResponse(
        throttle_time=datetime.timedelta(0),
        error_code=error,
        producer_id=producer_id,
        producer_epoch=epoch,
    )
