"""A broker asked about a partition it holds no replica of, on three real brokers and ZooKeeper:
every partition-level API answers NOT_LEADER_OR_FOLLOWER, as Kafka's brokers do for a partition
their metadata knows, so clients refresh their metadata and go to the leader (they answered
UNKNOWN_TOPIC_OR_PARTITION, which tells a client the topic may not exist)."""

import datetime
import socket

from kio.schema.delete_records.v2.request import DeleteRecordsPartition, DeleteRecordsRequest, DeleteRecordsTopic
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.list_offsets.v7.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from kio.schema.offset_for_leader_epoch.v4.request import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
)
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from tests.cluster.clients import TIMEOUT_S, agreed_view, create_topic
from tests.cluster.harness import read_frame, wait_until
from tests.harness import unique_topic
from tests.kafka_wire import decode_response, encode_request
from tests.unit.storage.conftest import batch


def _ask(broker, api_key: ApiKey, version: int, request):
    with socket.create_connection((broker.host, broker.port), timeout=TIMEOUT_S) as sock:
        sock.sendall(encode_request(api_key, version, request))
        return decode_response(api_key, version, read_frame(sock))


def _errors(broker, topic: str) -> dict[str, ErrorCode]:
    """The error each partition-level API answers for partition 0 of `topic`."""
    produce = ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout=datetime.timedelta(seconds=5),
        topic_data=(TopicProduceData(name=topic, partition_data=(PartitionProduceData(index=0, records=batch(b"v")),)),),
    )
    fetch = FetchRequest(
        replica_id=-1,
        max_wait=datetime.timedelta(0),
        min_bytes=1,
        topics=(FetchTopic(topic=topic, partitions=(FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1024),)),),
        forgotten_topics_data=(),
    )
    list_offsets = ListOffsetsRequest(
        replica_id=-1,
        isolation_level=0,
        topics=(ListOffsetsTopic(name=topic, partitions=(ListOffsetsPartition(partition_index=0, timestamp=-2),)),),
    )
    epoch_end = OffsetForLeaderEpochRequest(
        replica_id=-1,
        topics=(OffsetForLeaderTopic(topic=topic, partitions=(OffsetForLeaderPartition(partition=0, leader_epoch=0),)),),
    )
    delete_records = DeleteRecordsRequest(
        topics=(DeleteRecordsTopic(name=topic, partitions=(DeleteRecordsPartition(partition_index=0, offset=0),)),),
        timeout=datetime.timedelta(seconds=5),
    )
    answers = {
        "produce": _ask(broker, ApiKey.PRODUCE, 9, produce).responses[0].partition_responses[0],
        "fetch": _ask(broker, ApiKey.FETCH, 12, fetch).responses[0].partitions[0],
        "list_offsets": _ask(broker, ApiKey.LIST_OFFSETS, 7, list_offsets).topics[0].partitions[0],
        "offset_for_leader_epoch": _ask(broker, ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, epoch_end).topics[0].partitions[0],
        "delete_records": _ask(broker, ApiKey.DELETE_RECORDS, 2, delete_records).topics[0].partitions[0],
    }
    return {api: ErrorCode(answer.error_code) for api, answer in answers.items()}


def test_brokers_without_a_replica_answer_not_leader_or_follower(cluster):
    topic = unique_topic("elsewhere")
    create_topic(cluster, topic, 1, 1)
    view = wait_until(lambda: agreed_view(cluster, topic, (1, 2, 3), 1), TIMEOUT_S, "metadata agreement")
    (replica,) = view[0][1]
    for broker_id in {1, 2, 3} - {replica}:
        errors = _errors(cluster.broker(broker_id), topic)
        assert set(errors.values()) == {ErrorCode.not_leader_or_follower}, (broker_id, errors)
    assert _errors(cluster.broker(replica), topic)["list_offsets"] == ErrorCode.none
