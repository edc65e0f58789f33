"""KafkaJS (Node.js) against a real broker process: admin createTopics / fetchTopicOffsets /
fetchTopicOffsetsByTimestamp and a GZIP producer, run by js/scenario.js; confluent-kafka then
reads the records back (KafkaJS only consumes through groups, which have tests of their own).

The npm packages are pinned in js/package-lock.json; `.ci/setup test` installs them with npm ci.
"""

import json
import time
import uuid

from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_CREATE_TIME,
    Consumer,
    KafkaError,
    TopicPartition,
)

from tests.compat.kafkajs_support import JS_DIR, KAFKAJS_MARKS
from tests.harness import run

pytestmark = KAFKAJS_MARKS

TIMEOUT_S = 20


def read_back(bootstrap: str, topic: str, partition: int, count: int) -> list:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "logway-compat-unused",  # required by the client; never joined
            "enable.auto.commit": False,
        }
    )
    messages = []
    try:
        consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        deadline = time.monotonic() + TIMEOUT_S
        while len(messages) < count and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=count - len(messages), timeout=0.5):
                if msg.error() and msg.error().code() != KafkaError._PARTITION_EOF:
                    raise AssertionError(f"consumer error: {msg.error()}")
                if not msg.error():
                    messages.append(msg)
    finally:
        consumer.close()
    return messages


def test_kafkajs_admin_and_gzip_producer(shared_broker):
    topic = f"kjs-{uuid.uuid4().hex[:10]}"
    base_ts = int(time.time() * 1000) - 600_000
    result = run(
        ["node", str(JS_DIR / "scenario.js"), shared_broker.bootstrap, topic, str(base_ts)],
        timeout=60,
    )
    assert result.returncode == 0, result.stderr.decode()[-5000:]
    report = json.loads(result.stdout)

    assert report["created"] is True
    assert report["createdAgain"] is False
    assert report["listed"] is True
    assert report["metadata"] == [
        {
            "name": topic,
            "partitions": [
                {"partition": 0, "leader": 0, "replicas": [0], "isr": [0]},
                {"partition": 1, "leader": 0, "replicas": [0], "isr": [0]},
            ],
        }
    ]

    def base_offsets(sent):
        assert all(r["errorCode"] == 0 and r["topicName"] == topic for r in sent)
        return sorted((r["partition"], int(r["baseOffset"])) for r in sent)

    assert base_offsets(report["gzip"]) == [(0, 0), (1, 0)]
    assert base_offsets(report["plain"]) == [(0, 10)]
    assert base_offsets(report["batch"]) == [(1, 10)]

    assert [(o["partition"], o["offset"], o["high"], o["low"]) for o in report["offsets"]] == [
        (0, "12", "12", "0"),
        (1, "12", "12", "0"),
    ]
    # Records i and i+1 share timestamp base + (i // 2) s; 5.5 s lands before the 7th of each partition.
    assert [(o["partition"], o["offset"]) for o in report["offsetsAt5500"]] == [(0, "6"), (1, "6")]
    assert [(o["partition"], o["offset"]) for o in report["offsetsAtStart"]] == [(0, "0"), (1, "0")]

    # What KafkaJS wrote, as another client reads it.
    partition0 = read_back(shared_broker.bootstrap, topic, 0, 12)
    partition1 = read_back(shared_broker.bootstrap, topic, 1, 12)
    assert [m.offset() for m in partition0] == list(range(12))
    assert [m.offset() for m in partition1] == list(range(12))
    for partition, messages in ((0, partition0), (1, partition1)):
        for j, msg in enumerate(messages[:10]):
            i = 2 * j + partition
            assert msg.key() == f"key-{i}".encode()
            assert msg.value() == f"value-{i}".encode()
            assert msg.timestamp() == (TIMESTAMP_CREATE_TIME, base_ts + j * 1000)
            assert msg.headers() == [("index", str(i).encode()), ("codec", b"gzip")]
    assert [(m.key(), m.value(), m.timestamp()[1]) for m in partition0[10:]] == [
        (None, b"no-key", base_ts + 20_000),
        (b"tombstone", None, base_ts + 21_000),
    ]
    assert [m.value() for m in partition1[10:]] == [b"batch-a", b"batch-b"]
