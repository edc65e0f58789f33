"""OffsetForLeaderEpoch, and the replication side of Fetch, Produce, ListOffsets and
DeleteRecords, on an in-process broker whose partition the test makes leader or follower through
the replica manager, or leaves to other brokers in its metadata cache."""

import asyncio
import inspect
import datetime

from kio.schema.delete_records.v2.request import DeleteRecordsPartition, DeleteRecordsRequest, DeleteRecordsTopic
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.list_offsets.v7.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from kio.schema.offset_for_leader_epoch.v4.request import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
)
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from broker.deferred import Deferred
from broker.metadata_cache import BrokerNode, PartitionInfo
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.fetch import decode_fetch_response
from replication.partition_state import PartitionState
from replication.replica_selector import RACK_AWARE_REPLICA_SELECTOR
from storage.log_config import LogConfig
from storage.topic_partition import TopicPartition
from tests.in_process import CLIENT_SESSION, Client, running_broker
from tests.kafka_wire import encode_request
from tests.unit.storage.conftest import batch

TP = TopicPartition("t", 0)
ME, FOLLOWER = 0, 5


def lead(broker, epoch: int, isr=(ME, FOLLOWER)) -> None:
    state = PartitionState(TP, 1, ME, epoch, isr, 0, (ME, FOLLOWER), is_new=True)
    assert broker.replica_manager.become_leader_or_follower(1, [state], {}, ME) == {TP: ErrorCode.none}


async def call(broker, api_key, version, request):
    return await Client(broker).call(api_key, version, request)


def epoch_request(epoch: int, current: int = -1, replica_id: int = -1) -> OffsetForLeaderEpochRequest:
    return OffsetForLeaderEpochRequest(
        replica_id=replica_id,
        topics=(
            OffsetForLeaderTopic(
                topic=TP.topic,
                partitions=(OffsetForLeaderPartition(partition=0, current_leader_epoch=current, leader_epoch=epoch),),
            ),
        ),
    )


def test_offset_for_leader_epoch_answers_from_the_epoch_cache_in_every_version(tmp_path):
    async def main():
        async with running_broker(tmp_path) as broker:
            lead(broker, epoch=2)
            broker.replica_manager.append(TP, memoryview(batch(b"a", b"b")))
            lead(broker, epoch=4)
            broker.replica_manager.append(TP, memoryview(batch(b"c")))
            answers = {}
            for version in range(5):
                response = await call(broker, ApiKey.OFFSET_FOR_LEADER_EPOCH, version, epoch_request(3))
                answers[version] = response.topics[0].partitions[0]
            latest = (await call(broker, ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, epoch_request(4))).topics[0].partitions[0]
            fenced = (await call(broker, ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, epoch_request(2, current=3))).topics[0].partitions[0]
            future = (await call(broker, ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, epoch_request(2, current=5))).topics[0].partitions[0]
            beyond = (await call(broker, ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, epoch_request(9))).topics[0].partitions[0]
        assert answers[0].end_offset == 2 and answers[0].error_code == ErrorCode.none
        for version in range(1, 5):
            assert (answers[version].leader_epoch, answers[version].end_offset) == (2, 2)
        assert (latest.leader_epoch, latest.end_offset) == (4, 3)
        assert fenced.error_code == ErrorCode.fenced_leader_epoch
        assert future.error_code == ErrorCode.unknown_leader_epoch
        assert (beyond.leader_epoch, beyond.end_offset) == (-1, -1)

    asyncio.run(main())


def test_offset_for_leader_epoch_needs_the_leader_unless_debugging(tmp_path):
    async def main():
        async with running_broker(tmp_path) as broker:
            lead(broker, epoch=1)
            follow = PartitionState(TP, 1, FOLLOWER, 2, (FOLLOWER,), 1, (ME, FOLLOWER))
            broker.replica_manager.become_leader_or_follower(1, [follow], {}, ME)
            consumer = await call(broker, ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, epoch_request(1))
            debugging = await call(broker, ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, epoch_request(1, replica_id=-2))
        assert consumer.topics[0].partitions[0].error_code == ErrorCode.not_leader_or_follower
        assert debugging.topics[0].partitions[0].error_code == ErrorCode.none

    asyncio.run(main())


