"""InitProducerId (api key 22), versions 0-4.

An idempotent producer (transactional_id null) gets a new producer id with epoch 0, from the
broker's producer id manager (coordinator.producer_ids: ids from blocks claimed durably, never
handed out twice). As in Kafka, a producer id and epoch in the request (v3+: a producer bumping
its epoch after an error, KIP-360) do not change that: the answer is a fresh id.

A transactional id belongs to the transaction coordinator, which logway does not have yet (issue
6, transactions): after Kafka's checks (an empty id is INVALID_REQUEST, a transaction timeout
outside (0, transaction.max.timeout.ms] is INVALID_TRANSACTION_TIMEOUT) the answer is
NOT_COORDINATOR, what Kafka answers from a broker that does not coordinate the id. Clients ask
FindCoordinator again, which answers COORDINATOR_NOT_AVAILABLE for transactional ids, and give
up when their own timeout ends.

Errors (producer id and epoch -1): INVALID_REQUEST when only one of producer_id and
producer_epoch is -1 (v3+); COORDINATOR_LOAD_IN_PROGRESS when no new block of ids could be
claimed (every log dir failed to store it): retriable, as Kafka answers while it has no block.

Version notes: v1 is v0 (its answers may be throttled); v2 is flexible; v3 adds producer_id and
producer_epoch; v4 is v3 (a fenced transactional producer gets PRODUCER_FENCED instead of
INVALID_PRODUCER_EPOCH).
"""

import datetime
import logging

from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.init_producer_id.v4.response import InitProducerIdResponse

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.record_batch import NO_PRODUCER_EPOCH, NO_PRODUCER_ID

from broker.handlers.registry import RequestContext, api

log = logging.getLogger(__name__)


@api(ApiKey.INIT_PRODUCER_ID, versions=(0, 4))
async def handle_init_producer_id(
    ctx: RequestContext, request: InitProducerIdRequest
) -> InitProducerIdResponse:
    error = _check(ctx, request)
    if error is not ErrorCode.none:
        return _response(error)
    try:
        producer_id = await ctx.broker.producer_ids.generate()
    except OSError as exc:
        log.error("no producer id to give: %s", exc)
        return _response(ErrorCode.coordinator_load_in_progress)
    return _response(ErrorCode.none, producer_id, 0)


def _check(ctx: RequestContext, request: InitProducerIdRequest) -> ErrorCode:
    if (request.producer_id == NO_PRODUCER_ID) != (request.producer_epoch == NO_PRODUCER_EPOCH):
        return ErrorCode.invalid_request
    transactional_id = request.transactional_id
    if transactional_id is None:
        return ErrorCode.none
    if not transactional_id:
        return ErrorCode.invalid_request
    timeout_ms = request.transaction_timeout.total_seconds() * 1000
    if not 0 < timeout_ms <= ctx.broker.config.get("transaction.max.timeout.ms"):
        return ErrorCode.invalid_transaction_timeout
    return ErrorCode.not_coordinator


def _response(
    error: ErrorCode, producer_id: int = NO_PRODUCER_ID, epoch: int = NO_PRODUCER_EPOCH
) -> InitProducerIdResponse:
    return InitProducerIdResponse(
        throttle_time=datetime.timedelta(0),
        error_code=error,
        producer_id=producer_id,
        producer_epoch=epoch,
    )
