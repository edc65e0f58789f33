"""The replica manager's API for the controller side (LeaderAndIsr, StopReplica), and delayed
commits, over a real log manager."""

import asyncio
import dataclasses
import errno
import os
import time

import pytest

from broker.metadata_cache import BrokerNode, MetadataCache, PartitionInfo
from broker.replica_manager import ReplicaManager, ReplicationSettings
from protocol.errors import ErrorCode, KafkaError
from replication.partition_state import LeaderEndpoint, PartitionState
from storage.log_config import LogConfig
from storage.log_manager import LogManager
from storage.topic_partition import TopicPartition
from tests.unit.storage.conftest import batch

TP = TopicPartition("t", 0)
ME = 1
NOWHERE = LeaderEndpoint(2, "127.0.0.1", 9)  # the discard port: fetches fail and back off


def state(leader=ME, epoch=1, isr=(1, 2), zk_version=0, replicas=(1, 2), tp=TP) -> PartitionState:
    return PartitionState(tp, 5, leader, epoch, isr, zk_version, replicas, is_new=True)


class Recorder:
    def __init__(self, manager: ReplicaManager) -> None:
        self.events = []
        manager.add_leadership_listener(
            lambda tp, epoch: self.events.append(("lead", tp, epoch)),
            lambda tp, epoch: self.events.append(("resign", tp, epoch)),
        )


def with_manager(tmp_path, scenario, min_insync: int = 1, metadata_cache: MetadataCache | None = None, log_dirs=("",)):
    """Run `scenario(manager)` with a replica manager over log dirs `log_dirs` (under tmp_path)."""

    async def main():
        config = LogConfig(min_insync_replicas=min_insync)
        logs = LogManager([str(tmp_path / d) for d in log_dirs], lambda topic: config)
        await logs.startup()
        settings = ReplicationSettings(replica_lag_time_max_ms=100, commit_timeout_ms=300)
        manager = ReplicaManager(logs, ME, settings, metadata_cache)
        manager.start()
        try:
            await scenario(manager)
        finally:
            await manager.shutdown()
            await logs.shutdown()

    asyncio.run(main())


def test_leader_and_follower_roles_follow_the_controller_and_tell_listeners(tmp_path):
    async def scenario(manager: ReplicaManager):
        recorder = Recorder(manager)
        other = TopicPartition("t", 1)
        errors = manager.become_leader_or_follower(
            5, [state(), state(leader=2, tp=other)], {2: NOWHERE}, ME
        )
        assert errors == {TP: ErrorCode.none, other: ErrorCode.none}
        assert manager.partitions[TP].is_leader and not manager.partitions[other].is_leader
        assert set(manager.fetchers.partitions) == {other}
        assert recorder.events == [("lead", TP, 1)]
        # The leader moves away: listeners hear it, and the partition is fetched instead.
        manager.become_leader_or_follower(5, [state(leader=2, epoch=2)], {2: NOWHERE}, ME)
        assert recorder.events[-1] == ("resign", TP, 1)
        assert set(manager.fetchers.partitions) == {TP, other}
        with pytest.raises(KafkaError) as refused:
            manager.append(TP, memoryview(batch(b"a")))
        assert refused.value.error_code == ErrorCode.not_leader_or_follower

    with_manager(tmp_path, scenario)


def test_a_new_epoch_of_a_leadership_held_here_tells_no_listener(tmp_path):
    """A coordinator loads its partition's groups when told it leads it: told again when the
    controller bumped the epoch (it shrank the ISR after a broker left), it loaded them over
    the live groups, and members waiting in a JoinGroup were never answered."""

    async def scenario(manager: ReplicaManager):
        recorder = Recorder(manager)
        manager.become_leader_or_follower(5, [state(epoch=1)], {}, ME)
        manager.become_leader_or_follower(5, [state(epoch=2, isr=(1,))], {}, ME)
        assert manager.partitions[TP].leader_epoch == 2
        assert recorder.events == [("lead", TP, 1)]
        # Led again after resigning: a new leadership, told.
        manager.stop_replicas([TP], delete=False)
        manager.become_leader_or_follower(5, [state(epoch=3)], {}, ME)
        assert recorder.events == [("lead", TP, 1), ("resign", TP, 2), ("lead", TP, 3)]

    with_manager(tmp_path, scenario)


