"""Schemas of the message versions kio does not ship (Kafka 4 removed them), in kio's style.

Older clients (and kafka-python's version probing) still send these. The layouts are those of
Kafka's protocol guide; each is the next version up minus the fields that version added.
`MESSAGES` maps (api key, version) to (request class, response class).
"""

from dataclasses import dataclass, field
from typing import ClassVar

from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader
from kio.schema.response_header.v0.header import ResponseHeader
from kio.static.constants import EntityType
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from protocol.api_keys import ApiKey

_INT8 = {"kafka_type": "int8"}
_INT16 = {"kafka_type": "int16"}
_INT32 = {"kafka_type": "int32"}
_INT64 = {"kafka_type": "int64"}
_STRING = {"kafka_type": "string"}
_BOOL = {"kafka_type": "bool"}
_ERROR = {"kafka_type": "error_code"}
_MILLIS = {"kafka_type": "timedelta_i32"}


def _entity(api_key: ApiKey, version: int, kind: EntityType):
    """Make a class a kio entity of a non-flexible message version."""
    header = RequestHeader if kind is not EntityType.response else ResponseHeader

    def declare(cls: type) -> type:
        cls.__type__ = kind
        cls.__version__ = i16(version)
        cls.__flexible__ = False
        cls.__api_key__ = i16(api_key)
        cls.__header_schema__ = header
        cls.__annotations__.update(
            __type__=ClassVar,
            __version__=ClassVar[i16],
            __flexible__=ClassVar[bool],
            __api_key__=ClassVar[i16],
            __header_schema__=ClassVar[type],
        )
        return dataclass(frozen=True, slots=True, kw_only=True)(cls)

    return declare


_request = EntityType.request
_response = EntityType.response
_nested = EntityType.nested

# Produce v0-2: no transactional id; v1 adds the throttle time (after the responses), v2 the
# log append time. The broker parses Produce by hand (protocol.produce); these declare the layout.


def _produce(version: int) -> tuple[type, type]:
    @_entity(ApiKey.PRODUCE, version, _nested)
    class PartitionProduceData:
        index: i32 = field(metadata=_INT32)
        records: bytes | None = field(metadata={"kafka_type": "records"})

    @_entity(ApiKey.PRODUCE, version, _nested)
    class TopicProduceData:
        name: str = field(metadata=_STRING)
        partition_data: tuple[PartitionProduceData, ...]

    @_entity(ApiKey.PRODUCE, version, _request)
    class ProduceRequest:
        acks: i16 = field(metadata=_INT16)
        timeout: i32Timedelta = field(metadata=_MILLIS)
        topic_data: tuple[TopicProduceData, ...]

    if version < 2:

        @_entity(ApiKey.PRODUCE, version, _nested)
        class PartitionProduceResponse:
            index: i32 = field(metadata=_INT32)
            error_code: ErrorCode = field(metadata=_ERROR)
            base_offset: i64 = field(metadata=_INT64)

    else:

        @_entity(ApiKey.PRODUCE, version, _nested)
        class PartitionProduceResponse:
            index: i32 = field(metadata=_INT32)
            error_code: ErrorCode = field(metadata=_ERROR)
            base_offset: i64 = field(metadata=_INT64)
            log_append_time: i64 = field(metadata=_INT64, default=i64(-1))

    @_entity(ApiKey.PRODUCE, version, _nested)
    class TopicProduceResponse:
        name: str = field(metadata=_STRING)
        partition_responses: tuple[PartitionProduceResponse, ...]

    if version == 0:

        @_entity(ApiKey.PRODUCE, 0, _response)
        class ProduceResponse:
            responses: tuple[TopicProduceResponse, ...]

    else:

        @_entity(ApiKey.PRODUCE, version, _response)
        class ProduceResponse:
            responses: tuple[TopicProduceResponse, ...]
            throttle_time: i32Timedelta = field(metadata=_MILLIS)

    return ProduceRequest, ProduceResponse


# ListOffsets v0: a list of offsets per partition instead of one offset and timestamp.


@_entity(ApiKey.LIST_OFFSETS, 0, _nested)
class ListOffsetsPartitionV0:
    partition_index: i32 = field(metadata=_INT32)
    timestamp: i64 = field(metadata=_INT64)
    max_num_offsets: i32 = field(metadata=_INT32, default=i32(1))


