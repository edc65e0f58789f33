"""The transaction state machine alone: each request in each state, fencing, timeouts and
expiry, with writes completed (or failed) by hand."""

from coordinator.transaction_log import TxnState
from coordinator.transaction_state import TransactionMetadata
from protocol.errors import ErrorCode
from storage.topic_partition import TopicPartition

A0 = TopicPartition("a", 0)
A1 = TopicPartition("a", 1)
PID = 1000


def written(txn: TransactionMetadata, decision):
    assert decision.target is txn.pending
    txn.complete(decision.target)
    return decision.error


def initialized(now=0, timeout_ms=60_000) -> TransactionMetadata:
    txn = TransactionMetadata.new("t", PID, timeout_ms, now)
    assert written(txn, txn.init_producer(now, timeout_ms, lambda: None)) is ErrorCode.none
    return txn


def ongoing(now=0) -> TransactionMetadata:
    txn = initialized(now)
    written(txn, txn.add_partitions(now, PID, 0, [A0]))
    return txn


def test_a_new_transactional_id_starts_at_epoch_zero_empty():
    txn = initialized()
    assert (txn.producer_id, txn.producer_epoch, txn.state) == (PID, 0, TxnState.EMPTY)


def test_init_again_bumps_the_epoch_and_remembers_the_last():
    txn = initialized()
    written(txn, txn.init_producer(5, 30_000, lambda: None))
    assert (txn.producer_epoch, txn.last_producer_epoch, txn.timeout_ms) == (1, 0, 30_000)


def test_an_exhausted_epoch_takes_a_new_producer_id():
    txn = initialized()
    txn.producer_epoch = 2**15 - 2
    written(txn, txn.init_producer(5, 30_000, lambda: PID + 1))
    assert (txn.producer_id, txn.producer_epoch) == (PID + 1, 0)


def test_add_partitions_begins_the_transaction_and_a_repeat_writes_nothing():
    txn = ongoing(now=7)
    assert (txn.state, txn.partitions, txn.start_ms) == (TxnState.ONGOING, {A0}, 7)
    assert txn.add_partitions(9, PID, 0, [A0]).target is None
    written(txn, txn.add_partitions(9, PID, 0, [A1]))
    assert txn.partitions == {A0, A1} and txn.start_ms == 7


def test_requests_of_another_producer_or_epoch_are_refused():
    txn = ongoing()
    assert txn.add_partitions(1, PID + 1, 0, [A1]).error is ErrorCode.invalid_producer_id_mapping
    assert txn.add_partitions(1, PID, 1, [A1]).error is ErrorCode.producer_fenced
    assert txn.end_transaction(1, PID, 1, commit=True).error is ErrorCode.producer_fenced


def test_commit_goes_through_prepare_to_complete():
    txn = ongoing()
    written(txn, txn.end_transaction(1, PID, 0, commit=True))
    assert txn.state is TxnState.PREPARE_COMMIT and txn.partitions == {A0}
    assert txn.end_transaction(2, PID, 0, commit=True).error is ErrorCode.concurrent_transactions
    assert txn.end_transaction(2, PID, 0, commit=False).error is ErrorCode.invalid_txn_state
    assert txn.add_partitions(2, PID, 0, [A1]).error is ErrorCode.concurrent_transactions
    written(txn, txn.complete_transaction(3))
    assert (txn.state, txn.partitions) == (TxnState.COMPLETE_COMMIT, set())
    assert txn.end_transaction(4, PID, 0, commit=True) == (ErrorCode.none, None)  # a retry
    assert txn.end_transaction(4, PID, 0, commit=False).error is ErrorCode.invalid_txn_state


def test_end_without_a_transaction_is_an_invalid_state():
    txn = initialized()
    assert txn.end_transaction(1, PID, 0, commit=True).error is ErrorCode.invalid_txn_state


