"""A partition's leader and follower roles over a real log, with a recording IsrWriter."""

import asyncio

import pytest

from protocol.errors import ErrorCode, KafkaError
from replication.partition import Partition, diverging_epoch
from replication.partition_state import IsrFound, PartitionState
from storage.leader_epoch import EpochEntry, LeaderEpochCache
from storage.log_config import LogConfig
from tests.unit.storage.conftest import TP, batch

LEADER = 1


class Clock:
    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        return self.now


class IsrWriter:
    def __init__(self, answer="next") -> None:
        self.answer = answer
        self.writes = []

    async def write_isr(self, tp, leader_epoch, isr, zk_version):
        self.writes.append((leader_epoch, tuple(isr), zk_version))
        if isinstance(self.answer, Exception):
            raise self.answer
        return zk_version + 1 if self.answer == "next" else self.answer


def state(leader=LEADER, epoch=3, isr=(1, 2, 3), zk_version=7, replicas=(1, 2, 3)) -> PartitionState:
    return PartitionState(TP, 1, leader, epoch, isr, zk_version, replicas)


@pytest.fixture
def leader(open_log):
    def make(writer=None, **kwargs) -> Partition:
        partition = Partition(TP, open_log(), LEADER, clock=Clock())
        partition.isr_writer = writer
        partition.make_leader(state(**kwargs))
        return partition

    return make


def append(partition: Partition, *values: bytes, acks: int = 1, min_insync: int = 1):
    return partition.append_as_leader(memoryview(batch(*values)), acks, min_insync)


async def settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


def test_standalone_high_watermark_follows_the_log_end(open_log):
    partition = Partition(TP, open_log(), 0)
    partition.make_leader(Partition.standalone_state(TP, 0))
    append(partition, b"a", b"b", acks=-1)
    assert partition.high_watermark == 2 and partition.isr == (0,)
    assert partition.log.leader_epochs.entries == (EpochEntry(0, 0),)


def test_high_watermark_is_the_smallest_log_end_over_the_isr_and_never_falls(leader):
    partition = leader()
    append(partition, b"a", b"b", b"c")
    assert partition.high_watermark == 0  # followers' log ends are unknown yet
    partition.update_follower_fetch(2, 2)
    assert partition.high_watermark == 0
    assert partition.update_follower_fetch(3, 1)
    assert partition.high_watermark == 1
    partition.update_follower_fetch(3, 3)
    assert partition.high_watermark == 2
    partition.update_follower_fetch(3, 0)  # a follower that truncated does not lower it
    assert partition.high_watermark == 2


def test_becoming_leader_records_the_epoch_where_it_starts(leader):
    partition = leader(epoch=5)
    assert partition.log.leader_epochs.entries == (EpochEntry(5, 0),)
    assert partition.end_offset_for_epoch(4) == (4, 0)


def test_appends_need_leadership_and_enough_in_sync_replicas_for_acks_all(leader):
    partition = leader(isr=(1, 2))
    with pytest.raises(KafkaError) as refused:
        append(partition, b"a", acks=-1, min_insync=3)
    assert refused.value.error_code == ErrorCode.not_enough_replicas
    append(partition, b"a", acks=1, min_insync=3)  # acks=1 does not care
    partition.make_follower(state(leader=2, epoch=4))
    with pytest.raises(KafkaError) as not_leader:
        append(partition, b"b")
    assert not_leader.value.error_code == ErrorCode.not_leader_or_follower


def test_leader_epoch_checks(leader):
    partition = leader(epoch=3)
    partition.check_leader_epoch(-1)
    partition.check_leader_epoch(3)
    for epoch, error in ((2, ErrorCode.fenced_leader_epoch), (4, ErrorCode.unknown_leader_epoch)):
        with pytest.raises(KafkaError) as refused:
            partition.check_leader_epoch(epoch)
        assert refused.value.error_code == error


def test_a_lagging_follower_leaves_the_isr_and_the_high_watermark_moves_on(leader):
    async def main():
        writer = IsrWriter()
        partition = leader(writer)
        changes = []
        partition.on_change = changes.append
        append(partition, b"a", b"b")
        partition.update_follower_fetch(2, 2)
        partition.update_follower_fetch(3, 1)
        partition.clock.now += 500
        partition.maybe_shrink_isr(max_lag_ms=1000)
        await settle()
        assert writer.writes == []  # not yet lagging for long enough
        partition.update_follower_fetch(2, 2)
        partition.clock.now += 600
        partition.maybe_shrink_isr(max_lag_ms=1000)
        await settle()
        assert writer.writes == [(3, (1, 2), 7)]
        assert (partition.isr, partition.zk_version, partition.high_watermark) == ((1, 2), 8, 2)
        assert changes == [partition]

    asyncio.run(main())