@_entity(ApiKey.LIST_OFFSETS, 0, _nested)
class ListOffsetsTopicV0:
    name: str = field(metadata=_STRING)
    partitions: tuple[ListOffsetsPartitionV0, ...]


@_entity(ApiKey.LIST_OFFSETS, 0, _request)
class ListOffsetsRequestV0:
    replica_id: i32 = field(metadata=_INT32)
    topics: tuple[ListOffsetsTopicV0, ...]


@_entity(ApiKey.LIST_OFFSETS, 0, _nested)
class ListOffsetsPartitionResponseV0:
    partition_index: i32 = field(metadata=_INT32)
    error_code: ErrorCode = field(metadata=_ERROR)
    old_style_offsets: tuple[i64, ...] = field(metadata=_INT64, default=())


@_entity(ApiKey.LIST_OFFSETS, 0, _nested)
class ListOffsetsTopicResponseV0:
    name: str = field(metadata=_STRING)
    partitions: tuple[ListOffsetsPartitionResponseV0, ...]


@_entity(ApiKey.LIST_OFFSETS, 0, _response)
class ListOffsetsResponseV0:
    topics: tuple[ListOffsetsTopicResponseV0, ...]


# CreateTopics v0 and v1: no throttle time; v0 has no validate_only and no error messages.


def _create_topics(version: int) -> tuple[type, type]:
    @_entity(ApiKey.CREATE_TOPICS, version, _nested)
    class CreatableReplicaAssignment:
        partition_index: i32 = field(metadata=_INT32)
        broker_ids: tuple[i32, ...] = field(metadata=_INT32, default=())

    @_entity(ApiKey.CREATE_TOPICS, version, _nested)
    class CreatableTopicConfig:
        name: str = field(metadata=_STRING)
        value: str | None = field(metadata=_STRING)

    @_entity(ApiKey.CREATE_TOPICS, version, _nested)
    class CreatableTopic:
        name: str = field(metadata=_STRING)
        num_partitions: i32 = field(metadata=_INT32)
        replication_factor: i16 = field(metadata=_INT16)
        assignments: tuple[CreatableReplicaAssignment, ...]
        configs: tuple[CreatableTopicConfig, ...]

    if version == 0:

        @_entity(ApiKey.CREATE_TOPICS, 0, _request)
        class CreateTopicsRequest:
            topics: tuple[CreatableTopic, ...]
            timeout: i32Timedelta = field(metadata=_MILLIS)

        @_entity(ApiKey.CREATE_TOPICS, 0, _nested)
        class CreatableTopicResult:
            name: str = field(metadata=_STRING)
            error_code: ErrorCode = field(metadata=_ERROR)

    else:

        @_entity(ApiKey.CREATE_TOPICS, 1, _request)
        class CreateTopicsRequest:
            topics: tuple[CreatableTopic, ...]
            timeout: i32Timedelta = field(metadata=_MILLIS)
            validate_only: bool = field(metadata=_BOOL, default=False)

        @_entity(ApiKey.CREATE_TOPICS, 1, _nested)
        class CreatableTopicResult:
            name: str = field(metadata=_STRING)
            error_code: ErrorCode = field(metadata=_ERROR)
            error_message: str | None = field(metadata=_STRING, default=None)

    @_entity(ApiKey.CREATE_TOPICS, version, _response)
    class CreateTopicsResponse:
        topics: tuple[CreatableTopicResult, ...]

    return CreateTopicsRequest, CreateTopicsResponse


# DeleteTopics v0: as v1 without the throttle time.


@_entity(ApiKey.DELETE_TOPICS, 0, _request)
class DeleteTopicsRequestV0:
    topic_names: tuple[str, ...] = field(metadata=_STRING, default=())
    timeout: i32Timedelta = field(metadata=_MILLIS)


@_entity(ApiKey.DELETE_TOPICS, 0, _nested)
class DeletableTopicResultV0:
    name: str = field(metadata=_STRING)
    error_code: ErrorCode = field(metadata=_ERROR)


@_entity(ApiKey.DELETE_TOPICS, 0, _response)
class DeleteTopicsResponseV0:
    responses: tuple[DeletableTopicResultV0, ...]


# DescribeConfigs v0: an is_default flag where later versions give the config source, and no
# synonyms.


@_entity(ApiKey.DESCRIBE_CONFIGS, 0, _nested)
class DescribeConfigsResourceV0:
    resource_type: i8 = field(metadata=_INT8)
    resource_name: str = field(metadata=_STRING)
    configuration_keys: tuple[str, ...] | None = field(metadata=_STRING)


