"""Transactions against three real brokers and ZooKeeper: the transaction coordinator writes its
COMMIT / ABORT markers to partitions led by other brokers (WriteTxnMarkers), so consumers see
committed transactions only (read_committed) or everything (read_uncommitted), and offsets sent
in a transaction become the group's once it commits. Every broker asked for a coordinator at
once on a fresh cluster (each racing to create the internal topic) names one."""

import socket
from concurrent.futures import ThreadPoolExecutor

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from tests.cluster.clients import TIMEOUT_S, agreed_view, create_topic, read_values
from tests.cluster.harness import read_frame, wait_until
from tests.harness import unique_topic
from tests.kafka_wire import decode_response, encode_request

_PARTITIONS = 3


def _transaction(producer: Producer, topic: str, label: str, commit: bool, offsets=None, group=None) -> list[bytes]:
    values = [b"%s-%d" % (label.encode(), p) for p in range(_PARTITIONS)]
    producer.begin_transaction()
    for partition, value in enumerate(values):
        producer.produce(topic, value, partition=partition)
    if offsets is not None:
        producer.send_offsets_to_transaction(offsets, group, TIMEOUT_S)
    assert producer.flush(TIMEOUT_S) == 0  # aborting drops records not sent yet
    if commit:
        producer.commit_transaction(TIMEOUT_S)
    else:
        producer.abort_transaction(TIMEOUT_S)
    return values


def _read_all(bootstrap: str, topic: str, isolation: str, count: int) -> list[bytes]:
    """The values of every partition of `topic`, until `count` are read (or the timeout)."""
    return sorted(read_values(bootstrap, topic, count, range(_PARTITIONS), isolation))


def test_a_transaction_spanning_leaders_on_every_broker_commits_and_aborts(cluster):
    topic = unique_topic("txn")
    create_topic(cluster, topic, _PARTITIONS, 3)
    agreed = wait_until(lambda: agreed_view(cluster, topic, (1, 2, 3), _PARTITIONS), TIMEOUT_S, "metadata agreement")
    assert sorted(leader for leader, _, _ in agreed.values()) == [1, 2, 3]  # whoever coordinates, two are remote

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": unique_topic("tid")})
    producer.init_transactions(TIMEOUT_S)
    group = unique_topic("group")
    member = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    committed = _transaction(producer, topic, "first", commit=True)
    aborted = _transaction(producer, topic, "aborted", commit=False)
    offsets = [TopicPartition(topic, p, 1) for p in range(_PARTITIONS)]
    metadata = member.consumer_group_metadata()
    committed += _transaction(producer, topic, "last", commit=True, offsets=offsets, group=metadata)

    everything = committed + aborted
    assert _read_all(cluster.bootstrap, topic, "read_committed", len(committed)) == sorted(committed)
    assert _read_all(cluster.bootstrap, topic, "read_uncommitted", len(everything)) == sorted(everything)
    found = member.committed([TopicPartition(topic, p) for p in range(_PARTITIONS)], TIMEOUT_S)
    assert [(tp.partition, tp.offset) for tp in found] == [(p, 1) for p in range(_PARTITIONS)]
    member.close()


_GROUP, _TRANSACTION = 0, 1


def _find_coordinator(broker, key_type: int, key: str):
    """FindCoordinator v3 to `broker` on a connection of its own: the response."""
    request = FindCoordinatorRequest(key=key, key_type=key_type)
    with socket.create_connection((broker.host, broker.port), timeout=TIMEOUT_S) as sock:
        sock.sendall(encode_request(ApiKey.FIND_COORDINATOR, 3, request))
        return decode_response(ApiKey.FIND_COORDINATOR, 3, read_frame(sock))


@pytest.mark.parametrize("key_type", [_GROUP, _TRANSACTION], ids=["group", "transaction"])
def test_brokers_racing_to_create_a_coordinator_topic_all_name_its_coordinator(cluster, key_type):
    """Each broker creates the internal topic on its first FindCoordinator; asked at once, all but
    one lose the race (TOPIC_ALREADY_EXISTS) or see the topic before its leaders. Each answers the
    coordinator once the topic reaches its metadata (librdkafka's send_offsets_to_transaction
    hung on the COORDINATOR_NOT_AVAILABLE they used to answer)."""
    key = unique_topic("key")
    brokers = [cluster.broker(broker_id) for broker_id in (1, 2, 3)]
    with ThreadPoolExecutor(len(brokers)) as pool:
        answers = list(pool.map(lambda broker: _find_coordinator(broker, key_type, key), brokers))
    assert [ErrorCode(answer.error_code) for answer in answers] == [ErrorCode.none] * 3
    assert len({answer.node_id for answer in answers}) == 1

