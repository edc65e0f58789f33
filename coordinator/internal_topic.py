"""A coordinator's internal topic (__consumer_offsets, __transaction_state): created on first use,
its partitions led by this broker loaded before their keys are served.

Each key belongs to one partition, chosen as Kafka chooses it (Java's String.hashCode of the key,
modulo the partition count), so a key's records stay in one place whoever leads it. The topic's
replication factor is capped by the live brokers when it is created, and its min.insync.replicas
(transaction.state.log.min.isr) by that factor. In cluster mode the topic is ready once its
partitions are in this broker's metadata cache: brokers that create it at once converge (the
losers take TOPIC_ALREADY_EXISTS as the topic made, as Kafka does, and wait for it like the
winner), and a topic that ZooKeeper has but the metadata not yet is waited for too, so that
FindCoordinator names a coordinator instead of answering COORDINATOR_NOT_AVAILABLE meanwhile.

Loading: a partition that exists when the broker starts (standalone), or (cluster mode) whose
leadership this broker takes (`on_become_leader`, called by the owner, a ReplicaManager leadership
listener), is replayed by the owner's `read` in a worker thread, from its log start to its log end
(a new leader's HW may lag records its predecessor had committed, and a restarted broker's
checkpointed HW may lag its log), and what that found is given to the owner's `install` on the
loop once the HW has reached that end; until then the partition's keys answer
COORDINATOR_LOAD_IN_PROGRESS. The wait is for records the predecessor appended but never saw
committed (its write failed, and its in-memory state went back): a leader change before they are
replicated takes them away again, so acting on them (a loaded PrepareCommit's markers) could leave
a transaction committed in some partitions and aborted in the others once a later leader, without
them, aborts it. Kafka loads to the log end and acts at once; the HW of a new leader reaches its
log end as soon as its in-sync followers fetch. The loop owns the partition's Log, so the thread
is given a LogSlice of that range, taken on the loop (storage.log_slice): it reads the segment
files through descriptors of its own and never touches the Log, which the loop may meanwhile
append to, clean, or close (a load called off by a resignation goes on in its thread until it
ends). A load that fails is logged and tried again. A new topic has nothing to load. Resigning (`on_resign`) forgets the partition (its keys answer
NOT_COORDINATOR) and calls off its load; the owner drops its keys.
"""

import asyncio
import enum
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar

from protocol.errors import ErrorCode, KafkaError
from protocol.records import Record, build_batch
from storage.log import Log
from storage.log_slice import LogSlice
from storage.topic_partition import TopicPartition

log = logging.getLogger(__name__)


# What the coordinators need of the broker, which gives them its own objects (BrokerConfig,
# TopicManager, ReplicaManager): coordinator/ sits below broker/ and names only these.


class BrokerSettings(Protocol):
    def get(self, name: str) -> Any:
        """The typed value of a broker config key (its default when unset)."""


class LeaderReplica(Protocol):
    """This broker's replica of a partition (replication.partition.Partition)."""

    @property
    def log(self) -> Log: ...

    @property
    def leader_epoch(self) -> int: ...


class CoordinatorReplicas(Protocol):
    def leads(self, tp: TopicPartition) -> bool: ...

    def get_partition(self, tp: TopicPartition) -> LeaderReplica:
        """This broker's replica of `tp`; raises KafkaError when it holds none."""

    async def append_committed(self, tp: TopicPartition, records: memoryview) -> object:
        """Append `records` as the leader and return once they are committed; raises
        KafkaError when they cannot be."""

    async def wait_for_commit(self, tp: TopicPartition, last_offset: int, timeout_s: float) -> None:
        """Return once the HW passes `last_offset`; raises KafkaError (REQUEST_TIMED_OUT after
        `timeout_s`, NOT_ENOUGH_REPLICAS_AFTER_APPEND when it passed with too small an ISR,
        NOT_LEADER_OR_FOLLOWER)."""


class TopicDescription(Protocol):
    @property
    def partitions(self) -> int: ...


