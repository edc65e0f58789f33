"""kafka-python against a real broker process. Consumers have no group (group_id=None) and are
placed with assign()/seek."""

import os
import time

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka import codec as kafka_codec
from kafka.admin import NewTopic

from tests.harness import unique_topic

pytestmark = pytest.mark.compat

TIMEOUT_S = 20
# Each codec and the check kafka-python itself makes for the package it needs.
CODECS = {
    None: lambda: True,
    "gzip": kafka_codec.has_gzip,
    "snappy": kafka_codec.has_snappy,
    "lz4": kafka_codec.has_lz4,
    "zstd": kafka_codec.has_zstd,
}


def make_producer(broker, **extra) -> KafkaProducer:
    return KafkaProducer(
        bootstrap_servers=broker.bootstrap,
        acks="all",
        request_timeout_ms=10_000,
        max_block_ms=TIMEOUT_S * 1000,
        **extra,
    )


def make_consumer(broker, **extra) -> KafkaConsumer:
    settings = {"request_timeout_ms": 15_000, "fetch_max_wait_ms": 200, **extra}
    return KafkaConsumer(
        bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False, **settings
    )


def poll_records(consumer: KafkaConsumer, count: int, timeout_s: float = TIMEOUT_S) -> list:
    records = []
    deadline = time.monotonic() + timeout_s
    while len(records) < count and time.monotonic() < deadline:
        for batch in consumer.poll(timeout_ms=500, max_records=count - len(records)).values():
            records.extend(batch)
    return records


def create_topic(broker, topic: str, partitions: int) -> None:
    admin = KafkaAdminClient(
        bootstrap_servers=broker.bootstrap, request_timeout_ms=TIMEOUT_S * 1000
    )
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)], timeout_ms=TIMEOUT_S * 1000)
    finally:
        admin.close()


@pytest.mark.parametrize("codec", list(CODECS), ids=lambda c: c or "none")
def test_produce_each_codec_and_read_back(shared_broker, codec):
    if not CODECS[codec]():
        pytest.skip(f"kafka-python has no {codec} support here: its Python package is missing")
    topic = unique_topic(f"codec-{codec or 'none'}")
    producer = make_producer(shared_broker, compression_type=codec, linger_ms=10)
    base_ts = int(time.time() * 1000) - 120_000
    sent = []
    try:
        futures = []
        for i in range(150):
            key = None if i % 40 == 7 else f"k{i}".encode()
            value = None if i % 40 == 9 else (f"value-{i}-" * (1 + i % 5)).encode()
            headers = [("i", str(i).encode()), ("codec", (codec or "none").encode())]
            sent.append((key, value, headers, base_ts + i))
            futures.append(
                producer.send(
                    topic,
                    key=key,
                    value=value,
                    headers=headers,
                    partition=0,
                    timestamp_ms=base_ts + i,
                )
            )
        producer.flush(timeout=TIMEOUT_S)
        metadata = [f.get(timeout=TIMEOUT_S) for f in futures]
    finally:
        producer.close(timeout=TIMEOUT_S)
    assert [m.offset for m in metadata] == list(range(150))
    assert all(m.topic == topic and m.partition == 0 for m in metadata)

    consumer = make_consumer(shared_broker)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        records = poll_records(consumer, len(sent))
    finally:
        consumer.close()
    assert [r.offset for r in records] == list(range(150))
    for (key, value, headers, ts), record in zip(sent, records):
        assert (record.key, record.value, record.timestamp) == (key, value, ts)
        assert list(record.headers) == headers


