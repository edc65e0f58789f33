"""Tiered storage (KIP-405) with a real client: confluent-kafka consumes from offset 0 of a topic
whose early segments exist only in the remote store, after their local copies were deleted by
local.retention.bytes and again after a broker restart; deleting the topic removes its remote
data; a read_committed consumer skips the aborted transactions of segments only in the store
(their aborted transactions come from the remote transaction indexes); a kill -9 while copying
loses nothing and leaves one whole copy per offset range in the store. The store is a
directory, then S3: moto's S3 server, started by the test on a local port
(s3fs talks to it; nothing is downloaded)."""

import os
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from tests.harness import BrokerProcess, free_port, unique_topic

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


def consume_from_zero(bootstrap: str, topic: str, count: int = RECORDS) -> list[tuple[int, bytes]]:
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "tiered-reader", "enable.auto.commit": False,
        "isolation.level": "read_committed",
    })
    consumer.assign([TopicPartition(topic, 0, 0)])
    found: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(found) < count and time.monotonic() < deadline:
            for message in consumer.consume(500, timeout=1):
                assert message.error() is None, message.error()
                found.append((message.offset(), message.value()))
    finally:
        consumer.close()
    return found


def local_segment_bases(data_dir: Path, topic: str) -> list[int]:
    partition_dir = data_dir / f"{topic}-0"
    return sorted(int(name[:20]) for name in os.listdir(partition_dir) if name.endswith(".log"))


def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def assert_every_record(found: list[tuple[int, bytes]], count: int = RECORDS) -> None:
    assert [offset for offset, _ in found] == list(range(count))
    assert all(value.startswith(b"record-%06d-" % offset) for offset, value in found)


def consume_through_the_store(broker: BrokerProcess, data_dir: Path, segments_in_store, store_emptied) -> None:
    """Produce to a tiered topic until its early segments are in the store only, consume from 0,
    restart, consume from 0 again, delete the topic: its remote data goes."""
    topic = unique_topic("tiered")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={
        "remote.storage.enable": "true", "segment.bytes": "16384", "local.retention.bytes": "1",
        "retention.ms": "-1",
    })])[topic].result(timeout=TIMEOUT_S)
    produce(broker.bootstrap, topic)
    # Copied to the store, then deleted locally: only the active segment and the last ones stay.
    wait_for(
        lambda: segments_in_store(topic) >= 10 and local_segment_bases(data_dir, topic)[0] >= RECORDS // 2,
        "copies to the store and local deletion of the copied segments",
    )
    low, high = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "w"}).get_watermark_offsets(
        TopicPartition(topic, 0), timeout=TIMEOUT_S
    )
    assert (low, high) == (0, RECORDS)  # the log start is the remote one
    assert_every_record(consume_from_zero(broker.bootstrap, topic))

    broker.stop()
    broker.start()
    assert local_segment_bases(data_dir, topic)[0] > 0
    assert_every_record(consume_from_zero(broker.bootstrap, topic))

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.delete_topics([topic])[topic].result(timeout=TIMEOUT_S)
    wait_for(lambda: store_emptied(topic), "the remote data of the deleted topic to go")
    assert "Traceback" not in broker.log(), broker.log()[-5000:]


def test_a_consumer_reads_from_offset_zero_through_a_directory_store(tmp_path):
    store = tmp_path / "store"
    with tiered_broker(tmp_path / "data", f"file://{store}") as broker:
        consume_through_the_store(
            broker,
            tmp_path / "data",
            lambda topic: len([n for d in store.glob(f"{topic}-*/0") for n in os.listdir(d) if n.endswith(".log")]),
            lambda topic: not list(store.glob(f"{topic}-*")),
        )


@pytest.fixture
def s3_server():
    """moto's S3 server on a free local port, with a bucket; its endpoint."""
    boto3 = pytest.importorskip("boto3")
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id=S3_KEY, aws_secret_access_key=S3_SECRET, region_name="us-east-1"
    ).create_bucket(Bucket="logway-tier")
    try:
        yield endpoint
    finally:
        server.stop()


S3_KEY, S3_SECRET = "test-key-id", "test-secret"


def test_a_consumer_reads_from_offset_zero_through_an_s3_store(tmp_path, s3_server):
    import boto3

    s3 = boto3.client(
        "s3", endpoint_url=s3_server, aws_access_key_id=S3_KEY, aws_secret_access_key=S3_SECRET, region_name="us-east-1"
    )

    def keys(topic: str) -> list[str]:
        listed = s3.list_objects_v2(Bucket="logway-tier", Prefix=f"cluster/{topic}-")
        return [entry["Key"] for entry in listed.get("Contents", [])]

    broker = tiered_broker(
        tmp_path / "data",
        "s3://logway-tier/cluster",
        **{"rsm.config.endpoint_url": s3_server, "rsm.config.key": S3_KEY, "rsm.config.secret": S3_SECRET},
    )
    with broker:
        consume_through_the_store(
            broker,
            tmp_path / "data",
            lambda topic: len([key for key in keys(topic) if key.endswith(".log")]),
            lambda topic: not keys(topic),
        )
    assert S3_SECRET not in broker.log()