def test_a_pending_write_makes_everything_else_wait_and_a_failed_one_changes_nothing():
    txn = initialized()
    decision = txn.add_partitions(1, PID, 0, [A0])
    assert txn.add_partitions(1, PID, 0, [A1]).error is ErrorCode.concurrent_transactions
    assert txn.init_producer(1, 1000, lambda: None).error is ErrorCode.concurrent_transactions
    txn.abandon()
    assert txn.state is TxnState.EMPTY and txn.pending is None and decision.target is not None


def test_init_during_a_transaction_fences_and_aborts_it():
    txn = ongoing()
    decision = txn.init_producer(1, 60_000, lambda: None)
    assert decision.error is ErrorCode.concurrent_transactions
    assert decision.target.state is TxnState.PREPARE_ABORT and decision.target.producer_epoch == 1
    written(txn, decision)
    assert txn.add_partitions(2, PID, 0, [A1]).error is ErrorCode.producer_fenced
    written(txn, txn.complete_transaction(3))
    assert txn.state is TxnState.COMPLETE_ABORT
    written(txn, txn.init_producer(4, 60_000, lambda: None))
    assert (txn.state, txn.producer_epoch) == (TxnState.EMPTY, 2)


def test_a_failed_fence_restores_the_epoch():
    txn = ongoing()
    txn.init_producer(1, 60_000, lambda: None)
    txn.abandon()
    assert (txn.state, txn.producer_epoch) == (TxnState.ONGOING, 0)


def test_after_a_failed_fence_the_producers_own_bump_still_bumps():
    # The coordinator's timeout fence fails to write (its log partition below min.insync), the
    # client aborts, then asks for a new epoch with its current one (KIP-360), as librdkafka
    # does after an abortable error that "requires epoch bump". Taking that for a retry of the
    # fence that never happened answered the same epoch: the client reset its sequences to 0
    # under an epoch whose partitions expect more, and every later transaction failed with
    # OUT_OF_ORDER_SEQUENCE_NUMBER (a Jepsen schedule, seed 4087283495).
    txn = ongoing()
    assert txn.fence(1).error is ErrorCode.concurrent_transactions
    txn.abandon()
    assert (txn.state, txn.producer_epoch, txn.last_producer_epoch) == (TxnState.ONGOING, 0, -1)
    written(txn, txn.end_transaction(2, PID, 0, commit=False))
    written(txn, txn.complete_transaction(3))

    decision = txn.init_producer(4, 60_000, lambda: None, PID, 0)

    assert decision.target is not None and decision.target.producer_epoch == 1
    written(txn, decision)
    assert (txn.producer_epoch, txn.last_producer_epoch) == (1, 0)


def test_expected_producer_and_epoch_are_checked():
    txn = initialized()
    assert txn.init_producer(1, 1000, lambda: None, PID, 5).error is ErrorCode.producer_fenced
    assert txn.init_producer(1, 1000, lambda: None, PID + 1, 0).error is ErrorCode.producer_fenced
    written(txn, txn.init_producer(1, 1000, lambda: None, PID, 0))
    assert txn.producer_epoch == 1
    assert txn.init_producer(2, 1000, lambda: None, PID, 0) == (ErrorCode.none, None)  # a retry


def test_timeout_only_for_ongoing_transactions_past_their_timeout():
    txn = ongoing(now=100)
    assert not txn.has_timed_out(100 + 60_000)
    assert txn.has_timed_out(100 + 60_001)
    assert not initialized().has_timed_out(10**9)


def test_idle_transactional_ids_expire_as_dead():
    txn = initialized(now=0)
    assert txn.expire(999, 1000) is None
    decision = txn.expire(1000, 1000)
    assert decision.target.state is TxnState.DEAD
    assert ongoing().expire(10**9, 1000) is None


def test_restore_gives_back_the_written_state():
    txn = ongoing(now=3)
    again = TransactionMetadata.restore("t", txn.value())
    assert again.value() == txn.value()
