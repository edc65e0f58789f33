"""ListTransactions (api key 66), versions 0-1.

The transactional ids this broker coordinates, with their producer id and state (Kafka's state
names: Empty, Ongoing, PrepareCommit, ...), optionally only those in `state_filters`, with one of
`producer_id_filters`, and (v1, KIP-994) whose transaction started more than `duration_filter`
ms ago. As in Kafka, the duration compares the coordinator's clock with the start time of the
id's last transaction, -1 for one that never began one: such ids pass any duration filter.
State filters that name no state come back in unknown_state_filters.

Errors: COORDINATOR_LOAD_IN_PROGRESS while partitions of __transaction_state are loading (with
the ids known so far), COORDINATOR_NOT_AVAILABLE while shutting down.

Version notes: v0 is flexible; v1 adds the duration filter (-1: none). (v2 adds a transactional
id pattern: not served.)

Authorization (with an authorizer, as Kafka's KafkaApis): only the transactional ids the
caller may DESCRIBE are listed.
"""

import datetime

from kio.schema.list_transactions.v1.request import ListTransactionsRequest
from kio.schema.list_transactions.v1.response import ListTransactionsResponse, TransactionState

from coordinator.transaction_coordinator import TransactionDescription
from coordinator.transaction_log import TxnState
from protocol.api_keys import ApiKey

from broker.handlers.authorization import authorized_names
from broker.handlers.registry import RequestContext, api
from broker.security.acl import AclOperation, ResourceType

_STATE_NAMES = {state.display_name for state in TxnState}


@api(ApiKey.LIST_TRANSACTIONS, versions=(0, 1))
def handle_list_transactions(ctx: RequestContext, request: ListTransactionsRequest) -> ListTransactionsResponse:
    coordinator = ctx.broker.transaction_coordinator
    error, transactions = coordinator.list_transactions()
    states = set(request.state_filters)
    producer_ids = set(request.producer_id_filters)
    now_ms = coordinator.clock()
    visible = authorized_names(
        ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, (txn.transactional_id for txn in transactions)
    )

    def listed(txn: TransactionDescription) -> bool:
        return (
            (not states or txn.state.display_name in states)
            and (not producer_ids or txn.producer_id in producer_ids)
            and (request.duration_filter < 0 or now_ms - txn.start_ms > request.duration_filter)
        )

    return ListTransactionsResponse(
        throttle_time=datetime.timedelta(0),
        error_code=error,
        unknown_state_filters=tuple(sorted(states - _STATE_NAMES)),
        transaction_states=tuple(
            TransactionState(
                transactional_id=txn.transactional_id,
                producer_id=txn.producer_id,
                transaction_state=txn.state.display_name,
            )
            for txn in transactions
            if listed(txn) and txn.transactional_id in visible
        ),
    )