def test_kill_9_while_copying_loses_nothing_and_leaves_no_orphan_in_the_store(tmp_path):
    """The broker is killed while segments are being copied (every 50 ms a round); after the
    restart every record is read from 0 and the store holds one whole copy per offset range."""
    store = tmp_path / "store"
    topic = unique_topic("tiered-kill")
    broker = tiered_broker(tmp_path / "data", f"file://{store}", **{"remote.log.manager.task.interval.ms": "50"})
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1, config={
            "remote.storage.enable": "true", "segment.bytes": "16384", "local.retention.bytes": "1",
            "retention.ms": "-1",
        })])[topic].result(timeout=TIMEOUT_S)
        produce(broker.bootstrap, topic)
        deadline = time.monotonic() + TIMEOUT_S
        while not any(store.glob(f"{topic}-*/0/*.log")):  # polled closely: the copies take ms
            assert time.monotonic() < deadline, "no copy to the store"
            time.sleep(0.002)
        broker.kill()  # the first copy is being finished, the later ones under way
        broker.start()
        assert_every_record(consume_from_zero(broker.bootstrap, topic))
        wait_for(lambda: local_segment_bases(tmp_path / "data", topic)[0] >= RECORDS // 2, "copying to go on")
        time.sleep(0.5)  # a few more rounds: their cleanup removes what the kill left
        broker.stop()
    finally:
        broker.kill()
    by_start: dict[str, set[str]] = {}
    for path in store.glob(f"{topic}-*/0/*"):
        start, segment_id = path.name[:20], path.name[21:57]
        by_start.setdefault(start, set()).add(segment_id)
        suffixes = {p.name[57:] for p in path.parent.glob(f"{start}-{segment_id}.*")}
        assert suffixes == {".log", ".index", ".timeindex", ".txnindex", ".snapshot", ".leader_epoch_checkpoint"}
    assert by_start and all(len(ids) == 1 for ids in by_start.values()), by_start


def test_read_committed_consumers_skip_aborted_transactions_read_from_the_store(tmp_path):
    store = tmp_path / "store"
    topic = unique_topic("tiered-txn")
    with tiered_broker(tmp_path / "data", f"file://{store}", **{
        "transaction.state.log.replication.factor": "1", "transaction.state.log.min.isr": "1",
    }) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1, config={
            "remote.storage.enable": "true", "segment.bytes": "16384", "local.retention.bytes": "1",
            "retention.ms": "-1",
        })])[topic].result(timeout=TIMEOUT_S)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "tiered-txn", "linger.ms": 5})
        producer.init_transactions(TIMEOUT_S)
        committed = []
        for transaction in range(8):
            producer.begin_transaction()
            for i in range(150):
                value = b"t%d-%03d-" % (transaction, i) + b"x" * 80
                producer.produce(topic, value=value)
                if transaction % 2 == 0:
                    committed.append(value)
            if transaction % 2 == 0:
                producer.commit_transaction(TIMEOUT_S)
            else:
                assert producer.flush(TIMEOUT_S) == 0  # in the log before the abort (else purged unsent)
                producer.abort_transaction(TIMEOUT_S)
        wait_for(lambda: local_segment_bases(tmp_path / "data", topic)[0] > 600, "the aborted transactions to be in the store only")

        def values(isolation: str) -> list[bytes]:
            consumer = Consumer({
                "bootstrap.servers": broker.bootstrap, "group.id": "r", "isolation.level": isolation,
                "enable.auto.commit": False, "enable.partition.eof": True,
            })
            consumer.assign([TopicPartition(topic, 0, 0)])
            found: list[bytes] = []
            deadline = time.monotonic() + TIMEOUT_S
            try:
                while time.monotonic() < deadline:
                    message = consumer.poll(1)
                    if message is None:
                        continue
                    if message.error() is not None:
                        assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                        break
                    found.append(message.value())
            finally:
                consumer.close()
            return found

        assert values("read_committed") == committed
        assert len(values("read_uncommitted")) == 8 * 150
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
    # Kafka's check at start: tiered topics need the remote storage system.
    without = BrokerProcess(tmp_path / "tiered")
    with pytest.raises(RuntimeError, match="delete all topics with the property remote.storage.enable=true"):
        without.start()
