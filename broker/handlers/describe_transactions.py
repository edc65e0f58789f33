"""DescribeTransactions (api key 65), version 0.

The coordinator's record of each requested transactional id: state (Kafka's names), timeout,
start time of the open transaction (-1 ms: none), producer id and epoch, and its partitions.
kafka-transactions.sh describe uses it.

Errors, per id: TRANSACTIONAL_ID_NOT_FOUND, NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
COORDINATOR_LOAD_IN_PROGRESS. An entry with an error carries no transaction: producer id and
epoch -1, and start time 0 where Kafka puts -1. Clients ignore the fields of an entry in error,
and 0 keeps those answers readable by kio's readers (they refuse negative timestamps), which the
request fuzzing test decodes every answer with. An id in the Empty state does get -1, as in
Kafka (its tests read that answer field by field).

Version notes: v0 is flexible.

Authorization (with an authorizer, as Kafka's KafkaApis): DESCRIBE on the transactional id,
else TRANSACTIONAL_ID_AUTHORIZATION_FAILED; the partitions of topics the caller may not DESCRIBE
are left out.
"""

import datetime
from collections import defaultdict

from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.describe_transactions.v0.response import DescribeTransactionsResponse, TopicData, TransactionState

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode

from broker.handlers.authorization import authorized, authorized_names
from broker.handlers.registry import RequestContext, api
from broker.security.acl import AclOperation, ResourceType


@api(ApiKey.DESCRIBE_TRANSACTIONS, versions=(0, 0))
async def handle_describe_transactions(
    ctx: RequestContext, request: DescribeTransactionsRequest
) -> DescribeTransactionsResponse:
    states = [await _describe(ctx, transactional_id) for transactional_id in request.transactional_ids]
    return DescribeTransactionsResponse(throttle_time=datetime.timedelta(0), transaction_states=tuple(states))


async def _describe(ctx: RequestContext, transactional_id: str) -> TransactionState:
    coordinator = ctx.broker.transaction_coordinator
    if not authorized(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, transactional_id):
        error = ErrorCode.transactional_id_authorization_failed
    else:
        error = await coordinator.check(transactional_id)
    found = coordinator.describe(transactional_id) if error is ErrorCode.none else None
    if found is None:
        return TransactionState(
            error_code=ErrorCode.transactional_id_not_found if error is ErrorCode.none else error,
            transactional_id=transactional_id,
            transaction_state="",
            transaction_timeout=datetime.timedelta(0),
            transaction_start_time=_time(0),
            producer_id=-1,
            producer_epoch=-1,
            topics=(),
        )
    by_topic = defaultdict(list)
    visible = authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, {tp.topic for tp in found.partitions})
    for tp in sorted(found.partitions):
        if tp.topic in visible:
            by_topic[tp.topic].append(tp.partition)
    return TransactionState(
        error_code=ErrorCode.none,
        transactional_id=transactional_id,
        transaction_state=found.state.display_name,
        transaction_timeout=datetime.timedelta(milliseconds=found.timeout_ms),
        transaction_start_time=_time(found.start_ms),
        producer_id=found.producer_id,
        producer_epoch=found.producer_epoch,
        topics=tuple(TopicData(topic=topic, partitions=tuple(partitions)) for topic, partitions in by_topic.items()),
    )


def _time(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