@_entity(ApiKey.DESCRIBE_CONFIGS, 0, _request)
class DescribeConfigsRequestV0:
    resources: tuple[DescribeConfigsResourceV0, ...]


@_entity(ApiKey.DESCRIBE_CONFIGS, 0, _nested)
class DescribeConfigsResourceResultV0:
    name: str = field(metadata=_STRING)
    value: str | None = field(metadata=_STRING)
    read_only: bool = field(metadata=_BOOL)
    is_default: bool = field(metadata=_BOOL)
    is_sensitive: bool = field(metadata=_BOOL)


@_entity(ApiKey.DESCRIBE_CONFIGS, 0, _nested)
class DescribeConfigsResultV0:
    error_code: ErrorCode = field(metadata=_ERROR)
    error_message: str | None = field(metadata=_STRING)
    resource_type: i8 = field(metadata=_INT8)
    resource_name: str = field(metadata=_STRING)
    configs: tuple[DescribeConfigsResourceResultV0, ...]


@_entity(ApiKey.DESCRIBE_CONFIGS, 0, _response)
class DescribeConfigsResponseV0:
    throttle_time: i32Timedelta = field(metadata=_MILLIS)
    results: tuple[DescribeConfigsResultV0, ...]


# OffsetCommit v0 and v1: no retention time; v0 is a commit without group membership (no
# generation, no member id); v1 adds those and a commit timestamp per partition.


def _offset_commit(version: int) -> tuple[type, type]:
    if version == 0:

        @_entity(ApiKey.OFFSET_COMMIT, 0, _nested)
        class OffsetCommitRequestPartition:
            partition_index: i32 = field(metadata=_INT32)
            committed_offset: i64 = field(metadata=_INT64)
            committed_metadata: str | None = field(metadata=_STRING)

    else:

        @_entity(ApiKey.OFFSET_COMMIT, 1, _nested)
        class OffsetCommitRequestPartition:
            partition_index: i32 = field(metadata=_INT32)
            committed_offset: i64 = field(metadata=_INT64)
            commit_timestamp: i64 = field(metadata=_INT64, default=i64(-1))
            committed_metadata: str | None = field(metadata=_STRING)

    @_entity(ApiKey.OFFSET_COMMIT, version, _nested)
    class OffsetCommitRequestTopic:
        name: str = field(metadata=_STRING)
        partitions: tuple[OffsetCommitRequestPartition, ...]

    if version == 0:

        @_entity(ApiKey.OFFSET_COMMIT, 0, _request)
        class OffsetCommitRequest:
            group_id: str = field(metadata=_STRING)
            topics: tuple[OffsetCommitRequestTopic, ...]

    else:

        @_entity(ApiKey.OFFSET_COMMIT, 1, _request)
        class OffsetCommitRequest:
            group_id: str = field(metadata=_STRING)
            generation_id_or_member_epoch: i32 = field(metadata=_INT32, default=i32(-1))
            member_id: str = field(metadata=_STRING)
            topics: tuple[OffsetCommitRequestTopic, ...]

    @_entity(ApiKey.OFFSET_COMMIT, version, _nested)
    class OffsetCommitResponsePartition:
        partition_index: i32 = field(metadata=_INT32)
        error_code: ErrorCode = field(metadata=_ERROR)

    @_entity(ApiKey.OFFSET_COMMIT, version, _nested)
    class OffsetCommitResponseTopic:
        name: str = field(metadata=_STRING)
        partitions: tuple[OffsetCommitResponsePartition, ...]

    @_entity(ApiKey.OFFSET_COMMIT, version, _response)
    class OffsetCommitResponse:
        topics: tuple[OffsetCommitResponseTopic, ...]

    return OffsetCommitRequest, OffsetCommitResponse


# OffsetFetch v0: as v1 (Kafka read v0's offsets from ZooKeeper, v1's from the coordinator; logway
# serves both from the coordinator).


@_entity(ApiKey.OFFSET_FETCH, 0, _nested)
class OffsetFetchRequestTopicV0:
    name: str = field(metadata=_STRING)
    partition_indexes: tuple[i32, ...] = field(metadata=_INT32, default=())


@_entity(ApiKey.OFFSET_FETCH, 0, _request)
class OffsetFetchRequestV0:
    group_id: str = field(metadata=_STRING)
    topics: tuple[OffsetFetchRequestTopicV0, ...]


