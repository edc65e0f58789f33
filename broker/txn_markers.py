"""Writing a transaction's COMMIT / ABORT markers to its partitions (the transaction
coordinator's MarkerWriter, and the WriteTxnMarkers handler).

A partition this broker leads gets the marker appended locally; a marker in __consumer_offsets
also completes the transaction's pending offsets in the group coordinator. Partitions led by
other brokers will be sent WriteTxnMarkers through the inter-broker client once replication
exists (replication/broker_client.py); standalone there are none, and a partition this broker
does not host answers UNKNOWN_TOPIC_OR_PARTITION (a topic deleted meanwhile).
"""

from collections.abc import Sequence
from typing import TYPE_CHECKING

from coordinator.group_coordinator import OFFSETS_TOPIC
from coordinator.transaction_coordinator import Marker
from protocol.errors import ErrorCode, KafkaError
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
        return {tp: self.write_marker(marker, tp) for tp in partitions}

    def write_marker(self, marker: Marker, tp: TopicPartition) -> ErrorCode:
        try:
            self._replica_manager.append_marker(
                tp, marker.producer_id, marker.producer_epoch, marker.coordinator_epoch, marker.commit
            )
        except KafkaError as exc:
            return exc.error_code
        if tp.topic == OFFSETS_TOPIC:
            self._group_coordinator.complete_transaction(tp.partition, marker.producer_id, marker.commit)
        return ErrorCode.none
