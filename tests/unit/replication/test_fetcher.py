"""The replica fetcher against a stand-in leader: a real leader log answered through a client
double (the network path is covered by test_end_to_end.py), and a real follower replica manager."""

import asyncio
import datetime
import os
import time

import pytest
from kio.schema.list_offsets.v7.response import ListOffsetsPartitionResponse, ListOffsetsResponse, ListOffsetsTopicResponse
from kio.schema.offset_for_leader_epoch.v4.response import (
    EpochEndOffset,
    OffsetForLeaderEpochResponse,
    OffsetForLeaderTopicResult,
)

from broker.replica_manager import ReplicaManager, ReplicationSettings
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, KafkaError
from protocol.fetch import FetchResponse, PartitionResult, TopicResult
from replication.broker_client import BrokerConnectionError
from replication.fetcher import FetcherSettings, ReplicaFetcherManager, truncation_for
from replication.partition import Partition
from replication.partition_state import LeaderEndpoint, PartitionState
from storage.checkpoint import OffsetCheckpointFile
from storage.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, EpochEntry, LeaderEpochCache
from storage.log import InlineScheduler, Log
from storage.log_config import LogConfig
from storage.log_manager import LOG_START_OFFSET_CHECKPOINT, LogManager
from storage.remote.manager import RemoteLogAuxState
from protocol.records import iter_records
from storage.topic_partition import TopicPartition
from tests.unit.storage.conftest import batch

TP = TopicPartition("t", 0)
ME, LEADER = 2, 1
SOURCE = LeaderEndpoint(LEADER, "leader.invalid", 9092)
FAST = FetcherSettings(wait_max_ms=10, backoff_ms=30)


class StandInLeader:
    """Answers OffsetForLeaderEpoch and Fetch from a real log, as the leader's handlers would;
    `fail_with` makes every partition answer that error instead."""

    def __init__(self, log: Log, epoch: int) -> None:
        self.log = log
        self.partition = Partition(TP, log, LEADER)
        self.partition.make_leader(PartitionState(TP, 1, LEADER, epoch, (LEADER, ME), 0, (LEADER, ME)))
        self.requests: list[int] = []
        self.fail_with: ErrorCode | Exception | None = None
        self.diverging: tuple[int, int] | None = None
        self.closed = False

    async def send(self, api_key, version, request):
        await asyncio.sleep(0.005)  # the network, and the leader's long poll
        self.requests.append(api_key)
        if isinstance(self.fail_with, Exception):
            raise self.fail_with
        if api_key == ApiKey.OFFSET_FOR_LEADER_EPOCH:
            return self._epoch_end(request)
        return self._fetch(request)

    def _epoch_end(self, request):
        wanted = request.topics[0].partitions[0]
        epoch, end_offset = self.partition.end_offset_for_epoch(wanted.leader_epoch)
        answer = EpochEndOffset(
            error_code=self.fail_with or ErrorCode.none, partition=0, leader_epoch=epoch, end_offset=end_offset
        )
        return OffsetForLeaderEpochResponse(
            throttle_time=0, topics=(OffsetForLeaderTopicResult(topic=TP.topic, partitions=(answer,)),)
        )

    def _fetch(self, request):
        wanted = request.topics[0].partitions[0]
        result = PartitionResult(
            0, self.fail_with or ErrorCode.none, self.log.high_watermark, log_start_offset=self.log.log_start_offset, records=b""
        )
        if self.fail_with is None:
            result.diverging_epoch = self.diverging or self.partition.diverging_epoch(
                wanted.last_fetched_epoch, wanted.fetch_offset
            )
            region = self.log.read(wanted.fetch_offset, wanted.partition_max_bytes, self.log.log_end_offset, True)
            if result.diverging_epoch is None and region is not None:
                result.records = memoryview(region.read())
        return FetchResponse(0, ErrorCode.none, 0, [TopicResult(TP.topic, [result])])

    async def close(self):
        self.closed = True


def leader_log(tmp_path, epochs_and_values) -> Log:
    log = Log.load(str(tmp_path / "leader" / TP.dir_name), TP, LogConfig(), scheduler=InlineScheduler())
    for epoch, values in epochs_and_values:
        log.append_as_leader(memoryview(batch(*values)), leader_epoch=epoch)
    log.high_watermark = log.log_end_offset
    return log


