"""Produce (api key 0), versions 0-9.

Each partition's record set must be one record batch of magic v2 (Kafka 0.11+ clients send
nothing else); it is validated per batch (size, CRC, counts; never record by record), given its
offsets in place and appended. Errors are per partition: UNSUPPORTED_FOR_MESSAGE_FORMAT for
magic v0/v1, CORRUPT_MESSAGE for a bad CRC or framing, MESSAGE_TOO_LARGE beyond
max.message.bytes, INVALID_RECORD for an impossible batch, UNKNOWN_TOPIC_OR_PARTITION,
INVALID_TOPIC_EXCEPTION for an illegal name or an internal topic, KAFKA_STORAGE_ERROR when the
log dir fails. acks outside -1/0/1 gives INVALID_REQUIRED_ACKS for every partition.

Batches of idempotent producers (producer id >= 0) are checked against the partition's producer
state (storage.producer_state): OUT_OF_ORDER_SEQUENCE_NUMBER for a sequence gap or a new epoch
not starting at 0, INVALID_PRODUCER_EPOCH for an older epoch, INVALID_RECORD for a negative
sequence. A retry of one of the producer's last five batches answers NONE with the batch's
original base offset, its timestamp as log_append_time_ms (as Kafka does) and the current log
start offset, and is not appended again. Transactional batches are checked the same way and
appended as they are (no transaction coordinator yet).

acks=0 gets no response at all. Standalone, acks=1 and acks=-1 (all) are the same: the one
replica is the whole ISR, so the batch is committed once appended.

Version notes: v0-2 have no transactional id; v2 adds log_append_time_ms, v5 log_start_offset,
v8 record_errors and error_message; v9 is flexible. The request is parsed by hand (records stay
views into the request buffer) and the response encoded by hand (protocol.produce).
"""

from protocol.api_keys import ApiKey
from protocol.errors import CorruptRecordError, ErrorCode, KafkaError
from protocol.produce import PartitionResponse, encode_produce_response, parse_produce_request
from storage.topic_partition import TopicPartition

from broker.handlers.registry import NO_RESPONSE, EncodedResponse, RequestContext, api
from broker.topic_manager import INTERNAL_TOPICS, validate_topic_name

VALID_ACKS = (-1, 0, 1)


@api(ApiKey.PRODUCE, versions=(0, 9), parse=parse_produce_request)
def handle_produce(ctx: RequestContext, request) -> EncodedResponse | object:
    replica_manager = ctx.broker.replica_manager
    responses = []
    for topic in request.topics:
        partitions = []
        for data in topic.partitions:
            partition = PartitionResponse(data.index)
            try:
                if request.acks not in VALID_ACKS:
                    raise KafkaError(f"acks={request.acks} is not -1, 0 or 1", ErrorCode.invalid_required_acks)
                _check_topic(ctx, topic.name)
                if data.records is None:
                    raise CorruptRecordError("no record set")
                result = replica_manager.append(TopicPartition(topic.name, data.index), data.records)
            except KafkaError as exc:
                partition.error_code = exc.error_code
                partition.error_message = str(exc) or None
            else:
                partition.base_offset = result.first_offset
                partition.log_append_time_ms = result.log_append_time_ms
                partition.log_start_offset = result.log_start_offset
            partitions.append(partition)
        responses.append((topic.name, partitions))
    if request.acks == 0:
        return NO_RESPONSE
    return EncodedResponse([encode_produce_response(ctx.api_version, responses)])


def _check_topic(ctx: RequestContext, name: str) -> None:
    if name not in ctx.broker.topics.topics:
        validate_topic_name(name)  # existing topics were validated when created
    if name in INTERNAL_TOPICS:
        raise KafkaError(f"Cannot append to internal topic {name}", ErrorCode.invalid_topic_exception)