@_entity(ApiKey.OFFSET_FETCH, 0, _nested)
class OffsetFetchResponsePartitionV0:
    partition_index: i32 = field(metadata=_INT32)
    committed_offset: i64 = field(metadata=_INT64)
    metadata: str | None = field(metadata=_STRING)
    error_code: ErrorCode = field(metadata=_ERROR)


@_entity(ApiKey.OFFSET_FETCH, 0, _nested)
class OffsetFetchResponseTopicV0:
    name: str = field(metadata=_STRING)
    partitions: tuple[OffsetFetchResponsePartitionV0, ...]


@_entity(ApiKey.OFFSET_FETCH, 0, _response)
class OffsetFetchResponseV0:
    topics: tuple[OffsetFetchResponseTopicV0, ...]


# Inter-broker requests of ZooKeeper mode (Kafka 4 removed them with ZooKeeper): the controller
# tells brokers what to lead and follow (LeaderAndIsr v3), what the cluster looks like
# (UpdateMetadata v5) and what to stop serving (StopReplica v1); a broker stopping cleanly asks it
# to move its leaderships away first (ControlledShutdown v2). docs/cluster.md has the protocol.

_INT32_ARRAY = {"kafka_type": "int32"}


@_entity(ApiKey.LEADER_AND_ISR, 3, _nested)
class LeaderAndIsrPartitionState:
    partition_index: i32 = field(metadata=_INT32)
    controller_epoch: i32 = field(metadata=_INT32)
    leader: i32 = field(metadata=_INT32)
    leader_epoch: i32 = field(metadata=_INT32)
    isr: tuple[i32, ...] = field(metadata=_INT32_ARRAY, default=())
    zk_version: i32 = field(metadata=_INT32)
    replicas: tuple[i32, ...] = field(metadata=_INT32_ARRAY, default=())
    adding_replicas: tuple[i32, ...] = field(metadata=_INT32_ARRAY, default=())
    removing_replicas: tuple[i32, ...] = field(metadata=_INT32_ARRAY, default=())
    is_new: bool = field(metadata=_BOOL, default=False)


@_entity(ApiKey.LEADER_AND_ISR, 3, _nested)
class LeaderAndIsrTopicState:
    topic_name: str = field(metadata=_STRING)
    partition_states: tuple[LeaderAndIsrPartitionState, ...]


@_entity(ApiKey.LEADER_AND_ISR, 3, _nested)
class LeaderAndIsrLiveLeader:
    broker_id: i32 = field(metadata=_INT32)
    host_name: str = field(metadata=_STRING)
    port: i32 = field(metadata=_INT32)


@_entity(ApiKey.LEADER_AND_ISR, 3, _request)
class LeaderAndIsrRequest:
    controller_id: i32 = field(metadata=_INT32)
    controller_epoch: i32 = field(metadata=_INT32)
    broker_epoch: i64 = field(metadata=_INT64, default=i64(-1))
    topic_states: tuple[LeaderAndIsrTopicState, ...]
    live_leaders: tuple[LeaderAndIsrLiveLeader, ...]


@_entity(ApiKey.LEADER_AND_ISR, 3, _nested)
class LeaderAndIsrPartitionError:
    topic_name: str = field(metadata=_STRING)
    partition_index: i32 = field(metadata=_INT32)
    error_code: ErrorCode = field(metadata=_ERROR)


@_entity(ApiKey.LEADER_AND_ISR, 3, _response)
class LeaderAndIsrResponse:
    error_code: ErrorCode = field(metadata=_ERROR)
    partition_errors: tuple[LeaderAndIsrPartitionError, ...]


@_entity(ApiKey.UPDATE_METADATA, 5, _nested)
class UpdateMetadataPartitionState:
    partition_index: i32 = field(metadata=_INT32)
    controller_epoch: i32 = field(metadata=_INT32)
    leader: i32 = field(metadata=_INT32)
    leader_epoch: i32 = field(metadata=_INT32)
    isr: tuple[i32, ...] = field(metadata=_INT32_ARRAY, default=())
    zk_version: i32 = field(metadata=_INT32)
    replicas: tuple[i32, ...] = field(metadata=_INT32_ARRAY, default=())
    offline_replicas: tuple[i32, ...] = field(metadata=_INT32_ARRAY, default=())


@_entity(ApiKey.UPDATE_METADATA, 5, _nested)
class UpdateMetadataTopicState:
    topic_name: str = field(metadata=_STRING)
    partition_states: tuple[UpdateMetadataPartitionState, ...]


