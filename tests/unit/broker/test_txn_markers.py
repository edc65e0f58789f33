"""broker.txn_markers: in an in-process broker, markers wait for the ISR; ClusterMarkerWriter
with a fake inter-broker sender."""

import asyncio
import errno
import os

from kio.schema.write_txn_markers.v1.response import (
    WritableTxnMarkerPartitionResult,
    WritableTxnMarkerResult,
    WritableTxnMarkerTopicResult,
    WriteTxnMarkersResponse,
)

from broker.metadata_cache import BrokerNode, MetadataCache, PartitionInfo
from broker.txn_markers import ClusterMarkerWriter, _request
from coordinator.transaction_coordinator import Marker
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from replication.broker_client import BrokerRequestTimeoutError
from replication.partition_state import PartitionState
from storage.topic_partition import TopicPartition
from tests.in_process import Client, running_broker

TP = TopicPartition("t", 0)
MARKER = Marker(producer_id=5, producer_epoch=0, coordinator_epoch=0, commit=True)


def test_a_marker_is_written_once_the_isr_has_it(tmp_path):
    async def main():
        async with running_broker(tmp_path, {"offsets.commit.timeout.ms": "300"}) as broker:
            await broker.topics.create(TP.topic, 1, {})
            assert await broker.markers.write_markers(MARKER, [TP]) == {TP: ErrorCode.none}
            # A second ISR member that never fetches holds the high watermark back.
            broker.replica_manager.become_leader_or_follower(1, [PartitionState(TP, 1, 0, 1, (0, 1), 1, (0, 1))], {}, 0)
            assert await broker.markers.write_markers(MARKER, [TP]) == {TP: ErrorCode.request_timed_out}
            missing = TopicPartition("none", 0)
            assert await broker.markers.write_markers(MARKER, [missing]) == {missing: ErrorCode.unknown_topic_or_partition}

    asyncio.run(main())


def test_a_write_txn_markers_request_is_answered_once_the_isr_has_the_marker(tmp_path):
    async def main():
        async with running_broker(tmp_path, {"offsets.commit.timeout.ms": "300"}) as broker:
            await broker.topics.create(TP.topic, 1, {})
            request = _request(MARKER, [TP])
            client = Client(broker)
            assert _errors(await client.call(ApiKey.WRITE_TXN_MARKERS, 1, request)) == {TP: ErrorCode.none}
            broker.replica_manager.become_leader_or_follower(1, [PartitionState(TP, 1, 0, 1, (0, 1), 1, (0, 1))], {}, 0)
            answer = await client.call(ApiKey.WRITE_TXN_MARKERS, 1, request)
            assert _errors(answer) == {TP: ErrorCode.request_timed_out}

    asyncio.run(main())


def test_a_marker_that_reaches_flush_messages_is_written_once_fsynced_or_fails_with_its_disk(tmp_path, monkeypatch):
    real_fsync = os.fsync
    failing = []  # whether the partition's disk fails its fsyncs now

    def fsync(descriptor):
        if failing and os.readlink(f"/proc/self/fd/{descriptor}").startswith(str(tmp_path)):
            raise OSError(errno.EIO, "Input/output error")
        real_fsync(descriptor)

    async def main():
        async with running_broker(tmp_path) as broker:
            await broker.topics.create(TP.topic, 1, {"flush.messages": "1"})
            monkeypatch.setattr(os, "fsync", fsync)
            partition_log = broker.replica_manager.get_partition(TP).log
            assert await broker.markers.write_markers(MARKER, [TP]) == {TP: ErrorCode.none}
            assert partition_log.recovery_point == 1
            failing.append(True)
            assert await broker.markers.write_markers(MARKER, [TP]) == {TP: ErrorCode.kafka_storage_error}

    asyncio.run(main())


# ----------------------------------------------------------------- ClusterMarkerWriter

class _Local:
    def __init__(self) -> None:
        self.written: list[TopicPartition] = []

    async def write_markers(self, marker, partitions):
        self.written.extend(partitions)
        return dict.fromkeys(partitions, ErrorCode.none)


