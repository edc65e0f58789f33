"""One transactional id's state at its coordinator (Kafka's TransactionMetadata), as plain code:
no asyncio, time passed in.

Every change goes through the log: a request is checked against the current state, and when it
changes something the target state is prepared (`pending`) and returned for the coordinator to
write to __transaction_state; `complete` installs it once written, `abandon` drops it when the
write failed. While a write is pending every other request gets CONCURRENT_TRANSACTIONS.

States and moves (Kafka's):

    Empty ---------AddPartitions--------> Ongoing
    Ongoing -------EndTxn(commit)-------> PrepareCommit --markers written--> CompleteCommit
    Ongoing -------EndTxn(abort), timeout, fencing --> PrepareAbort --markers--> CompleteAbort
    Complete*, Empty --AddPartitions----> Ongoing
    Complete*, Empty --InitProducerId---> Empty (epoch bumped; a new producer id when the epoch
                                          is exhausted)
    Empty, Complete* --transactional.id.expiration.ms idle--> Dead (a tombstone)
    Ongoing --InitProducerId, timeout--> PrepareEpochFence (in memory: epoch bumped) --> PrepareAbort

Invariants: `partitions` is empty outside Ongoing and Prepare*; a producer's epoch only grows
(per producer id); at most one transition is pending.
"""

import dataclasses
from collections.abc import Callable, Iterable
from typing import NamedTuple

from protocol.errors import ErrorCode
from storage.topic_partition import TopicPartition

from coordinator.transaction_log import TransactionLogValue, TxnState

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
# Kafka keeps the last value of an int16 free, so a bumped epoch still fits (isEpochExhausted).
_LAST_USABLE_EPOCH = 2**15 - 2

