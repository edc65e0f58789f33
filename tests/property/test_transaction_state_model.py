"""The transaction state machine against its invariants: any interleaving of InitProducerId,
AddPartitions, EndTxn (from the current producer or a stale one), marker completion, timeouts,
expiry and writes that succeed or fail keeps one pending transition at most, partitions only
while a transaction is open or ending, epochs that never go back for a producer id, and an
aborted or committed transaction never reopened by a fenced producer."""

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from coordinator.transaction_log import TxnState
from coordinator.transaction_state import TransactionMetadata
from protocol.errors import ErrorCode
from storage.topic_partition import TopicPartition

PARTITIONS = [TopicPartition("t", i) for i in range(3)]
TIMEOUT_MS = 100


class TransactionModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0
        self.next_id = 1
        self.txn = TransactionMetadata.new("tx", self._new_id(), TIMEOUT_MS, 0)
        self.highest_epoch: dict[int, int] = {}

    def _new_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def _finish(self, decision, succeed: bool) -> None:
        if decision is None or decision.target is None:
            return
        if succeed:
            self.txn.complete(decision.target)
        else:
            self.txn.abandon()

    @rule(succeed=st.booleans())
    def init_producer(self, succeed):
        self._finish(self.txn.init_producer(self.now, TIMEOUT_MS, self._new_id), succeed)

    @rule(partitions=st.sets(st.sampled_from(PARTITIONS), min_size=1), stale=st.booleans(), succeed=st.booleans())
    def add_partitions(self, partitions, stale, succeed):
        epoch = self.txn.producer_epoch - (1 if stale else 0)
        decision = self.txn.add_partitions(self.now, self.txn.producer_id, epoch, partitions)
        if stale:
            assert decision.target is None and decision.error is not ErrorCode.none
        self._finish(decision, succeed)

    @rule(commit=st.booleans(), stale=st.booleans(), succeed=st.booleans())
    def end(self, commit, stale, succeed):
        epoch = self.txn.producer_epoch - (1 if stale else 0)
        decision = self.txn.end_transaction(self.now, self.txn.producer_id, epoch, commit)
        if stale:
            assert decision.target is None
        self._finish(decision, succeed)

    @rule(succeed=st.booleans())
    def markers_written(self, succeed):
        if self.txn.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT) and self.txn.pending is None:
            self._finish(self.txn.complete_transaction(self.now), succeed)

    @rule(ms=st.integers(0, 3 * TIMEOUT_MS), succeed=st.booleans())
    def time_passes(self, ms, succeed):
        self.now += ms
        if self.txn.has_timed_out(self.now):
            self._finish(self.txn.fence(self.now), succeed)

    @rule()
    def expire(self):
        decision = self.txn.expire(self.now, 10 * TIMEOUT_MS)
        if decision is not None:
            self.txn.abandon()  # the write of the tombstone is not modelled past this point

    @invariant()
    def partitions_only_in_a_transaction(self):
        if self.txn.state not in (TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            assert not self.txn.partitions
        else:
            assert self.txn.partitions

    @invariant()
    def epochs_never_go_back(self):
        txn = self.txn
        if txn.pending is None:
            assert txn.producer_epoch >= self.highest_epoch.get(txn.producer_id, -1)
            self.highest_epoch[txn.producer_id] = txn.producer_epoch

    @invariant()
    def fence_is_never_left_behind(self):
        assert self.txn.state is not TxnState.PREPARE_EPOCH_FENCE or self.txn.pending is not None


TestTransactionModel = TransactionModel.TestCase
TestTransactionModel.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
