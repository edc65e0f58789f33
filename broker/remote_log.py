"""Tiered storage on the broker (KIP-405): the remote store, the __remote_log_metadata topic and
the remote log manager, wired to this broker's topics and replicas (docs/tiered-storage.md).

Made only with remote.log.storage.system.enable. The store is rsm.config.url's (storage.remote.
storage_manager, the other rsm.config.* keys its fsspec options). The metadata lives in the
internal topic __remote_log_metadata (Kafka's TopicBasedRemoteLogMetadataManager): created on
first use with rlmm.config.remote.log.metadata.topic.num.partitions partitions and its replication
factor (capped by the live brokers), compacted, in segments of 100 MiB; a partition's records go
to the metadata partition Kafka's RemoteLogMetadataTopicPartitioner picks (murmur2 of the hash of
its topic id and partition). The partitions this broker leads are replayed into the metadata cache when it starts
or takes their leadership (coordinator.internal_topic, as the group coordinator loads
__consumer_offsets); until then the remote log manager leaves their tiered partitions alone.

Every remote.log.manager.task.interval.ms, each tiered log is told how far the store holds it
(its local retention may delete what is copied) and each one this broker leads is maintained by
the manager (copy, expiration, cleanup: storage.remote.manager). Deleting a tiered topic deletes
its partitions' remote data (MARKED first, so a restart resumes it). Fetches below a tiered log's
local start come to `read`.

Cluster mode (`clients` given): the metadata partitions are not loaded from the local log but
consumed from their leaders, and written through them, by broker.remote_log_metadata (Kafka's
ConsumerTask and ProducerManager), for every tiered partition this broker leads or follows; every
replica follows its tiered logs from that metadata. A follower fetching below its leader's local
log start rebuilds its state from the store (`remote_log_aux_state`, called by the replica
fetcher through the replica manager), and the leader of a partition of a tiered topic deleted
through the controller (StopReplica with delete) deletes its remote data, as Kafka's ZooKeeper-mode
broker does.
"""

import asyncio
import logging
import time

from coordinator.internal_topic import InternalTopic, LoadState, append_entries
from protocol.errors import ErrorCode, KafkaError
from protocol.record_batch import iter_batches
from protocol.records import iter_records
from replication.broker_client import BrokerClients
from storage.log_slice import LogSlice
from storage.remote.manager import RemoteLogAuxState, RemoteLogManager
from storage.remote.metadata import (
    PartitionDeleteMetadata,
    PartitionDeleteState,
    RemoteLogMetadataCache,
    RemoteSegmentMetadata,
    SegmentState,
    TopicIdPartition,
    encode,
)
from storage.remote.storage_manager import FsspecRemoteStorageManager
from storage.topic_partition import TopicPartition

from broker.config import BrokerConfig, remote_store_settings
from broker.metadata_cache import MetadataCache
from broker.partitioner import murmur2
from broker.remote_log_metadata import SharedMetadataTopic
from broker.replica_manager import ReplicaManager
from broker.topic_manager import TopicManager
from broker.topic_store import TopicInfo

log = logging.getLogger(__name__)

REMOTE_LOG_METADATA_TOPIC = "__remote_log_metadata"
_LOAD_BUFFER_BYTES = 5 * 1024 * 1024
# Once written, a key's records may all go: each is followed by a tombstone.
_FINAL_STATES = {
    RemoteSegmentMetadata: (SegmentState.DELETE_SEGMENT_FINISHED,),
    PartitionDeleteMetadata: (PartitionDeleteState.DELETE_PARTITION_FINISHED,),
}


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - 2**32 if value >= 2**31 else value


def _long_hash(value: int) -> int:
    """Java's Long.hashCode."""
    value &= 0xFFFFFFFFFFFFFFFF
    return _int32(value ^ (value >> 32))


