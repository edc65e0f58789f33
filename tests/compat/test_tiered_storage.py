"""Tiered storage (KIP-405) with a real client: confluent-kafka consumes from offset 0 of a topic
whose early segments exist only in the remote store (a directory), after their local copies were
deleted by local.retention.bytes and again after a broker restart; deleting the topic removes its
remote data."""

import os
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from tests.harness import BrokerProcess, unique_topic

pytestmark = pytest.mark.compat

TIMEOUT_S = 30
RECORDS = 3000


def tiered_broker(data_dir: Path, store_url: str, **more: str) -> BrokerProcess:
    return BrokerProcess(
        data_dir,
        {
            "remote.log.storage.system.enable": "true",
            "rsm.config.url": store_url,
            "remote.log.manager.task.interval.ms": "300",
            "log.retention.check.interval.ms": "300",
            "log.segment.delete.delay.ms": "0",
            "rlmm.config.remote.log.metadata.topic.num.partitions": "3",
            **more,
        },
    )


def produce(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 8192})
    for i in range(RECORDS):
        producer.produce(topic, key=b"k%d" % i, value=b"record-%06d-" % i + b"x" * 80)
    assert producer.flush(TIMEOUT_S) == 0


def consume_from_zero(bootstrap: str, topic: str) -> list[tuple[int, bytes]]:
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "tiered-reader", "enable.auto.commit": False,
        "isolation.level": "read_committed",
    })
    consumer.assign([TopicPartition(topic, 0, 0)])
    found: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(found) < RECORDS and time.monotonic() < deadline:
            for message in consumer.consume(500, timeout=1):
                assert message.error() is None, message.error()
                found.append((message.offset(), message.value()))
    finally:
        consumer.close()
    return found


def local_segment_bases(data_dir: Path, topic: str) -> list[int]:
    partition_dir = data_dir / f"{topic}-0"
    return sorted(int(name[:20]) for name in os.listdir(partition_dir) if name.endswith(".log"))


def remote_log_files(store: Path, topic: str) -> list[str]:
    return [name for directory in store.glob(f"{topic}-*/0") for name in os.listdir(directory) if name.endswith(".log")]


def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def assert_every_record(found: list[tuple[int, bytes]]) -> None:
    assert [offset for offset, _ in found] == list(range(RECORDS))
    assert all(value.startswith(b"record-%06d-" % offset) for offset, value in found)


def test_a_consumer_reads_from_offset_zero_through_the_remote_store(tmp_path):
    store = tmp_path / "store"
    topic = unique_topic("tiered")
    broker = tiered_broker(tmp_path / "data", f"file://{store}").start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1, config={
            "remote.storage.enable": "true", "segment.bytes": "16384", "local.retention.bytes": "1",
            "retention.ms": "-1",
        })])[topic].result(timeout=TIMEOUT_S)
        produce(broker.bootstrap, topic)
        # Copied to the store, then deleted locally: only the active segment and the last ones stay.
        wait_for(lambda: local_segment_bases(tmp_path / "data", topic)[0] > 0, "local deletion of copied segments")
        assert len(remote_log_files(store, topic)) >= 10
        low, high = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "w"}).get_watermark_offsets(
            TopicPartition(topic, 0), timeout=TIMEOUT_S
        )
        assert (low, high) == (0, RECORDS)  # the log start is the remote one
        assert_every_record(consume_from_zero(broker.bootstrap, topic))

        broker.stop()
        broker.start()
        assert local_segment_bases(tmp_path / "data", topic)[0] > 0
        assert_every_record(consume_from_zero(broker.bootstrap, topic))

        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.delete_topics([topic])[topic].result(timeout=TIMEOUT_S)
        wait_for(lambda: not list(store.glob(f"{topic}-*")), "the remote data of the deleted topic to go")
    finally:
        broker.stop()
    assert "Traceback" not in broker.log(), broker.log()[-5000:]


def test_remote_storage_needs_the_broker_system_and_no_compaction(tmp_path):
    with BrokerProcess(tmp_path / "plain") as plain:
        admin = AdminClient({"bootstrap.servers": plain.bootstrap})
        refused = admin.create_topics([NewTopic("t", 1, 1, config={"remote.storage.enable": "true"})])["t"]
        with pytest.raises(Exception, match="Tiered Storage functionality is disabled in the broker"):
            refused.result(timeout=TIMEOUT_S)
    with tiered_broker(tmp_path / "tiered", f"file://{tmp_path / 'store'}") as tiered:
        admin = AdminClient({"bootstrap.servers": tiered.bootstrap})
        refused = admin.create_topics([NewTopic("c", 1, 1, config={
            "remote.storage.enable": "true", "cleanup.policy": "compact",
        })])["c"]
        with pytest.raises(Exception, match="unsupported for the compacted topics"):
            refused.result(timeout=TIMEOUT_S)
        admin.create_topics([NewTopic("d", 1, 1, config={"remote.storage.enable": "true"})])["d"].result(timeout=TIMEOUT_S)
        [described] = admin.describe_configs([ConfigResource("topic", "d")]).values()
        configs = described.result(timeout=TIMEOUT_S)
        assert configs["remote.storage.enable"].value == "true"
        assert configs["local.retention.ms"].value == "-2"
