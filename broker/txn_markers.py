"""Writing a transaction's COMMIT / ABORT markers to its partitions (the transaction
coordinator's MarkerWriter, and the WriteTxnMarkers handler).

A partition this broker leads gets the marker appended locally; a marker in __consumer_offsets
also completes the transaction's pending offsets in the group coordinator. The coordinator's
markers (`write_markers`) are answered once the partition's ISR has them (acks=all, as Kafka
writes markers), so a leader change cannot lose a marker the coordinator counts as written;
a WriteTxnMarkers request (`write_marker`) is answered once appended. Partitions led by other
brokers are not sent WriteTxnMarkers yet (docs/cluster.md); a partition this broker does not
host answers UNKNOWN_TOPIC_OR_PARTITION (standalone: a topic deleted meanwhile), and one it does
not lead NOT_LEADER_OR_FOLLOWER.
"""

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

from coordinator.group_coordinator import OFFSETS_TOPIC
from coordinator.transaction_coordinator import Marker
from protocol.errors import ErrorCode, KafkaError
from storage.log import AppendResult
from storage.topic_partition import TopicPartition

if TYPE_CHECKING:
    from broker.replica_manager import ReplicaManager
    from coordinator.group_coordinator import GroupCoordinator


class LocalMarkerWriter:
    def __init__(self, replica_manager: "ReplicaManager", group_coordinator: "GroupCoordinator") -> None:
        self._replica_manager = replica_manager
        self._group_coordinator = group_coordinator

    async def write_markers(
        self, marker: Marker, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, ErrorCode]:
        appended = {tp: self._append(marker, tp) for tp in partitions}
        outcomes = await asyncio.gather(*(self._committed(tp, outcome) for tp, outcome in appended.items()))
        return dict(zip(appended, outcomes))

    def write_marker(self, marker: Marker, tp: TopicPartition) -> ErrorCode:
        outcome = self._append(marker, tp)
        return outcome if isinstance(outcome, ErrorCode) else ErrorCode.none

    def _append(self, marker: Marker, tp: TopicPartition) -> AppendResult | ErrorCode:
        try:
            result = self._replica_manager.append_marker(
                tp, marker.producer_id, marker.producer_epoch, marker.coordinator_epoch, marker.commit
            )
        except KafkaError as exc:
            return exc.error_code
        if tp.topic == OFFSETS_TOPIC:
            self._group_coordinator.complete_transaction(tp.partition, marker.producer_id, marker.commit)
        return result

    async def _committed(self, tp: TopicPartition, outcome: AppendResult | ErrorCode) -> ErrorCode:
        if isinstance(outcome, ErrorCode):
            return outcome
        replicas = self._replica_manager
        try:
            await replicas.wait_for_commit(tp, outcome.last_offset, replicas.settings.commit_timeout_ms / 1000)
        except KafkaError as exc:
            return exc.error_code
        return ErrorCode.none