def run(
    tmp_path,
    leader: StandInLeader,
    follower_history,
    scenario,
    settings: FetcherSettings = FAST,
    config: LogConfig = LogConfig(),
):
    """A follower whose log holds `follower_history` ((epoch, values) appended as leader)
    becomes follower of `leader` at its epoch; then `scenario(manager, partition)`. `config`:
    the follower's log's."""

    async def main():
        logs = LogManager([str(tmp_path / "follower")], lambda topic: config)
        await logs.startup()
        manager = ReplicaManager(logs, ME, ReplicationSettings(fetcher=FAST))
        manager.fetchers = ReplicaFetcherManager(manager, ME, settings, client_factory=lambda source, client_id: leader)
        manager.become_leader_or_follower(1, [PartitionState(TP, 1, ME, 0, (ME,), 0, (LEADER, ME), is_new=True)], {}, ME)
        partition = manager.partitions[TP]
        for epoch, values in follower_history:
            partition.leader_epoch = epoch
            partition.log.append_as_leader(memoryview(batch(*values)), epoch)
        follow = PartitionState(TP, 1, LEADER, leader.partition.leader_epoch, (LEADER, ME), 1, (LEADER, ME))
        manager.become_leader_or_follower(1, [follow], {LEADER: SOURCE}, ME)
        try:
            await scenario(manager, partition)
        finally:
            await manager.shutdown()
            await logs.shutdown()

    asyncio.run(main())


async def eventually(predicate, timeout_s: float = 5.0) -> None:
    for _ in range(int(timeout_s / 0.01)):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("timed out")


def log_bytes(log: Log) -> bytes:
    region = log.read(log.log_start_offset, 1 << 30, log.log_end_offset, True)
    return b"" if region is None else region.read()


def test_a_new_follower_truncates_its_divergent_tail_by_epoch_then_replicates(tmp_path):
    leader = StandInLeader(leader_log(tmp_path, [(0, (b"a", b"b")), (2, (b"c", b"d", b"e"))]), epoch=2)

    async def scenario(manager, partition):
        await eventually(lambda: partition.log.log_end_offset == 5)
        assert log_bytes(partition.log) == log_bytes(leader.log)
        assert partition.log.leader_epochs.entries == ((0, 0), (2, 2))
        assert partition.high_watermark == 5
        assert leader.requests[0] == ApiKey.OFFSET_FOR_LEADER_EPOCH

    # Epoch 1 was this broker's own, never replicated: x and y must go.
    run(tmp_path, leader, [(0, (b"a", b"b")), (1, (b"x", b"y"))], scenario)


def test_a_diverging_epoch_in_a_fetch_answer_truncates_and_fetches_again(tmp_path):
    leader = StandInLeader(leader_log(tmp_path, [(0, (b"a",)), (3, (b"b", b"c"))]), epoch=3)
    leader.diverging = (0, 1)

    async def scenario(manager, partition):
        await eventually(lambda: ApiKey.FETCH in leader.requests)
        leader.diverging = None
        await eventually(lambda: partition.log.log_end_offset == 3)
        assert log_bytes(partition.log) == log_bytes(leader.log)

    run(tmp_path, leader, [(0, (b"a",)), (2, (b"z",))], scenario)


def test_a_follower_takes_its_leaders_log_start_and_reports_it_once_checkpointed(tmp_path):
    """The leader answers a DeleteRecords once every follower reports the new log start: a
    follower killed after reporting it must not come back with the deleted records."""
    leader = StandInLeader(leader_log(tmp_path, [(0, (b"a", b"b", b"c", b"d", b"e"))]), epoch=0)
    checkpoint = OffsetCheckpointFile(str(tmp_path / "follower" / LOG_START_OFFSET_CHECKPOINT))
    reported = []  # per fetch: (the log start it reports, the one in the follower's checkpoint)
    answer = leader.send

    async def send(api_key, version, request):
        if api_key == ApiKey.FETCH:
            reported.append((request.topics[0].partitions[0].log_start_offset, checkpoint.read().get(TP, 0)))
        return await answer(api_key, version, request)

    leader.send = send

    async def scenario(manager, partition):
        await eventually(lambda: partition.log.log_end_offset == 5)
        leader.log.delete_records_before(3)
        await eventually(lambda: any(start == 3 for start, _ in reported))
        assert partition.log.log_start_offset == 3
        assert all(start <= saved for start, saved in reported)

    run(tmp_path, leader, [], scenario)


