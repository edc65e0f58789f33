"""confluent-kafka (librdkafka) against a real broker process, over real sockets.

Consumers use assign()/seek only (consumer groups have tests of their own). librdkafka insists on
a group.id; with auto-commit off and no subscribe() it never joins that group.
"""

import os
import socket
import struct
import threading
import time

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from tests.harness import unique_topic

pytestmark = pytest.mark.compat

TIMEOUT_S = 20
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def make_producer(bootstrap: str, **extra) -> Producer:
    config = {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": False,
        "message.timeout.ms": TIMEOUT_S * 1000,
        "socket.timeout.ms": 10_000,
        **extra,
    }
    return Producer(config)


def make_consumer(bootstrap: str, **extra) -> Consumer:
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": "logway-compat-unused",  # required by the client; never joined
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "socket.timeout.ms": 10_000,
        **extra,
    }
    return Consumer(config)


def produce(producer: Producer, topic: str, records: list[dict], partition: int = 0) -> list[int]:
    """Produce `records` (kwargs of Producer.produce) and return their delivered offsets."""
    reports: list[tuple] = []

    def on_delivery(err, msg):
        reports.append((err, msg.offset() if err is None else None))

    for record in records:
        producer.produce(topic, partition=partition, on_delivery=on_delivery, **record)
        producer.poll(0)
    assert producer.flush(TIMEOUT_S) == 0, "messages still undelivered"
    errors = [err for err, _ in reports if err is not None]
    assert not errors, errors
    assert len(reports) == len(records)
    return [offset for _, offset in reports]


def consume(consumer: Consumer, count: int, timeout_s: float = TIMEOUT_S) -> list:
    """Poll until `count` messages arrived (no errors allowed) or the time is up."""
    messages = []
    deadline = time.monotonic() + timeout_s
    while len(messages) < count and time.monotonic() < deadline:
        batch = consumer.consume(num_messages=count - len(messages), timeout=0.5)
        for msg in batch:
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise AssertionError(f"consumer error: {msg.error()}")
            messages.append(msg)
    return messages


def read_partition(
    bootstrap: str, topic: str, partition: int, count: int, start=OFFSET_BEGINNING
) -> list:
    consumer = make_consumer(bootstrap)
    try:
        consumer.assign([TopicPartition(topic, partition, start)])
        return consume(consumer, count)
    finally:
        consumer.close()


def test_list_topics_shows_broker_and_created_topic(shared_broker):
    topic = unique_topic("meta")
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])
    futures[topic].result(timeout=TIMEOUT_S)

    producer = make_producer(shared_broker.bootstrap)
    metadata = producer.list_topics(topic, timeout=TIMEOUT_S)
    assert list(metadata.brokers) == [0]
    broker = metadata.brokers[0]
    assert (broker.host, broker.port) == ("127.0.0.1", shared_broker.port)
    assert metadata.controller_id == 0
    assert metadata.cluster_id
    described = metadata.topics[topic]
    assert described.error is None
    assert sorted(described.partitions) == [0, 1, 2]
    for p in described.partitions.values():
        assert p.leader == 0 and p.replicas == [0] and p.isrs == [0] and p.error is None

    all_topics = producer.list_topics(timeout=TIMEOUT_S).topics
    assert topic in all_topics


@pytest.mark.parametrize("codec", CODECS)
def test_produce_and_read_back_every_codec(shared_broker, codec):
    topic = unique_topic(f"codec-{codec}")
    producer = make_producer(
        shared_broker.bootstrap, **{"compression.type": codec, "linger.ms": 20}
    )
    base_ts = int(time.time() * 1000) - 60_000
    records = []
    for i in range(200):
        record = {
            "key": f"key-{i}".encode(),
            "value": (f"value-{i}-" * (i % 7 + 1)).encode(),
            "timestamp": base_ts + i,
            "headers": [("index", str(i).encode()), ("codec", codec.encode())],
        }
        if i % 50 == 17:
            record["value"] = None  # a null value (tombstone)
        if i % 50 == 23:
            record["key"] = None
            record["headers"] = None
        records.append(record)
    offsets = produce(producer, topic, records)
    assert offsets == list(range(200)), "delivery reports give consecutive offsets in order"

    messages = read_partition(shared_broker.bootstrap, topic, 0, len(records))
    assert [m.offset() for m in messages] == list(range(200))
    for record, msg in zip(records, messages):
        assert msg.key() == record["key"]
        assert msg.value() == record["value"]
        assert msg.timestamp() == (TIMESTAMP_CREATE_TIME, record["timestamp"])
        assert (msg.headers() or None) == record["headers"]