@_entity(ApiKey.UPDATE_METADATA, 5, _nested)
class UpdateMetadataEndpoint:
    port: i32 = field(metadata=_INT32)
    host: str = field(metadata=_STRING)
    listener: str = field(metadata=_STRING)
    security_protocol: i16 = field(metadata=_INT16)


@_entity(ApiKey.UPDATE_METADATA, 5, _nested)
class UpdateMetadataBroker:
    id: i32 = field(metadata=_INT32)
    endpoints: tuple[UpdateMetadataEndpoint, ...]
    rack: str | None = field(metadata=_STRING, default=None)


@_entity(ApiKey.UPDATE_METADATA, 5, _request)
class UpdateMetadataRequest:
    controller_id: i32 = field(metadata=_INT32)
    controller_epoch: i32 = field(metadata=_INT32)
    broker_epoch: i64 = field(metadata=_INT64, default=i64(-1))
    topic_states: tuple[UpdateMetadataTopicState, ...]
    live_brokers: tuple[UpdateMetadataBroker, ...]


@_entity(ApiKey.UPDATE_METADATA, 5, _response)
class UpdateMetadataResponse:
    error_code: ErrorCode = field(metadata=_ERROR)


@_entity(ApiKey.STOP_REPLICA, 1, _nested)
class StopReplicaTopic:
    name: str = field(metadata=_STRING)
    partition_indexes: tuple[i32, ...] = field(metadata=_INT32_ARRAY, default=())


@_entity(ApiKey.STOP_REPLICA, 1, _request)
class StopReplicaRequest:
    controller_id: i32 = field(metadata=_INT32)
    controller_epoch: i32 = field(metadata=_INT32)
    broker_epoch: i64 = field(metadata=_INT64, default=i64(-1))
    delete_partitions: bool = field(metadata=_BOOL)
    topics: tuple[StopReplicaTopic, ...]


@_entity(ApiKey.STOP_REPLICA, 1, _nested)
class StopReplicaPartitionError:
    topic_name: str = field(metadata=_STRING)
    partition_index: i32 = field(metadata=_INT32)
    error_code: ErrorCode = field(metadata=_ERROR)


@_entity(ApiKey.STOP_REPLICA, 1, _response)
class StopReplicaResponse:
    error_code: ErrorCode = field(metadata=_ERROR)
    partition_errors: tuple[StopReplicaPartitionError, ...]


@_entity(ApiKey.CONTROLLED_SHUTDOWN, 2, _request)
class ControlledShutdownRequest:
    broker_id: i32 = field(metadata=_INT32)
    broker_epoch: i64 = field(metadata=_INT64, default=i64(-1))


@_entity(ApiKey.CONTROLLED_SHUTDOWN, 2, _nested)
class RemainingPartition:
    topic_name: str = field(metadata=_STRING)
    partition_index: i32 = field(metadata=_INT32)


@_entity(ApiKey.CONTROLLED_SHUTDOWN, 2, _response)
class ControlledShutdownResponse:
    error_code: ErrorCode = field(metadata=_ERROR)
    remaining_partitions: tuple[RemainingPartition, ...]


# OffsetForLeaderEpoch v0-1 (kio ships v2+): no current leader epoch in requests and no throttle
# time in responses; v1 answers with the leader epoch of the end offset.


def _offset_for_leader_epoch(version: int) -> tuple[type, type]:
    @_entity(ApiKey.OFFSET_FOR_LEADER_EPOCH, version, _nested)
    class OffsetForLeaderPartition:
        partition: i32 = field(metadata=_INT32)
        leader_epoch: i32 = field(metadata=_INT32)

    @_entity(ApiKey.OFFSET_FOR_LEADER_EPOCH, version, _nested)
    class OffsetForLeaderTopic:
        topic: str = field(metadata=_STRING)
        partitions: tuple[OffsetForLeaderPartition, ...]

    @_entity(ApiKey.OFFSET_FOR_LEADER_EPOCH, version, _request)
    class OffsetForLeaderEpochRequest:
        topics: tuple[OffsetForLeaderTopic, ...]

    if version == 0:

        @_entity(ApiKey.OFFSET_FOR_LEADER_EPOCH, 0, _nested)
        class EpochEndOffset:
            error_code: ErrorCode = field(metadata=_ERROR)
            partition: i32 = field(metadata=_INT32)
            end_offset: i64 = field(metadata=_INT64, default=i64(-1))

    else:

        @_entity(ApiKey.OFFSET_FOR_LEADER_EPOCH, 1, _nested)
        class EpochEndOffset:
            error_code: ErrorCode = field(metadata=_ERROR)
            partition: i32 = field(metadata=_INT32)
            leader_epoch: i32 = field(metadata=_INT32, default=i32(-1))
            end_offset: i64 = field(metadata=_INT64, default=i64(-1))

    @_entity(ApiKey.OFFSET_FOR_LEADER_EPOCH, version, _nested)
    class OffsetForLeaderTopicResult:
        topic: str = field(metadata=_STRING)
        partitions: tuple[EpochEndOffset, ...]

    @_entity(ApiKey.OFFSET_FOR_LEADER_EPOCH, version, _response)
    class OffsetForLeaderEpochResponse:
        topics: tuple[OffsetForLeaderTopicResult, ...]

    return OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse


