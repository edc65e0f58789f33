"""The partitions this broker holds, and the operations requests make on them (Kafka's
ReplicaManager): appends, reads, offset lookups, waiting for new data (long-poll fetches) and
for records to commit (acks=all produces, offset commits), and the leader and follower roles the
controller hands out.

Errors come out as KafkaError with the code the client receives, decided as Kafka's
getPartitionOrException and Partition.getLocalLog do: KAFKA_STORAGE_ERROR for a partition whose
log dir has failed (an I/O error on the way takes that dir offline); for one this broker does not
host, NOT_LEADER_OR_FOLLOWER when the metadata cache knows it (this broker is not, not yet or no
longer a replica: the client refreshes its metadata and goes to the leader) and
UNKNOWN_TOPIC_OR_PARTITION when it does not; then a request's leader epoch other than the
replica's (FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH), and NOT_LEADER_OR_FOLLOWER for an append
or consumer read on a replica that does not lead.

Standalone, every partition is led here at epoch 0 with this broker as the whole ISR
(`add_partition`). In cluster mode the controller's LeaderAndIsr makes partitions leaders or
followers (`become_leader_or_follower`), followers fetch through the replica fetcher manager
(replication.fetcher), leaders learn follower progress from their fetches
(`record_follower_fetch`), and a periodic check shrinks ISRs of followers that fell behind.
Leadership listeners hear of every partition this broker starts or stops leading (the group
coordinator loads and unloads __consumer_offsets partitions with them).

Reading from the nearest replica (KIP-392): with replica.selector.class the leader picks the
replica a consumer in a rack should read (`preferred_read_replica`, from the metadata cache's
racks); a follower serves consumers while it is in the ISR (`check_follower_read`) up to the HW
its leader last sent (`follow_high_watermark`, which wakes their long polls).

Tiered logs (broker.remote_log sets the hooks): a follower below its leader's local log start
gets its state from the remote store (`remote_log_aux_state`) and restarts there
(`start_from_remote`); deletion listeners hear of every replica StopReplica deletes, and whether
it was led here (the leader deletes a deleted topic's remote data).

Waiting: `watch_appends` calls back (a long-poll Fetch, Kafka's DelayedFetch) on a later turn of
the loop once any partition it watches gets records, a new high watermark or a new leader, or
its time is up (saying which);
`watch_commits` (an acks=all Produce, Kafka's DelayedProduce) calls back on a later turn once
each of its appends has an outcome: committed (the HW passed its records), the replica no
longer leads, or the ISR under min.insync.replicas; those still waiting at its timeout answer
REQUEST_TIMED_OUT. `wait_for_commit` awaits one append's commit the same way (coordinators,
transaction markers). `wait_for_low_watermark` (a DeleteRecords, Kafka's DelayedDeleteRecords)
returns once every replica on a live broker has its log start at an offset: followers raise
theirs to the leader's as they fetch (`follow_log_start`) and report it in their next fetch.

State is owned by the event loop.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import Final

from protocol.errors import ErrorCode, KafkaError
from replication.fetcher import FetcherSettings, ReplicaFetcherManager
from replication.partition import Partition
from replication.partition_state import NO_LEADER, IsrWriter, LeaderEndpoint, PartitionState
from replication.replica_selector import RackAwareReplicaSelector, ReplicaView
from storage.errors import KafkaStorageError
from storage.log import AppendResult, Log
from storage.log_config import LogConfig
from storage.log_manager import LogManager
from storage.records_file import FileRegion
from storage.remote.manager import RemoteLogAuxState
from storage.topic_partition import TopicPartition

from broker.metadata_cache import MetadataCache
from broker.timeouts import Timeout, Timeouts

log: Final = logging.getLogger(__name__)
# Bound once: compiled code looks a module's attribute up at every use, an enum member too.
_get_running_loop: Final = asyncio.get_running_loop
_NO_ERROR: Final = ErrorCode.none
# TopicPartition(...) runs the NamedTuple's interpreted __new__; tuple.__new__ builds the same
# tuple from C.
_new_tuple: Final = tuple.__new__

LeadershipCallback = Callable[[TopicPartition, int], None]
# A tiered follower's state from the remote store: (partition, the leader's local log start).
RemoteAuxStateSource = Callable[[TopicPartition, int], Awaitable[RemoteLogAuxState]]
_BECOME_LEADER, _RESIGN = 0, 1  # positions in a leadership listener


@dataclass(frozen=True)
class ReplicationSettings:
    replica_lag_time_max_ms: int = 10_000
    commit_timeout_ms: int = 5_000  # how long append_committed waits (offsets.commit.timeout.ms)
    fetcher: FetcherSettings = FetcherSettings()
    replica_selector: RackAwareReplicaSelector | None = None  # replica.selector.class


class AppendWatch:
    """A watch on partitions' appends (`ReplicaManager.watch_appends`), ended by its callback's
    scheduling or by `ReplicaManager.stop_watching`."""

    __slots__ = ("partitions", "callback", "timeout")

    def __init__(self, partitions: list[TopicPartition], callback: Callable[[bool], None]) -> None:
        self.partitions = partitions
        self.callback = callback
        self.timeout: Timeout | None = None


class CommitWatch:
    """A wait for appends to commit (`ReplicaManager.watch_commits`), ended by its callback's
    scheduling or by `ReplicaManager.stop_watching_commits`. `outcomes` holds each append's
    answer once it is known (None until then), in the order the appends were given."""

    __slots__ = ("partitions", "required_offsets", "min_insync", "outcomes", "waiting", "callback", "timeout")

    def __init__(
        self, appends: list[tuple[TopicPartition, int]], min_insync: list[int], callback: Callable[[list[ErrorCode]], None]
    ) -> None:
        self.partitions = [tp for tp, _ in appends]
        self.required_offsets = [last_offset + 1 for _, last_offset in appends]
        self.min_insync = min_insync
        self.outcomes: list[ErrorCode | None] = [None] * len(appends)
        self.waiting = len(appends)
        self.callback = callback
        self.timeout: Timeout | None = None


class ReplicaManager:
    def __init__(
        self,
        log_manager: LogManager,
        broker_id: int = 0,
        settings: ReplicationSettings = ReplicationSettings(),
        metadata_cache: MetadataCache | None = None,
    ) -> None:
        """`metadata_cache` tells the partitions that exist in the cluster from those that do
        not; without one, every partition not hosted here is unknown."""
        self.log_manager = log_manager
        self.metadata_cache = metadata_cache
        self.broker_id = broker_id
        self.settings = settings
        self.partitions: dict[TopicPartition, Partition] = {}
        # The TopicPartitions of `partitions` by topic and index: a request's partition is looked
        # up with the tuple its replica holds. Building one with tuple.__new__ from compiled code,
        # and freeing it, costs about as much as the rest of an idle partition's read.
        self._topic_partitions: dict[str, dict[int, TopicPartition]] = {}
        self.controller_epoch = 0
        self.isr_writer: IsrWriter | None = None
        self.fetchers = ReplicaFetcherManager(self, broker_id, settings.fetcher)
        # per partition, the fetches watching it: the one watch, or a set of two or more. Most
        # partitions are watched by one follower's long poll at a time; a set for each of a
        # session's thousands of partitions, built at every wait and then freed, was about a
        # tenth of an idle replication round's instructions (request_cost --api idle-round
        # --fetch-wait-ms 20).
        self._append_waiters: dict[TopicPartition, AppendWatch | set[AppendWatch]] = {}
        # per partition, the commit watches waiting on it and the position of its append in each
        self._commit_waiters: dict[TopicPartition, list[tuple[CommitWatch, int]]] = {}
        # per partition, the DeleteRecords waits: (the offset the low watermark must reach, the
        # future of the low watermark then)
        self._low_watermark_waiters: dict[TopicPartition, list[tuple[int, asyncio.Future[int]]]] = {}
        self._leadership_listeners: list[tuple[LeadershipCallback, LeadershipCallback]] = []
        # Tiered storage (broker.remote_log): where followers below their leader's local log
        # start find their state, and who hears of the partitions a StopReplica deleted
        # (partition, whether it was led here).
        self.remote_aux_state_source: RemoteAuxStateSource | None = None
        self.deletion_listeners: list[Callable[[TopicPartition, bool], None]] = []
        self._isr_check: asyncio.Task | None = None
        # Bound once: compiled code makes a new bound method at every `self._time_up`, and
        # every long poll and delayed produce hands its timer one.
        self._time_up_callback: Callable[[AppendWatch], None] = self._time_up
        self._commits_timed_out_callback: Callable[[CommitWatch], None] = self._commits_timed_out
        # The watches' timeouts, one loop timer for all (made on the loop, at the first watch).
        self._timeouts: Timeouts | None = None
        # Whether a log dir failed, read natively by every partition lookup (LogManager's flag
        # is a generic lookup).
        self._log_dir_failed = log_manager.has_offline_dirs
        # ISR changes stored by this broker as leader, since start (Kafka's IsrShrinksPerSec
        # and IsrExpandsPerSec counts, read by broker.metrics)
        self.isr_shrinks = 0
        self.isr_expands = 0
        log_manager.add_swap_listener(self._on_log_moved)
        log_manager.add_offline_listener(self._on_log_dir_failure)

    # ------------------------------------------------------------------------ life cycle

    def start(self) -> None:
        """Start the periodic ISR check (every half replica.lag.time.max.ms, as Kafka does)."""
        self._isr_check = asyncio.ensure_future(self._check_isr_periodically())

    async def shutdown(self) -> None:
        if self._isr_check is not None:
            self._isr_check.cancel()
            await asyncio.gather(self._isr_check, return_exceptions=True)
        await self.fetchers.shutdown()
        self.wake_all()
        if self._timeouts is not None:
            self._timeouts.close()

    async def _check_isr_periodically(self) -> None:
        interval_s = self.settings.replica_lag_time_max_ms / 2000
        while True:
            await asyncio.sleep(interval_s)
            self.shrink_isrs()

    def shrink_isrs(self) -> None:
        for partition in list(self.partitions.values()):
            partition.maybe_shrink_isr(self.settings.replica_lag_time_max_ms)

    # -------------------------------------------------------------- the controller's API

    def set_isr_writer(self, writer: IsrWriter) -> None:
        self.isr_writer = writer
        for partition in self.partitions.values():
            partition.isr_writer = writer

    def add_leadership_listener(self, on_become_leader: LeadershipCallback, on_resign: LeadershipCallback) -> None:
        """`on_become_leader(tp, leader_epoch)` when this broker starts leading a partition
        through LeaderAndIsr, `on_resign(tp, leader_epoch)` when it stops (follows, or stops
        the replica); called on the loop, after the change. A leadership is told once: a new
        leader epoch of a partition led here already (the controller shrank its ISR) is none,
        as in Kafka, where onElection hears only of new leaders. A coordinator loads its
        partition's state when told, and must not load it again over the state it serves."""
        self._leadership_listeners.append((on_become_leader, on_resign))

    def become_leader_or_follower(
        self,
        controller_epoch: int,
        states: list[PartitionState],
        leaders: dict[int, LeaderEndpoint],
        broker_id: int,
    ) -> dict[TopicPartition, ErrorCode]:
        """Act on a LeaderAndIsr request: per partition, lead or follow at the given epoch.

        A request of an older controller epoch than one already acted on gets
        STALE_CONTROLLER_EPOCH for every partition. A state older than the partition's leader
        epoch is ignored (FENCED_LEADER_EPOCH); one of the same epoch refreshes ISR, replicas and
        zk version (a controller-side ISR change, or a resend after isr_stale) and changes the
        role only if it differs. Logs are created as needed (not for an existing partition
        while a log dir is offline: KAFKA_STORAGE_ERROR); a partition in a failed log dir
        answers KAFKA_STORAGE_ERROR, which tells the controller its replica here is offline. Followers whose leader or epoch
        changed restart fetching (truncating by epoch first) from `leaders[leader]`; a leader
        missing there leaves the follower idle until the next request."""
        if broker_id != self.broker_id:
            log.warning("LeaderAndIsr for broker %d reached broker %d", broker_id, self.broker_id)
        if controller_epoch < self.controller_epoch:
            return {state.topic_partition: ErrorCode.stale_controller_epoch for state in states}
        self.controller_epoch = controller_epoch
        errors: dict[TopicPartition, ErrorCode] = {}
        new_leaders: list[Partition] = []
        resigned: list[tuple[TopicPartition, int]] = []
        new_followers: dict[TopicPartition, tuple[LeaderEndpoint, int]] = {}
        stopped_following: list[TopicPartition] = []
        for state in states:
            tp = state.topic_partition
            if self.log_manager.is_offline(tp):  # its log dir failed (Kafka's HostedPartition.Offline)
                errors[tp] = ErrorCode.kafka_storage_error
                continue
            try:
                partition = self._partition_for_state(state)
            except KafkaError as exc:
                errors[tp] = exc.error_code
                continue
            if partition.leader_epoch > state.leader_epoch:
                log.info("%s: ignoring leader epoch %d, older than %d", tp, state.leader_epoch, partition.leader_epoch)
                errors[tp] = ErrorCode.fenced_leader_epoch
                continue
            errors[tp] = _NO_ERROR
            was_leader, old_epoch = partition.is_leader, partition.leader_epoch
            if state.leader == self.broker_id:
                if partition.make_leader(state):
                    stopped_following.append(tp)
                    if not was_leader:  # Kafka's isNewLeader: a new epoch of a leadership held is none
                        new_leaders.append(partition)
            elif partition.make_follower(state) or tp not in self.fetchers.partitions:
                if was_leader:
                    resigned.append((tp, old_epoch))
                stopped_following.append(tp)
                endpoint = leaders.get(state.leader)
                if endpoint is not None and state.leader != NO_LEADER:
                    new_followers[tp] = (endpoint, state.leader_epoch)
        self.fetchers.remove_partitions(stopped_following)
        self.fetchers.add_partitions(new_followers)
        for tp in errors:
            self._on_partition_change(tp)
        for tp, epoch in resigned:
            self._notify(_RESIGN, tp, epoch)
        for partition in new_leaders:
            self._notify(_BECOME_LEADER, partition.topic_partition, partition.leader_epoch)
        return errors

    def stop_replicas(self, partitions: list[TopicPartition], delete: bool) -> dict[TopicPartition, ErrorCode]:
        """Act on StopReplica: stop fetching and leading each partition; with `delete`, remove
        it and its log as well."""
        self.fetchers.remove_partitions(partitions)
        errors = {}
        for tp in partitions:
            partition = self.partitions.get(tp)
            if partition is not None and partition.is_leader:
                self._notify(_RESIGN, tp, partition.leader_epoch)
            if delete:
                self.remove_partition(tp)
                for listener in self.deletion_listeners:
                    listener(tp, partition is not None and partition.is_leader)
            elif partition is not None:
                partition.make_follower(partition.stopped_state())
                self._on_partition_change(tp)
            errors[tp] = _NO_ERROR
        return errors

    def resign_leaderships(self, reason: str) -> None:
        """Stop leading every partition led here (as StopReplica without delete), until a
        LeaderAndIsr makes this broker a leader again."""
        led = [tp for tp, partition in self.partitions.items() if partition.is_leader]
        if led:
            log.warning("no longer leading %d partition(s): %s", len(led), reason)
            self.stop_replicas(led, delete=False)

    def _partition_for_state(self, state: PartitionState) -> Partition:
        tp = state.topic_partition
        partition = self.partitions.get(tp)
        if partition is not None:
            return partition
        partition = self._create_partition(tp, self.log_manager.config_for(tp.topic), state.is_new)
        if partition is None:
            raise KafkaError(f"{tp} is offline: its log directory failed", ErrorCode.kafka_storage_error)
        return partition

    def _notify(self, which: int, tp: TopicPartition, epoch: int) -> None:
        """Call listeners' callback `which`: _BECOME_LEADER or _RESIGN."""
        for listener in self._leadership_listeners:
            try:
                listener[which](tp, epoch)
            except Exception:
                log.exception("a leadership listener failed for %s", tp)

    # ------------------------------------------------------------------------ partitions

    def add_partition(self, tp: TopicPartition, config: LogConfig, is_new: bool = True) -> Partition | None:
        """Serve `tp` standalone (led here at epoch 0, this broker the whole ISR), creating its
        log if it has none. An existing partition (`is_new` false) whose log is missing while a
        log dir is offline is not created: its log may be in that dir, and an empty one
        elsewhere would restart its offsets and hide its records (Kafka's isNew, KIP-112). It
        stays offline instead, and None is returned."""
        partition = self.partitions.get(tp)
        if partition is None:
            partition = self._create_partition(tp, config, is_new)
            if partition is not None:
                partition.make_leader(Partition.standalone_state(tp, self.broker_id))
        return partition

    def _create_partition(self, tp: TopicPartition, config: LogConfig, is_new: bool) -> Partition | None:
        log_ = self.log_manager.get(tp)
        if log_ is None and not is_new and self.log_manager.has_offline_dirs:
            self.log_manager.mark_unplaced(tp)
            return None
        log_ = log_ or self.log_manager.create(tp, config)
        partition = self.partitions[tp] = Partition(tp, log_, self.broker_id)
        self._topic_partitions.setdefault(tp.topic, {})[tp.partition] = tp
        partition.isr_writer = self.isr_writer
        partition.on_change = lambda changed: self._on_partition_change(changed.topic_partition)
        partition.on_isr_change = self._count_isr_change
        return partition

    def waiting_requests(self) -> tuple[int, int]:
        """(fetches waiting for data, produces waiting for followers): Kafka's
        NumDelayedOperations of the Fetch and Produce purgatories."""
        fetches = {watch for watching in self._append_waiters.values() for watch in _each(watching)}
        produces = {watch for waiting in self._commit_waiters.values() for watch, _ in waiting}
        return len(fetches), len(produces)

    def watched_partitions(self) -> tuple[int, int]:
        """The same requests counted once per partition each waits on: Kafka's PurgatorySize,
        which counts a delayed operation in the watch list of every key it watches."""
        fetches = sum(len(_each(watching)) for watching in self._append_waiters.values())
        produces = sum(len(waiting) for waiting in self._commit_waiters.values())
        return fetches, produces

    def _count_isr_change(self, before: int, after: int) -> None:
        if after < before:
            self.isr_shrinks += 1
        elif after > before:
            self.isr_expands += 1

    def _on_log_dir_failure(self, path: str) -> None:
        """A log dir failed (Kafka's handleLogDirFailure): its partitions stay here as offline
        (answering KAFKA_STORAGE_ERROR, to the controller's LeaderAndIsr too), stop fetching,
        and those led here tell the leadership listeners they no longer are."""
        self._log_dir_failed = True
        offline = [tp for tp in self.partitions if self.log_manager.is_offline(tp)]
        if not offline:
            return
        log.warning("stopped serving %d partition(s) in the failed log directory %s", len(offline), path)
        self.fetchers.remove_partitions(offline)
        for tp in offline:
            partition = self.partitions[tp]
            if partition.is_leader:
                self._notify(_RESIGN, tp, partition.leader_epoch)
            self._on_partition_change(tp)

    def _on_log_moved(self, tp: TopicPartition, moved: Log) -> None:
        """A replica moved to another log dir (AlterReplicaLogDirs): its new log serves now."""
        partition = self.partitions.get(tp)
        if partition is not None:
            partition.log = moved

    def remove_partition(self, tp: TopicPartition) -> None:
        self.fetchers.remove_partitions([tp])
        self.partitions.pop(tp, None)
        hosted = self._topic_partitions.get(tp.topic)
        if hosted is not None:
            hosted.pop(tp.partition, None)
            if not hosted:
                del self._topic_partitions[tp.topic]
        self.log_manager.delete(tp)
        self._on_partition_change(tp)

    def topic_partition(self, topic: str, index: int) -> TopicPartition:
        """`topic`'s partition `index` as a TopicPartition: the one its replica here holds, or
        a new one for a partition not hosted here (whose lookup then fails)."""
        hosted = self._topic_partitions.get(topic)
        if hosted is not None:
            tp = hosted.get(index)
            if tp is not None:
                return tp
        return _new_tuple(TopicPartition, (topic, index))

    def get_partition(self, tp: TopicPartition) -> Partition:
        """This broker's replica of `tp`. Raises KAFKA_STORAGE_ERROR for a partition whose log
        dir failed; for one not hosted here NOT_LEADER_OR_FOLLOWER if the metadata cache knows
        it or has not been filled by a controller yet, UNKNOWN_TOPIC_OR_PARTITION otherwise
        (Kafka's getPartitionOrException, which answers UNKNOWN before the first UpdateMetadata)."""
        if self._log_dir_failed and self.log_manager.is_offline(tp):
            raise KafkaError(f"{tp} is offline: its log directory failed", ErrorCode.kafka_storage_error)
        partition = self.partitions.get(tp)
        if partition is not None:
            return partition
        # A broker no controller has told anything yet (just started) cannot know the partition
        # does not exist: clients retry NOT_LEADER_OR_FOLLOWER, and take UNKNOWN_TOPIC_OR_PARTITION
        # for an answer.
        cache = self.metadata_cache
        if cache is not None and (cache.partition(tp) is not None or not cache.filled):
            raise KafkaError(f"this broker is not a replica of {tp}", ErrorCode.not_leader_or_follower)
        raise KafkaError(f"this broker does not know {tp}", ErrorCode.unknown_topic_or_partition)

    def leader_partition(self, tp: TopicPartition) -> Partition:
        partition = self.get_partition(tp)
        partition.check_leader()
        return partition

    def partition_at_epoch(self, tp: TopicPartition, current_leader_epoch: int, leader_only: bool = True) -> Partition:
        """The replica a request naming the leader epoch it expects reads (Fetch, ListOffsets,
        OffsetForLeaderEpoch): the epoch is checked before leadership, as Kafka's
        Partition.getLocalLog does, so a client or follower behind or ahead of this replica
        learns that (FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH) rather than only
        NOT_LEADER_OR_FOLLOWER. `leader_only` false serves any replica (the debugging replica
        id)."""
        partition = self.get_partition(tp)
        partition.check_leader_epoch(current_leader_epoch)
        if leader_only:
            partition.check_leader()
        return partition

    def update_log_config(self, tp: TopicPartition, config: LogConfig) -> None:
        """A topic's config changed: its log here takes it at once. A lower
        min.insync.replicas may commit what the ISR holds, and the HW moves now rather than
        at the next append or follower's progress (the only other moments it is computed)."""
        log_ = self.log_manager.get(tp)
        if log_ is None:
            return
        log_.update_config(config)
        partition = self.partitions.get(tp)
        if partition is not None and partition.log is log_ and partition.maybe_increment_high_watermark():
            self._on_partition_change(tp)

    def leads(self, tp: TopicPartition) -> bool:
        partition = self.partitions.get(tp)
        return partition is not None and partition.is_leader

    # ------------------------------------------------------------------------- appending

    def append(
        self, tp: TopicPartition, records: memoryview, required_acks: int = 1, from_coordinator: bool = False
    ) -> AppendResult:
        """Append as the leader. acks=-1 is refused with NOT_ENOUGH_REPLICAS when the ISR is
        smaller than the topic's min.insync.replicas. Coordinators' batches skip producer
        sequence checks."""
        partition = self.get_partition(tp)
        # min.insync.replicas matters to acks=-1 only: not looked up for the others.
        min_insync = partition.min_insync_replicas if required_acks == -1 else 1
        try:
            result = partition.append_as_leader(records, required_acks, min_insync, from_coordinator)
        except OSError as exc:
            raise self.log_manager.handle_io_error(tp, exc) from exc
        if self._append_waiters:
            self._wake(tp)
        return result

    def append_marker(
        self, tp: TopicPartition, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool
    ) -> AppendResult:
        """Write a transaction marker as the partition's leader."""
        partition = self.get_partition(tp)
        try:
            result = partition.append_marker(producer_id, producer_epoch, coordinator_epoch, commit)
        except OSError as exc:
            raise self.log_manager.handle_io_error(tp, exc) from exc
        self._wake(tp)
        return result

    def aborted_transactions(self, partition: Partition, fetch_offset: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of the aborted transactions a read_committed fetch from
        `fetch_offset` spans (up to the last stable offset)."""
        aborted = partition.log.collect_aborted(fetch_offset, partition.last_stable_offset)
        return [(entry.producer_id, entry.first_offset) for entry in aborted]

    async def append_committed(self, tp: TopicPartition, records: memoryview) -> AppendResult:
        """Append `records` as the leader (acks=-1), before the first suspension, and return
        once they are committed (the HW passed them): what the group coordinator waits for
        before it answers. Raises REQUEST_TIMED_OUT after the commit timeout, and the errors of
        `wait_for_commit`. Coordinators' batches skip producer sequence checks."""
        result = self.append(tp, records, required_acks=-1, from_coordinator=True)
        await self.wait_for_flush(tp, result)
        await self.wait_for_commit(tp, result.last_offset, self.settings.commit_timeout_ms / 1000)
        return result

    async def wait_for_flush(self, tp: TopicPartition, result: AppendResult) -> None:
        """Return once the fsync that the append of `result` asked for (flush.messages reached)
        is done, as Kafka fsyncs in the append itself. Raises KAFKA_STORAGE_ERROR when it failed
        (the log dir is then offline)."""
        flush = result.flush
        if flush is None:
            return
        try:
            # Shielded: a cancelled coordinator write must not cancel an fsync that other
            # appends wait for too (the appends of one fsync's time share one: Log.flush).
            await asyncio.shield(flush)
        except OSError as exc:
            raise KafkaStorageError(f"{tp}: cannot fsync the appended records: {exc}") from exc

    async def wait_for_commit(self, tp: TopicPartition, last_offset: int, timeout_s: float) -> None:
        """Return once the HW passes `last_offset` (a delayed produce of one append). Raises
        NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR is then smaller than min.insync.replicas,
        NOT_LEADER_OR_FOLLOWER when the replica stops leading, REQUEST_TIMED_OUT at the
        timeout."""
        known: asyncio.Future[list[ErrorCode]] = _get_running_loop().create_future()

        def settled(outcomes: list[ErrorCode]) -> None:
            if not known.done():  # cancelled after its outcome was known, before the callback
                known.set_result(outcomes)

        watch = self.watch_commits([(tp, last_offset)], timeout_s, settled)
        try:
            outcome = (await known)[0]
        except asyncio.CancelledError:
            self.stop_watching_commits(watch)
            raise
        if outcome is ErrorCode.request_timed_out:
            raise KafkaError(f"{tp}: records up to {last_offset} not replicated within {timeout_s * 1000:.0f} ms", outcome)
        if outcome is not _NO_ERROR:
            raise KafkaError(f"{tp}: {outcome.name}", outcome)

    def watch_commits(
        self, appends: list[tuple[TopicPartition, int]], timeout_s: float, callback: Callable[[list[ErrorCode]], None]
    ) -> CommitWatch:
        """Call `callback(outcomes)` once, on a later turn of the loop, when each of `appends`
        (a partition and the last offset appended to it) has its outcome, as `commit_status`
        tells it; those still waiting `timeout_s` from now answer REQUEST_TIMED_OUT. Nothing is
        called after `stop_watching_commits`."""
        watch = CommitWatch(appends, [self._min_insync(tp) for tp, _ in appends], callback)
        waiters = self._commit_waiters
        for index, tp in enumerate(watch.partitions):
            waiting = waiters.get(tp)
            if waiting is None:
                waiters[tp] = [(watch, index)]
            else:
                waiting.append((watch, index))
        watch.timeout = self._watch_timeouts().add(timeout_s, self._commits_timed_out_callback, watch)
        for tp in set(watch.partitions):
            self._complete_commits(tp)
        return watch

    def stop_watching_commits(self, watch: CommitWatch) -> None:
        """End `watch` without its callback (once called back, it has ended already)."""
        if watch.timeout is not None:
            self._watch_timeouts().cancel(watch.timeout)
            watch.timeout = None
        waiters = self._commit_waiters
        for tp in set(watch.partitions):
            waiting = waiters.get(tp)
            if waiting is not None:
                left = [entry for entry in waiting if entry[0] is not watch]
                if left:
                    waiters[tp] = left
                else:
                    del waiters[tp]

    def _commits_timed_out(self, watch: CommitWatch) -> None:
        watch.timeout = None
        self._end_commit_watch(watch, ErrorCode.request_timed_out)

    def _end_commit_watch(self, watch: CommitWatch, for_waiting: ErrorCode) -> None:
        """Call `watch` back now, its appends still waiting answering `for_waiting`."""
        self.stop_watching_commits(watch)
        watch.callback([for_waiting if outcome is None else outcome for outcome in watch.outcomes])

    def commit_status(self, tp: TopicPartition, last_offset: int) -> ErrorCode | None:
        """What a delayed produce of records up to `last_offset` would answer now; None while
        it must wait."""
        return _commit_outcome(self.partitions.get(tp), last_offset + 1, self._min_insync(tp))

    def _min_insync(self, tp: TopicPartition) -> int:
        partition = self.partitions.get(tp)
        return partition.min_insync_replicas if partition is not None else 1

    def _complete_commits(self, tp: TopicPartition) -> None:
        """Give the watches waiting on `tp` the outcomes now known; those with all of theirs
        are called back on the next turn (the change that settled them is done by then)."""
        waiting = self._commit_waiters.get(tp)
        if not waiting:
            return
        partition = self.partitions.get(tp)
        remaining = []
        for watch, index in waiting:
            outcome = _commit_outcome(partition, watch.required_offsets[index], watch.min_insync[index])
            if outcome is None:
                remaining.append((watch, index))
                continue
            watch.outcomes[index] = outcome
            watch.waiting -= 1
            if watch.waiting == 0:
                if watch.timeout is not None:
                    self._watch_timeouts().cancel(watch.timeout)
                    watch.timeout = None
                self._watch_timeouts().loop.call_soon(watch.callback, _known(watch.outcomes))
        if remaining:
            self._commit_waiters[tp] = remaining
        else:
            del self._commit_waiters[tp]

    def delete_records_before(self, tp: TopicPartition, offset: int) -> int:
        """Raise the partition's log start offset (DeleteRecords); returns the new one."""
        return self._raise_log_start(self.leader_partition(tp), offset)

    def _raise_log_start(self, partition: Partition, offset: int) -> int:
        """The log's start raised to `offset` (at most its HW); its new start. An I/O error
        takes the log dir offline."""
        try:
            return partition.log.delete_records_before(offset)
        except OSError as exc:
            raise self.log_manager.handle_io_error(partition.topic_partition, exc) from exc

    def low_watermark(self, partition: Partition) -> int:
        """The lowest log start offset among the leader and the followers on live brokers
        (Kafka's lowWatermarkIfLeader): records below it are gone from every replica that could
        lead next. A follower that has not fetched since this broker took the lead counts as
        -1 (unknown); one on a broker the metadata cache does not know alive is left out."""
        low = partition.log.log_start_offset
        live = self.metadata_cache.brokers if self.metadata_cache is not None else {}
        for replica, follower in partition.followers.items():
            if follower.log_start_offset < low and replica in live:
                low = follower.log_start_offset
        return low

    async def wait_for_low_watermark(self, tp: TopicPartition, offset: int, timeout_s: float) -> int:
        """Return the partition's low watermark once it reaches `offset` (a delayed
        DeleteRecords, Kafka's DelayedDeleteRecords): followers raise their log start to the
        leader's when they fetch, and report it, once in their checkpoint, in the next fetch.
        Raises NOT_LEADER_OR_FOLLOWER when the replica stops leading, REQUEST_TIMED_OUT at the
        timeout."""
        waiter: asyncio.Future[int] = _get_running_loop().create_future()
        self._low_watermark_waiters.setdefault(tp, []).append((offset, waiter))
        self._complete_low_watermark_waits(tp)
        try:
            return await asyncio.wait_for(waiter, timeout_s)
        except TimeoutError:
            raise KafkaError(
                f"{tp}: the replicas' log start offsets did not reach {offset} within {timeout_s * 1000:.0f} ms",
                ErrorCode.request_timed_out,
            ) from None
        finally:
            self._forget_low_watermark_wait(tp, waiter)

    def check_low_watermarks(self) -> None:
        """Complete the DeleteRecords waits the live brokers now allow (after UpdateMetadata:
        a dead follower no longer holds the low watermark back)."""
        for tp in list(self._low_watermark_waiters):
            self._complete_low_watermark_waits(tp)

    def _complete_low_watermark_waits(self, tp: TopicPartition) -> None:
        waiting = self._low_watermark_waiters.get(tp)
        if not waiting:
            return
        partition = self.partitions.get(tp)
        if partition is None or not partition.is_leader:
            error = KafkaError(f"{tp}: no longer led here", ErrorCode.not_leader_or_follower)
            for _offset, waiter in waiting:
                if not waiter.done():
                    waiter.set_exception(error)
            return
        low = self.low_watermark(partition)
        for offset, waiter in waiting:
            if low >= offset and not waiter.done():
                waiter.set_result(low)

    def _forget_low_watermark_wait(self, tp: TopicPartition, waiter: asyncio.Future) -> None:
        waiting = self._low_watermark_waiters.get(tp, [])
        left = [entry for entry in waiting if entry[1] is not waiter]
        if left:
            self._low_watermark_waiters[tp] = left
        else:
            self._low_watermark_waiters.pop(tp, None)

    # -------------------------------------------------------------------------- following

    def append_as_follower(self, partition: Partition, records: memoryview, leader_high_watermark: int) -> None:
        """Append records fetched from the leader and take its HW (capped at our log end)."""
        tp = partition.topic_partition
        try:
            partition.log.append_as_follower(records)
        except OSError as exc:
            raise self.log_manager.handle_io_error(tp, exc) from exc
        self.follow_high_watermark(partition, leader_high_watermark)

    def follow_high_watermark(self, partition: Partition, leader_high_watermark: int) -> None:
        """Take the leader's HW (capped at our log end); consumers reading this follower
        (KIP-392) and waiting for it to move are woken."""
        high_watermark = min(leader_high_watermark, partition.log.log_end_offset)
        if high_watermark != partition.log.high_watermark:
            partition.log.high_watermark = high_watermark
            self._wake(partition.topic_partition)

    def follow_log_start(self, partition: Partition, leader_log_start_offset: int) -> bool:
        """Raise our log start offset to the leader's (DeleteRecords, retention), up to our HW;
        whether it moved. The caller writes the checkpoint before the next fetch reports it."""
        log_ = partition.log
        start = min(leader_log_start_offset, log_.high_watermark)
        if start <= log_.log_start_offset:
            return False
        self._raise_log_start(partition, start)
        return True

    def truncate(self, partition: Partition, offset: int) -> None:
        tp = partition.topic_partition
        try:
            if self.log_manager.truncate_to(tp, offset):
                log.info("%s: truncated to %d", tp, partition.log.log_end_offset)
        except OSError as exc:
            raise self.log_manager.handle_io_error(tp, exc) from exc

    def truncate_fully_and_start_at(self, partition: Partition, offset: int) -> None:
        tp = partition.topic_partition
        try:
            self.log_manager.truncate_fully_and_start_at(tp, offset)
        except OSError as exc:
            raise self.log_manager.handle_io_error(tp, exc) from exc
        log.info("%s: emptied, restarting at %d", tp, offset)

    async def remote_log_aux_state(self, partition: Partition, leader_local_log_start_offset: int) -> RemoteLogAuxState:
        """A tiered follower's state from the remote store; KafkaError when it cannot be had
        (OFFSET_MOVED_TO_TIERED_STORAGE, not retried, without tiered storage here)."""
        if self.remote_aux_state_source is None:
            raise KafkaError(
                f"{partition.topic_partition}: the leader's log starts in the remote store, and tiered storage is off here",
                ErrorCode.offset_moved_to_tiered_storage,
            )
        return await self.remote_aux_state_source(partition.topic_partition, leader_local_log_start_offset)

    def start_from_remote(self, partition: Partition, state: RemoteLogAuxState, leader_log_start_offset: int) -> None:
        """Restart a tiered follower's log at `state.next_offset` with the remote segment's
        state (Kafka's buildRemoteLogAuxState): only the leader's local tail is fetched then."""
        tp = partition.topic_partition
        try:
            self.log_manager.truncate_fully_and_start_at(tp, state.next_offset)
            partition.log.take_remote_aux_state(leader_log_start_offset, state.leader_epochs, state.producer_snapshot)
        except OSError as exc:
            raise self.log_manager.handle_io_error(tp, exc) from exc
        log.info(
            "%s: restarted at %d from the remote store (log start %d)", tp, state.next_offset, partition.log.log_start_offset
        )

    def record_follower_fetch(
        self,
        partition: Partition,
        replica_id: int,
        fetch_offset: int,
        log_start_offset: int = -1,
        fetch_time_ms: int | None = None,
    ) -> None:
        """A follower fetched from `fetch_offset` at `fetch_time_ms` (the partition's clock by
        default): its log end offset, which may move the HW (waking delayed produces and
        consumer long polls) or start an ISR expansion."""
        if partition.update_follower_fetch(replica_id, fetch_offset, fetch_time_ms, log_start_offset):
            self._on_partition_change(partition.topic_partition)
        elif self._low_watermark_waiters and partition.topic_partition in self._low_watermark_waiters:
            self._complete_low_watermark_waits(partition.topic_partition)

    # --------------------------------------------------------------------------- reading

    def preferred_read_replica(
        self, partition: Partition, client_rack: str, fetch_offset: int, listener: str | None
    ) -> int | None:
        """The follower a consumer in `client_rack` should read `partition` from, or None for
        this broker, its leader (Kafka's findPreferredReadReplica with replica.selector.class).
        A replica is a candidate when it is in the ISR, its log holds `fetch_offset`, and the
        consumer can reach it on its listener (which gives its rack)."""
        selector = self.settings.replica_selector
        cache = self.metadata_cache
        if selector is None or cache is None or not partition.is_leader:
            return None
        leader = ReplicaView(self.broker_id, _rack(cache, self.broker_id, listener), partition.log.log_end_offset, 0)
        replicas = [leader]
        for broker_id, log_end_offset, since_caught_up_ms in partition.read_replicas_holding(fetch_offset):
            rack = _rack(cache, broker_id, listener)
            if rack is not None:
                replicas.append(ReplicaView(broker_id, rack, log_end_offset, since_caught_up_ms))
        selected = selector.select(client_rack, replicas, leader)
        return None if selected is leader else selected.broker_id

    def check_follower_read(self, partition: Partition) -> None:
        """A consumer may read a follower (KIP-392) while it is in the ISR; out of it (the
        controller's latest word: the metadata cache, else LeaderAndIsr's) the consumer gets
        NOT_LEADER_OR_FOLLOWER and goes back to the leader."""
        info = self.metadata_cache.partition(partition.topic_partition) if self.metadata_cache else None
        isr = info.isr if info is not None and info.leader_epoch >= partition.leader_epoch else partition.isr
        if self.broker_id not in isr:
            raise KafkaError(
                f"this broker is a follower of {partition.topic_partition} outside its ISR "
                f"(leader: {partition.leader_id})",
                ErrorCode.not_leader_or_follower,
            )

    def read(
        self,
        partition: Partition,
        offset: int,
        max_bytes: int,
        min_one_batch: bool,
        read_committed: bool,
        for_follower: bool = False,
    ) -> FileRegion | None:
        """Records from `offset`: below the high watermark for consumers (below the last
        stable offset for read_committed ones), below the log end for followers. A follower's
        replica serves consumers up to the high watermark its leader last told it."""
        if for_follower:
            max_offset = partition.log.log_end_offset
        else:
            max_offset = partition.last_stable_offset if read_committed else partition.high_watermark
        try:
            return partition.log.read(offset, max_bytes, max_offset, min_one_batch)
        except OSError as exc:
            raise self.log_manager.handle_io_error(partition.topic_partition, exc) from exc

    def watch_appends(
        self, partitions: list[TopicPartition], timeout_s: float, callback: Callable[[bool], None]
    ) -> AppendWatch:
        """Call `callback` once: `callback(True)` on a later turn of the loop when any of
        `partitions` changes (new records, a new HW, leadership, its log dir offline), or
        `callback(False)` `timeout_s` from now; unless `stop_watching` comes first. It watches
        from this call on: a long-poll Fetch that read too little misses no append."""
        watch = AppendWatch(partitions, callback)
        waiters = self._append_waiters
        for tp in partitions:
            watching = waiters.setdefault(tp, watch)
            if watching is not watch:
                if isinstance(watching, AppendWatch):
                    waiters[tp] = {watching, watch}
                else:
                    watching.add(watch)
        watch.timeout = self._watch_timeouts().add(timeout_s, self._time_up_callback, watch)
        return watch

    def stop_watching(self, watch: AppendWatch) -> None:
        """End `watch` without its callback (once called back, it has ended already)."""
        if watch.timeout is not None:
            self._watch_timeouts().cancel(watch.timeout)
            watch.timeout = None
        waiters = self._append_waiters
        for tp in watch.partitions:
            watching = waiters.pop(tp, None)
            if watching is None or watching is watch:
                continue
            if isinstance(watching, AppendWatch):  # another fetch's
                waiters[tp] = watching
            else:
                watching.discard(watch)
                if watching:
                    waiters[tp] = watching

    def _watch_timeouts(self) -> Timeouts:
        timeouts = self._timeouts
        if timeouts is None:
            timeouts = self._timeouts = Timeouts(_get_running_loop())
        return timeouts

    def _time_up(self, watch: AppendWatch) -> None:
        watch.timeout = None
        self.stop_watching(watch)
        watch.callback(False)

    def wake_all(self) -> None:
        """Release every waiting fetch, delayed produce and DeleteRecords (shutdown)."""
        for tp in list(self._append_waiters):
            self._wake(tp)
        watches = {watch for waiting in self._commit_waiters.values() for watch, _ in waiting}
        for watch in watches:
            self._end_commit_watch(watch, ErrorCode.not_leader_or_follower)
        shutting_down = KafkaError("the broker is shutting down", ErrorCode.not_leader_or_follower)
        for waiting in self._low_watermark_waiters.values():
            for _offset, waiter in waiting:
                if not waiter.done():
                    waiter.set_exception(shutting_down)

    def _on_partition_change(self, tp: TopicPartition) -> None:
        self._wake(tp)
        self._complete_commits(tp)
        self._complete_low_watermark_waits(tp)

    def _wake(self, tp: TopicPartition) -> None:
        """The watches of `tp` end, and their callbacks run on the next turn: the change that
        woke them (an append, most often) is done by then."""
        watching = self._append_waiters.pop(tp, None)
        if watching is None:
            return
        # The watches' loop, the running one: Python 3.11's get_running_loop asks the kernel for
        # the process id at every call.
        loop = self._watch_timeouts().loop
        for watch in _each(watching):
            self.stop_watching(watch)
            loop.call_soon(watch.callback, True)


def _each(watching: AppendWatch | set[AppendWatch]) -> Collection[AppendWatch]:
    """The watches of a partition, as `ReplicaManager._append_waiters` holds them."""
    return (watching,) if isinstance(watching, AppendWatch) else watching


def _known(outcomes: list[ErrorCode | None]) -> list[ErrorCode]:
    """The outcomes of a watch whose appends all have one."""
    return [outcome for outcome in outcomes if outcome is not None]


def _commit_outcome(partition: Partition | None, required_offset: int, min_insync: int) -> ErrorCode | None:
    """What a delayed produce waiting for the HW to reach `required_offset` answers now; None
    while it must wait (Kafka's checkEnoughReplicasReachOffset)."""
    if partition is None or not partition.is_leader:
        return ErrorCode.not_leader_or_follower
    if partition.high_watermark < required_offset:
        return None
    if len(partition.isr) < min_insync:
        return ErrorCode.not_enough_replicas_after_append
    return _NO_ERROR


def _rack(cache: MetadataCache, broker_id: int, listener: str | None) -> str | None:
    if cache.endpoint(broker_id, listener) is None:
        return None
    return cache.brokers[broker_id].rack