def metadata_partition(tip: TopicIdPartition, partition_count: int) -> int:
    """The __remote_log_metadata partition of a partition's records (Kafka's
    RemoteLogMetadataTopicPartitioner: murmur2 of the 4 bytes of Objects.hash(the topic id's
    least and most significant bits, the partition), made positive, modulo the count)."""
    bits = tip.topic_id.int
    least, most = bits & 0xFFFFFFFFFFFFFFFF, bits >> 64
    h = 1
    for element in (_long_hash(least), _long_hash(most), tip.partition):
        h = _int32(31 * h + element)
    return (murmur2((h & 0xFFFFFFFF).to_bytes(4, "big")) & 0x7FFFFFFF) % partition_count


def read_metadata_partition(log_slice: LogSlice, buffer_bytes: int) -> list[bytes | None]:
    """The record values of a metadata partition, in order (a worker thread's work)."""
    values: list[bytes | None] = []
    for header, batch in log_slice.batches(buffer_bytes):
        if not header.is_control:
            values.extend(record.value for record in iter_records(batch))
    return values


class RemoteLog:
    def __init__(
        self,
        config: BrokerConfig,
        broker_id: int,
        topics: TopicManager,
        replica_manager: ReplicaManager,
        clients: BrokerClients | None = None,
        metadata_cache: MetadataCache | None = None,
    ) -> None:
        """`clients` (the inter-broker ones) and `metadata_cache` in cluster mode."""
        url, options = remote_store_settings(config.explicit_settings)
        self.topics = topics
        self.replica_manager = replica_manager
        self.cache = RemoteLogMetadataCache()
        self.metadata_topic: InternalTopic[list[bytes | None]] = InternalTopic(
            REMOTE_LOG_METADATA_TOPIC,
            topics,
            replica_manager,
            config.get("rlmm.config.remote.log.metadata.topic.num.partitions"),
            config.get("rlmm.config.remote.log.metadata.topic.replication.factor"),
            # Compacted; segments of 100 MiB (as __consumer_offsets') so the cleaner gets to them.
            {"cleanup.policy": "compact", "segment.bytes": str(100 * 1024 * 1024)},
            _LOAD_BUFFER_BYTES,
            read_metadata_partition,
            self._install,
        )
        self.manager = RemoteLogManager(
            FsspecRemoteStorageManager(url, options),
            self.cache,
            self,
            broker_id,
            config.get("remote.log.manager.copier.thread.pool.size"),
            config.get("remote.log.reader.threads"),
            config.get("remote.log.index.file.cache.total.size.bytes"),
        )
        self._metadata_cache = metadata_cache
        self.shared: SharedMetadataTopic | None = None
        if clients is not None:
            self.shared = SharedMetadataTopic(
                REMOTE_LOG_METADATA_TOPIC, self.cache, clients, metadata_cache.leader_of, self._needed, self._partition_of
            )
        self._interval_s = config.get("remote.log.manager.task.interval.ms") / 1000
        self._task: asyncio.Task | None = None
        self._deletions: set[asyncio.Task] = set()
        topics.on_delete.append(self._on_topic_deleted)
        replica_manager.remote_aux_state_source = self.remote_log_aux_state
        replica_manager.deletion_listeners.append(self._on_replica_deleted)

    def start(self) -> None:
        """Load the metadata partitions (standalone: all, if the topic exists; cluster mode:
        start consuming them) and start the periodic task. Call once the partitions are served."""
        if self.shared is not None:
            self.shared.start()
        else:
            self.metadata_topic.start()
        self._task = asyncio.get_running_loop().create_task(self._run_periodically())

    async def shutdown(self) -> None:
        """Stop the task and the thread pools; a copy cut short is cleaned up after the restart."""
        tasks = [t for t in (self._task, *self._deletions) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, *self.metadata_topic.stop(), return_exceptions=True)
        if self.shared is not None:
            await self.shared.stop()
        await asyncio.to_thread(self.manager.shutdown)

    def on_become_leader(self, tp: TopicPartition, leader_epoch: int) -> None:
        if self.shared is not None:
            self.shared.wake()
        else:
            self.metadata_topic.on_become_leader(tp)

    def on_resign(self, tp: TopicPartition, leader_epoch: int) -> None:
        if self.shared is not None:
            self.shared.wake()
        else:
            self.metadata_topic.on_resign(tp)

    def _metadata_partition_count(self) -> int | None:
        info = self.topics.topics.get(REMOTE_LOG_METADATA_TOPIC)
        return None if info is None else info.partitions

    def _partition_of(self, tip: TopicIdPartition) -> int | None:
        count = self._metadata_partition_count()
        return None if count is None else metadata_partition(tip, count)

    def _needed(self) -> set[int]:
        """The metadata partitions of the tiered partitions hosted here (cluster mode)."""
        count = self._metadata_partition_count()
        if count is None:
            return set()
        needed = set()
        for tp, partition in self.replica_manager.partitions.items():
            if partition.log.config.remote_storage_enable:
                tip = self.tip_of(tp)
                if tip is not None:
                    needed.add(metadata_partition(tip, count))
        return needed

    def _install(self, partition: int, values: list[bytes | None]) -> None:
        self.cache.replay(values)

    # ------------------------------------------------------------ MetadataPublisher

    async def publish(self, metadata: RemoteSegmentMetadata | PartitionDeleteMetadata) -> bool:
        if not await self.metadata_topic.ensure():
            raise KafkaError(f"{REMOTE_LOG_METADATA_TOPIC} is not available", ErrorCode.coordinator_not_available)
        partition = metadata_partition(metadata.partition, self.metadata_topic.partition_count)
        entries: list[tuple[bytes, bytes | None]] = [(metadata.key, encode(metadata))]
        if metadata.state in _FINAL_STATES[type(metadata)]:
            entries.append((metadata.key, None))  # compaction may drop every record of the key
        if self.shared is not None:
            await self.shared.publish(partition, entries)
            return True  # read back: the cache has it
        tp = TopicPartition(REMOTE_LOG_METADATA_TOPIC, partition)
        error = await append_entries(self.replica_manager, tp, entries, int(time.time() * 1000))
        if error is not ErrorCode.none:
            raise KafkaError(f"cannot write {metadata.state.name} of {metadata.partition} to {tp}", error)
        return False

    def is_loaded(self, tip: TopicIdPartition) -> bool:
        if REMOTE_LOG_METADATA_TOPIC not in self.topics.topics:
            return True  # nothing was ever written
        if self.shared is not None:
            return self.shared.is_loaded(self._partition_of(tip))
        count = self.metadata_topic.partition_count
        return count is not None and self.metadata_topic.partitions.get(metadata_partition(tip, count)) is LoadState.LOADED

    # ------------------------------------------------------------------------ the task

    def tip_of(self, tp: TopicPartition) -> TopicIdPartition | None:
        info = self.topics.topics.get(tp.topic)
        return None if info is None else TopicIdPartition(info.topic_id, tp.topic, tp.partition)

    def _readable(self, tp: TopicPartition) -> TopicIdPartition:
        """The partition's id for a read of its remote part: REPLICA_NOT_AVAILABLE (retriable)
        while its metadata is being loaded, so a client retries instead of taking an empty
        remote log for OFFSET_OUT_OF_RANGE and resetting its position."""
        tip = self.tip_of(tp)
        if tip is None:
            raise KafkaError(f"this broker does not know {tp}", ErrorCode.unknown_topic_or_partition)
        if not self.is_loaded(tip):
            raise KafkaError(f"the remote log metadata of {tp} is being loaded", ErrorCode.replica_not_available)
        return tip

    async def _run_periodically(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            await self.run_once()

    async def run_once(self) -> None:
        """One round of the remote log manager's work over this broker's tiered partitions."""
        try:
            await self.manager.resume_deletions()
        except KafkaError as exc:
            log.warning("resuming the deletion of remote partitions failed (%s); trying again later", exc)
        except Exception:
            log.exception("resuming the deletion of remote partitions failed; trying again later")
        for tp, partition in list(self.replica_manager.partitions.items()):
            if not partition.log.config.remote_storage_enable:
                continue
            tip = self.tip_of(tp)
            if tip is None:
                continue
            self.manager.follow(tip, partition.log)
            if not partition.is_leader:
                continue
            try:
                await self.manager.maintain(tip, partition)
            except asyncio.CancelledError:
                raise
            except KafkaError as exc:  # the metadata's leader moved, the store failed ...
                log.warning("%s: tiering failed (%s); trying again in %.0f s", tp, exc, self._interval_s)
            except Exception:
                log.exception("%s: tiering failed; trying again in %.0f s", tp, self._interval_s)

    def _on_topic_deleted(self, info: TopicInfo) -> None:
        if str(info.configs.get("remote.storage.enable", "false")).strip().lower() != "true":
            return
        for partition in range(info.partitions):
            tip = TopicIdPartition(info.topic_id, info.name, partition)
            task = asyncio.get_running_loop().create_task(self._delete_partition(tip))
            self._deletions.add(task)
            task.add_done_callback(self._deletions.discard)

    def _on_replica_deleted(self, tp: TopicPartition, was_leader: bool) -> None:
        """StopReplica deleted a replica (cluster mode): the leader of a partition of a tiered
        topic being deleted deletes its remote data, once (Kafka's ZooKeeper-mode broker deletes
        the remote log when it leads the partition StopReplica deletes). A replica moved away by
        a reassignment keeps it: its topic is not being deleted."""
        info = self.topics.topics.get(tp.topic)
        # A topic being deleted has left the metadata cache (the controller's UpdateMetadata
        # with leader -2 comes before its StopReplica); a moved replica's partition has not.
        deleting = self._metadata_cache is not None and self._metadata_cache.partition(tp) is None
        if not was_leader or info is None or not deleting:
            return
        if str(info.configs.get("remote.storage.enable", "false")).strip().lower() != "true":
            return
        tip = TopicIdPartition(info.topic_id, tp.topic, tp.partition)
        task = asyncio.get_running_loop().create_task(self._delete_partition(tip))
        self._deletions.add(task)
        task.add_done_callback(self._deletions.discard)

    async def remote_log_aux_state(self, tp: TopicPartition, leader_local_log_start_offset: int) -> RemoteLogAuxState:
        """A follower's state from the store (the replica fetcher's, through the replica manager)."""
        return await self.manager.remote_log_aux_state(self._readable(tp), leader_local_log_start_offset)

    async def _delete_partition(self, tip: TopicIdPartition) -> None:
        try:
            await self.manager.delete_partition(tip)
        except asyncio.CancelledError:
            raise
        except KafkaError as exc:
            log.warning("%s: deleting its remote data failed (%s); a later round tries again", tip, exc)
        except Exception:
            log.exception("%s: deleting its remote data failed; a later round tries again", tip)

    # ------------------------------------------------------------------------- reading

    async def offset_for_timestamp(self, tp: TopicPartition, timestamp: int, start_offset: int) -> tuple[int, int] | None:
        """ListOffsets' lookup of a timestamp in the remote part of a tiered log."""
        return await self.manager.offset_for_timestamp(self._readable(tp), timestamp, start_offset)

    async def read(
        self, tp: TopicPartition, offset: int, max_bytes: int, min_one_batch: bool, read_committed: bool
    ) -> tuple[bytes, list[tuple[int, int]]]:
        """Records of `tp` from `offset`, in the remote store only, and for read_committed the
        aborted transactions they span (producer id, first offset): Fetch's remote read."""
        tip = self._readable(tp)
        segment, data = await self.manager.read(tip, offset, max_bytes, min_one_batch)
        if not read_committed or not data:
            return data, []
        upper = _last_offset(data) + 1
        aborted, complete = await self.manager.aborted(tip, segment, offset, upper)
        if not complete:
            partition = self.replica_manager.partitions.get(tp)
            if partition is not None:
                local = partition.log
                aborted += local.collect_aborted(max(offset, local.local_log_start_offset), upper)
        return data, [(entry.producer_id, entry.first_offset) for entry in aborted]


def _last_offset(data: bytes) -> int:
    last = -1
    for _position, header in iter_batches(memoryview(data)):
        last = header.last_offset
    return last
