"""broker.http.produce: records batched per partition, and idempotent delivery (a producer id
from InitProducerId, sequences per partition, retries written once)."""

import asyncio

from broker.http.produce import OutRecord
from broker.partitioner import murmur2
from broker.http.routing import Unanswered
from broker.session import ANONYMOUS
from protocol.api_keys import ApiKey
from protocol.record_batch import iter_batches
from replication.broker_client import BrokerConnectionError
from storage.topic_partition import TopicPartition
from tests.in_process import running_broker


def _headers(broker, tp):
    log = broker.replica_manager.get_partition(tp).log
    data = log.read(0, 1 << 20, log.log_end_offset, True).read()
    return [header for _, header in iter_batches(data)]


def _batches(broker, tp):
    return [header.record_count for header in _headers(broker, tp)]


def test_the_records_of_one_call_become_one_batch_per_partition(tmp_path):
    async def scenario():
        async with running_broker(tmp_path, {"http.listeners": "http://127.0.0.1:0"}) as broker:
            await broker.topics.create("t", 2, {})
            records = [OutRecord(i % 2, None, b"v%d" % i) for i in range(10)]
            outcomes = await broker.http_api.producer.produce("t", records, ANONYMOUS)
            return outcomes, _batches(broker, TopicPartition("t", 0)), _batches(broker, TopicPartition("t", 1))

    outcomes, batches_0, batches_1 = asyncio.run(scenario())
    assert [(o.partition, o.offset) for o in outcomes] == [(i % 2, i // 2) for i in range(10)]
    assert (batches_0, batches_1) == ([5], [5])


def test_keyed_records_go_where_the_java_partitioner_puts_them_and_unkeyed_ones_stick_together(tmp_path):
    async def scenario():
        async with running_broker(tmp_path, {"http.listeners": "http://127.0.0.1:0"}) as broker:
            await broker.topics.create("t", 3, {})
            keyed = [OutRecord(None, b"foobar", b"x"), OutRecord(None, b"abc", b"y")]
            unkeyed = [OutRecord(None, None, b"z") for _ in range(4)]
            return (
                await broker.http_api.producer.produce("t", keyed, ANONYMOUS),
                await broker.http_api.producer.produce("t", unkeyed, ANONYMOUS),
            )

    keyed, unkeyed = asyncio.run(scenario())
    assert [o.partition for o in keyed] == [(murmur2(b"foobar") & 0x7FFFFFFF) % 3, (479470107 & 0x7FFFFFFF) % 3]
    assert len({o.partition for o in unkeyed}) == 1


def test_a_partition_the_topic_lacks_fails_that_record_alone(tmp_path):
    async def scenario():
        async with running_broker(tmp_path, {"http.listeners": "http://127.0.0.1:0"}) as broker:
            await broker.topics.create("t", 1, {})
            return await broker.http_api.producer.produce(
                "t", [OutRecord(0, None, b"a"), OutRecord(7, None, b"b")], ANONYMOUS
            )

    good, bad = asyncio.run(scenario())
    assert (good.error.name, good.offset, bad.error.name) == ("none", 0, "unknown_topic_or_partition")


def test_acks_all_batches_carry_one_producer_id_and_consecutive_sequences_per_partition(tmp_path):
    async def scenario():
        async with running_broker(tmp_path, {"http.listeners": "http://127.0.0.1:0"}) as broker:
            await broker.topics.create("t", 2, {})
            producer = broker.http_api.producer
            await producer.produce("t", [OutRecord(0, None, b"a"), OutRecord(0, None, b"b")], ANONYMOUS)
            await producer.produce("t", [OutRecord(1, None, b"c")], ANONYMOUS)
            await producer.produce("t", [OutRecord(0, None, b"d"), OutRecord(1, None, b"e")], ANONYMOUS)
            return _headers(broker, TopicPartition("t", 0)), _headers(broker, TopicPartition("t", 1))

    headers_0, headers_1 = asyncio.run(scenario())
    assert {h.producer_id for h in headers_0 + headers_1} == {headers_0[0].producer_id}
    assert headers_0[0].producer_id >= 0 and {h.producer_epoch for h in headers_0 + headers_1} == {0}
    assert [h.base_sequence for h in headers_0] == [0, 2]
    assert [h.base_sequence for h in headers_1] == [0, 1]


def test_acks_1_is_not_idempotent_as_the_java_producer_with_acks_1(tmp_path):
    async def scenario():
        async with running_broker(tmp_path, {"http.listeners": "http://127.0.0.1:0"}) as broker:
            await broker.topics.create("t", 1, {})
            await broker.http_api.producer.produce("t", [OutRecord(0, None, b"a")], ANONYMOUS, acks=1)
            return _headers(broker, TopicPartition("t", 0))

    (header,) = asyncio.run(scenario())
    assert (header.producer_id, header.base_sequence) == (-1, -1)


def test_a_produce_whose_answer_is_lost_is_retried_and_written_once_with_its_first_offsets(tmp_path):
    async def scenario():
        async with running_broker(tmp_path, {"http.listeners": "http://127.0.0.1:0"}) as broker:
            await broker.topics.create("t", 1, {})
            producer = broker.http_api.producer
            await producer.produce("t", [OutRecord(0, None, b"first")], ANONYMOUS)
            router = broker.http_api.router
            real_send = router.send
            lost = []

            async def send_losing_the_first_answer(broker_id, api_key, *args):
                answer = await real_send(broker_id, api_key, *args)
                if api_key == ApiKey.PRODUCE and not lost:
                    # The leader wrote the batch, but its answer never came (a connection lost).
                    lost.append(answer)
                    raise Unanswered(broker_id, BrokerConnectionError("connection lost"))
                return answer

            router.send = send_losing_the_first_answer
            outcomes = await producer.produce("t", [OutRecord(0, None, b"x"), OutRecord(0, None, b"y")], ANONYMOUS)
            return lost, outcomes, _headers(broker, TopicPartition("t", 0))

    lost, outcomes, headers = asyncio.run(scenario())
    assert len(lost) == 1
    assert [(o.error.name, o.offset) for o in outcomes] == [("none", 1), ("none", 2)]
    assert [(h.base_offset, h.record_count, h.base_sequence) for h in headers] == [(0, 1, 0), (1, 2, 1)]


def test_a_produce_cancelled_in_flight_leaves_its_producer_id_so_later_records_are_not_taken_for_it(tmp_path):
    async def scenario():
        async with running_broker(tmp_path, {"http.listeners": "http://127.0.0.1:0"}) as broker:
            await broker.topics.create("t", 1, {})
            producer = broker.http_api.producer
            router = broker.http_api.router
            real_send = router.send
            written = asyncio.Event()

            async def send_and_never_answer_the_first(broker_id, api_key, *args):
                answer = await real_send(broker_id, api_key, *args)
                if api_key == ApiKey.PRODUCE and not written.is_set():
                    written.set()
                    await asyncio.Event().wait()  # the HTTP client goes away before the answer
                return answer

            router.send = send_and_never_answer_the_first
            cancelled = asyncio.ensure_future(producer.produce("t", [OutRecord(0, None, b"x")], ANONYMOUS))
            await written.wait()
            cancelled.cancel()
            # Same sequence under the same producer id would be answered as a retry of "x".
            outcomes = await producer.produce("t", [OutRecord(0, None, b"y")], ANONYMOUS)
            return outcomes, _headers(broker, TopicPartition("t", 0))

    outcomes, headers = asyncio.run(scenario())
    assert [(o.error.name, o.offset) for o in outcomes] == [("none", 1)]
    assert len(headers) == 2 and headers[0].producer_id != headers[1].producer_id
