"""What this broker knows of the cluster: live brokers with their endpoints and racks, every
partition's leader, leader epoch, replicas, ISR and offline replicas, and the controller.

In cluster mode UpdateMetadata requests from the controller fill it: the brokers are replaced as
a whole, partition states are applied one by one (a state whose leader is -2 removes the
partition: its topic is being deleted, as in Kafka's UpdateMetadata). Standalone, the broker
fills it itself: it is the only broker, its own controller, and the leader of every partition.
Metadata, DescribeCluster and FindCoordinator answer from it.

Thread-safety: owned by the event loop.
"""

import asyncio
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from replication.partition_state import NO_LEADER
from storage.topic_partition import TopicPartition

NO_CONTROLLER = -1
LEADER_DURING_DELETE = -2


@dataclass(frozen=True)
class BrokerNode:
    broker_id: int
    endpoints: Mapping[str, tuple[str, int]]  # listener name -> (host, port)
    rack: str | None = None


@dataclass(frozen=True)
class PartitionInfo:
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()
    zk_version: int = 0


class MetadataCache:
    def __init__(self, listener_name: str) -> None:
        self.listener_name = listener_name
        self.controller_id = NO_CONTROLLER
        self.controller_epoch = -1
        self.brokers: dict[int, BrokerNode] = {}
        self._topics: dict[str, dict[int, PartitionInfo]] = {}
        self._waiters: set[asyncio.Future] = set()

    def update(
        self,
        controller_id: int,
        controller_epoch: int,
        brokers: Iterable[BrokerNode],
        partitions: Mapping[TopicPartition, PartitionInfo],
    ) -> list[TopicPartition]:
        """Apply an UpdateMetadata; returns the partitions it removed (deleted topics)."""
        self.controller_id = controller_id
        self.controller_epoch = controller_epoch
        self.brokers = {node.broker_id: node for node in brokers}
        removed = []
        for tp, info in partitions.items():
            if info.leader == LEADER_DURING_DELETE:
                if self._remove(tp):
                    removed.append(tp)
            else:
                self._topics.setdefault(tp.topic, {})[tp.partition] = info
        self._wake()
        return removed

    @property
    def filled(self) -> bool:
        """Whether a controller (standalone: the broker itself) has filled the cache yet; a
        broker just started in cluster mode knows no partition until the controller's first
        UpdateMetadata."""
        return self.controller_epoch >= 0

    async def wait_until(self, condition: Callable[[], bool], timeout_s: float) -> bool:
        """Wait until `condition` holds after an update (admin requests wait for their change
        to reach this cache); False after `timeout_s`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not condition():
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            woken = loop.create_future()
            self._waiters.add(woken)
            try:
                await asyncio.wait_for(asyncio.shield(woken), remaining)
            except TimeoutError:
                pass
            finally:
                self._waiters.discard(woken)
        return True

    def _wake(self) -> None:
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _remove(self, tp: TopicPartition) -> bool:
        topic = self._topics.get(tp.topic)
        if topic is None or topic.pop(tp.partition, None) is None:
            return False
        if not topic:
            del self._topics[tp.topic]
        return True

    def forget_leaderships_of(self, broker_id: int) -> None:
        """Mark the partitions `broker_id` leads as without a leader, until the controller's next
        UpdateMetadata: for a broker that stopped leading on its own (its ZooKeeper session
        expired). Otherwise its cache would go on naming it leader, and clients told so by it
        (Metadata, FindCoordinator) would come straight back to be refused, in a tight loop."""
        for partitions in self._topics.values():
            for index, info in partitions.items():
                if info.leader == broker_id:
                    partitions[index] = replace(info, leader=NO_LEADER)
        self._wake()

    def replace_topics(self, topics: Mapping[str, Mapping[int, PartitionInfo]]) -> None:
        """Standalone: the broker's own view of every topic."""
        self._topics = {name: dict(partitions) for name, partitions in topics.items()}
        self._wake()

    # ------------------------------------------------------------------ queries

    def topic_names(self) -> list[str]:
        return list(self._topics)

    def has_topic(self, topic: str) -> bool:
        return topic in self._topics

    def partitions(self, topic: str) -> dict[int, PartitionInfo]:
        """The topic's partitions by index (empty for an unknown topic)."""
        return dict(sorted(self._topics.get(topic, {}).items()))

    def partition(self, tp: TopicPartition) -> PartitionInfo | None:
        return self._topics.get(tp.topic, {}).get(tp.partition)

    def live_broker_ids(self) -> list[int]:
        return sorted(self.brokers)

    def endpoint(self, broker_id: int, listener_name: str | None = None) -> tuple[str, int] | None:
        """(host, port) of a live broker on the listener (this broker's client listener by
        default); None when the broker is not alive or has no such listener."""
        node = self.brokers.get(broker_id)
        if node is None:
            return None
        return node.endpoints.get(listener_name or self.listener_name)

    def alive_nodes(self, listener_name: str | None = None) -> list[tuple[int, str, int, str | None]]:
        """(id, host, port, rack) of every live broker with the listener (this broker's client
        listener by default)."""
        nodes = []
        for broker_id in sorted(self.brokers):
            endpoint = self.endpoint(broker_id, listener_name)
            if endpoint is not None:
                nodes.append((broker_id, endpoint[0], endpoint[1], self.brokers[broker_id].rack))
        return nodes

    def leader_of(self, tp: TopicPartition) -> int | None:
        """The partition's live leader, or None (unknown partition, no leader, leader gone)."""
        info = self.partition(tp)
        if info is None or info.leader < 0 or info.leader not in self.brokers:
            return None
        return info.leader