# WriteTxnMarkers v0 (kio ships v1, its flexible twin): Kafka brokers before 2.8 send it.


@_entity(ApiKey.WRITE_TXN_MARKERS, 0, _nested)
class WritableTxnMarkerTopic:
    name: str = field(metadata=_STRING)
    partition_indexes: tuple[i32, ...] = field(metadata=_INT32_ARRAY, default=())


@_entity(ApiKey.WRITE_TXN_MARKERS, 0, _nested)
class WritableTxnMarker:
    producer_id: i64 = field(metadata=_INT64)
    producer_epoch: i16 = field(metadata=_INT16)
    transaction_result: bool = field(metadata=_BOOL)
    topics: tuple[WritableTxnMarkerTopic, ...]
    coordinator_epoch: i32 = field(metadata=_INT32)


@_entity(ApiKey.WRITE_TXN_MARKERS, 0, _request)
class WriteTxnMarkersRequestV0:
    markers: tuple[WritableTxnMarker, ...]


@_entity(ApiKey.WRITE_TXN_MARKERS, 0, _nested)
class WritableTxnMarkerPartitionResult:
    partition_index: i32 = field(metadata=_INT32)
    error_code: ErrorCode = field(metadata=_ERROR)


@_entity(ApiKey.WRITE_TXN_MARKERS, 0, _nested)
class WritableTxnMarkerTopicResult:
    name: str = field(metadata=_STRING)
    partitions: tuple[WritableTxnMarkerPartitionResult, ...]


@_entity(ApiKey.WRITE_TXN_MARKERS, 0, _nested)
class WritableTxnMarkerResult:
    producer_id: i64 = field(metadata=_INT64)
    topics: tuple[WritableTxnMarkerTopicResult, ...]


@_entity(ApiKey.WRITE_TXN_MARKERS, 0, _response)
class WriteTxnMarkersResponseV0:
    markers: tuple[WritableTxnMarkerResult, ...]


# CreateAcls, DescribeAcls and DeleteAcls v0: v1 without the resource pattern type (every
# pattern is LITERAL).


@_entity(ApiKey.CREATE_ACLS, 0, _nested)
class AclCreationV0:
    resource_type: i8 = field(metadata=_INT8)
    resource_name: str = field(metadata=_STRING)
    principal: str = field(metadata=_STRING)
    host: str = field(metadata=_STRING)
    operation: i8 = field(metadata=_INT8)
    permission_type: i8 = field(metadata=_INT8)


@_entity(ApiKey.CREATE_ACLS, 0, _request)
class CreateAclsRequestV0:
    creations: tuple[AclCreationV0, ...]


@_entity(ApiKey.CREATE_ACLS, 0, _nested)
class AclCreationResultV0:
    error_code: ErrorCode = field(metadata=_ERROR)
    error_message: str | None = field(metadata=_STRING)


@_entity(ApiKey.CREATE_ACLS, 0, _response)
class CreateAclsResponseV0:
    throttle_time: i32Timedelta = field(metadata=_MILLIS)
    results: tuple[AclCreationResultV0, ...]


@_entity(ApiKey.DESCRIBE_ACLS, 0, _request)
class DescribeAclsRequestV0:
    resource_type_filter: i8 = field(metadata=_INT8)
    resource_name_filter: str | None = field(metadata=_STRING)
    principal_filter: str | None = field(metadata=_STRING)
    host_filter: str | None = field(metadata=_STRING)
    operation: i8 = field(metadata=_INT8)
    permission_type: i8 = field(metadata=_INT8)


