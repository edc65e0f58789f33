"""Transactions with the pure-Python clients against a real broker process: aiokafka (which
speaks the oldest versions of the transactional APIs: InitProducerId, AddPartitionsToTxn,
AddOffsetsToTxn, TxnOffsetCommit and EndTxn v0) and kafka-python. Committed and aborted
transactions as read_committed and read_uncommitted consumers see them, and offsets sent within
a transaction, visible to the group once it commits."""

import asyncio
import time

import kafka
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.structs import OffsetAndMetadata

from tests.compat.test_aiokafka import get_records, make_consumer, run_bounded
from tests.harness import unique_topic

pytestmark = pytest.mark.compat

OVERRIDES = {"transaction_state_log_num_partitions": "3", "offsets_topic_num_partitions": "3"}


@pytest.fixture
def txn_broker(broker_factory):
    return broker_factory(**OVERRIDES)


def test_commit_abort_and_offsets_in_transactions(txn_broker):
    topic = unique_topic("aio-txn")

    async def scenario():
        producer = AIOKafkaProducer(
            bootstrap_servers=txn_broker.bootstrap, transactional_id=unique_topic("aio-tx"), request_timeout_ms=10_000
        )
        await producer.start()
        try:
            async with producer.transaction():
                await producer.send_and_wait(topic, b"c1", partition=0)
            with pytest.raises(RuntimeError):
                async with producer.transaction():
                    await producer.send_and_wait(topic, b"a1", partition=0)
                    raise RuntimeError("abort")
            async with producer.transaction():
                await producer.send_and_wait(topic, b"c2", partition=0)
                await producer.send_offsets_to_transaction({TopicPartition(topic, 0): OffsetAndMetadata(42, "")}, "aio-group")
        finally:
            await producer.stop()

        seen = {}
        for isolation, count in (("read_committed", 2), ("read_uncommitted", 3)):
            consumer = make_consumer(txn_broker, isolation_level=isolation, auto_offset_reset="earliest")
            await consumer.start()
            try:
                consumer.assign([TopicPartition(topic, 0)])
                seen[isolation] = [r.value for r in await get_records(consumer, count)]
                await asyncio.sleep(0.5)  # nothing more comes
                seen[isolation] += [r.value for r in await get_records(consumer, 1, timeout_s=1)]
            finally:
                await consumer.stop()
        group = AIOKafkaConsumer(bootstrap_servers=txn_broker.bootstrap, group_id="aio-group", enable_auto_commit=False)
        await group.start()
        try:
            committed = await group.committed(TopicPartition(topic, 0))
        finally:
            await group.stop()
        return seen, committed

    seen, committed = run_bounded(scenario(), timeout_s=90)
    assert seen == {"read_committed": [b"c1", b"c2"], "read_uncommitted": [b"c1", b"a1", b"c2"]}
    assert committed == 42


def test_kafka_python_transactions(txn_broker):
    topic = unique_topic("kp-txn")
    producer = kafka.KafkaProducer(bootstrap_servers=txn_broker.bootstrap, transactional_id=unique_topic("kp-tx"))
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"c1", partition=0)
        producer.commit_transaction()
        producer.begin_transaction()
        producer.send(topic, b"a1", partition=0).get(timeout=20)
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(topic, b"c2", partition=0)
        producer.send_offsets_to_transaction(
            {kafka.TopicPartition(topic, 0): kafka.OffsetAndMetadata(7, "", -1)}, "kp-group"
        )
        producer.commit_transaction()
    finally:
        producer.close(timeout=10)

    def values(isolation: str, count: int) -> list[bytes]:
        consumer = kafka.KafkaConsumer(
            bootstrap_servers=txn_broker.bootstrap, isolation_level=isolation, enable_auto_commit=False
        )
        try:
            consumer.assign([kafka.TopicPartition(topic, 0)])
            consumer.seek_to_beginning()
            found: list[bytes] = []
            deadline = time.monotonic() + 20
            while len(found) < count and time.monotonic() < deadline:
                for records in consumer.poll(timeout_ms=500).values():
                    found += [r.value for r in records]
            found += [r.value for records in consumer.poll(timeout_ms=1000).values() for r in records]
            return found
        finally:
            consumer.close()

    assert values("read_committed", 2) == [b"c1", b"c2"]
    assert values("read_uncommitted", 3) == [b"c1", b"a1", b"c2"]
    group = kafka.KafkaConsumer(bootstrap_servers=txn_broker.bootstrap, group_id="kp-group", enable_auto_commit=False)
    try:
        assert group.committed(kafka.TopicPartition(topic, 0)) == 7
    finally:
        group.close()