def _cache(leaders: dict[TopicPartition, int], live=(0, 1, 2)) -> MetadataCache:
    cache = MetadataCache("PLAINTEXT")
    nodes = [BrokerNode(b, {"PLAINTEXT": ("127.0.0.1", 9000 + b)}) for b in live]
    cache.update(0, 1, nodes, {tp: PartitionInfo(leader, 0, (0, 1, 2), (0, 1, 2)) for tp, leader in leaders.items()})
    return cache


def _errors(response) -> dict[TopicPartition, ErrorCode]:
    return {
        TopicPartition(topic.name, p.partition_index): ErrorCode(p.error_code)
        for result in response.markers for topic in result.topics for p in topic.partitions
    }


def _answer(request, errors: dict[TopicPartition, ErrorCode]) -> WriteTxnMarkersResponse:
    wanted = request.markers[0]
    return WriteTxnMarkersResponse(markers=(WritableTxnMarkerResult(producer_id=wanted.producer_id, topics=tuple(
        WritableTxnMarkerTopicResult(name=topic.name, partitions=tuple(
            WritableTxnMarkerPartitionResult(partition_index=p, error_code=errors[TopicPartition(topic.name, p)])
            for p in topic.partition_indexes
        ))
        for topic in wanted.topics
    )),))


def test_markers_go_to_each_leader_once_grouped_and_local_ones_stay_local():
    tps = [TopicPartition("t", p) for p in range(5)]
    cache = _cache({tps[0]: 0, tps[1]: 1, tps[2]: 2, tps[3]: 1, tps[4]: 0})
    sent: dict[int, object] = {}

    async def send(broker_id, request):
        sent[broker_id] = request
        return _answer(request, dict.fromkeys(tps, ErrorCode.none))

    local = _Local()
    writer = ClusterMarkerWriter(0, cache, local, send)
    assert asyncio.run(writer.write_markers(MARKER, tps)) == dict.fromkeys(tps, ErrorCode.none)
    assert local.written == [tps[0], tps[4]]
    assert sorted(sent) == [1, 2]
    to_one = sent[1].markers[0]
    assert (to_one.producer_id, to_one.producer_epoch, to_one.coordinator_epoch, to_one.transaction_result) == MARKER
    assert [(t.name, t.partition_indexes) for t in to_one.topics] == [("t", (1, 3))]


def test_remote_failures_are_answered_as_the_coordinator_retries_them():
    moved, stale, gone, leaderless = (TopicPartition("t", p) for p in range(4))
    unreachable = TopicPartition("u", 0)
    cache = _cache({moved: 1, stale: 1, leaderless: 3, unreachable: 2})

    async def send(broker_id, request):
        if broker_id == 2:
            raise BrokerRequestTimeoutError("no answer")
        # Broker 1 has not heard of `moved` yet.
        return _answer(request, {moved: ErrorCode.unknown_topic_or_partition, stale: ErrorCode.invalid_producer_epoch})

    writer = ClusterMarkerWriter(0, cache, _Local(), send)
    assert asyncio.run(writer.write_markers(MARKER, [moved, stale, gone, leaderless, unreachable])) == {
        moved: ErrorCode.not_leader_or_follower,
        stale: ErrorCode.invalid_producer_epoch,
        gone: ErrorCode.unknown_topic_or_partition,
        leaderless: ErrorCode.not_leader_or_follower,
        unreachable: ErrorCode.request_timed_out,
    }


def test_each_write_finds_the_leaders_again():
    tp = TopicPartition("t", 0)
    cache = _cache({tp: 1})
    asked: list[int] = []

    async def send(broker_id, request):
        asked.append(broker_id)
        return _answer(request, {tp: ErrorCode.not_leader_or_follower if broker_id == 1 else ErrorCode.none})

    async def main():
        writer = ClusterMarkerWriter(0, cache, _Local(), send)
        assert await writer.write_markers(MARKER, [tp]) == {tp: ErrorCode.not_leader_or_follower}
        cache.update(0, 1, cache.brokers.values(), {tp: PartitionInfo(2, 1, (0, 1, 2), (0, 1, 2))})
        assert await writer.write_markers(MARKER, [tp]) == {tp: ErrorCode.none}

    asyncio.run(main())
    assert asked == [1, 2]
