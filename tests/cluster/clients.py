"""Client-side helpers the cluster tests share: an AdminClient, the cluster formed, what the
brokers say of a topic (and whether they agree), the controller from ZooKeeper, a topic made,
records read back."""

import asyncio
import json
import socket
import time
from collections.abc import Iterable

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.exceptions import NoNodeError
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest

from protocol.api_keys import ApiKey
from replication.broker_client import BrokerClient
from tests.cluster.checker import partition_batches, replicas_agree
from tests.cluster.harness import read_frame, wait_until
from tests.harness import unique_topic
from tests.kafka_wire import decode_describe_transactions, encode_request

TIMEOUT_S = 60


# Small preallocated indexes: the cluster tests make many partitions and write little.
SMALL_INDEXES = {"log.index.size.max.bytes": "65536"}


def wait_formed(cluster) -> None:
    def formed() -> bool:
        for broker_id in (1, 2, 3):
            try:
                metadata = admin_client(cluster.broker(broker_id).bootstrap).list_topics(timeout=5)
            except KafkaException:
                return False
            if sorted(metadata.brokers) != [1, 2, 3] or metadata.controller_id < 0:
                return False
        return True

    wait_until(formed, TIMEOUT_S, "the cluster formed")


def admin_client(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 5000})


def describe_transaction(cluster, broker_id: int, transactional_id: str):
    """What broker `broker_id` answers DescribeTransactions for the id: its one entry, read field
    by field, since an id in the Empty state has the start time -1 that kio refuses."""
    broker = cluster.broker(broker_id)
    request = DescribeTransactionsRequest(transactional_ids=(transactional_id,))
    with socket.create_connection((broker.host, broker.port), timeout=TIMEOUT_S) as sock:
        sock.sendall(encode_request(ApiKey.DESCRIBE_TRANSACTIONS, 0, request))
        (described,) = decode_describe_transactions(read_frame(sock))
    return described


def topic_view(bootstrap: str, topic: str) -> dict[int, tuple[int, tuple[int, ...], tuple[int, ...]]] | None:
    """partition -> (leader, replicas, isr) as the broker at `bootstrap` describes `topic`."""
    try:
        # All topics: naming one would let the client's Metadata request auto-create it.
        metadata = admin_client(bootstrap).list_topics(timeout=5)
    except KafkaException:
        return None
    described = metadata.topics.get(topic)
    if described is None or described.error is not None:
        return None
    return {
        p: (info.leader, tuple(info.replicas), tuple(info.isrs)) for p, info in sorted(described.partitions.items())
    }


def zookeeper_isrs(cluster, topic: str, partitions: int) -> dict[int, list[int]]:
    """partition -> its ISR, sorted, as ZooKeeper has it."""
    with cluster.zookeeper_client() as zk:
        states = {p: zk.get(f"/brokers/topics/{topic}/partitions/{p}/state")[0] for p in range(partitions)}
    return {p: sorted(json.loads(state)["isr"]) for p, state in states.items()}


def full_isrs(cluster, topic: str, partitions: int) -> bool:
    """Every partition's ISR holds every broker, in ZooKeeper and in every broker's Metadata,
    and every partition has a leader."""
    brokers = tuple(sorted(cluster.brokers))
    if any(tuple(isr) != brokers for isr in zookeeper_isrs(cluster, topic, partitions).values()):
        return False
    for broker_id in brokers:
        described = topic_view(cluster.broker(broker_id).bootstrap, topic)
        if described is None or len(described) != partitions:
            return False
        if any(leader not in brokers or tuple(sorted(isr)) != brokers for leader, _, isr in described.values()):
            return False
    return True


def replicas_identical(cluster, topic: str, partition: int) -> str | None:
    """None when every replica of the partition holds the same batches, byte for byte; else
    what differs."""
    dirs = [str(broker.data_dirs[0] / f"{topic}-{partition}") for broker in cluster.brokers.values()]
    lengths = {d: len(partition_batches(d)) for d in dirs}
    return replicas_agree(dirs) or (None if len(set(lengths.values())) == 1 else f"batches per replica {lengths}")


def zk_controller(cluster) -> tuple[int, int]:
    """(controller id, controller epoch) from ZooKeeper, of one controller: the two znodes are
    read apart, and between the reads the controller's session may end and another broker be
    elected, which would pair the old controller with the new epoch. So /controller is read
    again, and must be the same znode (its creation's zxid)."""
    with cluster.zookeeper_client() as zk:
        for _ in range(10):
            controller, stat = zk.get("/controller")
            epoch, _ = zk.get("/controller_epoch")
            if zk.get("/controller")[1].czxid == stat.czxid:
                return json.loads(controller)["brokerid"], int(epoch)
    raise AssertionError("the controller changed at every one of 10 reads")


def create_topic(cluster, topic: str, partitions: int, replication_factor: int, config: dict | None = None) -> None:
    admin = admin_client(cluster.bootstrap)  # kept: the futures die with their client
    new = NewTopic(topic, partitions, replication_factor, config=config or {})
    futures = admin.create_topics([new], operation_timeout=30)
    futures[topic].result(timeout=TIMEOUT_S)


def agreed_view(cluster, topic: str, broker_ids, partitions: int):
    """What every broker of `broker_ids` says of `topic`, when all say the same and every
    partition has a leader."""
    views = [topic_view(cluster.broker(b).bootstrap, topic) for b in broker_ids]
    first = views[0]
    if first is None or len(first) != partitions or any(view != first for view in views):
        return None
    if any(leader < 0 for leader, _, _ in first.values()):
        return None
    return first


def zk_controller_or_none(cluster) -> tuple[int, int] | None:
    """zk_controller, or None between controllers (the ephemeral /controller is gone)."""
    try:
        return zk_controller(cluster)
    except NoNodeError:
        return None


def read_values(
    bootstrap: str,
    topic: str,
    count: int,
    partitions: Iterable[int] = (0,),
    isolation: str = "read_uncommitted",
    start: int = 0,
) -> list[bytes]:
    """The values of `partitions` of `topic` from offset `start` (OFFSET_BEGINNING: their log
    start), until `count` (or the timeout)."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": unique_topic("reader"),
        "enable.auto.commit": False, "isolation.level": isolation,
    })
    consumer.assign([TopicPartition(topic, p, start) for p in partitions])
    read = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(read) < count and time.monotonic() < deadline:
        message = consumer.poll(1)
        if message is not None and message.error() is None:
            read.append(message.value())
    consumer.close()
    return read


def send_request(bootstrap: str, api_key: ApiKey, version: int, request):
    """One request to the broker at `bootstrap`, over the inter-broker client; its response."""
    host, port = bootstrap.rsplit(":", 1)

    async def call():
        client = BrokerClient(host, int(port), "test", connect_timeout_s=5, request_timeout_s=30)
        try:
            return await client.send(api_key, version, request)
        finally:
            await client.close()

    return asyncio.run(call())