def test_stale_epochs_are_refused(tmp_path):
    async def scenario(manager: ReplicaManager):
        manager.become_leader_or_follower(5, [state(epoch=4)], {}, ME)
        assert manager.become_leader_or_follower(5, [state(epoch=3)], {}, ME) == {TP: ErrorCode.fenced_leader_epoch}
        assert manager.become_leader_or_follower(4, [state(epoch=9)], {}, ME) == {
            TP: ErrorCode.stale_controller_epoch
        }
        assert manager.partitions[TP].leader_epoch == 4
        # The same epoch refreshes the ISR and version (the controller changed them).
        manager.become_leader_or_follower(5, [state(epoch=4, isr=(1,), zk_version=3)], {}, ME)
        assert (manager.partitions[TP].isr, manager.partitions[TP].zk_version) == ((1,), 3)

    with_manager(tmp_path, scenario)


def test_stop_replicas_stops_leading_and_deletes_on_request(tmp_path):
    async def scenario(manager: ReplicaManager):
        recorder = Recorder(manager)
        manager.become_leader_or_follower(5, [state()], {}, ME)
        assert manager.stop_replicas([TP], delete=False) == {TP: ErrorCode.none}
        assert not manager.partitions[TP].is_leader
        assert recorder.events[-1] == ("resign", TP, 1)
        manager.stop_replicas([TP], delete=True)
        assert TP not in manager.partitions and manager.log_manager.get(TP) is None

    with_manager(tmp_path, scenario)


def test_a_requests_partition_is_named_by_the_topic_partition_its_replica_holds_while_hosted(tmp_path):
    async def scenario(manager: ReplicaManager):
        manager.become_leader_or_follower(5, [state()], {}, ME)
        held = manager.partitions[TP].topic_partition
        hosted = manager.topic_partition("t", 0)
        other = manager.topic_partition("t", 7)
        manager.stop_replicas([TP], delete=True)
        after_deletion = manager.topic_partition("t", 0)
        assert hosted is held
        assert other == ("t", 7) and isinstance(other, TopicPartition)
        assert after_deletion == TP and after_deletion is not held

    with_manager(tmp_path, scenario)


def error_of(call) -> ErrorCode:
    with pytest.raises(KafkaError) as refused:
        call()
    return refused.value.error_code


def test_a_partition_not_hosted_here_is_not_led_here_if_the_metadata_knows_it(tmp_path):
    cache = MetadataCache("PLAINTEXT")
    cache.update(0, 5, [], {TP: PartitionInfo(2, 1, (ME, 2), (ME, 2))})

    async def scenario(manager: ReplicaManager):
        assert error_of(lambda: manager.get_partition(TP)) == ErrorCode.not_leader_or_follower
        assert error_of(lambda: manager.get_partition(TopicPartition("t", 1))) == ErrorCode.unknown_topic_or_partition
        # Led here, then removed (reassigned away): the topic still exists.
        manager.become_leader_or_follower(5, [state()], {}, ME)
        manager.stop_replicas([TP], delete=True)
        assert error_of(lambda: manager.append(TP, memoryview(batch(b"a")))) == ErrorCode.not_leader_or_follower

    with_manager(tmp_path, scenario, metadata_cache=cache)


def test_before_any_controller_fills_the_metadata_no_partition_is_called_unknown(tmp_path):
    async def scenario(manager: ReplicaManager):
        assert error_of(lambda: manager.get_partition(TopicPartition("t", 1))) == ErrorCode.not_leader_or_follower

    with_manager(tmp_path, scenario, metadata_cache=MetadataCache("PLAINTEXT"))


def test_a_requests_leader_epoch_is_checked_before_leadership(tmp_path):
    async def scenario(manager: ReplicaManager):
        manager.become_leader_or_follower(5, [state(leader=2, epoch=3)], {2: NOWHERE}, ME)
        assert error_of(lambda: manager.partition_at_epoch(TP, 2)) == ErrorCode.fenced_leader_epoch
        assert error_of(lambda: manager.partition_at_epoch(TP, 4)) == ErrorCode.unknown_leader_epoch
        assert error_of(lambda: manager.partition_at_epoch(TP, 3)) == ErrorCode.not_leader_or_follower
        assert error_of(lambda: manager.partition_at_epoch(TP, -1)) == ErrorCode.not_leader_or_follower
        assert manager.partition_at_epoch(TP, 3, leader_only=False) is manager.partitions[TP]

    with_manager(tmp_path, scenario)