@_entity(ApiKey.DESCRIBE_ACLS, 0, _nested)
class AclDescriptionV0:
    principal: str = field(metadata=_STRING)
    host: str = field(metadata=_STRING)
    operation: i8 = field(metadata=_INT8)
    permission_type: i8 = field(metadata=_INT8)


@_entity(ApiKey.DESCRIBE_ACLS, 0, _nested)
class DescribeAclsResourceV0:
    resource_type: i8 = field(metadata=_INT8)
    resource_name: str = field(metadata=_STRING)
    acls: tuple[AclDescriptionV0, ...]


@_entity(ApiKey.DESCRIBE_ACLS, 0, _response)
class DescribeAclsResponseV0:
    throttle_time: i32Timedelta = field(metadata=_MILLIS)
    error_code: ErrorCode = field(metadata=_ERROR)
    error_message: str | None = field(metadata=_STRING)
    resources: tuple[DescribeAclsResourceV0, ...]


@_entity(ApiKey.DELETE_ACLS, 0, _nested)
class DeleteAclsFilterV0:
    resource_type_filter: i8 = field(metadata=_INT8)
    resource_name_filter: str | None = field(metadata=_STRING)
    principal_filter: str | None = field(metadata=_STRING)
    host_filter: str | None = field(metadata=_STRING)
    operation: i8 = field(metadata=_INT8)
    permission_type: i8 = field(metadata=_INT8)


@_entity(ApiKey.DELETE_ACLS, 0, _request)
class DeleteAclsRequestV0:
    filters: tuple[DeleteAclsFilterV0, ...]


@_entity(ApiKey.DELETE_ACLS, 0, _nested)
class DeleteAclsMatchingAclV0:
    error_code: ErrorCode = field(metadata=_ERROR)
    error_message: str | None = field(metadata=_STRING)
    resource_type: i8 = field(metadata=_INT8)
    resource_name: str = field(metadata=_STRING)
    principal: str = field(metadata=_STRING)
    host: str = field(metadata=_STRING)
    operation: i8 = field(metadata=_INT8)
    permission_type: i8 = field(metadata=_INT8)


@_entity(ApiKey.DELETE_ACLS, 0, _nested)
class DeleteAclsFilterResultV0:
    error_code: ErrorCode = field(metadata=_ERROR)
    error_message: str | None = field(metadata=_STRING)
    matching_acls: tuple[DeleteAclsMatchingAclV0, ...]


@_entity(ApiKey.DELETE_ACLS, 0, _response)
class DeleteAclsResponseV0:
    throttle_time: i32Timedelta = field(metadata=_MILLIS)
    filter_results: tuple[DeleteAclsFilterResultV0, ...]


# DescribeLogDirs v0 and AlterReplicaLogDirs v0 (kio ships v1, the same layout: v1 only lets the
# broker throttle).


@_entity(ApiKey.DESCRIBE_LOG_DIRS, 0, _nested)
class DescribableLogDirTopicV0:
    topic: str = field(metadata=_STRING)
    partitions: tuple[i32, ...] = field(metadata=_INT32_ARRAY, default=())


@_entity(ApiKey.DESCRIBE_LOG_DIRS, 0, _request)
class DescribeLogDirsRequestV0:
    topics: tuple[DescribableLogDirTopicV0, ...] | None


@_entity(ApiKey.DESCRIBE_LOG_DIRS, 0, _nested)
class DescribeLogDirsPartitionV0:
    partition_index: i32 = field(metadata=_INT32)
    partition_size: i64 = field(metadata=_INT64)
    offset_lag: i64 = field(metadata=_INT64)
    is_future_key: bool = field(metadata=_BOOL)


@_entity(ApiKey.DESCRIBE_LOG_DIRS, 0, _nested)
class DescribeLogDirsTopicV0:
    name: str = field(metadata=_STRING)
    partitions: tuple[DescribeLogDirsPartitionV0, ...]


@_entity(ApiKey.DESCRIBE_LOG_DIRS, 0, _nested)
class DescribeLogDirsResultV0:
    error_code: ErrorCode = field(metadata=_ERROR)
    log_dir: str = field(metadata=_STRING)
    topics: tuple[DescribeLogDirsTopicV0, ...]


@_entity(ApiKey.DESCRIBE_LOG_DIRS, 0, _response)
class DescribeLogDirsResponseV0:
    throttle_time: i32Timedelta = field(metadata=_MILLIS)
    results: tuple[DescribeLogDirsResultV0, ...]