def test_many_messages_with_linger_and_offsets_increase(shared_broker):
    topic = unique_topic("batch")
    producer = make_producer(
        shared_broker.bootstrap,
        **{"linger.ms": 50, "batch.num.messages": 1000, "compression.type": "lz4"},
    )
    count = 5000
    records = [
        {"key": str(i % 10).encode(), "value": os.urandom(8) + str(i).encode()}
        for i in range(count)
    ]
    offsets = produce(producer, topic, records)
    assert offsets == list(range(count))

    messages = read_partition(shared_broker.bootstrap, topic, 0, count)
    assert [m.value() for m in messages] == [r["value"] for r in records]
    assert [m.key() for m in messages] == [r["key"] for r in records]


def test_large_message_near_message_max_bytes(shared_broker):
    topic = unique_topic("large")
    producer = make_producer(shared_broker.bootstrap, **{"message.max.bytes": 1_000_000})
    big = os.urandom(990_000)  # incompressible, and the batch stays under max.message.bytes
    offsets = produce(
        producer, topic, [{"value": b"small-before"}, {"value": big}, {"value": b"small-after"}]
    )
    assert offsets == [0, 1, 2]

    messages = read_partition(shared_broker.bootstrap, topic, 0, 3)
    assert [m.value() for m in messages] == [b"small-before", big, b"small-after"]

    # Starting at the big record: its batch is larger than fetch.max.bytes allows per partition.
    consumer = make_consumer(shared_broker.bootstrap, **{"max.partition.fetch.bytes": 65536})
    try:
        consumer.assign([TopicPartition(topic, 0, 1)])
        got = consume(consumer, 2)
    finally:
        consumer.close()
    assert [m.value() for m in got] == [big, b"small-after"]


def test_too_large_message_is_refused(shared_broker):
    topic = unique_topic("toolarge")
    producer = make_producer(shared_broker.bootstrap, **{"message.max.bytes": 3_000_000})
    reports = []
    producer.produce(
        topic, value=os.urandom(2_000_000), on_delivery=lambda err, msg: reports.append(err)
    )
    assert producer.flush(TIMEOUT_S) == 0
    assert len(reports) == 1 and reports[0] is not None
    assert reports[0].code() == KafkaError.MSG_SIZE_TOO_LARGE


def test_assign_seek_watermarks_and_offsets_for_times(shared_broker):
    topic = unique_topic("seek")
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])[topic].result(
        timeout=TIMEOUT_S
    )

    producer = make_producer(shared_broker.bootstrap, **{"linger.ms": 0})
    base_ts = int(time.time() * 1000) - 3_600_000
    for partition in (0, 1):
        records = [
            {
                "key": f"p{partition}-{i}".encode(),
                "value": f"v{i}".encode(),
                "timestamp": base_ts + i * 1000,
            }
            for i in range(10)
        ]
        assert produce(producer, topic, records, partition=partition) == list(range(10))

    consumer = make_consumer(shared_broker.bootstrap)
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT_S) == (
            0,
            10,
        )
        assert consumer.get_watermark_offsets(TopicPartition(topic, 1), timeout=TIMEOUT_S) == (
            0,
            10,
        )

        # offsets_for_times: exact hits, between two records, before everything, after everything.
        query = [
            TopicPartition(topic, 0, base_ts + 4000),
            TopicPartition(topic, 1, base_ts + 6500),
        ]
        found = consumer.offsets_for_times(query, timeout=TIMEOUT_S)
        assert [(tp.partition, tp.offset) for tp in found] == [(0, 4), (1, 7)]
        assert all(tp.error is None for tp in found)
        found = consumer.offsets_for_times(
            [TopicPartition(topic, 0, base_ts - 10_000)], timeout=TIMEOUT_S
        )
        assert found[0].offset == 0
        found = consumer.offsets_for_times(
            [TopicPartition(topic, 0, base_ts + 60_000)], timeout=TIMEOUT_S
        )
        assert found[0].offset == OFFSET_END  # -1: no record that late

        # Read partition 1 from offset 3, then seek back to 8 and read to the end.
        consumer.assign([TopicPartition(topic, 1, 3)])
        first = consume(consumer, 7)
        assert [m.offset() for m in first] == list(range(3, 10))
        assert [m.key() for m in first] == [f"p1-{i}".encode() for i in range(3, 10)]
        consumer.seek(TopicPartition(topic, 1, 8))
        again = consume(consumer, 2)
        assert [(m.offset(), m.value(), m.timestamp()[1]) for m in again] == [
            (8, b"v8", base_ts + 8000),
            (9, b"v9", base_ts + 9000),
        ]
        assert consumer.position([TopicPartition(topic, 1)])[0].offset == 10
    finally:
        consumer.close()


