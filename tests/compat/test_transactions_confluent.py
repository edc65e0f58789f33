"""Transactions with confluent-kafka (librdkafka) against real broker processes: committed and
aborted transactions as read_committed and read_uncommitted consumers see them, the LSO holding
read_committed readers while a transaction is open, and broker restarts (clean and kill -9) in
the middle of an open transaction."""

import random
import signal
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.harness import REPO, unique_topic

pytestmark = pytest.mark.compat

TIMEOUT_S = 30
COPIER = REPO / "tests" / "compat" / "transactional_copier.py"
KILLS = 4
OVERRIDES = {
    "transaction.state.log.num.partitions": "3",
    "offsets.topic.num.partitions": "3",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
}


@pytest.fixture
def txn_broker(broker_factory):
    return broker_factory(**{key.replace(".", "_"): value for key, value in OVERRIDES.items()})


def create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(TIMEOUT_S)


def transactional_producer(bootstrap: str, transactional_id: str | None = None, **extra) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id or f"tx-{uuid.uuid4().hex[:8]}",
            "transaction.timeout.ms": 60_000,
            "message.timeout.ms": 60_000,
            **extra,
        }
    )
    producer.init_transactions(TIMEOUT_S)
    return producer


def read_all(bootstrap: str, topic: str, isolation: str, expected: int | None = None, wait_s: float = 5) -> list[bytes]:
    """Values of partition 0 from the start: until `expected` are read, or nothing came for `wait_s`."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT_S
    quiet_until = time.monotonic() + wait_s
    try:
        while time.monotonic() < deadline and time.monotonic() < quiet_until:
            if expected is not None and len(values) >= expected:
                break
            message = consumer.poll(0.2)
            if message is None or message.error():
                continue
            values.append(message.value())
            quiet_until = time.monotonic() + wait_s
    finally:
        consumer.close()
    return values


def send(producer: Producer, topic: str, values: list[bytes]) -> None:
    for value in values:
        producer.produce(topic, value, partition=0)
    producer.flush(TIMEOUT_S)


def test_committed_transactions_are_seen_and_aborted_ones_only_by_read_uncommitted(txn_broker):
    topic = unique_topic("txn")
    create_topic(txn_broker.bootstrap, topic)
    producer = transactional_producer(txn_broker.bootstrap)
    producer.begin_transaction()
    send(producer, topic, [b"c1", b"c2"])
    producer.commit_transaction(TIMEOUT_S)
    producer.begin_transaction()
    send(producer, topic, [b"a1", b"a2"])
    producer.abort_transaction(TIMEOUT_S)
    producer.begin_transaction()
    send(producer, topic, [b"c3"])
    producer.commit_transaction(TIMEOUT_S)

    assert read_all(txn_broker.bootstrap, topic, "read_committed", expected=3) == [b"c1", b"c2", b"c3"]
    assert read_all(txn_broker.bootstrap, topic, "read_uncommitted", expected=5) == [b"c1", b"c2", b"a1", b"a2", b"c3"]


def test_an_open_transaction_holds_read_committed_readers_at_the_lso(txn_broker):
    topic = unique_topic("lso")
    create_topic(txn_broker.bootstrap, topic)
    plain = Producer({"bootstrap.servers": txn_broker.bootstrap})
    producer = transactional_producer(txn_broker.bootstrap)
    send(plain, topic, [b"before"])
    producer.begin_transaction()
    send(producer, topic, [b"open"])
    send(plain, topic, [b"after"])  # behind the open transaction: not stable yet
    assert read_all(txn_broker.bootstrap, topic, "read_committed", wait_s=2) == [b"before"]
    assert read_all(txn_broker.bootstrap, topic, "read_uncommitted", expected=3) == [b"before", b"open", b"after"]
    producer.commit_transaction(TIMEOUT_S)
    assert read_all(txn_broker.bootstrap, topic, "read_committed", expected=3) == [b"before", b"open", b"after"]


def test_a_new_producer_with_the_same_id_aborts_the_open_transaction(txn_broker):
    topic = unique_topic("fence")
    create_topic(txn_broker.bootstrap, topic)
    transactional_id = f"tx-{uuid.uuid4().hex[:8]}"
    zombie = transactional_producer(txn_broker.bootstrap, transactional_id)
    zombie.begin_transaction()
    send(zombie, topic, [b"zombie"])
    successor = transactional_producer(txn_broker.bootstrap, transactional_id)
    successor.begin_transaction()
    send(successor, topic, [b"successor"])
    successor.commit_transaction(TIMEOUT_S)
    assert read_all(txn_broker.bootstrap, topic, "read_committed", expected=1) == [b"successor"]


@pytest.mark.parametrize("crash", [False, True], ids=["restart", "kill-9"])
def test_a_broker_restart_during_an_open_transaction_leaves_nothing_half_visible(txn_broker, crash):
    topic = unique_topic("restart")
    create_topic(txn_broker.bootstrap, topic)
    producer = transactional_producer(txn_broker.bootstrap, "tx-restart", **{"transaction.timeout.ms": 5000, "message.timeout.ms": 5000})
    producer.begin_transaction()
    send(producer, topic, [b"open1", b"open2"])
    if crash:
        txn_broker.kill()
        txn_broker.start()
    else:
        txn_broker.restart()
    # The producer is gone with its transaction; the coordinator aborts it when it times out.
    assert read_all(txn_broker.bootstrap, topic, "read_committed", wait_s=2) == []
    successor = transactional_producer(txn_broker.bootstrap, "tx-restart")
    successor.begin_transaction()
    send(successor, topic, [b"next"])
    successor.commit_transaction(TIMEOUT_S)
    assert read_all(txn_broker.bootstrap, topic, "read_committed", expected=1) == [b"next"]
    assert read_all(txn_broker.bootstrap, topic, "read_uncommitted", expected=3) == [b"open1", b"open2", b"next"]


def test_a_copier_killed_at_random_points_copies_every_record_exactly_once(txn_broker):
    source, target = unique_topic("copy-a"), unique_topic("copy-b")
    create_topic(txn_broker.bootstrap, source, partitions=2)
    create_topic(txn_broker.bootstrap, target)
    expected = [f"record-{i}".encode() for i in range(200)]
    plain = Producer({"bootstrap.servers": txn_broker.bootstrap})
    for i, value in enumerate(expected):
        plain.produce(source, value, partition=i % 2)
    plain.flush(TIMEOUT_S)
    group, transactional_id = unique_topic("copier"), unique_topic("copier-tx")
    command = [sys.executable, str(COPIER), txn_broker.bootstrap, group, source, target, transactional_id]
    chance = random.Random(6)
    for _ in range(KILLS):
        copier = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL)
        time.sleep(chance.uniform(1.0, 4.0))
        copier.send_signal(signal.SIGKILL)
        copier.wait()
    copier = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL)
    try:
        read_all(txn_broker.bootstrap, target, "read_committed", expected=len(expected), wait_s=20)
    finally:
        copier.kill()
        copier.wait()
    copied = read_all(txn_broker.bootstrap, target, "read_committed", wait_s=2)
    assert sorted(copied) == sorted(expected)  # none lost, none twice
