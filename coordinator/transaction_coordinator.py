"""The transaction coordinator: the transactional ids of the __transaction_state partitions this
broker leads (standalone: all of them), and their records in that topic.

Each transactional id belongs to one partition, chosen as Kafka chooses it
(coordinator.internal_topic). __transaction_state is created on first use (FindCoordinator
TRANSACTION or InitProducerId with a transactional id) with transaction.state.log.num.partitions
partitions, compacted, segments of transaction.state.log.segment.bytes.

Each transactional id is a coordinator.transaction_state.TransactionMetadata, which decides; this
module writes what it decides through ReplicaManager.append_committed and answers once written.
Ending a transaction (EndTxn, a fenced or timed-out transaction aborted) writes PrepareCommit /
PrepareAbort, answers the client, then has a COMMIT / ABORT marker written to every partition of
the transaction (`MarkerWriter`: locally when this broker leads the partition; a remote leader
is sent WriteTxnMarkers) and finally writes CompleteCommit / CompleteAbort. Markers that fail are
retried (the writer finds each partition's leader again) until written or until this broker no
longer coordinates the id (its new coordinator writes them under a newer epoch); a partition
that no longer exists, or that says the marker is stale (INVALID_PRODUCER_EPOCH,
TRANSACTION_COORDINATOR_FENCED), is skipped, as Kafka does.

Timers: every transaction.abort.timed.out.transaction.cleanup.interval.ms, Ongoing transactions
older than their timeout are aborted under a bumped epoch (their producer is fenced); every
transaction.remove.expired.transaction.cleanup.interval.ms, transactional ids idle for
transactional.id.expiration.ms are removed (a tombstone).

Loading: as the group coordinator (coordinator.internal_topic), following the leadership of the
__transaction_state partitions in cluster mode (`on_become_leader` / `on_resign`, ReplicaManager
leadership listeners; resigning forgets the partition's transactional ids, whose clients then get
NOT_COORDINATOR and look for the new coordinator); a loaded transaction in PrepareCommit /
PrepareAbort has its markers written again (markers are idempotent), an Ongoing one is left to
its timeout or its producer.
"""

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from protocol.errors import ErrorCode, ProtocolError
from protocol.records import iter_records
from storage.log_slice import LogSlice
from storage.topic_partition import TopicPartition

from coordinator import transaction_log
from coordinator.internal_topic import (
    BrokerSettings,
    CoordinatorReplicas,
    CoordinatorTopics,
    InternalTopic,
    append_entries,
    coordinator_store_error,
)
from coordinator.transaction_log import TransactionLogValue, TxnState
from coordinator.transaction_state import Decision, TransactionMetadata

log = logging.getLogger(__name__)

TRANSACTION_STATE_TOPIC = "__transaction_state"
_MARKER_RETRY_S = 0.1
# Markers not retried: the partition is gone, or the partition says this coordinator (or this
# producer epoch) is stale, and another coordinator has taken over (Kafka gives up on these too).
_NOT_RETRIED = (
    ErrorCode.unknown_topic_or_partition,
    ErrorCode.invalid_topic_exception,
    ErrorCode.invalid_producer_epoch,
    ErrorCode.transaction_coordinator_fenced,
)


class Marker(NamedTuple):
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool


class MarkerWriter(Protocol):
    async def write_markers(
        self, marker: Marker, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, ErrorCode]:
        """Write the marker to each partition's leader; the error of each partition."""


class ProducerIdSource(Protocol):
    async def generate(self) -> int:
        """A producer id never handed out before, on any broker."""


@dataclass(frozen=True)
class TransactionDescription:
    transactional_id: str
    state: TxnState
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_ms: int
    partitions: frozenset[TopicPartition]


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)


def read_transaction_partition(log_slice: LogSlice, buffer_bytes: int) -> dict[str, TransactionLogValue]:
    """Replay a slice of a __transaction_state partition's log: the last state of each
    transactional id. Blocking: runs in a worker thread. A record that does not decode is logged
    and skipped."""
    found: dict[str, TransactionLogValue] = {}
    for _, batch in log_slice.batches(buffer_bytes):
        for record in iter_records(batch):
            try:
                transactional_id = transaction_log.decode_key(record.key)
                if record.value is None:
                    found.pop(transactional_id, None)
                else:
                    found[transactional_id] = transaction_log.decode_value(record.value)
            except (ProtocolError, ValueError) as exc:
                log.warning("%s: skipping record at offset %d: %s", log_slice.topic_partition, record.offset, exc)
    return found


