"""Tiered logs' traffic with the remote store (Kafka's RemoteLogManager), one per broker.

For each tiered partition this broker leads, `maintain` (every remote.log.manager.task.interval.ms)
does in turn:

1. Copy: each rolled segment after the remote log's last offset whose records all lie below the
   high watermark and the last stable offset, oldest first. The segment's files (the .log, its
   offset, time and transaction indexes, the producer snapshot at its end) are opened on the loop
   and the leader-epoch checkpoint as of its end made there; then, under a new segment id:
   COPY_SEGMENT_STARTED is published to the metadata, the files are written to the store on the
   copier threads, and COPY_SEGMENT_FINISHED is published, but only if this broker still leads
   at the same epoch (a leader that lost its leadership meanwhile leaves the copy to its
   successor's cleanup). The log is then told its `highest_remote_offset`, below which its local
   retention (local.retention.ms/bytes) may delete segments.
2. Expiration: remote segments wholly below the log start offset (DeleteRecords, or a total
   retention applied before), past retention.ms by their largest timestamp, or in excess of
   retention.bytes (counted over the remote log and the local segments not yet copied) go,
   oldest first: the log start offset is raised past them first (so no fetch is sent to them),
   then each is deleted (DELETE_SEGMENT_STARTED, the files, DELETE_SEGMENT_FINISHED).
3. Cleanup: a copy or deletion that a crash or a leader change left unfinished (a segment in
   COPY_SEGMENT_STARTED or DELETE_SEGMENT_STARTED that no copy of this manager is making) is
   deleted, and files in the store of segment ids the metadata does not know (a crash between
   writing them and the metadata, or a lost metadata record) are removed, unless their records
   are kept nowhere else (`_may_be_the_only_copy`: the metadata lost finished segments), which
   are kept and warned of.

A crash anywhere in this sequence therefore leaves either a finished segment or an orphan that
the next leader's cleanup removes, never a readable segment with missing files: a segment is read
only once COPY_SEGMENT_FINISHED, which is published after its files are all written.

Reads (`read`): the remote segment holding the offset is read on the reader threads
(storage.remote.reader). `delete_partition` removes a deleted topic's partition from the store
(RemotePartitionDeleteState MARKED, STARTED, the files, FINISHED), resumed after a restart.

Threads: the event loop owns the manager, the metadata cache and every Log; store calls run on the
copier or reader thread pools and come back to the loop through their futures. The manager knows
the broker only through `MetadataPublisher` and `TieredReplica`.
"""

import asyncio
import concurrent.futures
import logging
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from protocol.errors import ErrorCode, KafkaError
from storage.checkpoint import checkpoint_bytes
from storage.errors import OffsetOutOfRangeError
from storage.leader_epoch import EpochEntry, parse_epochs
from storage.log import Log
from storage.remote.metadata import (
    PartitionDeleteMetadata,
    PartitionDeleteState,
    RemoteLogMetadataCache,
    RemoteSegmentMetadata,
    SegmentState,
    TopicIdPartition,
)
from storage.remote.reader import RemoteLogReader
from storage.remote.storage_manager import FileRange, FsspecRemoteStorageManager, IndexType, SegmentFiles
from storage.segment import LogSegment
from storage.txn_index import AbortedTxn

log = logging.getLogger(__name__)


class MetadataPublisher(Protocol):
    """Where remote log metadata goes (the broker's __remote_log_metadata topic)."""

    async def publish(self, metadata: RemoteSegmentMetadata | PartitionDeleteMetadata) -> bool | None:
        """Write the record and return once it is committed; raises when it cannot be. True
        when the record is in the metadata cache already (a cluster's broker returns once it
        has read its record back from the topic), else the manager applies it."""

    def is_loaded(self, tip: TopicIdPartition) -> bool:
        """Whether the metadata of `tip` has been read (its metadata partition loaded)."""


