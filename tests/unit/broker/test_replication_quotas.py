"""Replication quotas: the rate over Kafka's sample windows, the throttled replica lists, and
the broker keeping them current from its topic and dynamic broker configs."""

import asyncio

import pytest

from broker.replication_quotas import ReplicationQuotaManager, ReplicationQuotas, throttled_partitions
from broker.security.quotas import WindowConfig
from storage.log_config import LONG_MAX, LogConfig
from storage.topic_partition import TopicPartition
from tests.in_process import running_broker

WINDOW = WindowConfig(samples=11, window_ms=1000)


class Clock:
    def __init__(self) -> None:
        self.now_ms = 1_000_000

    def __call__(self) -> int:
        return self.now_ms


def throttled_quota(bound: int) -> tuple[ReplicationQuotaManager, Clock]:
    clock = Clock()
    quota = ReplicationQuotaManager(WINDOW, clock)
    quota.update_quota(bound)
    quota.mark_throttled("t", None)
    return quota, clock


def test_without_a_rate_the_quota_is_never_exceeded():
    quota, _clock = throttled_quota(LONG_MAX)
    quota.record(10**12)
    assert not quota.is_quota_exceeded()


def test_a_burst_counts_at_once_over_one_window():
    # SimpleRate: a new rate is measured over at least one window, not quota.window.num - 1
    # windows as client quotas are, so the first burst over the bound is seen at once.
    quota, _clock = throttled_quota(1000)
    quota.record(1000)
    assert not quota.is_quota_exceeded()
    quota.record(1)
    assert quota.is_quota_exceeded()


def test_the_rate_is_spread_over_the_span_since_the_oldest_sample():
    quota, clock = throttled_quota(1000)
    quota.record(5000)
    clock.now_ms += 4000
    assert quota.is_quota_exceeded()  # 5000 B over 4 s
    clock.now_ms += 1001
    assert not quota.is_quota_exceeded()  # over 5 s: 1000 B/s at most


def test_samples_older_than_the_windows_are_forgotten():
    quota, clock = throttled_quota(100)
    quota.record(10**6)
    clock.now_ms += 11 * 1000
    assert not quota.is_quota_exceeded()


def test_a_steady_rate_just_under_the_bound_is_never_throttled_and_one_above_is():
    under, under_clock = throttled_quota(1000)
    over, over_clock = throttled_quota(1000)
    exceeded = {"under": 0, "over": 0}
    for _ in range(30):  # 30 s, one record every 100 ms
        for _ in range(10):
            under.record(99)
            over.record(110)
            under_clock.now_ms += 100
            over_clock.now_ms += 100
            exceeded["under"] += under.is_quota_exceeded()
            exceeded["over"] += over.is_quota_exceeded()
    assert exceeded["under"] == 0
    assert exceeded["over"] > 250


@pytest.mark.parametrize(
    ("replicas", "expected"),
    [
        (("*",), None),
        (("0:1", "1:2", "2:1"), frozenset({0, 2})),
        ((" 3:1 ",), frozenset({3})),
        (("0:2",), frozenset()),
    ],
)
def test_this_brokers_throttled_partitions_of_a_replica_list(replicas, expected):
    assert throttled_partitions(replicas, broker_id=1) == expected


def test_a_topics_config_marks_and_clears_its_throttled_partitions():
    quotas = ReplicationQuotas(1, WINDOW)
    throttled = LogConfig.resolve(
        {"leader.replication.throttled.replicas": "0:1,1:2", "follower.replication.throttled.replicas": "*"}, {}
    )
    quotas.update_topic("t", throttled)
    assert quotas.leader.is_throttled(TopicPartition("t", 0))
    assert not quotas.leader.is_throttled(TopicPartition("t", 1))  # its leader is broker 2
    assert quotas.follower.is_throttled(TopicPartition("t", 7))
    assert not quotas.leader.is_throttled(TopicPartition("u", 0))
    quotas.update_topic("t", LogConfig.resolve({}, {}))
    assert not quotas.leader.throttles_any and not quotas.follower.throttles_any


def test_the_broker_follows_topic_configs_and_the_dynamic_throttle_rates(tmp_path):
    async def main():
        async with running_broker(tmp_path, {"follower.replication.throttled.rate": "5000"}) as broker:
            quotas = broker.replication_quotas
            assert (quotas.leader.bound, quotas.follower.bound) == (LONG_MAX, 5000)
            await broker.topics.create("t", 2, {"leader.replication.throttled.replicas": "1:0"})
            created = quotas.leader.is_throttled(TopicPartition("t", 1))
            await broker.topics.set_configs("t", {"follower.replication.throttled.replicas": "*"})
            altered = (quotas.leader.throttles_any, quotas.follower.is_throttled(TopicPartition("t", 0)))
            await broker.dynamic_config.alter(
                "0",
                lambda current: {
                    **current,
                    "leader.replication.throttled.rate": "100",
                    "replica.alter.log.dirs.io.max.bytes.per.second": "200",
                },
                "0",
                False,
            )
            bounds = (quotas.leader.bound, quotas.alter_log_dirs.bound)
            moves_use_it = broker.log_manager.move_quota is quotas.alter_log_dirs
            await broker.topics.delete("t")
            deleted = quotas.follower.throttles_any
        assert created
        assert altered == (False, True)
        assert bounds == (100, 200)
        assert moves_use_it
        assert not deleted

    asyncio.run(main())