def test_a_commit_waits_for_the_followers_fetch(tmp_path):
    async def scenario(manager: ReplicaManager):
        manager.become_leader_or_follower(5, [state()], {}, ME)
        partition = manager.partitions[TP]
        result = manager.append(TP, memoryview(batch(b"a", b"b")), required_acks=-1)
        waiting = asyncio.ensure_future(manager.wait_for_commit(TP, result.last_offset, 5))
        await asyncio.sleep(0.01)
        assert not waiting.done()
        manager.record_follower_fetch(partition, 2, 1)
        await asyncio.sleep(0.01)
        assert not waiting.done()
        manager.record_follower_fetch(partition, 2, 2)
        await asyncio.wait_for(waiting, 1)
        assert partition.high_watermark == 2

    with_manager(tmp_path, scenario)


OTHER = TopicPartition("t", 1)


def append_to_two_led_partitions(manager: ReplicaManager) -> list[tuple[TopicPartition, int]]:
    """TP and OTHER led here with broker 2 in their ISRs, and one acks=all append to each:
    (partition, last offset) of both."""
    manager.become_leader_or_follower(5, [state(), state(tp=OTHER)], {}, ME)
    return [(tp, manager.append(tp, memoryview(batch(b"a")), required_acks=-1).last_offset) for tp in (TP, OTHER)]


def test_a_commit_watch_is_called_back_once_with_every_outcome_on_the_turn_after_the_last(tmp_path):
    async def scenario(manager: ReplicaManager):
        appends = append_to_two_led_partitions(manager)
        calls = []
        manager.watch_commits(appends, 60, calls.append)
        assert manager.waiting_requests() == (0, 1)
        assert manager.watched_partitions() == (0, 2)  # Kafka's PurgatorySize: one per partition

        manager.record_follower_fetch(manager.partitions[TP], 2, 1)
        await asyncio.sleep(0.01)
        assert calls == []  # one of its appends still waits
        manager.record_follower_fetch(manager.partitions[OTHER], 2, 1)
        assert calls == []  # not within the fetch that committed it
        await asyncio.sleep(0)
        assert calls == [[ErrorCode.none, ErrorCode.none]]
        assert manager.waiting_requests() == (0, 0)

    with_manager(tmp_path, scenario)


def test_a_commit_watch_times_out_only_the_appends_still_waiting(tmp_path):
    async def scenario(manager: ReplicaManager):
        appends = append_to_two_led_partitions(manager)
        calls = []
        manager.watch_commits(appends, 0.05, calls.append)
        manager.record_follower_fetch(manager.partitions[TP], 2, 1)
        await asyncio.sleep(0.2)
        assert calls == [[ErrorCode.none, ErrorCode.request_timed_out]]
        assert manager.waiting_requests() == (0, 0)

    with_manager(tmp_path, scenario)


def test_a_stopped_commit_watch_is_not_called_back(tmp_path):
    async def scenario(manager: ReplicaManager):
        manager.become_leader_or_follower(5, [state()], {}, ME)
        result = manager.append(TP, memoryview(batch(b"a")), required_acks=-1)
        calls = []
        watch = manager.watch_commits([(TP, result.last_offset)], 0.05, calls.append)
        manager.stop_watching_commits(watch)
        assert manager.waiting_requests() == (0, 0)
        manager.record_follower_fetch(manager.partitions[TP], 2, 1)
        await asyncio.sleep(0.2)
        assert calls == []

    with_manager(tmp_path, scenario)