def slow_follower_disk(tmp_path, monkeypatch, seconds: float) -> None:
    """Every fsync of a file under the follower's log dir takes `seconds` longer."""
    follower_dir = str(tmp_path / "follower")
    real_fsync = os.fsync

    def slow_fsync(descriptor):
        if os.readlink(f"/proc/self/fd/{descriptor}").startswith(follower_dir):
            time.sleep(seconds)
        real_fsync(descriptor)

    monkeypatch.setattr(os, "fsync", slow_fsync)


def test_a_follower_reports_records_that_reach_flush_messages_once_they_are_fsynced(tmp_path, monkeypatch):
    """With flush.messages, an acks=all answer must count only copies on disk, as Kafka's
    fetcher fsyncs in the append: the fetch after an append that asked for a flush waits for it."""
    leader = StandInLeader(leader_log(tmp_path, [(0, (b"a", b"b", b"c"))]), epoch=0)
    slow_follower_disk(tmp_path, monkeypatch, 0.05)
    reported = []  # per fetch: (its fetch offset, the follower's recovery point then)
    follower = {}  # "log": the follower's, once the scenario starts
    answer = leader.send

    async def send(api_key, version, request):
        if api_key == ApiKey.FETCH:
            reported.append((request.topics[0].partitions[0].fetch_offset, follower["log"].recovery_point))
        return await answer(api_key, version, request)

    leader.send = send

    async def scenario(manager, partition):
        follower["log"] = partition.log
        await eventually(lambda: any(offset == 3 for offset, _ in reported))
        leader.log.append_as_leader(memoryview(batch(b"d")), leader_epoch=0)
        leader.log.high_watermark = leader.log.log_end_offset
        await eventually(lambda: any(offset == 4 for offset, _ in reported))
        assert all(offset <= flushed for offset, flushed in reported), reported

    run(tmp_path, leader, [], scenario, config=LogConfig(flush_messages=1))


def test_a_fetcher_stopped_while_it_waits_for_an_fsync_leaves_the_fsync_to_end(tmp_path, monkeypatch):
    """The fsync a fetcher waits for may be the one a produce to the partition waits for too
    (appends share the next fsync of their log): stopping the fetcher must not cancel it."""
    leader = StandInLeader(leader_log(tmp_path, [(0, (b"a", b"b", b"c"))]), epoch=0)
    slow_follower_disk(tmp_path, monkeypatch, 0.2)

    async def scenario(manager, partition):
        await eventually(lambda: partition.log.log_end_offset == 3)
        assert partition.log.recovery_point == 0  # the fetcher waits for the fsync
        await manager.fetchers.shutdown()
        await eventually(lambda: partition.log.recovery_point == 3)

    run(tmp_path, leader, [], scenario, config=LogConfig(flush_messages=1))


def test_retriable_errors_back_off_and_fenced_epochs_stop_fetching(tmp_path):
    leader = StandInLeader(leader_log(tmp_path, [(0, (b"a",))]), epoch=0)
    leader.fail_with = ErrorCode.not_leader_or_follower

    async def scenario(manager, partition):
        await eventually(lambda: len(leader.requests) >= 2)  # asked again after the backoff
        leader.fail_with = ErrorCode.fenced_leader_epoch
        await asyncio.sleep(0.1)
        asked = len(leader.requests)
        await asyncio.sleep(0.1)
        assert len(leader.requests) == asked  # fenced: nothing until the next LeaderAndIsr
        assert manager.fetchers.partitions[TP].states[TP].failed

    run(tmp_path, leader, [], scenario)


def test_a_failed_request_is_retried_after_the_backoff(tmp_path):
    leader = StandInLeader(leader_log(tmp_path, [(0, (b"a", b"b"))]), epoch=0)
    leader.fail_with = BrokerConnectionError("connection refused")

    async def scenario(manager, partition):
        await eventually(lambda: len(leader.requests) >= 2)
        leader.fail_with = None
        await eventually(lambda: partition.log.log_end_offset == 2)

    run(tmp_path, leader, [], scenario)