def test_offsets_apis_and_seek(shared_broker):
    topic = unique_topic("offsets")
    create_topic(shared_broker, topic, 2)
    base_ts = int(time.time() * 1000) - 3_600_000
    producer = make_producer(shared_broker)
    try:
        for partition, count in ((0, 12), (1, 4)):
            futures = [
                producer.send(
                    topic,
                    value=f"p{partition}-{i}".encode(),
                    partition=partition,
                    timestamp_ms=base_ts + i * 1000,
                )
                for i in range(count)
            ]
            producer.flush(timeout=TIMEOUT_S)
            assert [f.get(timeout=TIMEOUT_S).offset for f in futures] == list(range(count))
    finally:
        producer.close(timeout=TIMEOUT_S)

    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    consumer = make_consumer(shared_broker)
    try:
        assert consumer.partitions_for_topic(topic) == {0, 1}
        assert consumer.beginning_offsets([tp0, tp1]) == {tp0: 0, tp1: 0}
        assert consumer.end_offsets([tp0, tp1]) == {tp0: 12, tp1: 4}

        found = consumer.offsets_for_times({tp0: base_ts + 5000, tp1: base_ts + 2500})
        assert (found[tp0].offset, found[tp0].timestamp) == (5, base_ts + 5000)
        assert (found[tp1].offset, found[tp1].timestamp) == (3, base_ts + 3000)
        found = consumer.offsets_for_times({tp0: base_ts + 999_999})
        assert found[tp0] is None  # no record that late

        consumer.assign([tp0, tp1])
        consumer.seek(tp0, 10)
        consumer.seek(tp1, 1)
        records = poll_records(consumer, 5)
        got = sorted((r.partition, r.offset, r.value) for r in records)
        assert got == [
            (0, 10, b"p0-10"),
            (0, 11, b"p0-11"),
            (1, 1, b"p1-1"),
            (1, 2, b"p1-2"),
            (1, 3, b"p1-3"),
        ]
        assert consumer.position(tp0) == 12 and consumer.position(tp1) == 4

        consumer.seek_to_beginning(tp1)
        again = poll_records(consumer, 4)
        assert [(r.partition, r.offset) for r in again] == [(1, i) for i in range(4)]
    finally:
        consumer.close()


def test_large_batch_of_small_and_one_big_record(shared_broker):
    topic = unique_topic("big")
    big = os.urandom(900_000)
    producer = make_producer(shared_broker, linger_ms=20, max_request_size=1_000_000)
    try:
        futures = [producer.send(topic, value=f"m{i}".encode(), partition=0) for i in range(2000)]
        futures.append(producer.send(topic, value=big, partition=0))
        producer.flush(timeout=TIMEOUT_S)
        offsets = [f.get(timeout=TIMEOUT_S).offset for f in futures]
    finally:
        producer.close(timeout=TIMEOUT_S)
    assert offsets == list(range(2001))

    consumer = make_consumer(shared_broker, max_partition_fetch_bytes=64 * 1024)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 1990)
        records = poll_records(consumer, 11)
    finally:
        consumer.close()
    assert [r.offset for r in records] == list(range(1990, 2001))
    assert records[-1].value == big


def test_small_fetch_sizes_cut_batches(shared_broker):
    """Fetch responses that end inside a batch: the client drops the partial batch and asks
    again from there."""
    topic = unique_topic("partial")
    producer = make_producer(shared_broker, linger_ms=5, batch_size=2000)
    values = [f"{i:05d}".encode() + b"." * 60 for i in range(2000)]
    try:
        futures = [producer.send(topic, value=v, partition=0) for v in values]
        producer.flush(timeout=TIMEOUT_S)
        assert [f.get(timeout=TIMEOUT_S).offset for f in futures] == list(range(2000))
    finally:
        producer.close(timeout=TIMEOUT_S)

    consumer = make_consumer(shared_broker, max_partition_fetch_bytes=1000, fetch_max_bytes=2500)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        records = poll_records(consumer, 2000)
    finally:
        consumer.close()
    assert [r.value for r in records] == values


def test_a_consumer_reads_in_an_incremental_fetch_session(shared_broker):
    """kafka-python opens a fetch session (KIP-227) and then sends only what changed; records
    written while it reads, to one partition of three, all arrive and in order."""
    topic = unique_topic("session")
    create_topic(shared_broker, topic, 3)
    partitions = [TopicPartition(topic, p) for p in range(3)]
    consumer = make_consumer(shared_broker)
    producer = make_producer(shared_broker)
    try:
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        consumer.poll(timeout_ms=500)  # the full fetch that opens the session
        values, records = [], []
        for round_ in range(5):
            batch = [b"%d-%d" % (round_, n) for n in range(20)]
            for value in batch:
                producer.send(topic, value=value, partition=1)
            producer.flush(timeout=TIMEOUT_S)
            values += batch
            records += poll_records(consumer, len(batch))
        (handler,) = consumer._fetcher._session_handlers.values()
        session = handler.next_metadata
    finally:
        producer.close(timeout=TIMEOUT_S)
        consumer.close()
    assert [r.value for r in records] == values and {r.partition for r in records} == {1}
    assert session.session_id != 0 and session.epoch > 1  # incremental fetches went on