_COMPLETE = (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
_PREPARED = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
_IDLE = (TxnState.EMPTY, *_COMPLETE)


class Decision(NamedTuple):
    """A request's outcome: an error, or a state to write (None: nothing to write)."""

    error: ErrorCode
    target: TransactionLogValue | None = None


_NOTHING_TO_DO = Decision(ErrorCode.none)


class TransactionMetadata:
    def __init__(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        timeout_ms: int,
        state: TxnState,
        partitions: Iterable[TopicPartition] = (),
        start_ms: int = -1,
        last_update_ms: int = -1,
        last_producer_epoch: int = NO_PRODUCER_EPOCH,
    ) -> None:
        self.transactional_id = transactional_id
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.last_producer_epoch = last_producer_epoch
        self.timeout_ms = timeout_ms
        self.state = state
        self.partitions = set(partitions)
        self.start_ms = start_ms
        self.last_update_ms = last_update_ms
        self.pending: TransactionLogValue | None = None
        # The last producer epoch before a fence in progress (the epoch before it is the last
        # epoch during it), for abandon() to put back: a fence whose write fails leaves no trace.
        self._last_epoch_before_fence = NO_PRODUCER_EPOCH

    @classmethod
    def new(cls, transactional_id: str, producer_id: int, timeout_ms: int, now: int) -> "TransactionMetadata":
        """A transactional id seen for the first time; InitProducerId moves it to epoch 0."""
        return cls(transactional_id, producer_id, NO_PRODUCER_EPOCH, timeout_ms, TxnState.EMPTY, last_update_ms=now)

    @classmethod
    def restore(cls, transactional_id: str, value: TransactionLogValue) -> "TransactionMetadata":
        return cls(
            transactional_id,
            value.producer_id,
            value.producer_epoch,
            value.timeout_ms,
            value.state,
            value.partitions,
            value.start_ms,
            value.last_update_ms,
        )

    def value(self) -> TransactionLogValue:
        return TransactionLogValue(
            self.producer_id,
            self.producer_epoch,
            self.timeout_ms,
            self.state,
            frozenset(self.partitions),
            self.last_update_ms,
            self.start_ms,
        )

    # --------------------------------------------------------------------------- writing

    def _prepare(self, now: int, **changes) -> Decision:
        self.pending = dataclasses.replace(self.value(), last_update_ms=now, **changes)
        return Decision(ErrorCode.none, self.pending)

    def complete(self, target: TransactionLogValue) -> None:
        """The pending `target` is in the log: make it the state."""
        if target is not self.pending:
            raise RuntimeError(f"{self.transactional_id}: completing a transition that is not pending")
        if target.producer_id != self.producer_id:
            self.last_producer_epoch = NO_PRODUCER_EPOCH
        elif target.producer_epoch != self.producer_epoch:
            self.last_producer_epoch = self.producer_epoch
        self.producer_id = target.producer_id
        self.producer_epoch = target.producer_epoch
        self.timeout_ms = target.timeout_ms
        self.state = target.state
        self.partitions = set(target.partitions)
        self.start_ms = target.start_ms
        self.last_update_ms = target.last_update_ms
        self.pending = None

    def abandon(self) -> None:
        """The pending write failed: the state stays as it was."""
        self.pending = None
        if self.state is TxnState.PREPARE_EPOCH_FENCE:
            # The fence was only in memory; the abort it led to did not happen. The last epoch
            # goes back too: left at the current one, the producer's own bump from it would
            # pass for a retry of a bump that never happened, and get the same epoch back.
            self.state = TxnState.ONGOING
            self.producer_epoch = self.last_producer_epoch
            self.last_producer_epoch = self._last_epoch_before_fence

    # -------------------------------------------------------------------------- requests

    def _check_producer(self, producer_id: int, producer_epoch: int) -> ErrorCode:
        if producer_id != self.producer_id:
            return ErrorCode.invalid_producer_id_mapping
        if producer_epoch != self.producer_epoch:
            return ErrorCode.producer_fenced
        if self.pending is not None:
            return ErrorCode.concurrent_transactions
        return ErrorCode.none

    def init_producer(
        self,
        now: int,
        timeout_ms: int,
        new_producer_id: Callable[[], int],
        expected_producer_id: int = NO_PRODUCER_ID,
        expected_epoch: int = NO_PRODUCER_EPOCH,
    ) -> Decision:
        """InitProducerId: a new epoch for this transactional id (Empty, epoch bumped). An open
        transaction is fenced and aborted first: the client gets CONCURRENT_TRANSACTIONS and
        retries. With an expected producer id and epoch (v3+), only that producer may ask; a retry
        of the bump that made the current epoch writes nothing (the caller answers the current
        producer id and epoch)."""
        if self.pending is not None or self.state in _PREPARED or self.state is TxnState.PREPARE_EPOCH_FENCE:
            return Decision(ErrorCode.concurrent_transactions)
        if expected_producer_id != NO_PRODUCER_ID:
            if expected_producer_id != self.producer_id:
                return Decision(ErrorCode.producer_fenced)
            if expected_epoch == self.last_producer_epoch and self.state in _IDLE:
                return _NOTHING_TO_DO  # a retry of the bump that made the current epoch
            if expected_epoch != self.producer_epoch:
                return Decision(ErrorCode.producer_fenced)
        if self.state is TxnState.ONGOING:
            return self.fence(now)
        if self.state is TxnState.DEAD:
            return Decision(ErrorCode.concurrent_transactions)
        if self.needs_new_producer_id:
            producer_id, epoch = new_producer_id(), 0
        else:
            producer_id, epoch = self.producer_id, self.producer_epoch + 1
        return self._prepare(
            now,
            producer_id=producer_id,
            producer_epoch=epoch,
            timeout_ms=timeout_ms,
            state=TxnState.EMPTY,
            partitions=frozenset(),
            start_ms=-1,
        )

    @property
    def needs_new_producer_id(self) -> bool:
        """Whether the next epoch bump starts a new producer id (the epoch is exhausted)."""
        return self.producer_epoch >= _LAST_USABLE_EPOCH

    def fence(self, now: int) -> Decision:
        """Abort the open transaction under a bumped epoch, so its producer can no longer write
        (a newer producer's InitProducerId, or the transaction timing out)."""
        self._last_epoch_before_fence = self.last_producer_epoch
        self.last_producer_epoch = self.producer_epoch
        self.producer_epoch += 1
        self.state = TxnState.PREPARE_EPOCH_FENCE
        return Decision(ErrorCode.concurrent_transactions, self._prepare(now, state=TxnState.PREPARE_ABORT).target)

    def add_partitions(
        self, now: int, producer_id: int, producer_epoch: int, partitions: Iterable[TopicPartition]
    ) -> Decision:
        """AddPartitionsToTxn / AddOffsetsToTxn: the transaction begins, or grows."""
        error = self._check_producer(producer_id, producer_epoch)
        if error is not ErrorCode.none:
            return Decision(error)
        if self.state in _PREPARED:
            return Decision(ErrorCode.concurrent_transactions)
        if self.state not in (TxnState.ONGOING, *_IDLE):
            return Decision(ErrorCode.invalid_txn_state)
        added = set(partitions)
        if self.state is TxnState.ONGOING and added <= self.partitions:
            return _NOTHING_TO_DO
        start_ms = self.start_ms if self.state is TxnState.ONGOING else now
        return self._prepare(
            now, state=TxnState.ONGOING, partitions=frozenset(self.partitions | added), start_ms=start_ms
        )

    def end_transaction(self, now: int, producer_id: int, producer_epoch: int, commit: bool) -> Decision:
        """EndTxn from the client: Ongoing moves to PrepareCommit / PrepareAbort. A retry of an
        end already done or under way gets NONE or CONCURRENT_TRANSACTIONS; the other end
        INVALID_TXN_STATE."""
        if producer_id != self.producer_id:
            return Decision(ErrorCode.invalid_producer_id_mapping)
        # A retried EndTxn may come with the epoch before a coordinator-side bump (KIP-360 does
        # not apply here: Kafka fences it too).
        if producer_epoch != self.producer_epoch:
            return Decision(ErrorCode.producer_fenced)
        if self.pending is not None:
            return Decision(ErrorCode.concurrent_transactions)
        wanted_prepare = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        wanted_complete = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        if self.state is TxnState.ONGOING:
            return self._prepare(now, state=wanted_prepare)
        if self.state is wanted_complete:
            return _NOTHING_TO_DO
        if self.state is wanted_prepare:
            return Decision(ErrorCode.concurrent_transactions)
        return Decision(ErrorCode.invalid_txn_state)

    def complete_transaction(self, now: int) -> Decision:
        """Every marker of a Prepare* transaction is written: CompleteCommit / CompleteAbort."""
        if self.state not in _PREPARED or self.pending is not None:
            raise RuntimeError(f"{self.transactional_id}: no prepared transaction to complete ({self.state.name})")
        state = TxnState.COMPLETE_COMMIT if self.state is TxnState.PREPARE_COMMIT else TxnState.COMPLETE_ABORT
        return self._prepare(now, state=state, partitions=frozenset())

    # ---------------------------------------------------------------------------- timers

    def has_timed_out(self, now: int) -> bool:
        """An Ongoing transaction older than its timeout: the coordinator aborts it."""
        return self.state is TxnState.ONGOING and self.pending is None and now > self.start_ms + self.timeout_ms

    def expire(self, now: int, expiration_ms: int) -> Decision | None:
        """Dead (to be written as a tombstone) when idle longer than transactional.id.expiration.ms."""
        if self.state not in _IDLE or self.pending is not None or now - self.last_update_ms < expiration_ms:
            return None
        return self._prepare(now, state=TxnState.DEAD, partitions=frozenset())