class TransactionCoordinator:
    def __init__(
        self,
        config: BrokerSettings,
        topics: CoordinatorTopics,
        replica_manager: CoordinatorReplicas,
        markers: MarkerWriter,
        producer_ids: ProducerIdSource,
        clock: Callable[[], int] = _wall_clock_ms,
    ) -> None:
        self.clock = clock
        self._config = config
        self._replica_manager = replica_manager
        self._markers = markers
        self._producer_ids = producer_ids
        self.state_topic = InternalTopic(
            TRANSACTION_STATE_TOPIC,
            topics,
            replica_manager,
            config.get("transaction.state.log.num.partitions"),
            config.get("transaction.state.log.replication.factor"),
            {
                "cleanup.policy": "compact",
                "segment.bytes": str(config.get("transaction.state.log.segment.bytes")),
                "min.insync.replicas": str(config.get("transaction.state.log.min.isr")),
                "compression.type": "uncompressed",
                "unclean.leader.election.enable": "false",
            },
            config.get("transaction.state.log.load.buffer.size"),
            read_transaction_partition,
            self._install,
        )
        self._txns: dict[str, TransactionMetadata] = {}
        self._background: set[asyncio.Task] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.active = False

    # ------------------------------------------------------------------------- life cycle

    def start(self) -> None:
        """Serve transactions: load __transaction_state if it exists, start the timers."""
        self._loop = asyncio.get_running_loop()
        self.active = True
        self.state_topic.start()
        self._every("transaction.abort.timed.out.transaction.cleanup.interval.ms", self.abort_timed_out_transactions)
        self._every("transaction.remove.expired.transaction.cleanup.interval.ms", self.remove_expired_transactional_ids)

    async def shutdown(self) -> None:
        """Stop serving; markers under way are called off (a restart writes them again)."""
        self.active = False
        loads = self.state_topic.stop()
        for task in self._background:
            task.cancel()
        await asyncio.gather(*loads, *self._background, return_exceptions=True)

    def _spawn(self, coroutine: Awaitable) -> asyncio.Task:
        task = self._loop.create_task(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    def _every(self, interval_config: str, action: Callable[[], Awaitable[None]]) -> None:
        interval_s = self._config.get(interval_config) / 1000

        async def repeat() -> None:
            while True:
                await asyncio.sleep(interval_s)
                await action()

        self._spawn(repeat())

    # ------------------------------------------------------------------- leadership moves

    def on_become_leader(self, tp: TopicPartition, leader_epoch: int) -> None:
        """This broker now leads `tp`: for a __transaction_state partition, load its ids."""
        if self.active:
            self.state_topic.on_become_leader(tp)

    def on_resign(self, tp: TopicPartition, leader_epoch: int) -> None:
        """This broker no longer leads `tp`: forget the transactional ids of that partition."""
        if not self.state_topic.on_resign(tp):
            return
        for transactional_id in [t for t in self._txns if self.state_topic.partition_for(t) == tp.partition]:
            del self._txns[transactional_id]

    # ---------------------------------------------------------------------------- loading

    def _install(self, partition: int, found: dict[str, TransactionLogValue]) -> None:
        for transactional_id, value in found.items():
            if value.state is TxnState.DEAD:
                continue
            txn = self._txns[transactional_id] = TransactionMetadata.restore(transactional_id, value)
            if value.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                self._spawn(self._complete(txn))
        log.info("%s-%d: %d transactional id(s)", TRANSACTION_STATE_TOPIC, partition, len(found))

    # ------------------------------------------------------------------- request checks

    async def find_coordinator(self, transactional_id: str) -> ErrorCode:
        """Whether transactional ids can be coordinated (the topic is ready): which broker
        coordinates this one is its partition's leader."""
        if not transactional_id:
            return ErrorCode.invalid_request
        if not self.active or not await self.state_topic.ensure():
            return ErrorCode.coordinator_not_available
        return ErrorCode.none

    async def check(self, transactional_id: str) -> ErrorCode:
        """Whether this broker coordinates the transactional id now."""
        if not transactional_id:
            return ErrorCode.invalid_request
        if not self.active or not await self.state_topic.ensure() or not self.active:
            return ErrorCode.coordinator_not_available
        return self.state_topic.state_of(transactional_id)

    async def _known(self, transactional_id: str) -> tuple[ErrorCode, TransactionMetadata | None]:
        """The id's metadata, or why there is none to use (INVALID_PRODUCER_ID_MAPPING for an id
        never initialized)."""
        error = await self.check(transactional_id)
        if error is not ErrorCode.none:
            return error, None
        txn = self._txns.get(transactional_id)
        return (ErrorCode.none, txn) if txn is not None else (ErrorCode.invalid_producer_id_mapping, None)

    def _coordinator_epoch(self, transactional_id: str) -> int:
        tp = TopicPartition(TRANSACTION_STATE_TOPIC, self.state_topic.partition_for(transactional_id))
        return self._replica_manager.get_partition(tp).leader_epoch

    # ------------------------------------------------------------------------- the APIs

    async def init_producer_id(
        self, transactional_id: str, timeout_ms: int, expected_producer_id: int, expected_epoch: int
    ) -> tuple[ErrorCode, int, int]:
        """InitProducerId with a transactional id: (error, producer id, epoch)."""
        if not 0 < timeout_ms <= self._config.get("transaction.max.timeout.ms"):
            return ErrorCode.invalid_transaction_timeout, -1, -1
        error = await self.check(transactional_id)
        if error is not ErrorCode.none:
            return error, -1, -1
        txn = self._txns.get(transactional_id)
        if txn is None:
            producer_id = await self._producer_ids.generate()
            # Another request may have made it meanwhile.
            txn = self._txns.setdefault(
                transactional_id, TransactionMetadata.new(transactional_id, producer_id, timeout_ms, self.clock())
            )
        fresh_id = None
        if txn.needs_new_producer_id:
            fresh_id = await self._producer_ids.generate()
        decision = txn.init_producer(self.clock(), timeout_ms, lambda: fresh_id, expected_producer_id, expected_epoch)
        if decision.target is None:
            if decision.error is ErrorCode.none:
                return ErrorCode.none, txn.producer_id, txn.producer_epoch
            return decision.error, -1, -1
        if decision.target.state is TxnState.PREPARE_ABORT:  # fenced an open transaction
            await self._end(txn, decision)
            return ErrorCode.concurrent_transactions, -1, -1
        error = await self._store(txn, decision.target)
        if error is not ErrorCode.none:
            return error, -1, -1
        return ErrorCode.none, txn.producer_id, txn.producer_epoch

    async def add_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Iterable[TopicPartition]
    ) -> ErrorCode:
        """AddPartitionsToTxn, and AddOffsetsToTxn with the group's offsets partition."""
        error, txn = await self._known(transactional_id)
        if txn is None:
            return error
        decision = txn.add_partitions(self.clock(), producer_id, producer_epoch, partitions)
        if decision.target is None:
            return decision.error
        return await self._store(txn, decision.target)

    async def end_transaction(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> ErrorCode:
        error, txn = await self._known(transactional_id)
        if txn is None:
            return error
        decision = txn.end_transaction(self.clock(), producer_id, producer_epoch, commit)
        if decision.target is None:
            return decision.error
        return await self._end(txn, decision)

    def describe(self, transactional_id: str) -> TransactionDescription | None:
        txn = self._txns.get(transactional_id)
        if txn is None:
            return None
        return TransactionDescription(
            transactional_id,
            txn.state,
            txn.producer_id,
            txn.producer_epoch,
            txn.timeout_ms,
            txn.start_ms,
            frozenset(txn.partitions),
        )

    def list_transactions(self) -> tuple[ErrorCode, list[TransactionDescription]]:
        if not self.active:
            return ErrorCode.coordinator_not_available, []
        error = ErrorCode.coordinator_load_in_progress if self.state_topic.loading else ErrorCode.none
        return error, [self.describe(transactional_id) for transactional_id in list(self._txns)]

    # -------------------------------------------------------------------------- timers

    async def abort_timed_out_transactions(self) -> None:
        now = self.clock()
        for txn in list(self._txns.values()):
            if txn.has_timed_out(now):
                log.info("aborting the transaction of %s: it timed out", txn.transactional_id)
                await self._end(txn, txn.fence(now))

    async def remove_expired_transactional_ids(self) -> None:
        now = self.clock()
        expiration_ms = self._config.get("transactional.id.expiration.ms")
        for txn in list(self._txns.values()):
            decision = txn.expire(now, expiration_ms)
            if decision is not None and await self._write(txn, decision.target) is ErrorCode.none:
                self._txns.pop(txn.transactional_id, None)

    # ---------------------------------------------------------------------- writing

    # A request's task is cancelled when its connection closes (broker.network). A transition
    # it started must still end, written and installed or abandoned: left pending, it would hold
    # the transactional id in CONCURRENT_TRANSACTIONS for good (no timeout aborts it either). So
    # the write and what follows it run as tasks of their own, which the request only awaits.

    async def _store(self, txn: TransactionMetadata, target: TransactionLogValue) -> ErrorCode:
        """Write the pending target; install it once written, drop it if the write failed."""
        return await asyncio.shield(self._spawn(self._write(txn, target)))

    async def _end(self, txn: TransactionMetadata, decision: Decision) -> ErrorCode:
        """Write Prepare*, then in the background the markers and Complete*."""
        return await asyncio.shield(self._spawn(self._prepare_end(txn, decision)))

    async def _write(self, txn: TransactionMetadata, target: TransactionLogValue) -> ErrorCode:
        key = transaction_log.encode_key(txn.transactional_id)
        value = None if target.state is TxnState.DEAD else transaction_log.encode_value(target)
        tp = TopicPartition(TRANSACTION_STATE_TOPIC, self.state_topic.partition_for(txn.transactional_id))
        error = await append_entries(self._replica_manager, tp, [(key, value)], self.clock())
        if error is ErrorCode.none:
            txn.complete(target)
        else:
            txn.abandon()
        return coordinator_store_error(error)

    async def _prepare_end(self, txn: TransactionMetadata, decision: Decision) -> ErrorCode:
        error = await self._write(txn, decision.target)
        if error is ErrorCode.none:
            self._spawn(self._complete(txn))
        return error

    async def _complete(self, txn: TransactionMetadata) -> None:
        marker = Marker(
            txn.producer_id,
            txn.producer_epoch,
            self._coordinator_epoch(txn.transactional_id),
            txn.state is TxnState.PREPARE_COMMIT,
        )
        remaining = sorted(txn.partitions)
        last_errors: dict[TopicPartition, ErrorCode] = {}  # logged once until the error changes
        while remaining and self._coordinates(txn):
            results = await self._markers.write_markers(marker, remaining)
            for tp, error in results.items():
                if error in _NOT_RETRIED:
                    log.warning("%s: no marker for %s (%s)", txn.transactional_id, tp, error.name)
                elif error is not ErrorCode.none and last_errors.get(tp) is not error:
                    log.info("%s: marker for %s failed (%s); retrying", txn.transactional_id, tp, error.name)
                last_errors[tp] = error
            done = (ErrorCode.none, *_NOT_RETRIED)
            remaining = [tp for tp in remaining if results.get(tp, ErrorCode.unknown_server_error) not in done]
            if remaining:
                await asyncio.sleep(_MARKER_RETRY_S)
        last_error = ErrorCode.none
        while not remaining and self._coordinates(txn):
            error = await self._write(txn, txn.complete_transaction(self.clock()).target)
            if error is ErrorCode.none:
                return
            if error is not last_error:
                log.info("%s: writing the transaction's completion failed (%s); retrying", txn.transactional_id, error.name)
                last_error = error
            await asyncio.sleep(_MARKER_RETRY_S)
        log.info("%s: no longer coordinated here; its new coordinator ends the transaction", txn.transactional_id)

    def _coordinates(self, txn: TransactionMetadata) -> bool:
        """Whether this broker still coordinates `txn` under the epoch its markers carry: resigning
        the __transaction_state partition forgets its ids, a new leadership loads new ones."""
        return self._txns.get(txn.transactional_id) is txn
