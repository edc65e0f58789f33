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


class IsrFound(NamedTuple):
    """A refused ISR write whose partition state still has this leader at its own epoch: an
    earlier write of this leader was stored although its answer was lost (the controller bumps
    the leader epoch with every change it makes). What is stored is the ISR in force."""

    isr: tuple[int, ...]
    zk_version: int


class IsrWriter(Protocol):
    async def write_isr(
        self, tp: TopicPartition, leader_epoch: int, isr: tuple[int, ...], zk_version: int
    ) -> int | IsrFound | None:
        """Store `isr` as the partition's ISR if its state is still at `zk_version` and
        `leader_epoch`, and announce the change; return the new version. When the state moved
        on: an `IsrFound` if this leader moved it itself in its epoch (the leader takes that ISR
        and decides again), or None when the controller changed the partition (the leader then
        stops changing the ISR until a LeaderAndIsr tells it the new state)."""
        ...
