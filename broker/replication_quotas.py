"""Replication quotas: throttled inter-broker replication, as Kafka's ReplicationQuotaManager.

Two quotas per broker, leader and follower, each a byte rate (leader.replication.throttled.rate,
follower.replication.throttled.rate; dynamic broker configs, per broker or cluster default; no
limit by default) and the set of partitions it applies to on this broker, from the topics'
leader.replication.throttled.replicas and follower.replication.throttled.replicas: '*' (every
partition of the topic) or partitionId:brokerId pairs, of which those naming this broker count.

- Leader side (broker/handlers/fetch.py): a follower's fetch of a throttled partition gets no
  records while the follower is out of the ISR and the leader quota is exceeded; the bytes
  sent for throttled partitions are recorded (whatever the ISR).
- Follower side (replication/fetcher.py): a throttled partition not caught up with its leader
  is left out of the fetch while the follower quota is exceeded; its bytes fetched are recorded.
- Moves between log dirs (storage/log_manager.py, AlterReplicaLogDirs): a third quota,
  replica.alter.log.dirs.io.max.bytes.per.second, over every move's copying; none copies while
  it is exceeded.

The rate is Kafka's SimpleRate over replication.quota.window.num samples of
replication.quota.window.size.seconds: the bytes of the samples kept, over the span since the
oldest began (at least one window). The quota is exceeded when that rate is above the bound.
Everything runs on the event loop.
"""

from collections.abc import Sequence

from storage.log_config import LONG_MAX, LogConfig
from storage.topic_partition import TopicPartition

from broker.security.quotas import Clock, SimpleRate, WindowConfig, monotonic_ms

ALL_REPLICAS = None  # the topic's list is '*'


def throttled_partitions(replicas: Sequence[str], broker_id: int) -> frozenset[int] | None:
    """The partitions of a throttled replica list that this broker throttles (Kafka's
    parseThrottledPartitions): None for '*', else those of the pairs naming `broker_id`."""
    items = [item.strip() for item in replicas if item.strip()]
    if items == ["*"]:
        return ALL_REPLICAS
    partitions = set()
    for item in items:
        partition, _, broker = item.partition(":")
        if int(broker) == broker_id:
            partitions.add(int(partition))
    return frozenset(partitions)


class ReplicationQuotaManager:
    """One replication quota (leader or follower): its bound, its rate, its partitions."""

    def __init__(self, window: WindowConfig, clock: Clock = monotonic_ms) -> None:
        self._clock = clock
        self._rate = SimpleRate(window)
        self.bound = LONG_MAX
        # topic -> the throttled partitions (ALL_REPLICAS: all of them); topics not throttled
        # are absent, so the check costs one dict lookup for them.
        self._throttled: dict[str, frozenset[int] | None] = {}

    def update_quota(self, bound: int) -> None:
        self.bound = bound

    def mark_throttled(self, topic: str, partitions: frozenset[int] | None) -> None:
        self._throttled[topic] = partitions

    def remove_throttle(self, topic: str) -> None:
        self._throttled.pop(topic, None)

    @property
    def throttles_any(self) -> bool:
        return bool(self._throttled)

    def is_throttled(self, tp: TopicPartition) -> bool:
        if tp.topic not in self._throttled:
            return False
        partitions = self._throttled[tp.topic]
        return partitions is ALL_REPLICAS or tp.partition in partitions

    def is_quota_exceeded(self) -> bool:
        if self.bound >= LONG_MAX:
            return False
        return self._rate.measure(self._clock()) > self.bound

    def record(self, value: int) -> None:
        """Counts `value` bytes, over the quota or not."""
        self._rate.record(value, self._clock())


class ReplicationQuotas:
    """This broker's leader and follower replication quotas."""

    def __init__(self, broker_id: int, window: WindowConfig, clock: Clock = monotonic_ms) -> None:
        self.broker_id = broker_id
        self.leader = ReplicationQuotaManager(window, clock)
        self.follower = ReplicationQuotaManager(window, clock)
        # Moves between this broker's log dirs: every one is throttled (storage.log_manager).
        self.alter_log_dirs = ReplicationQuotaManager(window, clock)

    def update_rates(self, leader: int, follower: int, alter_log_dirs: int = LONG_MAX) -> None:
        """leader/follower.replication.throttled.rate and
        replica.alter.log.dirs.io.max.bytes.per.second in effect (start, dynamic change)."""
        self.leader.update_quota(leader)
        self.follower.update_quota(follower)
        self.alter_log_dirs.update_quota(alter_log_dirs)

    def update_topic(self, topic: str, config: LogConfig) -> None:
        """A topic's config is in effect (created, loaded, changed): its throttled replicas."""
        for quota, replicas in (
            (self.leader, config.leader_replication_throttled_replicas),
            (self.follower, config.follower_replication_throttled_replicas),
        ):
            if any(item.strip() for item in replicas):
                quota.mark_throttled(topic, throttled_partitions(replicas, self.broker_id))
            else:
                quota.remove_throttle(topic)

    def remove_topic(self, topic: str) -> None:
        self.leader.remove_throttle(topic)
        self.follower.remove_throttle(topic)
