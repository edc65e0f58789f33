"""DescribeProducers (api key 61), version 0.

The active producers of each requested partition this broker leads, from the partition's
producer state (storage.producer_state): producer id and epoch, last sequence and timestamp,
the coordinator epoch of its last marker, and the first offset of its open transaction (-1:
none). kafka-transactions.sh describe-producers uses it to find hanging transactions.

Errors, per partition: UNKNOWN_TOPIC_OR_PARTITION, KAFKA_STORAGE_ERROR.

Version notes: v0 is flexible.

Authorization (with an authorizer, as Kafka's KafkaApis): READ on the topic, else its partitions
answer TOPIC_AUTHORIZATION_FAILED.
"""

import datetime

from kio.schema.describe_producers.v0.request import DescribeProducersRequest
from kio.schema.describe_producers.v0.response import (
    DescribeProducersResponse,
    PartitionResponse,
    ProducerState,
    TopicResponse,
)

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, KafkaError
from storage.topic_partition import TopicPartition

from broker.handlers.authorization import authorized_names
from broker.handlers.registry import RequestContext, api
from broker.security.acl import AclOperation, ResourceType


@api(ApiKey.DESCRIBE_PRODUCERS, versions=(0, 0))
def handle_describe_producers(ctx: RequestContext, request: DescribeProducersRequest) -> DescribeProducersResponse:
    readable = authorized_names(ctx, AclOperation.READ, ResourceType.TOPIC, (t.name for t in request.topics))
    return DescribeProducersResponse(
        throttle_time=datetime.timedelta(0),
        topics=tuple(
            TopicResponse(
                name=topic.name,
                partitions=tuple(
                    _describe(ctx, topic.name, p) if topic.name in readable else _denied(p)
                    for p in topic.partition_indexes
                ),
            )
            for topic in request.topics
        ),
    )


def _denied(partition_index: int) -> PartitionResponse:
    return PartitionResponse(
        partition_index=partition_index,
        error_code=ErrorCode.topic_authorization_failed,
        error_message="Topic authorization failed.",
        active_producers=(),
    )


def _describe(ctx: RequestContext, topic: str, partition_index: int) -> PartitionResponse:
    try:
        partition = ctx.broker.replica_manager.get_partition(TopicPartition(topic, partition_index))
    except KafkaError as exc:
        return PartitionResponse(
            partition_index=partition_index, error_code=exc.error_code, error_message=str(exc), active_producers=()
        )
    producers = tuple(
        ProducerState(
            producer_id=entry.producer_id,
            producer_epoch=entry.epoch,
            last_sequence=entry.last_seq,
            last_timestamp=entry.last_timestamp,
            coordinator_epoch=entry.coordinator_epoch,
            current_txn_start_offset=entry.current_txn_first_offset,
        )
        for entry in partition.log.producer_state.producers.values()
    )
    return PartitionResponse(partition_index=partition_index, error_code=ErrorCode.none, active_producers=producers)
