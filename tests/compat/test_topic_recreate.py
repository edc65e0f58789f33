"""A topic deleted and created again under the same name, with a real client (confluent-kafka):
the old topic's delayed file deletion must never touch the new topic's files.

Issue 12's sequence, as a user met it: create `t`, produce 100 records, delete `t`, create `t`
again at once, produce 50 (acknowledged), read them back. Once the old deletion's delay
(log.segment.delete.delay.ms, the broker default of file.delete.delay.ms) has passed, the new
topic must still hold its 50 records, its log directory must still be online, and a restart
(clean or kill -9) must keep all 50.
"""

import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.harness import unique_topic

pytestmark = pytest.mark.compat

TIMEOUT_S = 20
DELETE_DELAY_MS = 1000


def _admin(broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def _create(broker, topic: str) -> None:
    admin = _admin(broker)  # kept alive until the answer: its destruction cancels the request
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=TIMEOUT_S)


def _delete(broker, topic: str) -> None:
    admin = _admin(broker)
    admin.delete_topics([topic])[topic].result(timeout=TIMEOUT_S)


def _produce(broker, topic: str, values: list[bytes]) -> list[int]:
    """Produce with acks=all; the offsets the broker acknowledged, in send order."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 5})
    offsets: list[int] = []

    def delivered(err, msg) -> None:
        assert err is None, err
        offsets.append(msg.offset())

    for value in values:
        producer.produce(topic, value, on_delivery=delivered)
    assert producer.flush(TIMEOUT_S) == 0
    return offsets


def _read_all(broker, topic: str) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "logway-recreate-unused",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    values: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                if message.error().code() == KafkaError._PARTITION_EOF:
                    return values
                raise AssertionError(message.error())
            values.append(message.value())
    finally:
        consumer.close()
    raise AssertionError(f"no end of partition within {TIMEOUT_S}s; read {len(values)}")


def _recreated_with_records(broker) -> tuple[str, list[bytes]]:
    topic = unique_topic("recreate")
    _create(broker, topic)
    _produce(broker, topic, [f"old-{i}".encode() for i in range(100)])
    _delete(broker, topic)
    _create(broker, topic)
    new_values = [f"new-{i}".encode() for i in range(50)]
    assert _produce(broker, topic, new_values) == list(range(50))
    assert _read_all(broker, topic) == new_values
    return topic, new_values


def _past_the_delete_delay() -> None:
    time.sleep(DELETE_DELAY_MS / 1000 * 2.5)


def _assert_segment_files(broker, topic: str) -> None:
    partition_dir = broker.data_dir / f"{topic}-0"
    names = {path.name for path in partition_dir.iterdir()}
    for suffix in (".log", ".index", ".timeindex"):
        assert f"{0:020d}{suffix}" in names, sorted(names)


@pytest.mark.parametrize("restart", ["clean", "kill -9"])
def test_recreated_topic_keeps_its_records_after_the_old_deletion(broker_factory, restart):
    broker = broker_factory(log_segment_delete_delay_ms=str(DELETE_DELAY_MS))
    topic, new_values = _recreated_with_records(broker)

    _past_the_delete_delay()
    _assert_segment_files(broker, topic)
    assert _read_all(broker, topic) == new_values
    _restart(broker, restart)

    assert _read_all(broker, topic) == new_values
    assert "is offline" not in broker.log()
    assert "Traceback" not in broker.log()


def _restart(broker, how: str) -> None:
    if how == "clean":
        broker.stop()
    else:
        broker.kill()
    broker.start()


def _old_partition_dirs(broker, topic: str) -> list[str]:
    return [path.name for path in broker.data_dir.iterdir() if path.name.startswith(f"{topic}-0.")]


def test_the_old_topic_files_go_once_the_delete_delay_has_passed(broker_factory):
    broker = broker_factory(log_segment_delete_delay_ms=str(DELETE_DELAY_MS))
    topic = unique_topic("delayed")
    _create(broker, topic)
    _produce(broker, topic, [b"old"])
    _delete(broker, topic)
    assert [name.endswith("-delete") for name in _old_partition_dirs(broker, topic)] == [True]

    _past_the_delete_delay()

    assert _old_partition_dirs(broker, topic) == []


@pytest.mark.parametrize("restart", ["clean", "kill -9"])
def test_a_restart_with_the_old_deletion_pending_keeps_the_new_records(broker_factory, restart):
    broker = broker_factory()  # file.delete.delay.ms: Kafka's 60 s, far from passed
    topic, new_values = _recreated_with_records(broker)
    _restart(broker, restart)

    assert _read_all(broker, topic) == new_values
    assert _old_partition_dirs(broker, topic) == []  # removed at start
    assert "is offline" not in broker.log()


def _committed(broker, group: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        (found,) = consumer.committed([TopicPartition(topic, 0)], timeout=TIMEOUT_S)
        return found.offset
    finally:
        consumer.close()


def test_a_recreated_topic_starts_without_the_old_topics_committed_offsets(broker_factory):
    # Kafka drops a deleted topic's offsets from every group; kept, a group would resume the
    # new topic at the old one's position and skip its first records.
    broker = broker_factory()
    topic, group = unique_topic("recreate-offsets"), unique_topic("recreate-group")
    _create(broker, topic)
    _produce(broker, topic, [b"old-%d" % i for i in range(100)])
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 100)], asynchronous=False)
    finally:
        consumer.close()
    assert _committed(broker, group, topic) == 100

    _delete(broker, topic)
    _create(broker, topic)
    _produce(broker, topic, [b"new-%d" % i for i in range(50)])

    assert _committed(broker, group, topic) < 0  # none (librdkafka's OFFSET_INVALID)
    _restart(broker, "kill -9")  # the tombstones were written: the offsets stay gone
    assert _committed(broker, group, topic) < 0
