"""__remote_log_metadata shared by a cluster's brokers (broker.remote_log_metadata) against stand-in
leaders of its partitions: a client double answering Fetch and Produce from in-memory logs (the
network path is the inter-broker client's, covered in tests/unit/replication and
tests/cluster/test_tiered_storage.py)."""

import asyncio
import uuid

import pytest
from kio.schema.produce.v9.response import PartitionProduceResponse, ProduceResponse, TopicProduceResponse

from broker import remote_log_metadata
from broker.remote_log_metadata import SharedMetadataTopic
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, KafkaError
from protocol.fetch import FetchResponse, PartitionResult, TopicResult
from protocol.record_batch import iter_batches, set_base_offset
from protocol.records import Record, build_batch, iter_records
from storage.remote.metadata import RemoteLogMetadataCache, RemoteSegmentMetadata, SegmentState, TopicIdPartition, encode
from storage.topic_partition import TopicPartition

TOPIC = "__remote_log_metadata"
TOPIC_ID = uuid.UUID(int=5)


def segment(partition: int, state: SegmentState, segment_id: int = 1) -> RemoteSegmentMetadata:
    return RemoteSegmentMetadata(
        TopicIdPartition(TOPIC_ID, "events", partition), uuid.UUID(int=segment_id), 0, 99, 1, 1000, 1000, ((0, 0),), 4096, state
    )


class StandInLeaders:
    """The metadata partitions' logs and leaders: Fetch answers from a partition's log up to its
    end (its high watermark: every write here is committed), Produce appends; `refuse` makes the
    next produces answer that error."""

    def __init__(self, leaders: dict[int, int]) -> None:
        self.leaders = leaders
        self.logs: dict[int, list[bytes]] = {p: [] for p in leaders}
        self.fetched: list[tuple[int, int, int]] = []  # (broker, partition, fetch offset)
        self.produced_to: list[int] = []
        self.refuse: list[ErrorCode] = []

    def end(self, partition: int) -> int:
        return sum(sum(1 for _ in iter_records(b)) for b in self.logs[partition])

    def append(self, partition: int, values: list[bytes]) -> int:
        base = self.end(partition)
        self.logs[partition].append(build_batch([Record(base + i, 1000, b"k", v) for i, v in enumerate(values)]))
        return base

    def leader_of(self, tp: TopicPartition) -> int | None:
        return self.leaders.get(tp.partition)

    async def send_to(self, broker_id: int, api_key, version, request):
        await asyncio.sleep(0)
        if api_key == ApiKey.PRODUCE:
            return self._produce(broker_id, request)
        assert api_key == ApiKey.FETCH and request.replica_id == -1  # a consumer's fetch
        results = []
        for wanted in request.topics[0].partitions:
            self.fetched.append((broker_id, wanted.partition, wanted.fetch_offset))
            if wanted.fetch_offset > self.end(wanted.partition):
                results.append(PartitionResult(wanted.partition, ErrorCode.offset_out_of_range, -1, records=None))
                continue
            data = b"".join(b for b in self.logs[wanted.partition] if _last_offset(b) >= wanted.fetch_offset)
            results.append(PartitionResult(wanted.partition, ErrorCode.none, self.end(wanted.partition), records=memoryview(data)))
        return FetchResponse(0, ErrorCode.none, 0, [TopicResult(TOPIC, results)])

    def _produce(self, broker_id: int, request):
        data = request.topic_data[0].partition_data[0]
        partition = data.index
        self.produced_to.append(broker_id)
        if self.refuse:
            error, base = self.refuse.pop(0), -1
        else:
            assert broker_id == self.leaders[partition]
            records = bytearray(data.records)
            base = self.end(partition)
            for position, _header in iter_batches(records):
                set_base_offset(records, position, base)
            self.logs[partition].append(bytes(records))
            error = ErrorCode.none
        answer = PartitionProduceResponse(index=partition, error_code=error, base_offset=base, record_errors=())
        return ProduceResponse(responses=(TopicProduceResponse(name=TOPIC, partition_responses=(answer,)),))

    async def close(self) -> None:
        pass


def _last_offset(batch: bytes) -> int:
    return max(record.offset for record in iter_records(batch))


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch):
    monkeypatch.setattr(remote_log_metadata, "BACKOFF_S", 0.001)


def shared(leaders: StandInLeaders, needed: set[int]) -> tuple[SharedMetadataTopic, RemoteLogMetadataCache]:
    cache = RemoteLogMetadataCache()
    topic = SharedMetadataTopic(TOPIC, cache, leaders, leaders.leader_of, lambda: set(needed), lambda tip: tip.partition)
    return topic, cache