async def fetch(
    broker,
    offset: int,
    replica_id: int = -1,
    last_fetched_epoch: int = -1,
    current_leader_epoch: int = -1,
    tp=TP,
    rack_id: str = "",
    version: int = 12,
    max_wait_ms: int = 0,
    log_start_offset: int = -1,
):
    request = FetchRequest(
        replica_id=replica_id,
        rack_id=rack_id,
        max_wait=datetime.timedelta(milliseconds=max_wait_ms),
        min_bytes=1,
        topics=(
            FetchTopic(
                topic=tp.topic,
                partitions=(
                    FetchPartition(
                        partition=tp.partition,
                        current_leader_epoch=current_leader_epoch,
                        fetch_offset=offset,
                        last_fetched_epoch=last_fetched_epoch,
                        log_start_offset=log_start_offset,
                        partition_max_bytes=1 << 20,
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
    )
    frame = encode_request(ApiKey.FETCH, version, request)
    chunks = broker._dispatcher.dispatch(memoryview(bytearray(frame))[4:], CLIENT_SESSION)
    if inspect.isawaitable(chunks):
        chunks = await chunks
    body = memoryview(b"".join(bytes(c) if not hasattr(c, "read") else c.read() for c in chunks))
    header_size = 4 + 4 + (1 if version >= 12 else 0)  # frame size, correlation id, tagged fields
    return decode_fetch_response(version, body[header_size:]).topics[0].partitions[0]


def test_follower_fetches_read_to_the_log_end_and_move_the_high_watermark(tmp_path):
    async def main():
        async with running_broker(tmp_path) as broker:
            lead(broker, epoch=1)
            broker.replica_manager.append(TP, memoryview(batch(b"a", b"b")))
            consumer = await fetch(broker, 0)
            follower = await fetch(broker, 0, replica_id=FOLLOWER, last_fetched_epoch=-1)
            caught_up = await fetch(broker, 2, replica_id=FOLLOWER, last_fetched_epoch=1)
            consumer_after = await fetch(broker, 0)
        assert (consumer.high_watermark, len(consumer.records)) == (0, 0)
        assert len(follower.records) > 0 and follower.high_watermark == 0
        assert caught_up.high_watermark == 2
        assert len(consumer_after.records) == len(follower.records)

    asyncio.run(main())


def test_a_followers_long_poll_records_its_fetch_offsets_once(tmp_path):
    # Kafka's DelayedFetch reads again at its end without updating the follower's state: the
    # offsets are those already recorded.
    async def main():
        async with running_broker(tmp_path) as broker:
            lead(broker, epoch=1)
            broker.replica_manager.append(TP, memoryview(batch(b"a")))
            await fetch(broker, 1, replica_id=FOLLOWER, last_fetched_epoch=1)  # caught up: HW 1
            partition = broker.replica_manager.partitions[TP]
            arrived = partition.clock()
            answer = await fetch(broker, 1, replica_id=FOLLOWER, last_fetched_epoch=1, max_wait_ms=300)  # waits it out
            recorded = partition.followers[FOLLOWER].last_fetch_ms - arrived
            return recorded, answer

    recorded_after_ms, answer = asyncio.run(main())
    assert recorded_after_ms < 150  # at its arrival, not when its wait ended 300 ms later
    assert (answer.error_code, answer.high_watermark) == (ErrorCode.none, 1)


def test_a_follower_whose_last_epoch_ended_earlier_gets_a_diverging_epoch(tmp_path):
    async def main():
        async with running_broker(tmp_path) as broker:
            lead(broker, epoch=1)
            broker.replica_manager.append(TP, memoryview(batch(b"a", b"b")))
            lead(broker, epoch=3)
            broker.replica_manager.append(TP, memoryview(batch(b"c")))
            # The follower wrote offsets 2-3 in epoch 2 as a leader nobody followed.
            diverged = await fetch(broker, 4, replica_id=FOLLOWER, last_fetched_epoch=2)
            fine = await fetch(broker, 2, replica_id=FOLLOWER, last_fetched_epoch=1)
        assert diverged.diverging_epoch == (1, 2) and len(diverged.records) == 0
        assert fine.diverging_epoch is None and len(fine.records) > 0

    asyncio.run(main())


def test_acks_all_waits_for_the_follower_and_times_out_without_it(tmp_path):
    async def main():
        async with running_broker(tmp_path) as broker:
            lead(broker, epoch=1)
            produce = asyncio.ensure_future(produce_acks_all(broker, timeout_ms=5000))
            await asyncio.sleep(0.05)
            assert not produce.done()
            await fetch(broker, 1, replica_id=FOLLOWER, last_fetched_epoch=1)
            committed = await asyncio.wait_for(produce, 2)
            timed_out = await produce_acks_all(broker, timeout_ms=50)
        assert (committed.error_code, committed.base_offset) == (ErrorCode.none, 0)
        assert timed_out.error_code == ErrorCode.request_timed_out

    asyncio.run(main())


def test_an_acks_all_produce_answers_with_a_deferred_that_stops_waiting_when_cancelled(tmp_path):
    """Kafka's DelayedProduce: no task per request or partition, and a closed connection (which
    cancels the answer) leaves nothing waiting for the followers."""

    async def main():
        async with running_broker(tmp_path) as broker:
            lead(broker, epoch=1)
            request = bytearray(encode_request(ApiKey.PRODUCE, 9, acks_all_request(timeout_ms=5000)))
            waiting = broker._dispatcher.dispatch(memoryview(request)[4:], CLIENT_SESSION)
            assert isinstance(waiting, Deferred) and not waiting.done()
            assert broker.replica_manager.waiting_requests() == (0, 1)
            waiting.cancel()  # its connection closed
            return broker.replica_manager.waiting_requests()

    assert asyncio.run(main()) == (0, 0)


async def produce_acks_all(broker, timeout_ms: int, tp=TP):
    response = await call(broker, ApiKey.PRODUCE, 9, acks_all_request(timeout_ms, tp))
    return response.responses[0].partition_responses[0]


def acks_all_request(timeout_ms: int, tp=TP) -> ProduceRequest:
    return ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout=datetime.timedelta(milliseconds=timeout_ms),
        topic_data=(
            TopicProduceData(
                name=tp.topic, partition_data=(PartitionProduceData(index=tp.partition, records=bytes(batch(b"v"))),)
            ),
        ),
    )


async def list_offsets(broker, current_leader_epoch: int = -1, tp=TP):
    request = ListOffsetsRequest(
        replica_id=-1,
        isolation_level=0,
        topics=(
            ListOffsetsTopic(
                name=tp.topic,
                partitions=(
                    ListOffsetsPartition(
                        partition_index=tp.partition, current_leader_epoch=current_leader_epoch, timestamp=-2
                    ),
                ),
            ),
        ),
    )
    return (await call(broker, ApiKey.LIST_OFFSETS, 7, request)).topics[0].partitions[0]


def test_a_new_leader_whose_high_watermark_lags_its_epoch_start_answers_offset_not_available(tmp_path):
    # Kafka's Partition.fetchOffsetForTimestamp: its offsets could be below what was acknowledged.
    async def main():
        async with running_broker(tmp_path) as broker:
            lead(broker, epoch=1)
            broker.replica_manager.append(TP, memoryview(batch(b"a", b"b")))
            lead(broker, epoch=2)  # the epoch starts at 2; the HW is 0 until the follower fetches
            lagging = await list_offsets(broker)
            await fetch(broker, 2, replica_id=FOLLOWER, current_leader_epoch=2)
            caught_up = await list_offsets(broker)
        assert lagging.error_code == ErrorCode.offset_not_available
        assert (caught_up.error_code, caught_up.offset) == (ErrorCode.none, 0)

    asyncio.run(main())


async def delete_records(broker, tp=TP):
    request = DeleteRecordsRequest(
        topics=(DeleteRecordsTopic(name=tp.topic, partitions=(DeleteRecordsPartition(partition_index=tp.partition, offset=0),)),),
        timeout=datetime.timedelta(seconds=1),
    )
    return (await call(broker, ApiKey.DELETE_RECORDS, 2, request)).topics[0].partitions[0]


async def offset_for_leader_epoch(broker, current_leader_epoch: int = -1, tp=TP):
    request = OffsetForLeaderEpochRequest(
        replica_id=-1,
        topics=(
            OffsetForLeaderTopic(
                topic=tp.topic,
                partitions=(
                    OffsetForLeaderPartition(
                        partition=tp.partition, current_leader_epoch=current_leader_epoch, leader_epoch=0
                    ),
                ),
            ),
        ),
    )
    return (await call(broker, ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, request)).topics[0].partitions[0]


async def partition_errors(broker, tp=TP, current_leader_epoch: int = -1) -> dict[str, ErrorCode]:
    """The error of every partition-level API asked about `tp` (Produce has no leader epoch)."""
    return {
        "produce": ErrorCode((await produce_acks_all(broker, timeout_ms=100, tp=tp)).error_code),
        "fetch": ErrorCode((await fetch(broker, 0, current_leader_epoch=current_leader_epoch, tp=tp)).error_code),
        "list_offsets": ErrorCode((await list_offsets(broker, current_leader_epoch, tp=tp)).error_code),
        "offset_for_leader_epoch": ErrorCode(
            (await offset_for_leader_epoch(broker, current_leader_epoch, tp=tp)).error_code
        ),
        "delete_records": ErrorCode((await delete_records(broker, tp=tp)).error_code),
    }


def test_a_broker_hosting_no_replica_of_a_known_partition_answers_not_leader_or_follower(tmp_path):
    elsewhere = TopicPartition("elsewhere", 0)  # in the metadata, led by other brokers

    async def main():
        async with running_broker(tmp_path) as broker:
            cache = broker.metadata_cache
            others = PartitionInfo(FOLLOWER, 3, (FOLLOWER, 6), (FOLLOWER, 6))
            cache.update(cache.controller_id, cache.controller_epoch, list(cache.brokers.values()), {elsewhere: others})
            known = await partition_errors(broker, elsewhere)
            unknown = await partition_errors(broker, TopicPartition("nowhere", 0))
        assert set(known.values()) == {ErrorCode.not_leader_or_follower}, known
        assert set(unknown.values()) == {ErrorCode.unknown_topic_or_partition}, unknown

    asyncio.run(main())


def test_a_follower_checks_the_leader_epoch_of_a_request_before_leadership(tmp_path):
    async def main():
        async with running_broker(tmp_path) as broker:
            follow = PartitionState(TP, 1, FOLLOWER, 3, (FOLLOWER, ME), 0, (ME, FOLLOWER), is_new=True)
            broker.replica_manager.become_leader_or_follower(1, [follow], {}, ME)
            older = await partition_errors(broker, current_leader_epoch=2)
            same = await partition_errors(broker, current_leader_epoch=3)
            newer = await partition_errors(broker, current_leader_epoch=4)
        with_epoch = ("fetch", "list_offsets", "offset_for_leader_epoch")
        assert {api: older[api] for api in with_epoch} == dict.fromkeys(with_epoch, ErrorCode.fenced_leader_epoch)
        assert {api: newer[api] for api in with_epoch} == dict.fromkeys(with_epoch, ErrorCode.unknown_leader_epoch)
        # Consumers of Fetch v11+ may read an in-sync follower (KIP-392); the rest needs the leader.
        assert same.pop("fetch") == ErrorCode.none
        assert set(same.values()) == {ErrorCode.not_leader_or_follower}, same
        assert older["produce"] == newer["produce"] == older["delete_records"] == ErrorCode.not_leader_or_follower

    asyncio.run(main())


# ---------------------------------------------------------------- fetch from follower (KIP-392)

RACK_AWARE = {"replica.selector.class": RACK_AWARE_REPLICA_SELECTOR}


def racks(broker, follower_rack: str | None = "rack-b", partitions=None) -> None:
    """This broker in rack-a, the follower (alive on the client listener) in `follower_rack`;
    None: the follower is not alive."""
    cache = broker.metadata_cache
    nodes = [BrokerNode(ME, cache.brokers[ME].endpoints, "rack-a")]
    if follower_rack is not None:
        nodes.append(BrokerNode(FOLLOWER, {cache.listener_name: ("127.0.0.1", 9)}, follower_rack))
    cache.update(cache.controller_id, cache.controller_epoch, nodes, partitions or {})


def records_length(answer) -> int:
    return len(answer.records or b"")


def lead_in_rack_a_with_two_records(broker) -> None:
    """Lead with offsets 0-1, the follower in rack-b."""
    lead(broker, epoch=1)
    racks(broker)
    broker.replica_manager.append(TP, memoryview(batch(b"a", b"b")))


def test_the_leader_sends_a_consumer_in_a_followers_rack_to_that_follower_at_once_and_without_records(tmp_path):
    async def main():
        async with running_broker(tmp_path, RACK_AWARE) as broker:
            lead_in_rack_a_with_two_records(broker)
            await fetch(broker, 2, replica_id=FOLLOWER, last_fetched_epoch=1)
            # Nothing to read at the HW: without the preferred replica this would wait a minute.
            sent = await asyncio.wait_for(fetch(broker, 2, rack_id="rack-b", max_wait_ms=60_000), 30)
            from_start = await fetch(broker, 0, rack_id="rack-b")
            leaders_rack = await fetch(broker, 0, rack_id="rack-a")
            no_replica_there = await fetch(broker, 0, rack_id="rack-z")
            no_rack = await fetch(broker, 0)
            follower = await fetch(broker, 2, replica_id=FOLLOWER, last_fetched_epoch=1, rack_id="rack-b")
        assert (sent.error_code, sent.preferred_read_replica, records_length(sent)) == (ErrorCode.none, FOLLOWER, 0)
        assert (from_start.preferred_read_replica, records_length(from_start), from_start.high_watermark) == (
            FOLLOWER, 0, 2,
        )
        for answer in (leaders_rack, no_replica_there, no_rack):
            assert (answer.preferred_read_replica, records_length(answer)) == (-1, len(batch(b"a", b"b")))
        assert follower.preferred_read_replica == -1

    asyncio.run(main())


def test_the_leader_keeps_consumers_whose_rack_follower_lacks_the_offset_is_out_of_the_isr_or_gone(tmp_path):
    async def main():
        async with running_broker(tmp_path, RACK_AWARE) as broker:
            lead_in_rack_a_with_two_records(broker)
            await fetch(broker, 1, replica_id=FOLLOWER, last_fetched_epoch=1, log_start_offset=1)
            answers = {
                "at its log end": await fetch(broker, 1, rack_id="rack-b"),
                "beyond its log end": await fetch(broker, 2, rack_id="rack-b"),
                "before its log start": await fetch(broker, 0, rack_id="rack-b"),
            }
            lead(broker, epoch=1, isr=(ME,))
            answers["out of the ISR"] = await fetch(broker, 1, rack_id="rack-b")
            lead(broker, epoch=1)
            racks(broker, follower_rack=None)
            answers["not alive"] = await fetch(broker, 1, rack_id="rack-b")
        preferred = {why: answer.preferred_read_replica for why, answer in answers.items()}
        assert preferred == {
            "at its log end": FOLLOWER,
            "beyond its log end": -1,
            "before its log start": -1,
            "out of the ISR": -1,
            "not alive": -1,
        }

    asyncio.run(main())


def test_without_replica_selector_class_the_leader_serves_every_rack(tmp_path):
    async def main():
        async with running_broker(tmp_path) as broker:
            lead(broker, epoch=1)
            racks(broker)
            broker.replica_manager.append(TP, memoryview(batch(b"a")))
            await fetch(broker, 1, replica_id=FOLLOWER, last_fetched_epoch=1)
            answer = await fetch(broker, 0, rack_id="rack-b")
        assert (answer.preferred_read_replica, records_length(answer)) == (-1, len(batch(b"a")))

    asyncio.run(main())


def become_follower_holding_two_batches(broker, high_watermark: int):
    """Offsets 0-1 and 2 written as leader at epoch 1, then a follower of FOLLOWER at epoch 2
    whose leader sent `high_watermark`."""
    lead(broker, epoch=1)
    broker.replica_manager.append(TP, memoryview(batch(b"a", b"b")))
    broker.replica_manager.append(TP, memoryview(batch(b"c")))
    follow = PartitionState(TP, 1, FOLLOWER, 2, (FOLLOWER, ME), 1, (ME, FOLLOWER))
    broker.replica_manager.become_leader_or_follower(1, [follow], {}, ME)
    partition = broker.replica_manager.partitions[TP]
    broker.replica_manager.follow_high_watermark(partition, high_watermark)
    return partition


def test_an_in_sync_follower_serves_consumers_of_fetch_v11_up_to_the_high_watermark_it_learnt(tmp_path):
    async def main():
        async with running_broker(tmp_path, RACK_AWARE) as broker:
            become_follower_holding_two_batches(broker, high_watermark=2)
            below = await fetch(broker, 0, current_leader_epoch=2, rack_id="rack-a")
            at_the_high_watermark = await fetch(broker, 2)
            beyond_the_log_end = await fetch(broker, 4)
            before_v11 = await fetch(broker, 0, version=10)
        assert (below.error_code, below.high_watermark, below.preferred_read_replica) == (ErrorCode.none, 2, -1)
        assert records_length(below) == len(batch(b"a", b"b"))
        assert (at_the_high_watermark.error_code, records_length(at_the_high_watermark)) == (ErrorCode.none, 0)
        # The consumer's position is beyond this replica: librdkafka and Kafka's consumer go back
        # to the leader on this answer (the HW in it is below their position).
        assert beyond_the_log_end.error_code == ErrorCode.offset_out_of_range
        assert before_v11.error_code == ErrorCode.not_leader_or_follower

    asyncio.run(main())


def test_a_consumer_waiting_on_a_follower_is_answered_when_the_leaders_high_watermark_arrives(tmp_path):
    async def main():
        async with running_broker(tmp_path) as broker:
            partition = become_follower_holding_two_batches(broker, high_watermark=2)
            waiting = asyncio.ensure_future(fetch(broker, 2, max_wait_ms=60_000))
            for _ in range(100):  # until the fetch waits for the partition
                if TP in broker.replica_manager._append_waiters:
                    break
                await asyncio.sleep(0)
            broker.replica_manager.follow_high_watermark(partition, 3)
            woken = await asyncio.wait_for(waiting, 30)
        assert (woken.high_watermark, records_length(woken)) == (3, len(batch(b"c")))

    asyncio.run(main())


def test_a_follower_out_of_the_isr_sends_consumers_back_to_the_leader(tmp_path):
    async def main():
        async with running_broker(tmp_path) as broker:
            become_follower_holding_two_batches(broker, high_watermark=3)
            in_sync = await fetch(broker, 0)
            # The controller's UpdateMetadata after the leader shrank the ISR.
            racks(broker, partitions={TP: PartitionInfo(FOLLOWER, 2, (ME, FOLLOWER), (FOLLOWER,))})
            left = await fetch(broker, 0)
        assert in_sync.error_code == ErrorCode.none
        assert (left.error_code, records_length(left)) == (ErrorCode.not_leader_or_follower, 0)

    asyncio.run(main())


def throttled_leader_of_two_records(broker) -> None:
    """The leader of TP, alone in its ISR, its replicas throttled (leader.replication.throttled.rate
    is the broker's), holding two records."""
    broker.replication_quotas.update_topic(TP.topic, LogConfig.resolve(
        {"leader.replication.throttled.replicas": f"{TP.partition}:{ME}"}, {}
    ))
    lead(broker, epoch=1, isr=(ME,))
    broker.replica_manager.append(TP, memoryview(batch(b"a", b"b")))


def test_the_leader_throttles_a_follower_out_of_the_isr_only_while_its_quota_is_exceeded(tmp_path):
    async def main():
        async with running_broker(tmp_path, {"leader.replication.throttled.rate": "1"}) as broker:
            throttled_leader_of_two_records(broker)
            first = await fetch(broker, 0, replica_id=FOLLOWER)  # nothing recorded yet
            throttled = await fetch(broker, 0, replica_id=FOLLOWER)
            lead(broker, epoch=2, isr=(ME, FOLLOWER))
            in_sync = await fetch(broker, 0, replica_id=FOLLOWER, current_leader_epoch=2)
            broker.replication_quotas.update_topic(TP.topic, LogConfig.resolve({}, {}))
            lead(broker, epoch=3, isr=(ME,))
            unthrottled_topic = await fetch(broker, 0, replica_id=FOLLOWER, current_leader_epoch=3)
        assert len(first.records) > 0
        assert len(throttled.records) == 0 and throttled.error_code == ErrorCode.none
        assert throttled.high_watermark == first.high_watermark
        assert len(in_sync.records) > 0
        assert len(unthrottled_topic.records) > 0

    asyncio.run(main())


def test_a_throttled_followers_long_poll_reads_again_at_max_wait(tmp_path):
    """A read that a quota held back is not settled: lifting the throttle wakes no watch, and
    the answer at max_wait_ms carries the records a second read finds."""
    async def main():
        async with running_broker(tmp_path, {"leader.replication.throttled.rate": "1"}) as broker:
            throttled_leader_of_two_records(broker)
            await fetch(broker, 0, replica_id=FOLLOWER)  # the quota exceeded from here on
            waiting = asyncio.ensure_future(fetch(broker, 0, replica_id=FOLLOWER, max_wait_ms=300))
            await asyncio.sleep(0.05)
            broker.replication_quotas.update_topic(TP.topic, LogConfig.resolve({}, {}))
            return await asyncio.wait_for(waiting, 10)

    assert len(asyncio.run(main()).records) > 0