class TieredReplica(Protocol):
    """This broker's replica of a tiered partition (replication.partition.Partition)."""

    @property
    def log(self) -> Log: ...

    @property
    def leader_epoch(self) -> int: ...

    @property
    def is_leader(self) -> bool: ...


@dataclass(frozen=True)
class RemoteLogAuxState:
    """What a tiered follower below its leader's local log start takes from the store (Kafka's
    remote log aux state): it restarts its log at `next_offset`, the end of the remote segment
    holding the offset before the leader's local log start, with that segment's leader epochs
    and producer snapshot (None when the segment had none)."""

    next_offset: int
    leader_epochs: list[EpochEntry]
    producer_snapshot: bytes | None


def _now_ms() -> int:
    return int(time.time() * 1000)


def _may_be_the_only_copy(start_offset: int, copied: list[RemoteSegmentMetadata], partition_log: Log) -> bool:
    """Whether store files that no metadata names, of a segment from `start_offset`, may hold
    records kept nowhere else: below the local log, and in no copied segment the metadata knows.

    Files left by a crash or a lost metadata record between a copy and its FINISHED record are
    not: the local log keeps a segment until a copy of it is finished, and the cleanup of that
    round finds the copy. Such files mean that the metadata lost finished segments (a truncated
    metadata partition); the log start has then already moved up to the local log, as Kafka's
    leader moves it when its remote log is empty, but deleting the files would destroy the only
    copy of the records. They are kept and warned of, as Kafka, which never lists its store,
    keeps every orphan. (A crash's files whose finished copy expired in the very round that found
    it are kept too, the one case where unneeded files stay.)"""
    if start_offset >= partition_log.local_log_start_offset:
        return False
    return not any(s.start_offset <= start_offset <= s.end_offset for s in copied)


def _names(paths: list[str]) -> str:
    return ", ".join(p.rsplit("/", 1)[-1] for p in paths)