class CoordinatorTopics(Protocol):
    @property
    def topics(self) -> Mapping[str, TopicDescription]: ...

    @property
    def is_local(self) -> bool:
        """Standalone: this broker holds every partition of every topic."""

    @property
    def live_broker_count(self) -> int: ...

    def check_new_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        assignments: Mapping[int, Sequence[int]],
        configs: Mapping[str, str],
        default_partitions: int,
        default_replication_factor: int,
    ) -> tuple[int, int]:
        """Raises KafkaError when the topic may not be created."""

    async def create(
        self, name: str, num_partitions: int, configs: Mapping[str, str], replication_factor: int = 1
    ) -> object: ...

    async def wait_for_topic(self, name: str) -> int:
        """The topic's partition count, once this broker's metadata has it."""

_INT32_MIN = -(2**31)
Contents = TypeVar("Contents")  # what replaying one partition finds
LOAD_RETRY_S = 5.0
_COMMIT_RETRY_S = 0.1


def java_string_hash(text: str) -> int:
    """Java's String.hashCode: 31 * h + c over UTF-16 code units, wrapping as an int32."""
    units = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h - 2**32 if h >= 2**31 else h


def partition_for(key: str, partition_count: int) -> int:
    """The partition of a group or transactional id, as Kafka computes it (Utils.abs maps
    Integer.MIN_VALUE, which has no positive counterpart, to 0)."""
    h = java_string_hash(key)
    return (0 if h == _INT32_MIN else abs(h)) % partition_count


Entry = tuple[bytes, bytes | None]  # a record's key and value (None: a tombstone)


async def append_entries(
    replica_manager: CoordinatorReplicas, tp: TopicPartition, entries: Sequence[Entry], now: int, **batch_fields
) -> ErrorCode:
    """Append the entries as one batch (`batch_fields`: producer fields of build_batch) and
    return NONE once they are committed, or the error of the append."""
    batch = build_batch([Record(i, now, key, value) for i, (key, value) in enumerate(entries)], **batch_fields)
    try:
        await replica_manager.append_committed(tp, memoryview(bytearray(batch)))
    except KafkaError as exc:
        log.warning("writing to %s failed: %s", tp, exc)
        return exc.error_code
    return ErrorCode.none


def coordinator_store_error(error: ErrorCode) -> ErrorCode:
    """What clients see when a coordinator could not store its records (Kafka's mapping)."""
    if error in (
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.not_enough_replicas,
        ErrorCode.not_enough_replicas_after_append,
        ErrorCode.request_timed_out,
    ):
        return ErrorCode.coordinator_not_available
    if error in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
        return ErrorCode.not_coordinator
    if error in (ErrorCode.message_too_large, ErrorCode.record_list_too_large, ErrorCode.invalid_fetch_size):
        return ErrorCode.unknown_server_error
    return error


class LoadState(enum.Enum):
    LOADING = enum.auto()
    LOADED = enum.auto()


