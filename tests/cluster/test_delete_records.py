"""DeleteRecords on three real brokers and ZooKeeper. Kafka's leader answers once every replica
on a live broker has dropped the records (DelayedDeleteRecords, the low watermark): followers take
the leader's log start as they fetch. So a follower that does not fetch holds the answer back
until the request's timeout, and the records stay deleted when the leader dies right after the
answer and a follower takes over."""

import datetime

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic
from kio.schema.delete_records.v2.request import DeleteRecordsPartition, DeleteRecordsRequest, DeleteRecordsTopic

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from tests.cluster.clients import TIMEOUT_S, admin_client, read_values, send_request, topic_view, wait_formed
from tests.cluster.harness import wait_until
from tests.harness import unique_topic

pytestmark = pytest.mark.slow

_RECORDS = 20


def _delete_before(broker, topic: str, offset: int, timeout_ms: int):
    """DeleteRecords for partition 0, straight to `broker`: (error, low watermark)."""
    request = DeleteRecordsRequest(
        topics=(DeleteRecordsTopic(name=topic, partitions=(DeleteRecordsPartition(partition_index=0, offset=offset),)),),
        timeout=datetime.timedelta(milliseconds=timeout_ms),
    )
    answer = send_request(broker.bootstrap, ApiKey.DELETE_RECORDS, 2, request).topics[0].partitions[0]
    return ErrorCode(answer.error_code), answer.low_watermark


def _leader(broker, topic: str) -> int:
    """Partition 0's leader in `broker`'s metadata (-1 while it has none)."""
    view = topic_view(broker.bootstrap, topic)
    return view[0][0] if view else -1


def _watermarks(bootstrap: str, topic: str) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("watermarks")})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT_S)
    finally:
        consumer.close()


def test_delete_records_waits_for_every_live_replica_and_stays_done_when_the_leader_dies(cluster_factory):
    cluster = cluster_factory(overrides={"replica.lag.time.max.ms": "2000"})
    wait_formed(cluster)
    topic = unique_topic("deleted")
    admin = admin_client(cluster.bootstrap)
    created = admin.create_topics(
        [NewTopic(topic, num_partitions=1, replica_assignment=[[1, 2, 3]], config={"min.insync.replicas": "2"})],
        operation_timeout=30,
    )
    created[topic].result(timeout=TIMEOUT_S)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for number in range(_RECORDS):
        producer.produce(topic, value=str(number).encode(), partition=0)
    assert producer.flush(TIMEOUT_S) == 0
    leader = wait_until(lambda: (found := _leader(cluster.broker(1), topic)) > 0 and found, TIMEOUT_S, "a leader")
    follower = next(b for b in (1, 2, 3) if b != leader)

    # A follower that does not fetch (its broker still alive to ZooKeeper) holds the answer back.
    cluster.broker(follower).pause()
    try:
        error, _ = _delete_before(cluster.broker(leader), topic, 5, timeout_ms=1000)
        assert error == ErrorCode.request_timed_out
    finally:
        cluster.broker(follower).resume()
    assert _delete_before(cluster.broker(leader), topic, 10, timeout_ms=30_000) == (ErrorCode.none, 10)

    # Every live replica has dropped offsets 0-9 by the answer: whichever leads next has too.
    cluster.broker(leader).kill()
    survivor = next(b for b in (1, 2, 3) if b != leader)
    wait_until(lambda: _leader(cluster.broker(survivor), topic) not in (-1, leader), TIMEOUT_S, "a new leader")
    assert _watermarks(cluster.broker(survivor).bootstrap, topic) == (10, _RECORDS)
    values = read_values(cluster.broker(survivor).bootstrap, topic, _RECORDS - 10, start=OFFSET_BEGINNING)
    assert values == [str(number).encode() for number in range(10, _RECORDS)]
