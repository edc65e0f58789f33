"""WriteTxnMarkers (api key 27), versions 0-1.

From a transaction coordinator to a partition's leader: append the COMMIT or ABORT marker of a
producer's transaction to each named partition this broker leads (broker.txn_markers), which
ends the transaction there (the LSO moves on, an abort is added to the transaction index, and
in __consumer_offsets the transaction's offsets are committed or dropped).

Errors, per partition: UNKNOWN_TOPIC_OR_PARTITION, KAFKA_STORAGE_ERROR; INVALID_PRODUCER_EPOCH
for a marker older than the producer's epoch there, TRANSACTION_COORDINATOR_FENCED for one from
an older coordinator epoch than the producer's last marker.

Version notes: v1 is v0, flexible (v0 is declared in protocol.legacy).
"""

from kio.schema.write_txn_markers.v1.request import WriteTxnMarkersRequest
from kio.schema.write_txn_markers.v1.response import (
    WritableTxnMarkerPartitionResult,
    WritableTxnMarkerResult,
    WritableTxnMarkerTopicResult,
    WriteTxnMarkersResponse,
)

from coordinator.transaction_coordinator import Marker
from protocol.api_keys import ApiKey
from storage.topic_partition import TopicPartition

from broker.handlers.registry import RequestContext, api


@api(ApiKey.WRITE_TXN_MARKERS, versions=(0, 1))
def handle_write_txn_markers(ctx: RequestContext, request: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
    writer = ctx.broker.markers
    results = []
    for wanted in request.markers:
        marker = Marker(wanted.producer_id, wanted.producer_epoch, wanted.coordinator_epoch, wanted.transaction_result)
        topics = tuple(
            WritableTxnMarkerTopicResult(
                name=topic.name,
                partitions=tuple(
                    WritableTxnMarkerPartitionResult(
                        partition_index=p, error_code=writer.write_marker(marker, TopicPartition(topic.name, p))
                    )
                    for p in topic.partition_indexes
                ),
            )
            for topic in wanted.topics
        )
        results.append(WritableTxnMarkerResult(producer_id=wanted.producer_id, topics=topics))
    return WriteTxnMarkersResponse(markers=tuple(results))
