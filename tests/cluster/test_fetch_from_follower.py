"""Fetch from the nearest replica (KIP-392) on three real brokers and ZooKeeper, each broker in a
rack of its own (broker.rack) with Kafka's RackAwareReplicaSelector: a librdkafka consumer whose
client.rack is a follower's reads everything produced (acks=all) from that follower, and keeps
reading while the leader is stopped; once that follower is stopped it goes back to the leader
and still reads everything."""

import datetime
import json
import socket
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.metadata.v12.request import MetadataRequest

from protocol.api_keys import ApiKey
from replication.replica_selector import RACK_AWARE_REPLICA_SELECTOR
from tests.cluster.clients import SMALL_INDEXES, TIMEOUT_S, agreed_view, create_topic, full_isrs, wait_formed
from tests.cluster.harness import decode_response, encode_request, read_frame, wait_until
from tests.harness import unique_topic

pytestmark = pytest.mark.slow

BATCHES = 40
PER_BATCH = 10
# Short enough for a stopped follower to leave the ISR soon, long enough for no other to.
LAG_TIME_MS = 4000


def _ask(broker, api_key: ApiKey, version: int, request):
    with socket.create_connection((broker.host, broker.port), timeout=TIMEOUT_S) as sock:
        sock.sendall(encode_request(api_key, version, request))
        return decode_response(api_key, version, read_frame(sock))


def _racks(broker) -> dict[int, str | None]:
    response = _ask(broker, ApiKey.METADATA, 12, MetadataRequest(topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    return {node.node_id: node.rack for node in response.brokers}


def _consumer_fetch(broker, topic: str, offset: int):
    """What `broker` answers a consumer's Fetch v12 (no rack) for partition 0 from `offset`."""
    request = FetchRequest(
        replica_id=-1,
        max_wait=datetime.timedelta(0),
        min_bytes=1,
        topics=(FetchTopic(topic=topic, partitions=(FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1024),)),),
        forgotten_topics_data=(),
    )
    return _ask(broker, ApiKey.FETCH, 12, request).responses[0].partitions[0]


def _produce(bootstrap: str, topic: str, first: int) -> list[bytes]:
    """BATCHES small batches of PER_BATCH values (many batches: the consumer needs many fetches)."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "enable.idempotence": True})
    values = []
    for batch in range(BATCHES):
        for n in range(PER_BATCH):
            value = b"value-%06d" % (first + batch * PER_BATCH + n)
            producer.produce(topic, value, partition=0)
            values.append(value)
        assert producer.flush(TIMEOUT_S) == 0
    return values


class _RackConsumer:
    """A librdkafka consumer in a rack, fetching little at a time (so that reading the topic
    takes many fetches, not one prefetch), with the broker it fetches partition 0 from and its
    bytes received per broker from its statistics."""

    def __init__(self, bootstrap: str, topic: str, rack: str) -> None:
        self.topic = topic
        self.stats: dict = {}
        self.received: list[bytes] = []
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap,
            "group.id": unique_topic("ffetch"),
            "client.rack": rack,
            "enable.auto.commit": False,
            "message.max.bytes": 1000,
            "fetch.max.bytes": 1024,
            "max.partition.fetch.bytes": 1024,
            "queued.max.messages.kbytes": 1,
            "socket.timeout.ms": 5000,
            "statistics.interval.ms": 200,
            "stats_cb": self._on_stats,
        })
        self.consumer.assign([TopicPartition(topic, 0, 0)])

    def _on_stats(self, text: str) -> None:
        self.stats = json.loads(text)

    def _poll(self, timeout_s: float) -> None:
        message = self.consumer.poll(timeout_s)
        if message is not None and message.error() is None:
            self.received.append(message.value())

    def read(self, count: int, timeout_s: float) -> list[bytes]:
        deadline = time.monotonic() + timeout_s
        while len(self.received) < count and time.monotonic() < deadline:
            self._poll(0.2)
        values, self.received = self.received[:count], self.received[count:]
        return values

    def fetching_from(self) -> int | None:
        self._poll(0)  # statistics arrive in polls
        partition = self.stats.get("topics", {}).get(self.topic, {}).get("partitions", {}).get("0")
        return None if partition is None else partition["broker"]

    def received_bytes(self) -> dict[int, int]:
        self._poll(0)
        return {broker["nodeid"]: broker["rxbytes"] for broker in self.stats.get("brokers", {}).values() if broker["nodeid"] >= 0}

    def close(self) -> None:
        self.consumer.close()


def test_a_consumer_reads_the_follower_in_its_rack_and_goes_back_to_the_leader_when_it_stops(cluster_factory):
    cluster = cluster_factory(
        overrides={
            **SMALL_INDEXES,
            "replica.selector.class": RACK_AWARE_REPLICA_SELECTOR,
            "replica.lag.time.max.ms": str(LAG_TIME_MS),
        },
        start=False,
    )
    for broker_id, broker in cluster.brokers.items():
        broker.settings["broker.rack"] = f"rack-{broker_id}"
    cluster.start()
    wait_formed(cluster)
    assert _racks(cluster.broker(1)) == {1: "rack-1", 2: "rack-2", 3: "rack-3"}

    topic = unique_topic("ffetch")
    create_topic(cluster, topic, 1, 3)
    wait_until(lambda: full_isrs(cluster, topic, 1), TIMEOUT_S, "a full ISR")
    leader = agreed_view(cluster, topic, (1, 2, 3), 1)[0][0]
    follower = min({1, 2, 3} - {leader})

    first = _produce(cluster.bootstrap, topic, 0)
    # The follower learns the HW from the leader's fetch answers, and serves consumers up to it.
    wait_until(
        lambda: _consumer_fetch(cluster.broker(follower), topic, 0).high_watermark == len(first),
        TIMEOUT_S, "the follower to learn the high watermark",
    )

    consumer = _RackConsumer(cluster.bootstrap, topic, f"rack-{follower}")
    try:
        # The leader answers the first fetch with the follower as preferred read replica and no
        # records: the first record read came from the follower.
        assert consumer.read(1, TIMEOUT_S) == first[:1]
        assert wait_until(lambda: consumer.fetching_from() == follower or None, TIMEOUT_S, "stats")
        cluster.broker(leader).pause()
        try:
            # Within the ZooKeeper session timeout: the leader keeps its leadership.
            assert consumer.read(len(first) - 1, 4) == first[1:]
        finally:
            cluster.broker(leader).resume()
        values_size = len(b"".join(first))
        received = wait_until(
            lambda: (r := consumer.received_bytes()).get(follower, 0) > values_size and r, TIMEOUT_S, "stats"
        )
        assert received[leader] < values_size, received

        wait_until(lambda: full_isrs(cluster, topic, 1), TIMEOUT_S, "a full ISR again")
        cluster.broker(follower).pause()
        try:
            # acks=all waits until the stopped follower has left the ISR; the consumer's fetches
            # to it time out, and the leader serves it (the follower is no candidate any more).
            second = _produce(cluster.bootstrap, topic, len(first))
            assert consumer.read(len(second), TIMEOUT_S) == second
            assert wait_until(lambda: consumer.fetching_from() == leader or None, TIMEOUT_S, "stats")
        finally:
            cluster.broker(follower).resume()
    finally:
        consumer.close()