def test_waiting_consumer_gets_message_produced_later(shared_broker):
    topic = unique_topic("longpoll")
    producer = make_producer(shared_broker.bootstrap)
    assert produce(producer, topic, [{"value": b"before"}]) == [0]

    consumer = make_consumer(
        shared_broker.bootstrap, **{"fetch.wait.max.ms": 10_000, "socket.timeout.ms": 30_000}
    )
    received: list = []
    started = threading.Event()

    def wait_for_one():
        consumer.assign([TopicPartition(topic, 0, 1)])  # the log end
        started.set()
        received.extend(consume(consumer, 1, timeout_s=TIMEOUT_S))

    waiter = threading.Thread(target=wait_for_one, daemon=True)
    waiter.start()
    try:
        assert started.wait(TIMEOUT_S)
        time.sleep(1.5)  # the consumer is now parked in a long-poll fetch at the log end
        sent_at = time.monotonic()
        assert produce(producer, topic, [{"key": b"k", "value": b"after"}]) == [1]
        waiter.join(TIMEOUT_S)
        assert not waiter.is_alive()
        assert [(m.offset(), m.value()) for m in received] == [(1, b"after")]
        # Woken by the append, not by fetch.wait.max.ms (10 s) running out.
        assert time.monotonic() - sent_at < 5.0
    finally:
        waiter.join(TIMEOUT_S)
        consumer.close()


def test_log_append_time_topic(shared_broker):
    topic = unique_topic("logappend")
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
    new_topic = NewTopic(topic, 1, 1, config={"message.timestamp.type": "LogAppendTime"})
    admin.create_topics([new_topic])[topic].result(timeout=TIMEOUT_S)

    before = int(time.time() * 1000)
    for codec in ("none", "gzip"):
        producer = make_producer(shared_broker.bootstrap, **{"compression.type": codec})
        reports = []
        for i in range(3):
            producer.produce(
                topic,
                value=f"{codec}-{i}".encode(),
                timestamp=1000 + i,  # replaced by the broker's clock
                on_delivery=lambda err, msg: reports.append((err, msg.timestamp())),
            )
        assert producer.flush(TIMEOUT_S) == 0
        assert all(err is None for err, _ in reports)
        # The delivery report carries the broker's append time (ProduceResponse log_append_time).
        assert all(kind == TIMESTAMP_LOG_APPEND_TIME and ts >= before for _, (kind, ts) in reports)
    after = int(time.time() * 1000)

    messages = read_partition(shared_broker.bootstrap, topic, 0, 6)
    assert [m.value() for m in messages] == [
        f"{c}-{i}".encode() for c in ("none", "gzip") for i in range(3)
    ]
    for msg in messages:
        kind, ts = msg.timestamp()
        assert kind == TIMESTAMP_LOG_APPEND_TIME and before <= ts <= after


def test_acks_zero_records_are_written(shared_broker):
    topic = unique_topic("acks0")
    producer = make_producer(shared_broker.bootstrap, acks=0)
    reports = []
    for i in range(20):
        producer.produce(
            topic, value=str(i).encode(), on_delivery=lambda err, msg: reports.append(err)
        )
    assert producer.flush(TIMEOUT_S) == 0
    assert reports == [None] * 20  # "delivered" as soon as sent: the broker answers nothing
    messages = read_partition(shared_broker.bootstrap, topic, 0, 20)
    assert [m.value() for m in messages] == [str(i).encode() for i in range(20)]


def test_acks_all_with_min_insync_replicas_above_the_replica_count_is_written(shared_broker):
    """Kafka 3.7+ asks for min(min.insync.replicas, replica count) in-sync replicas (its
    effectiveMinIsr), so a 1-replica topic with min.insync.replicas=2 takes acks=all writes
    instead of answering NOT_ENOUGH_REPLICAS."""
    topic = unique_topic("min-isr-above-replicas")
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
    new_topic = NewTopic(topic, 1, 1, config={"min.insync.replicas": "2"})
    admin.create_topics([new_topic])[topic].result(timeout=TIMEOUT_S)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource], request_timeout=TIMEOUT_S)[resource].result(TIMEOUT_S)
    assert configs["min.insync.replicas"].value == "2"

    producer = make_producer(shared_broker.bootstrap, acks="all")
    assert produce(producer, topic, [{"value": str(i).encode()} for i in range(5)]) == [0, 1, 2, 3, 4]
    messages = read_partition(shared_broker.bootstrap, topic, 0, 5)
    assert [m.value() for m in messages] == [str(i).encode() for i in range(5)]


