"""Fetch through the dispatcher of an in-process broker, served as a connection serves it."""

import asyncio
import datetime
import time

from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from broker.deferred import Deferred
from protocol.api_keys import ApiKey
from protocol.records import Record, build_batch
from tests.in_process import CLIENT_SESSION, running_broker
from tests.kafka_wire import decode_response, encode_request

MS = datetime.timedelta(milliseconds=1)
TOPIC = "tail"


def frame(api_key: int, version: int, request) -> memoryview:
    return memoryview(bytearray(encode_request(api_key, version, request, client_id="app")))[4:]


def _tail_requests():
    """A consumer's Fetch v12 of the topic's next record (offset 0), and the Produce of it."""
    fetch = FetchRequest(
        replica_id=-1,
        max_wait=5_000 * MS,
        min_bytes=1,
        topics=(FetchTopic(topic=TOPIC, partitions=(FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20),)),),
        forgotten_topics_data=(),
    )
    records = bytes(build_batch([Record(0, 1_000, b"k", b"first")]))
    produce = ProduceRequest(
        transactional_id=None,
        acks=1,
        timeout=5_000 * MS,
        topic_data=(TopicProduceData(name=TOPIC, partition_data=(PartitionProduceData(index=0, records=records),)),),
    )
    return fetch, produce


def test_a_record_appended_before_the_long_poll_is_awaited_ends_it(tmp_path):
    # A waiting Fetch watches its partition from its dispatch on: a Produce served before its
    # answer is awaited (another connection) must end the wait, not leave the fetch to its
    # max_wait (the lost wake-up a tailing consumer saw as a 500 ms stall).
    fetch, produce = _tail_requests()

    async def scenario():
        async with running_broker(tmp_path) as broker:
            await broker.topics.create(TOPIC, 1, {})
            dispatch = broker._dispatcher.dispatch
            waiting = dispatch(frame(ApiKey.FETCH, 12, fetch), CLIENT_SESSION)
            task = asyncio.ensure_future(waiting)
            dispatch(frame(ApiKey.PRODUCE, 9, produce), CLIENT_SESSION)  # before the task's first step
            started = time.monotonic()
            chunks = await asyncio.wait_for(task, 10)
            waited = time.monotonic() - started
            response = decode_response(ApiKey.FETCH, 12, b"".join(c if isinstance(c, bytes) else c.read() for c in chunks))
            return waited, response

    waited, response = asyncio.run(scenario())
    (partition,) = response.responses[0].partitions
    assert partition.high_watermark == 1 and partition.records
    assert waited < 2.0


def test_a_long_poll_is_answered_on_the_turn_after_the_append_that_wakes_it(tmp_path):
    """Not within the Produce (whose append is not over when the watch hears of it), and with no
    turn of its own after that: its answer joins the Produce's row of sends."""
    fetch, produce = _tail_requests()

    async def scenario():
        async with running_broker(tmp_path) as broker:
            await broker.topics.create(TOPIC, 1, {})
            dispatch = broker._dispatcher.dispatch
            waiting = dispatch(frame(ApiKey.FETCH, 12, fetch), CLIENT_SESSION)
            assert isinstance(waiting, Deferred) and not waiting.done()
            dispatch(frame(ApiKey.PRODUCE, 9, produce), CLIENT_SESSION)
            done_within_the_produce = waiting.done()
            await asyncio.sleep(0)
            return done_within_the_produce, waiting.done(), waiting.result()

    done_within_the_produce, done_a_turn_later, chunks = asyncio.run(scenario())
    assert not done_within_the_produce and done_a_turn_later
    response = decode_response(ApiKey.FETCH, 12, b"".join(c if isinstance(c, bytes) else c.read() for c in chunks))
    assert response.responses[0].partitions[0].records


def test_a_cancelled_long_poll_stops_watching_its_partitions(tmp_path):
    fetch, _ = _tail_requests()

    async def scenario():
        async with running_broker(tmp_path) as broker:
            await broker.topics.create(TOPIC, 1, {})
            waiting = broker._dispatcher.dispatch(frame(ApiKey.FETCH, 12, fetch), CLIENT_SESSION)
            watching = broker.replica_manager.waiting_requests()
            waiting.cancel()  # its connection closed
            return watching, broker.replica_manager.waiting_requests()

    assert asyncio.run(scenario()) == ((1, 0), (0, 0))
