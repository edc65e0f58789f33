"""aiokafka against a real broker process. Consumers have no group (group_id=None) and are
placed with assign()/seek. Each test runs its coroutine under asyncio.run with an overall bound."""

import asyncio
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka import codec as aiokafka_codec

from tests.harness import unique_topic

pytestmark = pytest.mark.compat

TIMEOUT_S = 20
CODECS = {
    None: lambda: True,
    "gzip": aiokafka_codec.has_gzip,
    "snappy": aiokafka_codec.has_snappy,
    "lz4": aiokafka_codec.has_lz4,
    "zstd": aiokafka_codec.has_zstd,
}


def run_bounded(coroutine, timeout_s: float = 60):
    async def bounded():
        return await asyncio.wait_for(coroutine, timeout_s)

    return asyncio.run(bounded())


def make_producer(broker, **extra) -> AIOKafkaProducer:
    return AIOKafkaProducer(
        bootstrap_servers=broker.bootstrap, acks="all", request_timeout_ms=10_000, **extra
    )


def make_consumer(broker, **extra) -> AIOKafkaConsumer:
    settings = {"request_timeout_ms": 15_000, "fetch_max_wait_ms": 200, **extra}
    return AIOKafkaConsumer(
        bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False, **settings
    )


async def get_records(consumer: AIOKafkaConsumer, count: int, timeout_s: float = TIMEOUT_S) -> list:
    records = []
    deadline = time.monotonic() + timeout_s
    while len(records) < count and time.monotonic() < deadline:
        batches = await consumer.getmany(timeout_ms=500, max_records=count - len(records))
        for batch in batches.values():
            records.extend(batch)
    return records


@pytest.mark.parametrize("codec", list(CODECS), ids=lambda c: c or "none")
def test_send_and_wait_each_codec_then_getmany(shared_broker, codec):
    if not CODECS[codec]():
        pytest.skip(f"aiokafka has no {codec} support here: its Python package is missing")
    topic = unique_topic(f"codec-{codec or 'none'}")
    base_ts = int(time.time() * 1000) - 30_000

    async def scenario():
        producer = make_producer(shared_broker, compression_type=codec, linger_ms=5)
        await producer.start()
        sent = []
        try:
            # Some one at a time (send_and_wait), the rest batched (send, then wait for all).
            for i in range(10):
                value = f"single-{i}".encode()
                metadata = await producer.send_and_wait(
                    topic,
                    value=value,
                    key=b"s",
                    partition=0,
                    timestamp_ms=base_ts + i,
                    headers=[("n", str(i).encode())],
                )
                assert metadata.offset == i
                sent.append((b"s", value, base_ts + i, [("n", str(i).encode())]))
            futures = []
            for i in range(10, 300):
                key = None if i % 50 == 0 else f"k{i}".encode()
                value = None if i % 50 == 1 else (f"batched-{i}" * (1 + i % 4)).encode()
                futures.append(
                    await producer.send(
                        topic, value=value, key=key, partition=0, timestamp_ms=base_ts + i
                    )
                )
                sent.append((key, value, base_ts + i, []))
            offsets = [m.offset for m in await asyncio.gather(*futures)]
            assert offsets == list(range(10, 300))
        finally:
            await producer.stop()

        consumer = make_consumer(shared_broker)
        await consumer.start()
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            records = await get_records(consumer, len(sent))
        finally:
            await consumer.stop()
        assert [r.offset for r in records] == list(range(300))
        for (key, value, ts, headers), record in zip(sent, records):
            assert (record.key, record.value, record.timestamp) == (key, value, ts)
            assert list(record.headers) == headers

    run_bounded(scenario())


def test_offsets_for_times_end_offsets_and_seek(shared_broker):
    topic = unique_topic("offsets")
    base_ts = int(time.time() * 1000) - 7_200_000

    async def scenario():
        producer = make_producer(shared_broker)
        await producer.start()
        try:
            batch = producer.create_batch()
            for i in range(20):
                assert (
                    batch.append(key=None, value=f"v{i}".encode(), timestamp=base_ts + i * 100)
                    is not None
                )
            batch.close()
            future = await producer.send_batch(batch, topic, partition=0)
            assert (await future).offset == 0
        finally:
            await producer.stop()

        tp = TopicPartition(topic, 0)
        consumer = make_consumer(shared_broker)
        await consumer.start()
        try:
            assert await consumer.beginning_offsets([tp]) == {tp: 0}
            assert await consumer.end_offsets([tp]) == {tp: 20}
            found = await consumer.offsets_for_times({tp: base_ts + 1250})
            assert (found[tp].offset, found[tp].timestamp) == (13, base_ts + 1300)
            found = await consumer.offsets_for_times({tp: base_ts})
            assert found[tp].offset == 0
            found = await consumer.offsets_for_times({tp: base_ts + 1_000_000})
            assert found[tp] is None

            consumer.assign([tp])
            consumer.seek(tp, 15)
            records = await get_records(consumer, 5)
            assert [(r.offset, r.value) for r in records] == [
                (i, f"v{i}".encode()) for i in range(15, 20)
            ]
            assert await consumer.position(tp) == 20
            await consumer.seek_to_end(tp)
            assert await consumer.position(tp) == 20
        finally:
            await consumer.stop()

    run_bounded(scenario())


def test_getmany_waits_for_a_later_message(shared_broker):
    topic = unique_topic("wait")

    async def scenario():
        producer = make_producer(shared_broker)
        await producer.start()
        consumer = make_consumer(shared_broker, fetch_max_wait_ms=10_000, request_timeout_ms=30_000)
        await consumer.start()
        try:
            assert (await producer.send_and_wait(topic, b"first", partition=0)).offset == 0
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            consumer.seek(tp, 1)

            async def produce_later():
                await asyncio.sleep(1.0)
                return time.monotonic(), await producer.send_and_wait(topic, b"second", partition=0)

            later = asyncio.ensure_future(produce_later())
            records = await get_records(consumer, 1)
            received_at = time.monotonic()
            sent_at, metadata = await later
            assert metadata.offset == 1
            assert [(r.offset, r.value) for r in records] == [(1, b"second")]
            assert received_at - sent_at < 5.0  # woken by the append, not by the 10 s wait
        finally:
            await consumer.stop()
            await producer.stop()

    run_bounded(scenario())


def test_small_fetch_sizes_cut_batches(shared_broker):
    """Fetch responses that end inside a batch: the client drops the partial batch and asks
    again from there."""
    topic = unique_topic("partial")
    values = [f"{i:05d}".encode() + b"." * 60 for i in range(2000)]

    async def scenario():
        producer = make_producer(shared_broker, linger_ms=5, max_batch_size=2000)
        await producer.start()
        try:
            futures = [await producer.send(topic, value=v, partition=0) for v in values]
            offsets = [m.offset for m in await asyncio.gather(*futures)]
            assert offsets == list(range(2000))
        finally:
            await producer.stop()

        consumer = make_consumer(
            shared_broker, max_partition_fetch_bytes=1000, fetch_max_bytes=2500
        )
        await consumer.start()
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            records = await get_records(consumer, 2000)
        finally:
            await consumer.stop()
        assert [r.value for r in records] == values

    run_bounded(scenario())