def test_a_commit_wait_cancelled_after_its_outcome_is_known_ends_quietly(tmp_path):
    """The outcome is handed over on the next turn: a caller cancelled in between (its request
    gone) must not make that hand-over fail in the loop."""

    async def scenario(manager: ReplicaManager):
        loop_errors = []
        asyncio.get_running_loop().set_exception_handler(lambda _loop, context: loop_errors.append(context))
        manager.add_partition(TP, LogConfig())  # standalone: committed as soon as appended
        result = manager.append(TP, memoryview(batch(b"a")), required_acks=-1)
        waiting = asyncio.ensure_future(manager.wait_for_commit(TP, result.last_offset, 5))
        await asyncio.sleep(0)  # it registers, finds the append committed, and awaits the hand-over
        waiting.cancel()
        await asyncio.sleep(0.01)
        assert waiting.cancelled() and loop_errors == []

    with_manager(tmp_path, scenario)


def test_commits_time_out_or_fail_when_leadership_goes(tmp_path):
    async def scenario(manager: ReplicaManager):
        manager.become_leader_or_follower(5, [state()], {}, ME)
        with pytest.raises(KafkaError) as timed_out:
            await manager.append_committed(TP, memoryview(batch(b"a")))
        assert timed_out.value.error_code == ErrorCode.request_timed_out
        result = manager.append(TP, memoryview(batch(b"b")), required_acks=-1)
        waiting = asyncio.ensure_future(manager.wait_for_commit(TP, result.last_offset, 5))
        await asyncio.sleep(0.01)
        manager.become_leader_or_follower(5, [state(leader=2, epoch=2)], {2: NOWHERE}, ME)
        with pytest.raises(KafkaError) as moved:
            await waiting
        assert moved.value.error_code == ErrorCode.not_leader_or_follower

    with_manager(tmp_path, scenario)


def live_brokers(*broker_ids: int) -> MetadataCache:
    cache = MetadataCache("PLAINTEXT")
    cache.update(0, 5, [BrokerNode(b, {"PLAINTEXT": ("127.0.0.1", 9)}) for b in broker_ids], {})
    return cache


def led_with_four_records(manager: ReplicaManager):
    """TP led here with followers 2 and 3, four records committed by both, the first three
    deleted: (the partition, the DeleteRecords wait for offset 3)."""
    manager.become_leader_or_follower(5, [state(isr=(1, 2, 3), replicas=(1, 2, 3))], {}, ME)
    partition = manager.partitions[TP]
    manager.append(TP, memoryview(batch(b"a", b"b", b"c", b"d")), required_acks=-1)
    for follower in (2, 3):
        manager.record_follower_fetch(partition, follower, 4, log_start_offset=0)
    assert manager.delete_records_before(TP, 3) == 3
    return partition, asyncio.ensure_future(manager.wait_for_low_watermark(TP, 3, 5))


def test_a_delete_records_wait_ends_once_every_follower_on_a_live_broker_has_the_log_start(tmp_path):
    """Kafka's DelayedDeleteRecords: a follower still holding the deleted records could lead
    next and serve them again."""

    async def scenario(manager: ReplicaManager):
        partition, waiting = led_with_four_records(manager)
        assert manager.low_watermark(partition) == 0
        manager.record_follower_fetch(partition, 2, 4, log_start_offset=3)
        await asyncio.sleep(0.01)
        assert not waiting.done()
        manager.record_follower_fetch(partition, 3, 4, log_start_offset=3)
        assert await asyncio.wait_for(waiting, 1) == 3

    with_manager(tmp_path, scenario, metadata_cache=live_brokers(1, 2, 3))


def test_a_follower_on_a_dead_broker_does_not_hold_the_low_watermark_back(tmp_path):
    async def scenario(manager: ReplicaManager):
        partition, waiting = led_with_four_records(manager)
        manager.record_follower_fetch(partition, 2, 4, log_start_offset=3)
        await asyncio.sleep(0.01)
        assert not waiting.done()
        manager.metadata_cache.update(0, 5, [BrokerNode(b, {}) for b in (1, 2)], {})  # broker 3 died
        manager.check_low_watermarks()
        assert await asyncio.wait_for(waiting, 1) == 3

    with_manager(tmp_path, scenario, metadata_cache=live_brokers(1, 2, 3))