def test_a_fetcher_left_without_partitions_stops_and_closes_its_connection(tmp_path):
    leader = StandInLeader(leader_log(tmp_path, [(0, (b"a",))]), epoch=0)

    async def scenario(manager, partition):
        await eventually(lambda: partition.log.log_end_offset == 1)
        manager.fetchers.remove_partitions([TP])
        assert not manager.fetchers.fetchers
        await eventually(lambda: leader.closed)  # before the broker shuts down
        asked = len(leader.requests)
        await asyncio.sleep(0.1)
        assert len(leader.requests) == asked

    run(tmp_path, leader, [], scenario)


@pytest.mark.parametrize(
    "leader_answer, follower_epochs, log_end, expected",
    [
        ((UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET), [(0, 0)], 10, (4, True)),  # unknown: to the HW
        ((UNDEFINED_EPOCH, 7), [(0, 0)], 10, (7, True)),
        ((2, 8), [(0, 0), (2, 5)], 10, (8, True)),  # same epoch: the smaller end
        ((2, 12), [(0, 0), (2, 5)], 10, (10, True)),
        ((1, 8), [(0, 0), (2, 5)], 10, (5, False)),  # epoch 1 was never ours: cut, ask again
    ],
)
def test_truncation_decisions(leader_answer, follower_epochs, log_end, expected):
    epochs = LeaderEpochCache("unused", [EpochEntry(*e) for e in follower_epochs])
    assert truncation_for(*leader_answer, epochs, log_end, 4) == expected


def test_the_largest_lag_behind_a_leaders_high_watermark_is_kept_for_the_metrics(tmp_path):
    leader = StandInLeader(leader_log(tmp_path, [(0, (b"a", b"b", b"c"))]), epoch=0)

    async def scenario(manager, partition):
        await eventually(lambda: partition.log.log_end_offset == 3)
        await eventually(lambda: manager.fetchers.max_lag() == 0)
        # The leader now says 4 more records are committed than it has served so far.
        leader.log.high_watermark = 7
        await eventually(lambda: manager.fetchers.max_lag() == 4)

    run(tmp_path, leader, [], scenario)


def test_the_bytes_appended_from_leaders_are_counted_for_the_metrics(tmp_path):
    leader = StandInLeader(leader_log(tmp_path, [(0, (b"a", b"b", b"c"))]), epoch=0)

    async def scenario(manager, partition):
        await eventually(lambda: partition.log.log_end_offset == 3)
        assert manager.fetchers.bytes_appended == partition.log.size_in_bytes > 0

    run(tmp_path, leader, [], scenario)


class SwitchedQuota:
    """A follower quota throttling every partition, exceeded while the test says so."""

    def __init__(self) -> None:
        self.exceeded = True
        self.recorded: list[int] = []

    def is_throttled(self, tp: TopicPartition) -> bool:
        return True

    def is_quota_exceeded(self) -> bool:
        return self.exceeded

    def record(self, value: int) -> None:
        self.recorded.append(value)


def test_a_throttled_follower_out_of_sync_fetches_only_while_under_its_quota_and_records_what_it_got(tmp_path):
    leader = StandInLeader(leader_log(tmp_path, [(0, (b"a", b"b", b"c"))]), epoch=0)
    quota = SwitchedQuota()

    async def scenario(manager, partition):
        await eventually(lambda: ApiKey.OFFSET_FOR_LEADER_EPOCH in leader.requests)
        await asyncio.sleep(0.2)  # several backoffs of 30 ms
        assert ApiKey.FETCH not in leader.requests
        assert partition.log.log_end_offset == 0
        quota.exceeded = False
        await eventually(lambda: partition.log.log_end_offset == 3)
        assert quota.recorded == [len(log_bytes(leader.log))]
        # Caught up (in sync): never throttled, even over the quota.
        quota.exceeded = True
        leader.log.append_as_leader(memoryview(batch(b"d", b"e")), leader_epoch=0)
        leader.log.high_watermark = leader.log.log_end_offset
        await eventually(lambda: partition.log.log_end_offset == 5)

    run(tmp_path, leader, [], scenario, FetcherSettings(wait_max_ms=10, backoff_ms=30, quota=quota))


