"""What the controller decides about a partition, as the replicas act on it.

The controller's LeaderAndIsr request carries one `PartitionState` per partition a broker holds
(docs/cluster.md, "Replicas"); the broker's replica manager becomes leader or follower from it.
A leader that changes the ISR writes it back through an `IsrWriter`, which in ZooKeeper mode is a
compare-and-set on the partition's state znode (its version is `zk_version`).
"""

from typing import NamedTuple, Protocol

from storage.topic_partition import TopicPartition

NO_LEADER = -1


class PartitionState(NamedTuple):
    topic_partition: TopicPartition
    controller_epoch: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    zk_version: int
    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()
    is_new: bool = False


class LeaderEndpoint(NamedTuple):
    """Where a follower finds its leader (LeaderAndIsr's live_leaders)."""

    broker_id: int
    host: str
    port: int


class IsrWriter(Protocol):
    async def write_isr(
        self, tp: TopicPartition, leader_epoch: int, isr: tuple[int, ...], zk_version: int
    ) -> int | None:
        """Store `isr` as the partition's ISR if its state is still at `zk_version` and
        `leader_epoch`, and announce the change; return the new version, or None when the
        controller changed the partition meanwhile (the leader then stops changing the ISR until
        a LeaderAndIsr tells it the new state)."""
        ...
