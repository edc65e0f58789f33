"""The Spark source (a batch read and a stream) and the export job reading a tiered topic
(KIP-405) whose early segments exist only in the store: the history straight from the store
(rsm.config.url, a directory), the live tail from the broker, in one job, equal to what a Kafka
client reads from offset 0, at both isolation levels (read_committed also across a transaction
open at the store's end).

To show that no broker is on the data path of the store's offsets, the store is moved away
from the broker once the reference reads are done (the broker keeps nothing of it in memory:
its remote cache is 1 byte), and Spark is pointed at the new place: the broker can no longer
serve an offset below its local log start, and any read that asked it for one would fail."""

import os
import shutil
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from spark_jobs import reading
from spark_jobs.export import ExportConfig, committed_ranges, run_export
from spark_jobs.options import parse_read_options
from spark_jobs.planning import DataLossError
from tests.compat.test_tiered_storage import local_segment_bases, tiered_broker
from tests.harness import unique_topic
from tests.spark.helpers import SPARK_MARKS, rows_of, wait_for

pytestmark = SPARK_MARKS

RECORDS = 3000
TIMEOUT_S = 60


def produce(bootstrap: str, topic: str) -> None:
    """Plain records with headers around one aborted and one committed transaction, all with
    CreateTime stamps."""
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 8192})

    def send(producer, start: int, count: int) -> None:
        for i in range(start, start + count):
            producer.produce(
                topic, key=b"k%d" % i, value=b"record-%06d-" % i + b"x" * 80, headers=[("n", b"%d" % i)],
                timestamp=1_700_000_000_000 + i,
            )

    send(plain, 0, RECORDS // 3)
    assert plain.flush(TIMEOUT_S) == 0
    transactional = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique_topic("tx"), "linger.ms": 5, "batch.size": 8192})
    transactional.init_transactions(TIMEOUT_S)
    transactional.begin_transaction()
    send(transactional, 10_000, 200)  # aborted: read_committed readers never see these
    assert transactional.flush(TIMEOUT_S) == 0  # written before the abort, not purged by it
    transactional.abort_transaction(TIMEOUT_S)
    transactional.begin_transaction()
    send(transactional, 20_000, 200)
    transactional.commit_transaction(TIMEOUT_S)
    send(plain, RECORDS // 3, RECORDS - RECORDS // 3)
    assert plain.flush(TIMEOUT_S) == 0


def consume_from_zero(bootstrap: str, topic: str, isolation: str, end: int) -> dict:
    """(partition, offset) -> (key, value, timestamp, timestampType, headers), as rows_of gives."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "reference", "enable.auto.commit": False,
        "isolation.level": isolation, "enable.partition.eof": True,
    })
    consumer.assign([TopicPartition(topic, 0, 0)])
    found = {}
    deadline = time.monotonic() + TIMEOUT_S
    try:
        done = False
        while not done:
            assert time.monotonic() < deadline, f"read {len(found)} records of {topic} in {TIMEOUT_S} s"
            for message in consumer.consume(500, timeout=1):
                if message.error() is not None:
                    assert message.error().code() == message.error()._PARTITION_EOF, message.error()
                    done = message.offset() >= end
                    continue
                kind, timestamp = message.timestamp()
                found[(0, message.offset())] = (
                    message.key(), message.value(), timestamp, 0, [(k, v) for k, v in message.headers() or []],
                )
    finally:
        consumer.close()
    return found


def store_segment_starts(store: Path, topic: str) -> set[int]:
    return {int(p.name[:20]) for p in store.glob(f"{topic}-*/0/*.log")}


@pytest.fixture(scope="module")
def tiered(tmp_path_factory):
    """A broker with a directory store and a tiered topic whose early segments are only in the
    store, the records a Kafka client reads from offset 0 (both isolation levels), and then the
    store moved to where only Spark is told to look."""
    root = tmp_path_factory.mktemp("tiered")
    store, data = root / "store", root / "data"
    # Nothing of the store kept in memory: a 1-byte remote cache.
    broker = tiered_broker(data, f"file://{store}", **{"remote.log.index.file.cache.total.size.bytes": "1"}).start()
    try:
        topic = unique_topic("tiered")
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1, config={
            "remote.storage.enable": "true", "segment.bytes": "16384", "local.retention.bytes": "1", "retention.ms": "-1",
        })])[topic].result(timeout=TIMEOUT_S)
        produce(broker.bootstrap, topic)
        # Every rolled segment copied, and the copied ones deleted locally.
        wait_for(
            lambda: local_segment_bases(data, topic)[0] > RECORDS // 2
            and set(local_segment_bases(data, topic)[:-1]) <= store_segment_starts(store, topic),
            TIMEOUT_S,
            "copies to the store and local deletion",
        )
        low, end = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "w"}).get_watermark_offsets(
            TopicPartition(topic, 0), timeout=TIMEOUT_S
        )
        assert low == 0
        reference = {
            isolation: consume_from_zero(broker.bootstrap, topic, isolation, end)
            for isolation in ("read_uncommitted", "read_committed")
        }
        assert len(reference["read_uncommitted"]) == RECORDS + 400
        assert len(reference["read_committed"]) == RECORDS + 200
        moved = root / "moved-store"
        os.rename(store, moved)
        yield broker, topic, moved, reference, local_segment_bases(data, topic)[0]
        assert "Traceback" not in broker.log(), broker.log()[-5000:]  # it never read its store
    finally:
        broker.kill()


def source_options(broker, topic: str, store: Path, **more: str) -> dict:
    return {
        "kafka.bootstrap.servers": broker.bootstrap, "subscribe": topic, "includeHeaders": "true",
        "rsm.config.url": f"file://{store}", "kafkaConsumer.pollTimeoutMs": "20000", **more,
    }


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_the_source_reads_the_history_from_the_store_and_the_tail_from_the_broker(spark, tiered, isolation):
    broker, topic, store, reference, local_start = tiered
    options = source_options(broker, topic, store, **{"kafka.isolation.level": isolation})
    plan = reading.plan(parse_read_options(options))
    remote = [r for r in plan if r.remote is not None]
    # One task per remote segment, covering everything below the local log start.
    assert len(remote) == len({r.remote.segment.segment_id for r in remote}) == len(
        [p for p in store.glob(f"{topic}-*/0/*.log")]
    )
    assert remote[0].start == 0 and min(r.start for r in plan if r.remote is None) >= local_start

    rows = rows_of(spark.read.format("logway").options(**options).load(), headers=True)
    assert rows == reference[isolation]


def test_a_stream_reads_the_history_from_the_store_in_micro_batches(spark, tiered, tmp_path):
    broker, topic, store, reference, _ = tiered
    stream = (
        spark.readStream.format("logway")
        .options(**source_options(broker, topic, store))
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "1000")
        .load()
    )
    name = "stream_" + topic.replace("-", "_")
    query = (
        stream.writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(180)
        assert query.exception() is None
    finally:
        query.stop()
    assert rows_of(spark.table(name), headers=True) == reference["read_uncommitted"]


def test_the_export_job_reads_the_history_from_the_store(spark, tiered, tmp_path):
    broker, topic, store, reference, _ = tiered
    output = tmp_path / "export"
    options = source_options(broker, topic, store)
    summary = run_export(spark, ExportConfig(str(output), options, group_id=None, progress_interval_s=0.5))
    assert summary.complete, summary.report()
    rows = {}
    for (t, partition), ranges in committed_ranges(str(output)).items():
        for start, end in ranges:
            path = output / f"topic={t}" / f"partition={partition}" / f"{start:020d}-{end:020d}.parquet"
            for row in pq.read_table(path, partitioning=None).to_pylist():
                assert (partition, row["offset"]) not in rows
                rows[(partition, row["offset"])] = (
                    row["key"], row["value"], int(row["timestamp"].timestamp() * 1000), row["timestampType"],
                    [(h["key"], h["value"]) for h in row["headers"]],
                )
    assert rows == reference["read_uncommitted"]
    # The remote segments were exported one file each at least.
    assert len(summary.planned) > len(list(store.glob(f"{topic}-*/0/*.log")))


def test_a_remote_segment_gone_from_the_store_fails_the_read_loudly(spark, tiered, tmp_path):
    broker, topic, store, _, _ = tiered
    copy = tmp_path / "store-copy"
    shutil.copytree(store, copy)
    first = min(copy.glob(f"{topic}-*/0/*.log"))
    options = source_options(broker, topic, copy)
    plan = reading.plan(parse_read_options(options))  # planned while the segment was there
    first.unlink()
    failed = [r for r in plan if r.remote is not None and r.start == 0]
    with pytest.raises(DataLossError, match="cannot be read"):
        list(reading.records(parse_read_options(options), failed[0]))
    with pytest.raises(Exception, match="DataLossError"):
        spark.read.format("logway").options(**options).load().count()


def test_read_committed_leaves_a_transaction_open_at_the_store_s_end_to_the_broker(spark, tmp_path):
    """A transaction whose records are in the store and whose abort marker is not (it landed in
    the active segment, never copied): only the broker's transaction index knows it was aborted,
    so the read takes the offsets from its first one on from the broker."""
    store = tmp_path / "store"
    with tiered_broker(tmp_path / "data", f"file://{store}") as broker:
        topic = unique_topic("tiered-open")
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1, config={
            "remote.storage.enable": "true", "segment.bytes": "16384", "local.retention.bytes": "1", "retention.ms": "-1",
        })])[topic].result(timeout=TIMEOUT_S)
        plain = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "batch.size": 8192})
        transactional = Producer({
            "bootstrap.servers": broker.bootstrap, "transactional.id": unique_topic("tx"), "linger.ms": 5,
            "batch.size": 8192,
        })
        first_aborted = []
        for i in range(500):
            plain.produce(topic, value=b"before-%06d-" % i + b"x" * 80)
        assert plain.flush(TIMEOUT_S) == 0
        transactional.init_transactions(TIMEOUT_S)
        transactional.begin_transaction()
        for i in range(100):
            transactional.produce(
                topic, value=b"aborted-%06d" % i, on_delivery=lambda err, msg: first_aborted.append(msg.offset())
            )
        assert transactional.flush(TIMEOUT_S) == 0
        for i in range(500):  # segments roll while the transaction is open
            plain.produce(topic, value=b"during-%06d-" % i + b"x" * 80)
        assert plain.flush(TIMEOUT_S) == 0
        transactional.abort_transaction(TIMEOUT_S)
        data = tmp_path / "data"
        wait_for(
            lambda: local_segment_bases(data, topic)[0] > min(first_aborted)
            and set(local_segment_bases(data, topic)[:-1]) <= store_segment_starts(store, topic),
            TIMEOUT_S,
            "copies to the store and local deletion",
        )
        _, end = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "w"}).get_watermark_offsets(
            TopicPartition(topic, 0), timeout=TIMEOUT_S
        )
        reference = consume_from_zero(broker.bootstrap, topic, "read_committed", end)
        assert len(reference) == 1000

        options = source_options(broker, topic, store, **{"kafka.isolation.level": "read_committed"})
        plan = reading.plan(parse_read_options(options))
        assert max(r.end for r in plan if r.remote is not None) == min(first_aborted)
        assert rows_of(spark.read.format("logway").options(**options).load(), headers=True) == reference
