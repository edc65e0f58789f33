"""ListTransactions (api key 66), version 0.

The transactional ids this broker coordinates, with their producer id and state (Kafka's state
names: Empty, Ongoing, PrepareCommit, ...), optionally only those in `state_filters` and with
one of `producer_id_filters`. State filters that name no state come back in
unknown_state_filters.

Errors: COORDINATOR_LOAD_IN_PROGRESS while partitions of __transaction_state are loading (with
the ids known so far), COORDINATOR_NOT_AVAILABLE while shutting down.

Version notes: v0 is flexible. (v1 adds a duration filter, v2 a transactional id pattern: not
served.)
"""

import datetime

from kio.schema.list_transactions.v0.request import ListTransactionsRequest
from kio.schema.list_transactions.v0.response import ListTransactionsResponse, TransactionState

from coordinator.transaction_log import TxnState
from protocol.api_keys import ApiKey

from broker.handlers.registry import RequestContext, api

_STATE_NAMES = {state.display_name for state in TxnState}


@api(ApiKey.LIST_TRANSACTIONS, versions=(0, 0))
def handle_list_transactions(ctx: RequestContext, request: ListTransactionsRequest) -> ListTransactionsResponse:
    error, transactions = ctx.broker.transaction_coordinator.list_transactions()
    states = set(request.state_filters)
    producer_ids = set(request.producer_id_filters)
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
            if (not states or txn.state.display_name in states)
            and (not producer_ids or txn.producer_id in producer_ids)
        ),
    )
