"""Fetch through the dispatcher of an in-process broker, served as a connection serves it."""

import asyncio
import datetime
import time

import pytest
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic, ForgottenTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from broker.deferred import Deferred
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.records import Record, build_batch
from tests.in_process import CLIENT_SESSION, Client, running_broker
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


@pytest.mark.pure_python  # counts ReplicaManager.read's calls
def test_a_long_poll_nothing_woke_answers_its_read_at_max_wait_without_reading_again(tmp_path, monkeypatch):
    """Nothing changed, so a second read would find the same: an idle follower's fetch of
    thousands of partitions reads them once a wait. One woken by an append reads again."""
    from broker.replica_manager import ReplicaManager

    reads = []
    read = ReplicaManager.read

    def counted(self, partition, *args, **kwargs):
        reads.append(partition.topic_partition.partition)
        return read(self, partition, *args, **kwargs)

    monkeypatch.setattr(ReplicaManager, "read", counted)

    async def scenario():
        async with running_broker(tmp_path) as broker:
            await broker.topics.create(TOPIC, 2, {})
            client = Client(broker)
            idle = await client.call(ApiKey.FETCH, 12, _session_fetch({0: 0, 1: 0}, max_wait_ms=50))
            idle_reads = list(reads)
            reads.clear()
            waiting = asyncio.ensure_future(client.call(ApiKey.FETCH, 12, _session_fetch({0: 0, 1: 0}, max_wait_ms=5_000)))
            await asyncio.sleep(0.05)
            await client.call(ApiKey.PRODUCE, 9, _produce(1, b"new"))
            return idle, idle_reads, await waiting, reads

    idle, idle_reads, woken, woken_reads = asyncio.run(scenario())
    assert idle_reads == [0, 1] and _answered(idle) == {0: 0, 1: 0}
    assert woken_reads == [0, 1, 0, 1] and _answered(woken)[0] == 0 < _answered(woken)[1]


# --- incremental fetch sessions (KIP-227; the cache's rules: test_fetch_sessions.py)


def _session_fetch(offsets: dict[int, int], *, session_id=0, epoch=0, forgotten=(), max_wait_ms=0):
    """A consumer's Fetch v12 of TOPIC's partitions at `offsets` in a session."""
    return FetchRequest(
        replica_id=-1,
        max_wait=max_wait_ms * MS,
        min_bytes=1,
        session_id=session_id,
        session_epoch=epoch,
        topics=(FetchTopic(topic=TOPIC, partitions=tuple(
            FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=1 << 20) for p, o in offsets.items()
        )),) if offsets else (),
        forgotten_topics_data=(ForgottenTopic(topic=TOPIC, partitions=tuple(forgotten)),) if forgotten else (),
    )


def _produce(partition: int, value: bytes) -> ProduceRequest:
    records = bytes(build_batch([Record(0, 1_000, b"k", value)]))
    return ProduceRequest(
        transactional_id=None,
        acks=1,
        timeout=5_000 * MS,
        topic_data=(TopicProduceData(name=TOPIC, partition_data=(PartitionProduceData(index=partition, records=records),)),),
    )


def _answered(response) -> dict[int, int]:
    """{partition: bytes of records} of a Fetch response."""
    return {p.partition_index: len(p.records or b"") for t in response.responses for p in t.partitions}


def test_a_fetch_session_answers_only_the_partitions_with_something_new(tmp_path):
    async def scenario():
        async with running_broker(tmp_path) as broker:
            await broker.topics.create(TOPIC, 2, {})
            client = Client(broker)
            await client.call(ApiKey.PRODUCE, 9, _produce(0, b"first"))
            full = await client.call(ApiKey.FETCH, 12, _session_fetch({0: 0, 1: 0}))
            session_id = full.session_id
            # Partition 0 read up to its end: only its new offset is sent, and nothing is new.
            idle = await client.call(ApiKey.FETCH, 12, _session_fetch({0: 1}, session_id=session_id, epoch=1, max_wait_ms=10))
            await client.call(ApiKey.PRODUCE, 9, _produce(1, b"second"))
            # Nothing sent: partition 1, still read from offset 0, has a record now.
            changed = await client.call(ApiKey.FETCH, 12, _session_fetch({}, session_id=session_id, epoch=2))
            return full, idle, changed

    full, idle, changed = asyncio.run(scenario())
    assert full.error_code == ErrorCode.none and full.session_id > 0
    assert _answered(full).keys() == {0, 1} and _answered(full)[0] > 0
    assert (idle.error_code, idle.session_id, _answered(idle)) == (ErrorCode.none, full.session_id, {})
    assert changed.session_id == full.session_id and list(_answered(changed)) == [1] and _answered(changed)[1] > 0


def test_a_fetch_session_stops_reading_what_it_forgot(tmp_path):
    async def scenario():
        async with running_broker(tmp_path) as broker:
            await broker.topics.create(TOPIC, 2, {})
            client = Client(broker)
            full = await client.call(ApiKey.FETCH, 12, _session_fetch({0: 0, 1: 0}))
            await client.call(ApiKey.FETCH, 12, _session_fetch({}, session_id=full.session_id, epoch=1, forgotten=[0]))
            await client.call(ApiKey.PRODUCE, 9, _produce(0, b"unread"))
            await client.call(ApiKey.PRODUCE, 9, _produce(1, b"read"))
            return await client.call(ApiKey.FETCH, 12, _session_fetch({}, session_id=full.session_id, epoch=2))

    assert list(_answered(asyncio.run(scenario()))) == [1]


def test_a_fetch_naming_an_unknown_session_or_a_wrong_epoch_gets_a_session_error(tmp_path):
    async def scenario():
        async with running_broker(tmp_path) as broker:
            await broker.topics.create(TOPIC, 1, {})
            client = Client(broker)
            full = await client.call(ApiKey.FETCH, 12, _session_fetch({0: 0}))
            unknown = await client.call(ApiKey.FETCH, 12, _session_fetch({}, session_id=full.session_id + 1, epoch=1))
            wrong_epoch = await client.call(ApiKey.FETCH, 12, _session_fetch({}, session_id=full.session_id, epoch=5))
            return unknown, wrong_epoch

    unknown, wrong_epoch = asyncio.run(scenario())
    assert (unknown.error_code, unknown.session_id, unknown.responses) == (ErrorCode.fetch_session_id_not_found, 0, ())
    assert (wrong_epoch.error_code, wrong_epoch.session_id) == (ErrorCode.invalid_fetch_session_epoch, 0)


@pytest.mark.parametrize("epoch, slots", [(-1, 1000), (0, 0)])
def test_no_session_for_a_fetch_not_asking_or_with_no_slots(tmp_path, epoch, slots):
    # Epoch -1: librdkafka's fetches, and every fetch before v7.
    async def scenario():
        async with running_broker(tmp_path, {"max.incremental.fetch.session.cache.slots": str(slots)}) as broker:
            await broker.topics.create(TOPIC, 1, {})
            response = await Client(broker).call(ApiKey.FETCH, 12, _session_fetch({0: 0}, epoch=epoch))
            return response, len(broker.fetch_sessions.sessions)

    response, sessions = asyncio.run(scenario())
    assert (response.error_code, response.session_id, list(_answered(response)), sessions) == (ErrorCode.none, 0, [0], 0)
