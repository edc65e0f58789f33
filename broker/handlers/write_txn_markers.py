"""WriteTxnMarkers (api key 27), versions 0-1.

From a transaction coordinator to a partition's leader: append the COMMIT or ABORT marker of a
producer's transaction to each named partition this broker leads (broker.txn_markers'
LocalMarkerWriter, as for the coordinator's own markers), which ends the transaction there (the
LSO moves on, an abort is added to the transaction index, and in __consumer_offsets the
transaction's offsets are committed or dropped). Answered once each partition's ISR has its
marker (acks=all, as Kafka appends markers), so the coordinator counts only markers a leader
change cannot lose; REQUEST_TIMED_OUT when the ISR does not catch up within
offsets.commit.timeout.ms.

Errors, per partition: UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT,
KAFKA_STORAGE_ERROR; INVALID_PRODUCER_EPOCH for a marker older than the producer's epoch there,
TRANSACTION_COORDINATOR_FENCED for one from an older coordinator epoch than the producer's last
marker.

Version notes: v1 is v0, flexible (v0 is declared in protocol.legacy).

Authorization (with an authorizer, as Kafka's KafkaApis): the sender (a transaction
coordinator) needs ALTER or CLUSTER_ACTION on the cluster, else CLUSTER_AUTHORIZATION_FAILED.
"""

import asyncio

from kio.schema.write_txn_markers.v1.request import WritableTxnMarker, WriteTxnMarkersRequest
from kio.schema.write_txn_markers.v1.response import (
    WritableTxnMarkerPartitionResult,
    WritableTxnMarkerResult,
    WritableTxnMarkerTopicResult,
    WriteTxnMarkersResponse,
)

from coordinator.transaction_coordinator import Marker
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from storage.topic_partition import TopicPartition

from broker.handlers.authorization import authorized, refused
from broker.handlers.registry import RequestContext, api
from broker.security.acl import AclOperation
from broker.txn_markers import LocalMarkerWriter


@api(ApiKey.WRITE_TXN_MARKERS, versions=(0, 1))
async def handle_write_txn_markers(ctx: RequestContext, request: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
    if not authorized(ctx, AclOperation.ALTER, log_denied=False) and not authorized(ctx, AclOperation.CLUSTER_ACTION):
        return refused(ctx, request, ErrorCode.cluster_authorization_failed)
    results = await asyncio.gather(*(_write(ctx.broker.markers, wanted) for wanted in request.markers))
    return WriteTxnMarkersResponse(markers=tuple(results))


async def _write(writer: LocalMarkerWriter, wanted: WritableTxnMarker) -> WritableTxnMarkerResult:
    marker = Marker(wanted.producer_id, wanted.producer_epoch, wanted.coordinator_epoch, wanted.transaction_result)
    partitions = [TopicPartition(topic.name, p) for topic in wanted.topics for p in topic.partition_indexes]
    errors = await writer.write_markers(marker, partitions)
    topics = tuple(
        WritableTxnMarkerTopicResult(
            name=topic.name,
            partitions=tuple(
                WritableTxnMarkerPartitionResult(partition_index=p, error_code=errors[TopicPartition(topic.name, p)])
                for p in topic.partition_indexes
            ),
        )
        for topic in wanted.topics
    )
    return WritableTxnMarkerResult(producer_id=wanted.producer_id, topics=topics)