def test_concurrent_producers_get_distinct_contiguous_offsets(shared_broker):
    topic = unique_topic("concurrent")
    assert produce(make_producer(shared_broker.bootstrap), topic, [{"value": b"init"}]) == [0]
    results: dict[int, list[int]] = {}

    def worker(n: int) -> None:
        producer = make_producer(shared_broker.bootstrap, **{"linger.ms": 1})
        records = [{"value": f"w{n}-{i}".encode()} for i in range(500)]
        results[n] = produce(producer, topic, records)

    threads = [threading.Thread(target=worker, args=(n,), daemon=True) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT_S * 2)
    assert sorted(results) == [0, 1, 2, 3]
    every = sorted(offset for offsets in results.values() for offset in offsets)
    assert every == list(range(1, 2001))
    for offsets in results.values():
        assert offsets == sorted(offsets), "one producer's records keep their order"

    messages = read_partition(shared_broker.bootstrap, topic, 0, 2001)
    by_offset = {m.offset(): m.value() for m in messages}
    for n, offsets in results.items():
        assert [by_offset[o] for o in offsets] == [f"w{n}-{i}".encode() for i in range(500)]


def test_concurrent_producers_to_a_flush_messages_topic_are_each_answered_once_fsynced(shared_broker):
    """With flush.messages=1 each answer waits for an fsync, and the appends of several
    connections made while one runs share the next (storage.log.Log.flush): every record is
    answered, once, in its producer's order."""
    topic = unique_topic("flushed")
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"flush.messages": "1"})])[topic].result(timeout=TIMEOUT_S)
    results: dict[int, list[int]] = {}

    def worker(n: int) -> None:
        producer = make_producer(shared_broker.bootstrap, acks="1", **{"linger.ms": 0})
        results[n] = produce(producer, topic, [{"value": f"w{n}-{i}".encode()} for i in range(200)])

    threads = [threading.Thread(target=worker, args=(n,), daemon=True) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT_S * 2)
    assert sorted(results) == list(range(6))
    assert sorted(offset for offsets in results.values() for offset in offsets) == list(range(1200))
    messages = read_partition(shared_broker.bootstrap, topic, 0, 1200)
    by_offset = {m.offset(): m.value() for m in messages}
    for n, offsets in results.items():
        assert [by_offset[o] for o in offsets] == [f"w{n}-{i}".encode() for i in range(200)]


def test_small_fetch_sizes_cut_batches(shared_broker):
    """Fetch responses that end inside a batch: the client drops the partial batch and asks
    again from there."""
    topic = unique_topic("partial")
    producer = make_producer(shared_broker.bootstrap, **{"linger.ms": 5, "batch.size": 2000})
    records = [{"value": f"{i:05d}".encode() + b"." * 60} for i in range(2000)]
    assert produce(producer, topic, records) == list(range(2000))

    consumer = make_consumer(
        shared_broker.bootstrap,
        **{
            "max.partition.fetch.bytes": 1500,
            "fetch.max.bytes": 3000,
            "message.max.bytes": 3000,  # librdkafka wants fetch.max.bytes >= message.max.bytes
            "fetch.wait.max.ms": 50,
        },
    )
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        messages = consume(consumer, 2000)
    finally:
        consumer.close()
    assert [m.value() for m in messages] == [r["value"] for r in records]


def test_auto_created_topic_gets_a_leader_even_if_the_asking_client_disconnects(shared_broker):
    """librdkafka asks for a new topic's metadata on its bootstrap connection and closes that
    connection as soon as it learns the broker's id, often while the auto-creation is under way.
    The topic must still be created whole (its partition served), not left leaderless."""
    topic = unique_topic("disconnect")
    name = topic.encode()
    # Metadata v4: header (api key 3, version 4, correlation id, client id), then the topic
    # list and allow_auto_topic_creation=true.
    body = struct.pack(">hhih", 3, 4, 1, 6) + b"compat"
    body += struct.pack(">ih", 1, len(name)) + name + b"\x01"
    with socket.create_connection(("127.0.0.1", shared_broker.port), timeout=5) as sock:
        sock.sendall(struct.pack(">i", len(body)) + body)
    # Closed without reading the answer. The topic must come to have a leader.
    producer = make_producer(shared_broker.bootstrap)
    deadline = time.monotonic() + 10
    while True:
        described = producer.list_topics(topic, timeout=TIMEOUT_S).topics[topic]
        partitions = described.partitions
        if described.error is None and partitions and partitions[0].leader == 0:
            break
        assert time.monotonic() < deadline, f"{topic} never got a leader: {described.partitions}"
        time.sleep(0.2)
    assert produce(producer, topic, [{"value": b"x"}]) == [0]