def test_a_delete_records_wait_times_out_or_fails_when_leadership_goes(tmp_path):
    async def scenario(manager: ReplicaManager):
        partition, waiting = led_with_four_records(manager)
        with pytest.raises(KafkaError) as timed_out:
            await manager.wait_for_low_watermark(TP, 3, 0.05)
        assert timed_out.value.error_code == ErrorCode.request_timed_out
        manager.become_leader_or_follower(5, [state(leader=2, epoch=2, replicas=(1, 2, 3))], {2: NOWHERE}, ME)
        with pytest.raises(KafkaError) as moved:
            await asyncio.wait_for(waiting, 1)
        assert moved.value.error_code == ErrorCode.not_leader_or_follower
        assert not manager._low_watermark_waiters  # neither wait left anything behind

    with_manager(tmp_path, scenario, metadata_cache=live_brokers(1, 2, 3))


def test_a_follower_takes_the_leaders_log_start_up_to_its_high_watermark(tmp_path):
    async def scenario(manager: ReplicaManager):
        manager.become_leader_or_follower(5, [state(leader=2)], {2: NOWHERE}, ME)
        partition = manager.partitions[TP]
        manager.append_as_follower(partition, memoryview(batch(b"a", b"b", b"c", b"d")), leader_high_watermark=2)
        assert manager.follow_log_start(partition, 3)
        assert partition.log.log_start_offset == 2  # the HW: the rest may not be committed
        assert not manager.follow_log_start(partition, 1)  # never back
        manager.follow_high_watermark(partition, 4)
        assert manager.follow_log_start(partition, 3)
        assert partition.log.log_start_offset == 3

    with_manager(tmp_path, scenario)


def test_a_commit_waits_while_the_isr_is_under_min_insync(tmp_path):
    """Kafka 3.9: the HW does not move while the ISR is under min.insync.replicas, so an acks=all
    produce is not answered NOT_ENOUGH_REPLICAS_AFTER_APPEND with its records visible; it waits,
    and times out if the ISR does not grow again."""

    class Writer:
        async def write_isr(self, tp, leader_epoch, isr, zk_version):
            return zk_version + 1

    async def scenario(manager: ReplicaManager):
        manager.set_isr_writer(Writer())
        manager.become_leader_or_follower(5, [state(isr=(1, 2, 3), replicas=(1, 2, 3))], {}, ME)
        partition = manager.partitions[TP]
        result = manager.append(TP, memoryview(batch(b"a")), required_acks=-1)
        manager.record_follower_fetch(partition, 2, 1)
        # Broker 3 never fetches: after replica.lag.time.max.ms the periodic check drops it, and
        # the ISR (1, 2) is below min.insync.replicas=3.
        with pytest.raises(KafkaError) as timed_out:
            await manager.wait_for_commit(TP, result.last_offset, 1.5)
        assert timed_out.value.error_code == ErrorCode.request_timed_out
        assert (partition.isr, partition.high_watermark) == ((1, 2), 0)

    with_manager(tmp_path, scenario, min_insync=3)


def test_a_lower_min_insync_replicas_commits_what_the_isr_holds_at_once(tmp_path):
    """The HW is computed when the leader's or a follower's log end moves (as Kafka), and when
    the topic's config changes: an idle partition's records do not wait for the next append."""

    async def scenario(manager: ReplicaManager):
        manager.become_leader_or_follower(5, [state(isr=(1, 2), replicas=(1, 2, 3))], {}, ME)
        partition = manager.partitions[TP]
        manager.append(TP, memoryview(batch(b"a")))
        manager.record_follower_fetch(partition, 2, 1)
        held = partition.high_watermark
        woken = []
        manager.watch_appends([TP], 60, woken.append)
        manager.record_follower_fetch(partition, 2, 1)  # an idle follower: its log end is the same
        manager.update_log_config(TP, LogConfig(min_insync_replicas=2))
        await asyncio.sleep(0)
        assert (held, partition.high_watermark, woken) == (0, 1, [True])

    with_manager(tmp_path, scenario, min_insync=3)


def test_standalone_partitions_commit_at_once(tmp_path):
    async def scenario(manager: ReplicaManager):
        recorder = Recorder(manager)
        manager.add_partition(TP, LogConfig())
        result = await asyncio.wait_for(manager.append_committed(TP, memoryview(batch(b"a"))), 1)
        assert result.first_offset == 0 and manager.partitions[TP].high_watermark == 1
        assert recorder.events == []  # standalone leadership is not news

    with_manager(tmp_path, scenario)