class InternalTopic(Generic[Contents]):
    def __init__(
        self,
        name: str,
        topics: CoordinatorTopics,
        replica_manager: CoordinatorReplicas,
        partition_count: int,
        replication_factor: int,
        configs: Mapping[str, str],
        load_buffer_bytes: int,
        read: Callable[[LogSlice, int], Contents],
        install: Callable[[int, Contents], None],
    ) -> None:
        self.name = name
        self._topics = topics
        self._replica_manager = replica_manager
        self._load_buffer_bytes = load_buffer_bytes
        self._read = read
        self._install = install
        self._wanted_partitions = partition_count
        self._wanted_replication_factor = replication_factor
        self._configs = dict(configs)
        self.partition_count: int | None = None
        # Whether keys can be mapped to coordinators: the topic made or found, and (cluster
        # mode) in this broker's metadata. Leading one of its partitions sets the partition
        # count earlier: LeaderAndIsr comes before the UpdateMetadata naming the leaders.
        self._ready = False
        self.partitions: dict[int, LoadState] = {}  # the partitions this broker leads
        self._creating: asyncio.Task | None = None
        self._loads: dict[int, asyncio.Task] = {}

    def start(self) -> None:
        """Load the partitions of the topic if it exists: standalone, all of them; in cluster
        mode, those this broker already leads, and then leadership changes drive loading
        (on_become_leader). A broker restarting as a partition's leader handles the
        controller's LeaderAndIsr while it joins the cluster, before its coordinators start, and
        that leadership was told to no one listening."""
        info = self._topics.topics.get(self.name)
        if info is None:
            return
        if self._topics.is_local:
            self.take_over(info.partitions, is_new=False)
            return
        for partition in range(info.partitions):
            tp = TopicPartition(self.name, partition)
            if partition not in self.partitions and self._replica_manager.leads(tp):
                self.on_become_leader(tp)

    def stop(self) -> list[asyncio.Task]:
        """Call off loads under way; returns them to be awaited."""
        loads = list(self._loads.values())
        for task in loads:
            task.cancel()
        return loads

    def partition_for(self, key: str) -> int:
        return partition_for(key, self.partition_count)

    async def ensure(self) -> bool:
        """Whether the topic is ready, creating it on first use."""
        if self._ready:
            return True
        if self._creating is None:
            self._creating = asyncio.get_running_loop().create_task(self._create())
        return await asyncio.shield(self._creating)

    def state_of(self, key: str) -> ErrorCode:
        """Whether the key's partition is served: NONE, COORDINATOR_LOAD_IN_PROGRESS or
        NOT_COORDINATOR. Call once `ensure` is true."""
        state = self.partitions.get(self.partition_for(key))
        if state is None:
            return ErrorCode.not_coordinator
        if state is LoadState.LOADING:
            return ErrorCode.coordinator_load_in_progress
        return ErrorCode.none

    @property
    def loading(self) -> bool:
        return any(state is LoadState.LOADING for state in self.partitions.values())

    async def _create(self) -> bool:
        try:
            if self.name in self._topics.topics:  # made by another broker, or with CreateTopics
                self.take_over(await self._topics.wait_for_topic(self.name), is_new=False)
            elif not self._topics.is_local and self._topics.live_broker_count == 0:
                return False  # this broker has no metadata yet
            else:
                await self._create_topic()
        except KafkaError as exc:
            log.warning("cannot create %s: %s", self.name, exc)
            return False
        finally:
            self._creating = None
        return True

    async def _create_topic(self) -> None:
        """Create the topic and serve it. Brokers racing to create it converge, as in Kafka: the
        ones that lose (TOPIC_ALREADY_EXISTS) serve the winner's topic once it reaches their
        metadata, so their clients are told a coordinator rather than an error."""
        count = self._wanted_partitions
        replication_factor = min(self._wanted_replication_factor, self._topics.live_broker_count)
        configs = _capped_min_insync(self._configs, replication_factor)
        try:
            self._topics.check_new_topic(
                self.name,
                count,
                replication_factor,
                {},
                configs,
                default_partitions=count,
                default_replication_factor=replication_factor,
            )
            await self._topics.create(self.name, count, configs, replication_factor)
        except KafkaError as exc:
            if exc.error_code is not ErrorCode.topic_already_exists:
                raise
            log.info("%s was created by another broker meanwhile", self.name)
            self.take_over(await self._topics.wait_for_topic(self.name), is_new=False)
            return
        self.take_over(count, is_new=True)

    def take_over(self, partition_count: int, is_new: bool) -> None:
        """Serve the partitions this broker leads (standalone: all); a new topic has nothing to
        load. In cluster mode leadership changes drive it (on_become_leader)."""
        self.partition_count = partition_count
        self._ready = True
        if not self._topics.is_local:
            return
        for partition in range(partition_count):
            if not self._replica_manager.leads(TopicPartition(self.name, partition)):
                continue
            if is_new:
                self.partitions[partition] = LoadState.LOADED
            else:
                self._start_loading(partition)

    # ------------------------------------------------------------------- leadership moves

    def on_become_leader(self, tp: TopicPartition) -> None:
        """This broker now leads `tp`: if it is one of this topic's partitions, load it."""
        if tp.topic != self.name:
            return
        if self.partition_count is None:
            info = self._topics.topics.get(self.name)
            self.partition_count = info.partitions if info is not None else self._wanted_partitions
        self._start_loading(tp.partition)

    def on_resign(self, tp: TopicPartition) -> bool:
        """This broker no longer leads `tp`: True when it served that partition of this topic,
        whose keys the owner then drops."""
        if tp.topic != self.name or self.partitions.pop(tp.partition, None) is None:
            return False
        self._cancel_load(tp.partition)
        log.info("%s: no longer its coordinator", tp)
        return True

    # ---------------------------------------------------------------------------- loading

    def _start_loading(self, partition: int) -> None:
        self._cancel_load(partition)
        self.partitions[partition] = LoadState.LOADING
        task = self._loads[partition] = asyncio.get_running_loop().create_task(self._load_partition(partition))

        def finished(_task: asyncio.Task) -> None:
            if self._loads.get(partition) is task:
                del self._loads[partition]

        task.add_done_callback(finished)

    def _cancel_load(self, partition: int) -> None:
        task = self._loads.pop(partition, None)
        if task is not None:
            task.cancel()

    async def _load_partition(self, partition: int) -> None:
        started = time.monotonic()
        tp = TopicPartition(self.name, partition)
        while True:
            try:
                partition_log = self._replica_manager.get_partition(tp).log
                end_offset = partition_log.log_end_offset
                log_slice = partition_log.slice(partition_log.log_start_offset, end_offset)
                contents = await asyncio.to_thread(_read_slice, self._read, log_slice, self._load_buffer_bytes)
                break
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("loading %s-%d failed; retrying in %.0f s", self.name, partition, LOAD_RETRY_S)
                await asyncio.sleep(LOAD_RETRY_S)
        if end_offset > partition_log.high_watermark:
            await self._wait_until_committed(tp, end_offset)
        self._install(partition, contents)
        self.partitions[partition] = LoadState.LOADED
        log.info("loaded %s-%d in %.0f ms", self.name, partition, (time.monotonic() - started) * 1000)

    async def _wait_until_committed(self, tp: TopicPartition, end_offset: int) -> None:
        """Return once the HW of `tp` reaches `end_offset`. A resignation cancels the wait."""
        log.info("%s: loaded up to %d, waiting for the high watermark to reach it", tp, end_offset)
        while True:
            try:
                await self._replica_manager.wait_for_commit(tp, end_offset - 1, LOAD_RETRY_S)
                return
            except KafkaError as exc:
                if exc.error_code is ErrorCode.not_enough_replicas_after_append:
                    return  # committed; a small ISR concerns only the writes to come
                if exc.error_code is not ErrorCode.request_timed_out:
                    await asyncio.sleep(_COMMIT_RETRY_S)  # not leading any more: on_resign calls this off


def _read_slice(read: Callable[[LogSlice, int], Contents], log_slice: LogSlice, buffer_bytes: int) -> Contents:
    """The load's work in its thread, which closes the slice's descriptors as soon as it is done."""
    with log_slice:
        return read(log_slice, buffer_bytes)


def _capped_min_insync(configs: Mapping[str, str], replication_factor: int) -> dict[str, str]:
    """The topic's configs with min.insync.replicas at most its replication factor: the factor
    is capped by the live brokers, and a topic that can never reach its min.insync.replicas
    could take no coordinator write (Kafka instead waits for enough brokers to create it)."""
    capped = dict(configs)
    if "min.insync.replicas" in capped:
        capped["min.insync.replicas"] = str(min(int(capped["min.insync.replicas"]), replication_factor))
    return capped
