"""Writing a transaction's COMMIT / ABORT markers to its partitions (the transaction
coordinator's MarkerWriter, and the WriteTxnMarkers handler's writing).

`LocalMarkerWriter`: a partition this broker leads gets the marker appended locally; a marker in
__consumer_offsets also completes the transaction's pending offsets in the group coordinator.
Markers are answered once the partition's ISR has them (acks=all, as Kafka writes markers), so a
leader change cannot lose a marker the coordinator counts as written. A partition this broker
does not host answers UNKNOWN_TOPIC_OR_PARTITION (standalone: a topic deleted meanwhile), one it
does not lead NOT_LEADER_OR_FOLLOWER. Standalone, it is the coordinator's writer; in cluster
mode it serves WriteTxnMarkers and the partitions the coordinator's broker leads itself.

`ClusterMarkerWriter` (cluster mode, the coordinator's writer): each partition goes to its
leader in the metadata cache, locally when that is this broker, otherwise in one WriteTxnMarkers
(v1) per leader through `RemoteMarkerSender` (one inter-broker client per broker). Every call
resolves the leaders afresh, so the coordinator's retries (coordinator.transaction_coordinator)
follow leadership moves. Its answers, per partition: the leader's error, except that a partition
missing from the metadata cache is UNKNOWN_TOPIC_OR_PARTITION (deleted: not retried, as Kafka
drops markers to deleted topics); one without a live leader, or that its leader does not know
yet (its LeaderAndIsr is still on the way), NOT_LEADER_OR_FOLLOWER; a request without an answer
REQUEST_TIMED_OUT or NETWORK_EXCEPTION. All of these but the first are retried by the coordinator.

Thread-safety: owned by the event loop.
"""

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from kio.schema.write_txn_markers.v1.request import WritableTxnMarker, WritableTxnMarkerTopic, WriteTxnMarkersRequest
from kio.schema.write_txn_markers.v1.response import WriteTxnMarkersResponse

from coordinator.group_coordinator import OFFSETS_TOPIC
from coordinator.transaction_coordinator import Marker
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, KafkaError
from replication.broker_client import (
    BrokerClientError,
    BrokerClients,
    BrokerRequestTimeoutError,
)
from storage.log import AppendResult
from storage.topic_partition import TopicPartition

if TYPE_CHECKING:
    from broker.metadata_cache import MetadataCache
    from broker.replica_manager import ReplicaManager
    from coordinator.group_coordinator import GroupCoordinator

WRITE_TXN_MARKERS_VERSION = 1

SendMarkers = Callable[[int, WriteTxnMarkersRequest], Awaitable[WriteTxnMarkersResponse]]


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
            await replicas.wait_for_flush(tp, outcome)
            await replicas.wait_for_commit(tp, outcome.last_offset, replicas.settings.commit_timeout_ms / 1000)
        except KafkaError as exc:
            return exc.error_code
        return ErrorCode.none


class ClusterMarkerWriter:
    def __init__(
        self, broker_id: int, metadata_cache: "MetadataCache", local: LocalMarkerWriter, send: SendMarkers
    ) -> None:
        self._broker_id = broker_id
        self._metadata_cache = metadata_cache
        self._local = local
        self._send = send

    async def write_markers(
        self, marker: Marker, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, ErrorCode]:
        results: dict[TopicPartition, ErrorCode] = {}
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in partitions:
            if self._metadata_cache.partition(tp) is None:
                results[tp] = ErrorCode.unknown_topic_or_partition
                continue
            leader = self._metadata_cache.leader_of(tp)
            if leader is None:
                results[tp] = ErrorCode.not_leader_or_follower
            else:
                by_leader.setdefault(leader, []).append(tp)
        local = by_leader.pop(self._broker_id, [])
        answers = await asyncio.gather(
            self._local.write_markers(marker, local),
            *(self._write_remote(leader, marker, tps) for leader, tps in by_leader.items()),
        )
        for answer in answers:
            results.update(answer)
        return results

    async def _write_remote(
        self, leader: int, marker: Marker, partitions: list[TopicPartition]
    ) -> dict[TopicPartition, ErrorCode]:
        try:
            response = await self._send(leader, _request(marker, partitions))
        except BrokerClientError as exc:
            timed_out = isinstance(exc, BrokerRequestTimeoutError)
            return dict.fromkeys(partitions, ErrorCode.request_timed_out if timed_out else ErrorCode.network_exception)
        answered = {
            TopicPartition(topic.name, p.partition_index): ErrorCode(p.error_code)
            for result in response.markers
            for topic in result.topics
            for p in topic.partitions
        }
        return {tp: _leader_error(answered.get(tp, ErrorCode.unknown_server_error)) for tp in partitions}


def _leader_error(error: ErrorCode) -> ErrorCode:
    # The metadata cache knows the partition, so a leader that does not is yet to be told of it.
    return ErrorCode.not_leader_or_follower if error is ErrorCode.unknown_topic_or_partition else error


def _request(marker: Marker, partitions: list[TopicPartition]) -> WriteTxnMarkersRequest:
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    topics = tuple(WritableTxnMarkerTopic(name=name, partition_indexes=tuple(ps)) for name, ps in by_topic.items())
    return WriteTxnMarkersRequest(markers=(WritableTxnMarker(
        producer_id=marker.producer_id,
        producer_epoch=marker.producer_epoch,
        transaction_result=marker.commit,
        topics=topics,
        coordinator_epoch=marker.coordinator_epoch,
    ),))


class RemoteMarkerSender(BrokerClients):
    """WriteTxnMarkers to other brokers over their inter-broker listener, one client per broker
    (connected again when the broker's endpoint changes)."""

    async def send(self, broker_id: int, request: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
        return await self.send_to(broker_id, ApiKey.WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION, request)