def test_only_the_partitions_of_hosted_tiered_partitions_are_consumed_from_their_leaders_until_loaded():
    leaders = StandInLeaders({0: 1, 1: 2})
    leaders.append(0, [encode(segment(0, SegmentState.COPY_SEGMENT_STARTED)), encode(segment(0, SegmentState.COPY_SEGMENT_FINISHED))])
    leaders.append(1, [encode(segment(1, SegmentState.COPY_SEGMENT_STARTED))])
    topic, cache = shared(leaders, {0})

    async def main():
        assert not topic.is_loaded(0)
        await topic.consume_once()

    asyncio.run(main())
    assert leaders.fetched == [(1, 0, 0)]
    assert topic.is_loaded(0) and not topic.is_loaded(1)
    assert [s.state for s in cache.state(segment(0, SegmentState.COPY_SEGMENT_FINISHED).partition).segments.values()] == [
        SegmentState.COPY_SEGMENT_FINISHED
    ]
    assert segment(1, SegmentState.COPY_SEGMENT_STARTED).partition not in cache.partitions


def test_a_write_goes_to_the_leader_and_returns_once_read_back_into_the_cache():
    leaders = StandInLeaders({0: 1, 1: 2})
    topic, cache = shared(leaders, set())
    written = segment(1, SegmentState.COPY_SEGMENT_STARTED)

    async def main():
        topic.start()
        try:
            await topic.publish(1, [(written.key, encode(written))])
            # Applied by the consumer, as every other broker applies it.
            assert cache.state(written.partition).segments[written.segment_id] == written
        finally:
            await topic.stop()

    asyncio.run(main())
    assert leaders.produced_to == [2]
    assert leaders.end(1) == 1


def test_a_write_follows_the_partitions_leader_when_it_moves():
    leaders = StandInLeaders({0: 1})
    leaders.refuse = [ErrorCode.not_leader_or_follower]
    topic, cache = shared(leaders, set())
    written = segment(0, SegmentState.COPY_SEGMENT_STARTED)

    async def main():
        topic.start()
        try:
            leaders.leaders[0] = 3  # the controller moved it; the answer said so
            await topic.publish(0, [(written.key, encode(written))])
        finally:
            await topic.stop()

    asyncio.run(main())
    assert leaders.produced_to[-1] == 3
    assert written.segment_id in cache.state(written.partition).segments


def test_a_write_refused_for_good_raises():
    leaders = StandInLeaders({0: 1})
    leaders.refuse = [ErrorCode.topic_authorization_failed]
    topic, _cache = shared(leaders, set())
    written = segment(0, SegmentState.COPY_SEGMENT_STARTED)

    async def main():
        topic.start()
        try:
            await topic.publish(0, [(written.key, encode(written))])
        finally:
            await topic.stop()

    with pytest.raises(KafkaError) as raised:
        asyncio.run(main())
    assert raised.value.error_code is ErrorCode.topic_authorization_failed


def test_a_partition_consumed_again_is_replayed_from_its_start_without_its_stale_entries():
    leaders = StandInLeaders({0: 1})
    leaders.append(0, [encode(segment(0, SegmentState.COPY_SEGMENT_STARTED))])
    needed = {0}
    cache = RemoteLogMetadataCache()
    topic = SharedMetadataTopic(TOPIC, cache, leaders, leaders.leader_of, lambda: set(needed), lambda tip: tip.partition)
    tip = segment(0, SegmentState.COPY_SEGMENT_STARTED).partition

    async def main():
        await topic.consume_once()
        needed.clear()
        await topic.consume_once()  # no longer hosted: forgotten
        assert not topic.is_loaded(0)
        # Meanwhile the segment was deleted and compaction kept only its tombstone.
        leaders.logs[0] = [build_batch([Record(0, 1000, segment(0, SegmentState.COPY_SEGMENT_STARTED).key, None)])]
        needed.add(0)
        await topic.consume_once()

    asyncio.run(main())
    assert [offset for _broker, _partition, offset in leaders.fetched] == [0, 0]
    assert topic.is_loaded(0)
    assert not cache.state(tip).segments


def test_a_partition_that_lost_records_read_from_it_is_replayed_from_its_start():
    """Its leader's log ends below the consumer's position (an unclean election): the entries
    read from the lost records leave the cache, and the records the partition now holds,
    written after the loss, are read."""
    leaders = StandInLeaders({0: 1})
    lost = segment(0, SegmentState.COPY_SEGMENT_STARTED, segment_id=1)
    leaders.append(0, [encode(lost), encode(lost.with_state(SegmentState.COPY_SEGMENT_FINISHED, 1, 1001))])
    topic, cache = shared(leaders, {0})
    kept = segment(0, SegmentState.COPY_SEGMENT_STARTED, segment_id=2)

    async def main():
        await topic.consume_once()
        assert lost.segment_id in cache.state(lost.partition).segments
        leaders.logs[0] = []
        leaders.append(0, [encode(kept)])
        await topic.consume_once()  # out of range: replayed from the start
        assert not topic.is_loaded(0)
        await topic.consume_once()

    asyncio.run(main())
    assert [offset for _broker, _partition, offset in leaders.fetched] == [0, 2, 0]
    assert topic.is_loaded(0)
    assert list(cache.state(lost.partition).segments) == [kept.segment_id]