def test_a_caught_up_follower_rejoins_once_it_fetched_in_this_epoch(leader):
    async def main():
        writer = IsrWriter()
        partition = leader(writer, isr=(1, 2))
        append(partition, b"a", b"b")
        partition.update_follower_fetch(2, 2)
        assert partition.high_watermark == 2
        partition.update_follower_fetch(3, 1)
        await settle()
        assert writer.writes == []  # below the high watermark
        partition.update_follower_fetch(3, 2)
        await settle()
        assert writer.writes == [(3, (1, 2, 3), 7)] and partition.isr == (1, 2, 3)

    asyncio.run(main())


def test_the_high_watermark_holds_while_the_isr_is_under_min_insync_replicas(open_log):
    """As in Kafka 3.9: records only the leader holds are not committed while fewer replicas
    than min.insync.replicas are in sync, whatever the ISR says of them."""

    async def main():
        partition = Partition(TP, open_log(LogConfig(min_insync_replicas=2)), LEADER, clock=Clock())
        partition.isr_writer = IsrWriter()
        partition.make_leader(state(isr=(1,)))
        append(partition, b"a", b"b")
        assert partition.high_watermark == 0
        partition.update_follower_fetch(2, 2)  # caught up: it rejoins, and the ISR is large enough
        await settle()
        assert (partition.isr, partition.high_watermark) == ((1, 2), 2)

    asyncio.run(main())


def test_min_insync_replicas_above_the_replica_count_does_not_hold_the_high_watermark(open_log):
    partition = Partition(TP, open_log(LogConfig(min_insync_replicas=2)), LEADER, clock=Clock())
    partition.make_leader(state(isr=(1,), replicas=(1,)))
    append(partition, b"a")
    assert partition.high_watermark == 1


def test_a_stale_isr_write_stops_isr_changes_until_the_controller_speaks(leader):
    async def main():
        writer = IsrWriter(answer=None)
        partition = leader(writer)
        append(partition, b"a")
        partition.clock.now += 5_000
        partition.maybe_shrink_isr(max_lag_ms=1000)
        await settle()
        assert partition.isr_stale and partition.isr == (1, 2, 3)
        partition.maybe_shrink_isr(max_lag_ms=1000)
        await settle()
        assert len(writer.writes) == 1
        writer.answer = "next"
        partition.make_leader(state(isr=(1, 2, 3), zk_version=9))
        assert not partition.isr_stale

    asyncio.run(main())


def test_an_isr_found_in_zookeeper_becomes_the_isr_and_changes_go_on_from_it(leader):
    async def main():
        writer = IsrWriter(answer=IsrFound((1,), 8))  # its own earlier shrink, stored unanswered
        partition = leader(writer)
        append(partition, b"a")
        partition.clock.now += 5_000
        partition.maybe_shrink_isr(max_lag_ms=1000)
        await settle()
        assert (partition.isr, partition.zk_version, partition.isr_stale) == ((1,), 8, False)
        writer.answer = "next"
        partition.update_follower_fetch(2, 1)  # caught up: it rejoins, written at the found version
        await settle()
        assert (partition.isr, writer.writes[-1]) == ((1, 2), (3, (1, 2), 8))

    asyncio.run(main())


def test_a_failed_isr_write_is_tried_again_by_the_next_check(leader):
    async def main():
        writer = IsrWriter(answer=ConnectionError("ZooKeeper unreachable"))
        partition = leader(writer)
        append(partition, b"a")
        partition.clock.now += 5_000
        partition.maybe_shrink_isr(max_lag_ms=1000)
        await settle()
        writer.answer = "next"
        partition.maybe_shrink_isr(max_lag_ms=1000)
        await settle()
        assert len(writer.writes) == 2 and partition.isr == (1,)

    asyncio.run(main())


def test_fetches_from_non_replicas_or_to_followers_are_refused(leader):
    partition = leader()
    with pytest.raises(KafkaError):
        partition.update_follower_fetch(9, 0)
    partition.make_follower(state(leader=2, epoch=4))
    with pytest.raises(KafkaError):
        partition.update_follower_fetch(3, 0)


def test_diverging_epoch_as_the_fetch_handler_answers_it():
    epochs = LeaderEpochCache("unused", [EpochEntry(0, 0), EpochEntry(2, 10), EpochEntry(4, 20)])
    assert diverging_epoch(epochs, 25, -1, 30) is None
    assert diverging_epoch(epochs, 25, 2, 10) is None
    assert diverging_epoch(epochs, 25, 2, 12) is None  # epoch 2 goes on to 20
    assert diverging_epoch(epochs, 25, 2, 21) == (2, 20)  # epoch 2 ended at 20 here
    assert diverging_epoch(epochs, 25, 3, 15) == (2, 20)  # epoch 3 never was ours
    assert diverging_epoch(epochs, 25, 4, 25) is None
    assert diverging_epoch(epochs, 25, 7, 30) is None  # an epoch beyond ours: no answer
