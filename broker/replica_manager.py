"""The partitions this broker holds, and the operations requests make on them (Kafka's
ReplicaManager): appends, reads, offset lookups, and waiting for new data (long-poll fetches).

Errors come out as KafkaError with the code the client receives: UNKNOWN_TOPIC_OR_PARTITION for
a partition this broker does not hold, KAFKA_STORAGE_ERROR for one whose log dir has failed (an
I/O error on the way takes that dir offline).
"""

import asyncio
from collections.abc import Iterable

from protocol.errors import ErrorCode, KafkaError
from replication.partition import Partition
from storage.log import AppendResult
from storage.log_config import LogConfig
from storage.log_manager import LogManager
from storage.records_file import FileRegion
from storage.topic_partition import TopicPartition


class ReplicaManager:
    def __init__(self, log_manager: LogManager) -> None:
        self.log_manager = log_manager
        self.partitions: dict[TopicPartition, Partition] = {}
        self._append_waiters: dict[TopicPartition, set[asyncio.Future]] = {}

    def add_partition(self, tp: TopicPartition, config: LogConfig, is_new: bool = True) -> Partition | None:
        """Serve `tp`, creating its log if it has none. An existing partition (`is_new` false)
        whose log is missing while a log dir is offline is not created: its log may be in that
        dir, and an empty one elsewhere would restart its offsets and hide its records (Kafka's
        isNew, KIP-112). It stays offline instead, and None is returned."""
        partition = self.partitions.get(tp)
        if partition is None:
            log = self.log_manager.get(tp)
            if log is None and not is_new and self.log_manager.has_offline_dirs:
                self.log_manager.mark_unplaced(tp)
                return None
            log = log or self.log_manager.create(tp, config)
            partition = self.partitions[tp] = Partition(tp, log)
        return partition

    def remove_partition(self, tp: TopicPartition) -> None:
        self.partitions.pop(tp, None)
        self.log_manager.delete(tp)
        self._wake(tp)

    def get_partition(self, tp: TopicPartition) -> Partition:
        if self.log_manager.is_offline(tp):
            raise KafkaError(f"{tp} is offline: its log directory failed", ErrorCode.kafka_storage_error)
        partition = self.partitions.get(tp)
        if partition is None:
            raise KafkaError(f"this broker does not host {tp}", ErrorCode.unknown_topic_or_partition)
        return partition

    def append(self, tp: TopicPartition, records: memoryview, from_coordinator: bool = False) -> AppendResult:
        partition = self.get_partition(tp)
        try:
            result = partition.append_as_leader(records, from_coordinator)
        except OSError as exc:
            raise self.log_manager.handle_io_error(tp, exc) from exc
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
        """Append `records` as the leader, before the first suspension, and return once they
        are committed: what the group coordinator waits for before it answers. Standalone the
        one replica is the whole ISR, so an appended batch is committed at once; replication
        holds this until the ISR has it. Coordinators' batches skip producer sequence checks."""
        return self.append(tp, records, from_coordinator=True)

    def delete_records_before(self, tp: TopicPartition, offset: int) -> int:
        """Raise the partition's log start offset (DeleteRecords); returns the new one."""
        partition = self.get_partition(tp)
        try:
            return partition.log.delete_records_before(offset)
        except OSError as exc:
            raise self.log_manager.handle_io_error(tp, exc) from exc

    def read(
        self,
        partition: Partition,
        offset: int,
        max_bytes: int,
        min_one_batch: bool,
        read_committed: bool,
    ) -> FileRegion | None:
        """Committed records from `offset`: below the high watermark, or below the last stable
        offset for read_committed consumers."""
        max_offset = partition.last_stable_offset if read_committed else partition.high_watermark
        try:
            return partition.log.read(offset, max_bytes, max_offset, min_one_batch)
        except OSError as exc:
            raise self.log_manager.handle_io_error(partition.topic_partition, exc) from exc

    async def wait_for_appends(self, partitions: Iterable[TopicPartition], timeout_s: float) -> None:
        """Return when any of `partitions` gets new records, after `timeout_s` at the latest."""
        loop = asyncio.get_running_loop()
        woken = loop.create_future()
        watched = list(partitions)
        for tp in watched:
            self._append_waiters.setdefault(tp, set()).add(woken)
        timer = loop.call_later(timeout_s, _resolve, woken)
        try:
            await woken
        finally:
            timer.cancel()
            for tp in watched:
                waiters = self._append_waiters.get(tp)
                if waiters is not None:
                    waiters.discard(woken)
                    if not waiters:
                        del self._append_waiters[tp]

    def wake_all(self) -> None:
        """Release every waiting fetch (shutdown)."""
        for tp in list(self._append_waiters):
            self._wake(tp)

    def _wake(self, tp: TopicPartition) -> None:
        for waiter in self._append_waiters.pop(tp, ()):
            _resolve(waiter)


def _resolve(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)
