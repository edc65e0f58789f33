"""Log compaction seen by a real client, over real sockets: a compacted topic created with
confluent-kafka's AdminClient, many updates of a few keys, the background cleaner shrinking the
partition, and a consumer (assign + seek to the beginning: consumer groups are not used) reading
exactly the latest record of each key. Then kill -9 while the cleaner is at work, until a kill
lands during a cleaning: after the restart every key still reads its latest value.

Values are "<key>:<sequence number>", so the record a key reads back can be told apart.
"""

import os
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.harness import unique_topic

pytestmark = pytest.mark.compat

TIMEOUT_S = 30
CLEANER = {"log_cleaner_backoff_ms": "50"}


def create_compacted_topic(broker, segment_bytes: int, **config: str) -> str:
    topic = unique_topic("compacted")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "socket.timeout.ms": 10_000})
    settings = {
        "cleanup.policy": "compact",
        "segment.bytes": str(segment_bytes),
        "min.cleanable.dirty.ratio": "0.01",
        "file.delete.delay.ms": "0",
        **config,
    }
    admin.create_topics([NewTopic(topic, 1, 1, config=settings)])[topic].result(TIMEOUT_S)
    return topic


def make_producer(broker, batch_bytes: int) -> Producer:
    # Batches must fit in a segment, or the broker refuses them (RECORD_LIST_TOO_LARGE).
    return Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "acks": "all",
            "enable.idempotence": False,
            "linger.ms": 5,
            "batch.size": batch_bytes,
            "compression.type": "lz4",
            "message.timeout.ms": TIMEOUT_S * 1000,
        }
    )


def produce(producer: Producer, topic: str, records: list[tuple[bytes, bytes | None]]) -> None:
    """Produce (key, value) records and wait until every one is acknowledged."""
    errors = []

    def on_delivery(err, _msg):
        if err is not None:
            errors.append(err)

    for key, value in records:
        while True:
            try:
                producer.produce(topic, key=key, value=value, partition=0, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(TIMEOUT_S) == 0
    assert errors == []


def updates(keys: int, first_seq: int, count: int, size: int = 100) -> list[tuple[bytes, bytes]]:
    records = []
    for seq in range(first_seq, first_seq + count):
        key = b"key-%d" % (seq % keys)
        value = key + b":%d:" % seq
        records.append((key, value + b"x" * (size - len(value))))
    return records


def read_partition(broker, topic: str) -> list[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) of every record from the beginning to the end; bounded in time."""
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "logway-compat-unused",  # required by the client; never joined
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    records = []
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                return records
            records.append((msg.offset(), msg.key(), msg.value()))
    finally:
        consumer.close()
    raise AssertionError(f"the end of {topic} was not reached in {TIMEOUT_S}s")


def partition_dir(broker, topic: str):
    return broker.data_dir / f"{topic}-0"


def segment_bytes_on_disk(broker, topic: str) -> tuple[int, int]:
    """(how many segments, their total size), listed again when the cleaner swaps a segment
    between the listing and the sizes."""
    directory = partition_dir(broker, topic)
    for _ in range(100):
        try:
            sizes = [os.path.getsize(directory / n) for n in os.listdir(directory) if n.endswith(".log")]
        except FileNotFoundError:
            continue
        return len(sizes), sum(sizes)
    raise AssertionError(f"{directory} kept changing under the listing")


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen in {TIMEOUT_S}s"
        time.sleep(0.05)


def latest_per_key(records) -> dict[bytes, bytes | None]:
    latest = {}
    for key, value in records:
        latest[key] = value
    return latest


def assert_clean_log(broker) -> None:
    text = broker.log()
    assert "Traceback" not in text, text[-5000:]
    assert " ERROR " not in text, text[-5000:]


def test_the_cleaner_keeps_exactly_the_latest_record_per_key(broker_factory):
    broker = broker_factory(**CLEANER)
    # segment.ms: the last updates leave the active segment (which is never cleaned) once the
    # marker below arrives more than a second later.
    topic = create_compacted_topic(broker, 16384, **{"segment.ms": "1000"})
    producer = make_producer(broker, batch_bytes=8000)
    sent = updates(keys=10, first_seq=0, count=3000) + [(b"key-3", None)]  # key-3 deleted
    produce(producer, topic, sent)
    segments, size = segment_bytes_on_disk(broker, topic)
    time.sleep(1.2)
    produce(producer, topic, [(b"marker", b"rolls the active segment")])
    expected = latest_per_key(sent + [(b"marker", b"rolls the active segment")])

    # Ten values, a tombstone and the marker, with their batches, are a few kilobytes.
    wait_until(lambda: segment_bytes_on_disk(broker, topic)[1] < 10_000, "compaction")
    after_segments, after_size = segment_bytes_on_disk(broker, topic)
    assert after_segments < segments and after_size < size / 20

    records = read_partition(broker, topic)
    assert [offset for offset, _, _ in records] == sorted({offset for offset, _, _ in records})
    assert sorted(key for _, key, _ in records) == sorted(expected)  # each key exactly once
    assert {key: value for _, key, value in records} == expected
    assert records[-1][0] == len(sent)  # the marker keeps its offset

    # Compacted topics take records with keys only.
    failures = []

    def on_delivery(err, _msg):
        failures.append(err)

    producer.produce(topic, value=b"no key", partition=0, on_delivery=on_delivery)
    producer.flush(TIMEOUT_S)
    assert [err.code() for err in failures] == [KafkaError.INVALID_RECORD]
    assert_clean_log(broker)


def cleaning_files(broker, topic: str) -> list[str]:
    try:
        names = os.listdir(partition_dir(broker, topic))
    except FileNotFoundError:
        return []
    return [n for n in names if n.endswith((".cleaned", ".swap"))]


def test_kill_9_while_cleaning_loses_nothing_it_had_to_keep(broker_factory):
    broker = broker_factory(**CLEANER)
    topic = create_compacted_topic(broker, 262_144)
    sent: list[tuple[bytes, bytes]] = []
    kills_during_cleaning = 0
    for attempt in range(8):
        producer = make_producer(broker, batch_bytes=65_536)
        burst = updates(keys=20, first_seq=len(sent), count=20_000, size=200)
        produce(producer, topic, burst)  # every record acknowledged: nothing is in flight
        sent += burst
        deadline = time.monotonic() + 5
        while not cleaning_files(broker, topic) and time.monotonic() < deadline:
            time.sleep(0.002)
        caught = bool(cleaning_files(broker, topic))
        broker.kill()
        kills_during_cleaning += caught
        broker.start()
        records = read_partition(broker, topic)
        offsets = [offset for offset, _, _ in records]
        assert offsets == sorted(set(offsets))
        assert {key: value for _, key, value in records} == latest_per_key(sent)
        if kills_during_cleaning >= 2:
            break
    assert kills_during_cleaning >= 1, "no kill landed while the cleaner was writing"
    assert "Traceback" not in broker.log()