@pytest.mark.parametrize("failing", [False, True])
def test_a_coordinators_append_that_reaches_flush_messages_returns_once_fsynced(tmp_path, monkeypatch, failing):
    real_fsync = os.fsync

    def slow_or_failing_fsync(descriptor):  # the partition's disk
        if os.readlink(f"/proc/self/fd/{descriptor}").startswith(str(tmp_path)):
            if failing:
                raise OSError(errno.EIO, "Input/output error")
            time.sleep(0.1)
        real_fsync(descriptor)

    async def scenario(manager: ReplicaManager):
        partition_log = manager.add_partition(TP, LogConfig(flush_messages=1)).log
        monkeypatch.setattr(os, "fsync", slow_or_failing_fsync)
        appending = manager.append_committed(TP, memoryview(batch(b"a")))
        if failing:
            with pytest.raises(KafkaError) as raised:
                await appending
            assert raised.value.error_code == ErrorCode.kafka_storage_error
        else:
            await appending
            assert partition_log.recovery_point == 1

    with_manager(tmp_path, scenario)


def test_a_cancelled_coordinator_append_leaves_the_fsync_it_shares_to_the_others(tmp_path, monkeypatch):
    real_fsync = os.fsync

    def slow_fsync(descriptor):  # the partition's disk
        if os.readlink(f"/proc/self/fd/{descriptor}").startswith(str(tmp_path)):
            time.sleep(0.1)
        real_fsync(descriptor)

    async def scenario(manager: ReplicaManager):
        partition_log = manager.add_partition(TP, LogConfig(flush_messages=1)).log
        monkeypatch.setattr(os, "fsync", slow_fsync)
        first = asyncio.ensure_future(manager.append_committed(TP, memoryview(batch(b"a"))))
        second = asyncio.ensure_future(manager.append_committed(TP, memoryview(batch(b"b"))))
        third = asyncio.ensure_future(manager.append_committed(TP, memoryview(batch(b"c"))))
        await asyncio.sleep(0.01)
        first.cancel()
        second.cancel()  # the fsync it waits for, asked while the first ran, is the third's too
        await asyncio.wait_for(third, 5)
        assert partition_log.recovery_point == 3

    with_manager(tmp_path, scenario)


def test_settings_come_from_broker_configs(tmp_path):
    from broker.server import _replication_settings
    from tests.in_process import broker_config

    settings = _replication_settings(broker_config(tmp_path, {"replica.fetch.backoff.ms": "7", "num.replica.fetchers": "2"}))
    assert dataclasses.astuple(settings.fetcher)[:6] == (2, 500, 1, 1_048_576, 10_485_760, 7)
    assert settings.replica_lag_time_max_ms == 10_000


def test_a_failed_log_dir_stops_its_partitions_and_leaderandisr_answers_kafka_storage_error(tmp_path):
    async def scenario(manager: ReplicaManager):
        recorder = Recorder(manager)
        followed = TopicPartition("t", 1)
        manager.become_leader_or_follower(5, [state(), state(leader=2, tp=followed)], {2: NOWHERE}, ME)
        assert set(manager.fetchers.partitions) == {followed}
        manager.log_manager.handle_io_error(TP, OSError(5, "Input/output error"))
        # Both partitions were in the one dir: the follower stops fetching, the leader resigns.
        assert not manager.fetchers.partitions
        assert recorder.events[-1] == ("resign", TP, 1)
        errors = manager.become_leader_or_follower(5, [state(epoch=2), state(leader=2, epoch=2, tp=followed)], {2: NOWHERE}, ME)
        assert errors == {TP: ErrorCode.kafka_storage_error, followed: ErrorCode.kafka_storage_error}
        with pytest.raises(KafkaError) as refused:
            manager.append(TP, memoryview(batch(b"a")))
        assert refused.value.error_code == ErrorCode.kafka_storage_error

    with_manager(tmp_path, scenario)


