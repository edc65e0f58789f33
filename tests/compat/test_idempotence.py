"""Idempotent producers of every client, each record written exactly once and in order although
answers are lost: the broker sits behind a proxy that swallows the first answer to every
produced batch and closes the connection (tests/dropping_proxy.py), so each batch is appended,
retried by the client on a new connection, and recognised by the broker as a duplicate. And
confluent-kafka with the broker killed (SIGKILL) between appending a batch and answering: the
producer state rebuilt after the crash recognises the batch when it comes again.

Each record's value names its partition and its place there ("<partition>-<i>"); a partition is
correct when it holds exactly those values, in that order, from offset 0, and every delivery
report names the offset where its record is.
"""

import asyncio
import json
import shutil
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaProducer

from tests.compat.test_confluent_kafka import read_partition
from tests.compat.test_restart import watermarks
from tests.dropping_proxy import ResponseDroppingProxy
from tests.harness import run, unique_topic

pytestmark = pytest.mark.compat

TIMEOUT_S = 60
PARTITIONS = 3
RECORDS = 150  # per partition
JS_DIR = Path(__file__).resolve().parent / "js"


@pytest.fixture
def proxied_broker(broker_factory):
    """A broker that clients reach (after bootstrapping) through a ResponseDroppingProxy."""
    proxy = ResponseDroppingProxy()
    # One offsets partition: the read-back consumer's group.id makes the broker create them,
    # each with its preallocated indexes.
    broker = broker_factory(
        advertised_listeners=f"PLAINTEXT://{proxy.address}", offsets_topic_num_partitions="1"
    )
    proxy.start(broker.port)
    yield broker, proxy
    proxy.close()
    assert "Traceback" not in broker.log(), broker.log()[-5000:]


def create_topic(broker, partitions: int = PARTITIONS) -> str:
    topic = unique_topic("idempotent")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=TIMEOUT_S)
    return topic


def value(partition: int, i: int) -> bytes:
    return f"{partition}-{i}".encode()


def assert_exactly_once_in_order(broker, topic: str, acked: dict[bytes, int]) -> None:
    """Every partition holds its records once each, in order; `acked` maps each value to the
    offset its delivery report gave."""
    for partition in range(PARTITIONS):
        messages = read_partition(broker.bootstrap, topic, partition, RECORDS)
        assert watermarks(broker, topic, partition) == (0, RECORDS)
        assert [m.value() for m in messages] == [value(partition, i) for i in range(RECORDS)]
        assert [m.offset() for m in messages] == list(range(RECORDS))
        assert all(acked[m.value()] == m.offset() for m in messages)


def produce_with_confluent_kafka(broker, topic: str) -> dict[bytes, int]:
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "enable.idempotence": True,
            "linger.ms": 5,
            "batch.num.messages": 25,
            "message.timeout.ms": TIMEOUT_S * 1000,
            "retry.backoff.ms": 20,
            "reconnect.backoff.ms": 10,
            "reconnect.backoff.max.ms": 200,
        }
    )
    acked, errors = {}, []

    def on_delivery(err, msg):
        if err is None:
            acked[msg.value()] = msg.offset()
        else:
            errors.append(err)

    for i in range(RECORDS):
        for partition in range(PARTITIONS):
            producer.produce(topic, value(partition, i), partition=partition, on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(TIMEOUT_S) == 0
    assert errors == []
    return acked


def test_confluent_kafka(proxied_broker):
    broker, proxy = proxied_broker
    topic = create_topic(broker)
    acked = produce_with_confluent_kafka(broker, topic)
    assert proxy.dropped >= PARTITIONS * RECORDS // 25
    assert_exactly_once_in_order(broker, topic, acked)


def test_kafka_python_with_its_default_idempotence(proxied_broker):
    broker, proxy = proxied_broker
    topic = create_topic(broker)
    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap,
        linger_ms=5,
        batch_size=600,
        retry_backoff_ms=20,
        reconnect_backoff_ms=10,
        request_timeout_ms=10_000,
        max_block_ms=TIMEOUT_S * 1000,
    )
    try:
        assert producer.config["enable_idempotence"]
        futures = [
            (value(p, i), producer.send(topic, value(p, i), partition=p))
            for i in range(RECORDS)
            for p in range(PARTITIONS)
        ]
        producer.flush(TIMEOUT_S)
        acked = {v: f.get(timeout=TIMEOUT_S).offset for v, f in futures}
    finally:
        producer.close(timeout=TIMEOUT_S)
    assert proxy.dropped > 0
    assert_exactly_once_in_order(broker, topic, acked)


def test_aiokafka(proxied_broker):
    broker, proxy = proxied_broker
    topic = create_topic(broker)

    async def produce() -> dict[bytes, int]:
        producer = AIOKafkaProducer(
            bootstrap_servers=broker.bootstrap,
            enable_idempotence=True,
            linger_ms=5,
            max_batch_size=600,
            retry_backoff_ms=20,
            request_timeout_ms=10_000,
        )
        await producer.start()
        try:
            sends = [
                (value(p, i), await producer.send(topic, value(p, i), partition=p))
                for i in range(RECORDS)
                for p in range(PARTITIONS)
            ]
            return {v: (await f).offset for v, f in sends}
        finally:
            await producer.stop()

    acked = asyncio.run(asyncio.wait_for(produce(), TIMEOUT_S))
    assert proxy.dropped > 0
    assert_exactly_once_in_order(broker, topic, acked)


@pytest.mark.skipif(
    shutil.which("node") is None or not (JS_DIR / "node_modules" / "kafkajs").is_dir(),
    reason="node or kafkajs is not installed (.ci/setup test installs them)",
)
def test_kafkajs(proxied_broker):
    broker, proxy = proxied_broker
    topic = create_topic(broker)
    command = ["node", str(JS_DIR / "idempotent.js"), broker.bootstrap, topic, str(PARTITIONS), str(RECORDS)]
    result = run(command, timeout=120)
    assert result.returncode == 0, result.stderr.decode()[-5000:]
    reports = json.loads(result.stdout)["acked"]
    assert all(r["errorCode"] == 0 for r in reports)
    acked = {}
    for partition in range(PARTITIONS):
        offsets = [r["baseOffset"] for r in reports if r["partition"] == partition]
        acked.update({value(partition, i): offset for i, offset in enumerate(offsets)})
    assert proxy.dropped > 0
    assert_exactly_once_in_order(broker, topic, acked)


def test_confluent_kafka_across_kill_9(proxied_broker):
    """The broker is killed (SIGKILL) right after it appended a batch whose answer the proxy
    drops, and restarted: the client sends the batch again to the restarted broker, which must
    know it from the producer state it rebuilt after the crash."""
    broker, proxy = proxied_broker
    topic = create_topic(broker)
    restarts = []

    def crash_and_restart(dropped: int) -> None:
        if dropped in (3, 9):
            broker.kill()
            broker.start()
            restarts.append(dropped)

    proxy.on_drop = crash_and_restart
    acked = produce_with_confluent_kafka(broker, topic)
    assert restarts == [3, 9]
    assert_exactly_once_in_order(broker, topic, acked)
