"""This broker's replica of one partition.

Standalone, every replica is the leader of a one-member ISR: the high watermark follows the log
end offset as soon as an append returns. Replication through ZooKeeper extends this class with
followers and an ISR; the leader epoch already fences requests that name a different one.
"""

from protocol.errors import ErrorCode, KafkaError
from storage.log import AppendResult, Log
from storage.topic_partition import TopicPartition

NO_LEADER_EPOCH = -1


class Partition:
    def __init__(self, topic_partition: TopicPartition, log: Log, leader_epoch: int = 0) -> None:
        self.topic_partition = topic_partition
        self.log = log
        self.leader_epoch = leader_epoch

    def check_leader_epoch(self, requested_epoch: int) -> None:
        """Refuse a request made for another leader epoch than this replica's (KIP-320)."""
        if requested_epoch == NO_LEADER_EPOCH or requested_epoch == self.leader_epoch:
            return
        if requested_epoch < self.leader_epoch:
            raise KafkaError(
                f"{self.topic_partition}: leader epoch {requested_epoch} is older than "
                f"{self.leader_epoch}",
                ErrorCode.fenced_leader_epoch,
            )
        raise KafkaError(
            f"{self.topic_partition}: leader epoch {requested_epoch} is newer than "
            f"{self.leader_epoch}",
            ErrorCode.unknown_leader_epoch,
        )

    def append_as_leader(self, records: memoryview, from_coordinator: bool = False) -> AppendResult:
        result = self.log.append_as_leader(records, self.leader_epoch, from_coordinator)
        self.log.high_watermark = self.log.log_end_offset
        return result

    def append_marker(
        self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool
    ) -> AppendResult:
        """Write a transaction coordinator's COMMIT or ABORT marker (WriteTxnMarkers)."""
        result = self.log.append_marker(producer_id, producer_epoch, coordinator_epoch, commit, self.leader_epoch)
        self.log.high_watermark = self.log.log_end_offset
        return result

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the earliest open transaction, at most the high watermark."""
        first_unstable = self.log.first_unstable_offset
        if first_unstable is None:
            return self.log.high_watermark
        return min(first_unstable, self.log.high_watermark)