def test_a_partition_follows_its_log_moved_to_another_log_dir(tmp_path):
    async def scenario(manager: ReplicaManager):
        manager.become_leader_or_follower(5, [state()], {}, ME)
        manager.append(TP, memoryview(batch(b"a")))
        logs = manager.log_manager
        target = next(d.path for d in logs.dirs.values() if d.path != logs.log_dir_of(TP))
        logs.move(TP, target)
        for _ in range(500):
            if logs.log_dir_of(TP) == target:
                break
            await asyncio.sleep(0.01)
        assert manager.partitions[TP].log is logs.get(TP) and logs.log_dir_of(TP) == target
        manager.append(TP, memoryview(batch(b"b")))
        assert logs.get(TP).log_end_offset == 2

    with_manager(tmp_path, scenario, log_dirs=("a", "b"))


def test_a_watch_is_called_back_on_the_turn_after_the_append_that_wakes_it_and_once(tmp_path):
    other = TopicPartition("t", 1)

    async def scenario(manager: ReplicaManager):
        manager.add_partition(TP, LogConfig())
        manager.add_partition(other, LogConfig())
        calls = []
        manager.watch_appends([TP, other], 60, lambda changed: calls.append(("woken", changed)))
        assert manager.waiting_requests() == (1, 0) and manager.watched_partitions() == (2, 0)

        manager.append(TP, memoryview(batch(b"a")), required_acks=1)
        manager.append(other, memoryview(batch(b"b")), required_acks=1)
        assert calls == []  # not within the appends, which are not over when the watch hears

        await asyncio.sleep(0)
        assert calls == [("woken", True)] and manager.waiting_requests() == (0, 0) == manager.watched_partitions()
        manager.append(TP, memoryview(batch(b"c")), required_acks=1)
        await asyncio.sleep(0.01)
        assert calls == [("woken", True)]

    with_manager(tmp_path, scenario)


def test_watches_sharing_partitions_are_each_woken_once_until_stopped(tmp_path):
    # One watch of a partition is held alone, two or more together: going from one to several
    # and back must neither lose a watch nor wake a stopped one.
    other = TopicPartition("t", 1)

    async def scenario(manager: ReplicaManager):
        manager.add_partition(TP, LogConfig())
        manager.add_partition(other, LogConfig())
        calls = []

        def watch(name: str, partitions: list[TopicPartition]):
            return manager.watch_appends(partitions, 60, lambda changed: calls.append(name))

        first = watch("first", [TP, TP, other])  # a partition named twice is watched once
        second = watch("second", [TP])
        watch("third", [TP, other])
        assert manager.waiting_requests() == (3, 0) and manager.watched_partitions() == (5, 0)
        manager.stop_watching(first)
        manager.stop_watching(first)  # stopping again changes nothing
        assert manager.waiting_requests() == (2, 0) and manager.watched_partitions() == (3, 0)

        manager.append(other, memoryview(batch(b"a")), required_acks=1)
        await asyncio.sleep(0)
        assert calls == ["third"] and manager.watched_partitions() == (1, 0)
        manager.stop_watching(second)
        assert manager.waiting_requests() == (0, 0)
        fourth = watch("fourth", [TP])
        watch("fifth", [TP])
        manager.stop_watching(fourth)
        manager.append(TP, memoryview(batch(b"b")), required_acks=1)
        await asyncio.sleep(0)
        assert calls == ["third", "fifth"] and manager.waiting_requests() == (0, 0)

    with_manager(tmp_path, scenario)


def test_a_watch_is_called_back_at_its_timeout_unless_stopped_first(tmp_path):
    async def scenario(manager: ReplicaManager):
        manager.add_partition(TP, LogConfig())
        calls = []
        manager.watch_appends([TP], 0.05, lambda changed: calls.append(("timed out", changed)))
        stopped = manager.watch_appends([TP], 0.05, lambda changed: calls.append(("stopped", changed)))
        assert manager.waiting_requests() == (2, 0)

        manager.stop_watching(stopped)
        await asyncio.sleep(0.2)

        assert calls == [("timed out", False)] and manager.waiting_requests() == (0, 0)
        manager.append(TP, memoryview(batch(b"a")), required_acks=1)
        await asyncio.sleep(0)
        assert calls == [("timed out", False)]

    with_manager(tmp_path, scenario)