@_entity(ApiKey.ALTER_REPLICA_LOG_DIRS, 0, _nested)
class AlterReplicaLogDirTopicV0:
    name: str = field(metadata=_STRING)
    partitions: tuple[i32, ...] = field(metadata=_INT32_ARRAY, default=())


@_entity(ApiKey.ALTER_REPLICA_LOG_DIRS, 0, _nested)
class AlterReplicaLogDirV0:
    path: str = field(metadata=_STRING)
    topics: tuple[AlterReplicaLogDirTopicV0, ...]


@_entity(ApiKey.ALTER_REPLICA_LOG_DIRS, 0, _request)
class AlterReplicaLogDirsRequestV0:
    dirs: tuple[AlterReplicaLogDirV0, ...]


@_entity(ApiKey.ALTER_REPLICA_LOG_DIRS, 0, _nested)
class AlterReplicaLogDirPartitionResultV0:
    partition_index: i32 = field(metadata=_INT32)
    error_code: ErrorCode = field(metadata=_ERROR)


@_entity(ApiKey.ALTER_REPLICA_LOG_DIRS, 0, _nested)
class AlterReplicaLogDirTopicResultV0:
    topic_name: str = field(metadata=_STRING)
    partitions: tuple[AlterReplicaLogDirPartitionResultV0, ...]


@_entity(ApiKey.ALTER_REPLICA_LOG_DIRS, 0, _response)
class AlterReplicaLogDirsResponseV0:
    throttle_time: i32Timedelta = field(metadata=_MILLIS)
    results: tuple[AlterReplicaLogDirTopicResultV0, ...]


MESSAGES: dict[tuple[int, int], tuple[type, type]] = {
    (ApiKey.LEADER_AND_ISR, 3): (LeaderAndIsrRequest, LeaderAndIsrResponse),
    (ApiKey.CREATE_ACLS, 0): (CreateAclsRequestV0, CreateAclsResponseV0),
    (ApiKey.DESCRIBE_ACLS, 0): (DescribeAclsRequestV0, DescribeAclsResponseV0),
    (ApiKey.DELETE_ACLS, 0): (DeleteAclsRequestV0, DeleteAclsResponseV0),
    (ApiKey.UPDATE_METADATA, 5): (UpdateMetadataRequest, UpdateMetadataResponse),
    (ApiKey.STOP_REPLICA, 1): (StopReplicaRequest, StopReplicaResponse),
    (ApiKey.CONTROLLED_SHUTDOWN, 2): (ControlledShutdownRequest, ControlledShutdownResponse),
    (ApiKey.OFFSET_FOR_LEADER_EPOCH, 0): _offset_for_leader_epoch(0),
    (ApiKey.OFFSET_FOR_LEADER_EPOCH, 1): _offset_for_leader_epoch(1),
    (ApiKey.PRODUCE, 0): _produce(0),
    (ApiKey.PRODUCE, 1): _produce(1),
    (ApiKey.PRODUCE, 2): _produce(2),
    (ApiKey.LIST_OFFSETS, 0): (ListOffsetsRequestV0, ListOffsetsResponseV0),
    (ApiKey.CREATE_TOPICS, 0): _create_topics(0),
    (ApiKey.CREATE_TOPICS, 1): _create_topics(1),
    (ApiKey.DELETE_TOPICS, 0): (DeleteTopicsRequestV0, DeleteTopicsResponseV0),
    (ApiKey.DESCRIBE_CONFIGS, 0): (DescribeConfigsRequestV0, DescribeConfigsResponseV0),
    (ApiKey.OFFSET_COMMIT, 0): _offset_commit(0),
    (ApiKey.OFFSET_COMMIT, 1): _offset_commit(1),
    (ApiKey.OFFSET_FETCH, 0): (OffsetFetchRequestV0, OffsetFetchResponseV0),
    (ApiKey.WRITE_TXN_MARKERS, 0): (WriteTxnMarkersRequestV0, WriteTxnMarkersResponseV0),
    (ApiKey.DESCRIBE_LOG_DIRS, 0): (DescribeLogDirsRequestV0, DescribeLogDirsResponseV0),
    (ApiKey.ALTER_REPLICA_LOG_DIRS, 0): (AlterReplicaLogDirsRequestV0, AlterReplicaLogDirsResponseV0),
}