class RemoteLogManager:
    def __init__(
        self,
        store: FsspecRemoteStorageManager,
        cache: RemoteLogMetadataCache,
        publisher: MetadataPublisher,
        broker_id: int,
        copier_threads: int = 10,
        reader_threads: int = 10,
        cache_bytes: int = 1024**3,
        now_ms: Callable[[], int] = _now_ms,
    ) -> None:
        self.store = store
        self.cache = cache
        self.publisher = publisher
        self.broker_id = broker_id
        self.reader = RemoteLogReader(store, cache_bytes)
        self._copier = concurrent.futures.ThreadPoolExecutor(copier_threads, "logway-remote-copier")
        self._readers = concurrent.futures.ThreadPoolExecutor(reader_threads, "logway-remote-reader")
        self._in_progress: set[uuid.UUID] = set()  # segments this manager is copying or deleting
        self._kept_orphans: set[uuid.UUID] = set()  # unnamed files kept and warned of (clean_up)
        # One piece of work at a time per partition: a round's and a topic deletion's would
        # otherwise both delete a segment.
        self._locks: dict[TopicIdPartition, asyncio.Lock] = {}
        self._now_ms = now_ms

    def shutdown(self) -> None:
        """Stop the thread pools (work under way finishes; a copy cut short is an orphan the
        next cleanup removes)."""
        self._copier.shutdown(wait=True, cancel_futures=True)
        self._readers.shutdown(wait=True, cancel_futures=True)

    async def _in_thread(self, pool: concurrent.futures.Executor, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(pool, fn, *args)

    async def _publish(self, metadata: RemoteSegmentMetadata | PartitionDeleteMetadata) -> None:
        if not await self.publisher.publish(metadata):
            self.cache.apply(metadata)

    # --------------------------------------------------------------------------- the task

    def follow(self, tip: TopicIdPartition, partition_log: Log) -> None:
        """Tell a tiered log (leader's or follower's) how far the remote store holds it."""
        if self.publisher.is_loaded(tip):
            partition_log.highest_remote_offset = self.cache.state(tip).highest_copied_offset

    def _lock(self, tip: TopicIdPartition) -> asyncio.Lock:
        lock = self._locks.get(tip)
        if lock is None:
            lock = self._locks[tip] = asyncio.Lock()
        return lock

    async def maintain(self, tip: TopicIdPartition, replica: TieredReplica) -> None:
        """Copy, expire and clean up one partition this broker leads (see the module doc)."""
        async with self._lock(tip):
            await self._maintain(tip, replica)

    async def _maintain(self, tip: TopicIdPartition, replica: TieredReplica) -> None:
        if not replica.is_leader or not self.publisher.is_loaded(tip):
            return
        epoch = replica.leader_epoch

        def still_leading() -> bool:
            return replica.is_leader and replica.leader_epoch == epoch

        await self.copy_segments(tip, replica)
        if still_leading():
            await self.expire(tip, replica)
        if still_leading():
            await self.clean_up(tip, replica.log)
        self.follow(tip, replica.log)

    # ------------------------------------------------------------------------------ copying

    def _next_to_copy(self, tip: TopicIdPartition, partition_log: Log) -> tuple[LogSegment, int] | None:
        highest = self.cache.state(tip).highest_copied_offset
        unstable = partition_log.first_unstable_offset
        bound = partition_log.high_watermark if unstable is None else min(unstable, partition_log.high_watermark)
        segments = partition_log.segments
        for position in range(len(segments) - 1):
            segment, next_base = segments[position], segments[position + 1].base_offset
            if next_base - 1 <= highest or segment.size == 0:
                continue
            return (segment, next_base) if next_base <= bound else None
        return None

    async def copy_segments(self, tip: TopicIdPartition, replica: TieredReplica) -> int:
        """Copy the rolled segments not in the store yet; how many were copied."""
        copied = 0
        while replica.is_leader:
            partition_log, epoch = replica.log, replica.leader_epoch
            found = self._next_to_copy(tip, partition_log)
            if found is None:
                break
            segment, next_base = found
            if not await self._copy(tip, replica, partition_log, epoch, segment, next_base):
                break
            if self.cache.state(tip).highest_copied_offset < next_base - 1:
                # The metadata lacks the finished copy (its topic lost records it had read back):
                # copying on would copy the segment again, and local retention must not count
                # on a copy the metadata does not name. The next round starts from what it holds.
                log.warning("%s: the remote log metadata does not hold the copy of segment %d-%d; copying stops this round",
                            tip, segment.base_offset, next_base - 1)
                break
            copied += 1
            partition_log.highest_remote_offset = max(partition_log.highest_remote_offset, next_base - 1)
        return copied

    async def _copy(
        self, tip: TopicIdPartition, replica: TieredReplica, partition_log: Log, epoch: int,
        segment: LogSegment, next_base: int,
    ) -> bool:
        try:
            files = segment_files(partition_log, segment, next_base)
        except OSError as exc:  # the log was closed meanwhile: its partition deleted or moved
            log.info("%s: not copying segment %d: %s", tip, segment.base_offset, exc)
            return False
        metadata = RemoteSegmentMetadata(
            tip,
            uuid.uuid4(),
            segment.base_offset,
            next_base - 1,
            self.broker_id,
            segment.largest_timestamp,  # as local retention sees it (the file's time without timestamps)
            self._now_ms(),
            segment_epochs(partition_log, segment.base_offset, next_base),
            segment.size,
            SegmentState.COPY_SEGMENT_STARTED,
        )
        try:
            try:
                await self._publish(metadata)
                self._in_progress.add(metadata.segment_id)
                await self._in_thread(self._copier, self.store.copy_log_segment_data, metadata, files)
            finally:
                files.close()
            if not replica.is_leader or replica.leader_epoch != epoch or replica.log is not partition_log:
                log.info("%s: no longer its leader at epoch %d; the copy of %s is left to clean up", tip, epoch, metadata.segment_id)
                return False
            await self._publish(metadata.with_state(SegmentState.COPY_SEGMENT_FINISHED, self.broker_id, self._now_ms()))
        finally:
            self._in_progress.discard(metadata.segment_id)
        log.info(
            "%s: copied segment %d-%d (%d bytes) to the remote store as %s",
            tip, metadata.start_offset, metadata.end_offset, metadata.size, metadata.segment_id,
        )
        return True

    # --------------------------------------------------------------------------- expiration

    async def expire(self, tip: TopicIdPartition, replica: TieredReplica) -> int:
        """Delete the remote segments past the total retention or below the log start offset;
        how many went."""
        partition_log = replica.log
        config = partition_log.config
        copied = self.cache.state(tip).copied
        # A log start behind what the store still holds (a checkpoint older than the last
        # expiration, when the broker stopped) moves up to the remote log start, or to the local
        # one when the remote log is empty (Kafka's leader does the same).
        first = min(copied[0].start_offset if copied else partition_log.local_log_start_offset, partition_log.local_log_start_offset)
        if partition_log.log_start_offset < min(first, partition_log.high_watermark):
            partition_log.delete_records_before(min(first, partition_log.high_watermark))
        doomed = [s for s in copied if s.end_offset < partition_log.log_start_offset]
        kept = [s for s in copied if s.end_offset >= partition_log.log_start_offset]
        if config.delete and config.retention_ms >= 0:
            now = self._now_ms()
            while kept and now - kept[0].max_timestamp_ms > config.retention_ms:
                doomed.append(kept.pop(0))
        if config.delete and config.retention_bytes >= 0:
            highest = self.cache.state(tip).highest_copied_offset
            local_only = sum(s.size for s in partition_log.segments if s.base_offset > highest)
            excess = sum(s.size for s in kept) + local_only - config.retention_bytes
            while kept and excess >= kept[0].size:
                excess -= kept[0].size
                doomed.append(kept.pop(0))
        if not doomed:
            return 0
        new_start = max(s.end_offset for s in doomed) + 1
        if new_start > partition_log.log_start_offset and replica.log is partition_log:
            partition_log.delete_records_before(min(new_start, partition_log.high_watermark))
        for segment in doomed:
            await self._delete_segment(segment)
        return len(doomed)

    async def _delete_segment(self, segment: RemoteSegmentMetadata) -> None:
        self._in_progress.add(segment.segment_id)
        try:
            if segment.state is not SegmentState.DELETE_SEGMENT_STARTED:
                segment = segment.with_state(SegmentState.DELETE_SEGMENT_STARTED, self.broker_id, self._now_ms())
                await self._publish(segment)
            await self._in_thread(self._copier, self.store.delete_log_segment_data, segment)
            await self._publish(segment.with_state(SegmentState.DELETE_SEGMENT_FINISHED, self.broker_id, self._now_ms()))
        finally:
            self._in_progress.discard(segment.segment_id)

    # ------------------------------------------------------------------------------ cleanup

    async def clean_up(self, tip: TopicIdPartition, partition_log: Log) -> int:
        """Delete unfinished copies and deletions and the store's files of unknown segments;
        how many segments went."""
        state = self.cache.state(tip)
        unfinished = [
            s
            for s in state.in_state(SegmentState.COPY_SEGMENT_STARTED, SegmentState.DELETE_SEGMENT_STARTED)
            if s.segment_id not in self._in_progress
        ]
        for segment in unfinished:
            log.info("%s: deleting segment %s, left %s", tip, segment.segment_id, segment.state.name)
            await self._delete_segment(segment)
        listed = await self._in_thread(self._copier, self.store.list_segments, tip)
        # Read after the listing: a copy that began meanwhile is known by now (its STARTED record
        # is applied before its first file is written).
        state = self.cache.state(tip)
        copied = state.copied
        orphans = 0
        for segment_id, stored in listed.items():
            if segment_id in state.segments or segment_id in self._in_progress:
                continue
            if _may_be_the_only_copy(stored.start_offset, copied, partition_log):
                if segment_id not in self._kept_orphans:
                    self._kept_orphans.add(segment_id)
                    log.warning(
                        "%s: keeping files %s in the remote store that no remote log metadata names: "
                        "their records from offset %d are neither in the local log (from %d) nor in a "
                        "remote segment the metadata knows, so the metadata may have lost their "
                        "segment's records",
                        tip, _names(stored.paths), stored.start_offset, partition_log.local_log_start_offset,
                    )
                continue
            log.info("%s: removing orphan files %s from the remote store", tip, _names(stored.paths))
            await self._in_thread(self._copier, self.store.delete_files, stored.paths)
            orphans += 1
        return len(unfinished) + orphans

    # --------------------------------------------------------------------- partition deletion

    async def delete_partition(self, tip: TopicIdPartition, only_if_pending: bool = False) -> None:
        """Remove every remote segment of a deleted partition, through the partition delete
        states (a restart resumes from MARKED or STARTED: `resume_deletions`), then whatever
        else the store holds of it (orphans)."""
        async with self._lock(tip):
            state = self.cache.partitions.get(tip)
            if only_if_pending and (state is None or state.delete_state is None):
                return  # finished meanwhile
            await self._delete_partition(tip)
        self._locks.pop(tip, None)

    async def _delete_partition(self, tip: TopicIdPartition) -> None:
        state = self.cache.partitions.get(tip)
        if state is None or state.delete_state is None:
            await self._publish(self._partition_delete(tip, PartitionDeleteState.DELETE_PARTITION_MARKED))
        await self._publish(self._partition_delete(tip, PartitionDeleteState.DELETE_PARTITION_STARTED))
        # Segment by segment, so that no record of a segment outlives the partition in a
        # compacted __remote_log_metadata (each deletion ends with a tombstone).
        for segment in list(self.cache.state(tip).segments.values()):
            await self._delete_segment(segment)
        await self._in_thread(self._copier, self.store.delete_partition, tip)
        await self._publish(self._partition_delete(tip, PartitionDeleteState.DELETE_PARTITION_FINISHED))
        log.info("%s: its remote data is deleted", tip)

    def _partition_delete(self, tip: TopicIdPartition, state: PartitionDeleteState) -> PartitionDeleteMetadata:
        return PartitionDeleteMetadata(tip, self.broker_id, self._now_ms(), state)

    async def resume_deletions(self) -> None:
        """Finish the partition deletions a restart of this broker interrupted (those of other
        brokers, which share the metadata in a cluster, are theirs to finish)."""
        for tip, state in list(self.cache.partitions.items()):
            if state.delete_state is not None and state.delete_broker_id == self.broker_id and self.publisher.is_loaded(tip):
                await self.delete_partition(tip, only_if_pending=True)

    # ------------------------------------------------------------------------------ following

    async def remote_log_aux_state(self, tip: TopicIdPartition, leader_local_log_start_offset: int) -> RemoteLogAuxState:
        """The state a follower of `tip` restarts from when its leader's local log starts at
        `leader_local_log_start_offset` (Kafka's ReplicaFetcherTierStateMachine): read from the
        remote segment holding the offset before it. REPLICA_NOT_AVAILABLE (the follower tries
        again) when the metadata knows no such segment yet."""
        previous = leader_local_log_start_offset - 1
        segment = self.cache.state(tip).segment_for(previous)
        if segment is None or segment.start_offset > previous:
            raise KafkaError(
                f"{tip}: no remote segment holds offset {previous}, before the leader's local log start",
                ErrorCode.replica_not_available,
            )
        epochs = await self._in_thread(self._readers, self.store.fetch_index, segment, IndexType.LEADER_EPOCH)
        try:
            snapshot = await self._in_thread(self._readers, self.store.fetch_index, segment, IndexType.PRODUCER_SNAPSHOT)
        except FileNotFoundError:
            snapshot = None
        return RemoteLogAuxState(
            segment.end_offset + 1, parse_epochs(epochs, f"{segment.segment_id}.leader_epoch_checkpoint"), snapshot or None
        )

    # ------------------------------------------------------------------------------ reading

    def remote_segment(self, tip: TopicIdPartition, offset: int) -> RemoteSegmentMetadata:
        segment = self.cache.state(tip).segment_for(offset)
        if segment is None:
            raise OffsetOutOfRangeError(f"offset {offset} of {tip} is in no remote segment")
        return segment

    async def read(
        self, tip: TopicIdPartition, offset: int, max_bytes: int, min_one_batch: bool
    ) -> tuple[RemoteSegmentMetadata, bytes]:
        """Whole batches from the remote segment holding `offset` (Kafka's remote fetch)."""
        segment = self.remote_segment(tip, offset)
        data = await self._in_thread(self._readers, self.reader.read, segment, offset, max_bytes, min_one_batch)
        return segment, data

    async def offset_for_timestamp(
        self, tip: TopicIdPartition, timestamp: int, start_offset: int
    ) -> tuple[int, int] | None:
        """(timestamp, offset) of the first remote record at or after `start_offset` stamped at
        or after `timestamp`, None when the remote log has none (the local log may)."""
        for segment in self.cache.state(tip).copied:
            if segment.max_timestamp_ms < timestamp or segment.end_offset < start_offset:
                continue
            found = await self._in_thread(
                self._readers, self.reader.offset_for_timestamp, segment, timestamp, max(start_offset, segment.start_offset)
            )
            if found is not None:
                return found
        return None

    async def aborted(
        self, tip: TopicIdPartition, segment: RemoteSegmentMetadata, fetch_offset: int, upper_bound_offset: int
    ) -> tuple[list[AbortedTxn], bool]:
        """The aborted transactions of [fetch_offset, upper_bound_offset) in the remote
        transaction indexes from `segment` on, and whether that is all of them."""
        later = [s for s in self.cache.state(tip).copied if s.start_offset >= segment.start_offset]
        return await self._in_thread(self._readers, self.reader.aborted, later, fetch_offset, upper_bound_offset)


# ------------------------------------------------------------------- on the loop, from the Log


def segment_files(partition_log: Log, segment: LogSegment, next_base: int) -> SegmentFiles:
    """Open what a copy of `segment` reads (on the loop, which owns the log)."""
    opened: list[int] = []

    def open_file(path: str | os.PathLike | None, required: bool = True) -> FileRange | None:
        if path is None or (not required and not os.path.exists(path)):
            return None
        fd = os.open(path, os.O_RDONLY)
        opened.append(fd)
        return FileRange(fd, os.fstat(fd).st_size)

    try:
        region = segment.records.region(0, segment.size)
        log_fd = os.dup(region.fd)
        opened.append(log_fd)
        snapshot = partition_log.producer_state.snapshot_path(next_base)
        epochs = [
            f"{epoch} {offset}" for epoch, offset in epochs_until(partition_log, next_base)
        ]
        return SegmentFiles(
            FileRange(log_fd, segment.size),
            open_file(segment.offset_index.path),
            open_file(segment.time_index.path),
            open_file(segment.txn_index.path, required=False),
            open_file(snapshot, required=False),
            checkpoint_bytes(epochs),
        )
    except BaseException:
        for fd in opened:
            os.close(fd)
        raise


def epochs_until(partition_log: Log, end_offset: int) -> list[tuple[int, int]]:
    """The log's leader epochs that begin below `end_offset` (its checkpoint at that point)."""
    return [(e.epoch, e.start_offset) for e in partition_log.leader_epochs.entries if e.start_offset < end_offset]


def segment_epochs(partition_log: Log, start_offset: int, end_offset: int) -> tuple[tuple[int, int], ...]:
    """The epochs of the records in [start_offset, end_offset), the first one starting at
    start_offset (Kafka's epochEntriesInRange)."""
    entries = epochs_until(partition_log, end_offset)
    within = [(epoch, offset) for epoch, offset in entries if offset > start_offset]
    before = [(epoch, offset) for epoch, offset in entries if offset <= start_offset]
    if before:
        within.insert(0, (before[-1][0], start_offset))
    return tuple(within)