class TieredStandInLeader(StandInLeader):
    """A leader of a tiered log whose records below `local_start` are in the remote store only:
    it answers a fetch below it OFFSET_MOVED_TO_TIERED_STORAGE, ListOffsets -4 with it and -2
    with 0, as the leader's handlers do."""

    def __init__(self, log: Log, epoch: int, local_start: int) -> None:
        super().__init__(log, epoch)
        self.local_start = local_start
        self.asked_offsets: list[int] = []

    async def send(self, api_key, version, request):
        if api_key == ApiKey.LIST_OFFSETS:
            self.requests.append(api_key)
            timestamp = request.topics[0].partitions[0].timestamp
            self.asked_offsets.append(timestamp)
            offset = {-4: self.local_start, -2: 0}[timestamp]
            answer = ListOffsetsPartitionResponse(partition_index=0, error_code=ErrorCode.none, offset=offset)
            return ListOffsetsResponse(
                throttle_time=datetime.timedelta(0), topics=(ListOffsetsTopicResponse(name=TP.topic, partitions=(answer,)),)
            )
        return await super().send(api_key, version, request)

    def _fetch(self, request):
        wanted = request.topics[0].partitions[0]
        if wanted.fetch_offset < self.local_start:
            result = PartitionResult(0, ErrorCode.offset_moved_to_tiered_storage, self.log.high_watermark, records=b"")
            return FetchResponse(0, ErrorCode.none, 0, [TopicResult(TP.topic, [result])])
        return super()._fetch(request)


class RemoteStore:
    """The remote log manager's answer to a follower: the state of the remote segment [0, 2]
    (the leader's local log starts at 3), or `error` first."""

    def __init__(self, error: ErrorCode | None = None) -> None:
        self.error = error
        self.asked: list[tuple[TopicPartition, int]] = []

    async def aux_state(self, tp: TopicPartition, leader_local_start: int) -> RemoteLogAuxState:
        self.asked.append((tp, leader_local_start))
        if self.error is not None:
            error, self.error = self.error, None
            raise KafkaError("the remote log metadata is being loaded", error)
        return RemoteLogAuxState(3, [EpochEntry(0, 0)], None)


def tiered_leader(tmp_path) -> TieredStandInLeader:
    # Offsets 0-2 in epoch 0 (in the store only, as far as the follower is told), 3-4 in epoch 2.
    return TieredStandInLeader(leader_log(tmp_path, [(0, (b"a", b"b", b"c")), (2, (b"d", b"e"))]), epoch=2, local_start=3)


def test_a_follower_below_its_leaders_local_log_start_rebuilds_from_the_store_and_fetches_the_tail(tmp_path):
    leader = tiered_leader(tmp_path)
    store = RemoteStore()

    async def scenario(manager, partition):
        manager.remote_aux_state_source = store.aux_state
        await eventually(lambda: partition.log.log_end_offset == 5)
        assert store.asked == [(TP, 3)]
        assert leader.asked_offsets == [-4, -2]
        log_ = partition.log
        # It restarted at the remote segment's end, took its epochs and the leader's log start,
        # and fetched only offsets 3 and 4.
        assert (log_.log_start_offset, log_.local_log_start_offset) == (0, 3)
        assert [segment.base_offset for segment in log_.segments] == [3]
        assert log_.leader_epochs.entries == ((0, 0), (2, 3))
        tail = log_.read(3, 1 << 30, log_.log_end_offset, True).read()
        assert tail == leader.log.read(3, 1 << 30, leader.log.log_end_offset, True).read()
        assert [r.value for r in iter_records(tail)] == [b"d", b"e"]

    run(tmp_path, leader, [], scenario)


@pytest.mark.parametrize(
    "error", [ErrorCode.replica_not_available, ErrorCode.unknown_server_error], ids=["metadata not loaded", "store failed"]
)
def test_a_follower_that_cannot_read_the_store_yet_backs_off_and_tries_again(tmp_path, error):
    leader = tiered_leader(tmp_path)
    store = RemoteStore(error)

    async def scenario(manager, partition):
        manager.remote_aux_state_source = store.aux_state
        await eventually(lambda: partition.log.log_end_offset == 5)
        assert store.asked == [(TP, 3), (TP, 3)]
        assert partition.log.local_log_start_offset == 3

    run(tmp_path, leader, [], scenario)


def test_a_follower_without_tiered_storage_stops_fetching_a_partition_moved_to_the_store(tmp_path):
    leader = tiered_leader(tmp_path)

    async def scenario(manager, partition):
        await eventually(lambda: manager.fetchers.partitions[TP].states[TP].failed)
        assert partition.log.log_end_offset == 0

    run(tmp_path, leader, [], scenario)
