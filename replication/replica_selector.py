"""Which replica a consumer should read from (KIP-392, Kafka's ReplicaSelector).

`replica.selector.class` names the selector; unset (Kafka's default) the leader serves every
consumer. logway has Kafka's one implementation, RackAwareReplicaSelector: a consumer that gives
its rack (`client.rack`, sent as Fetch v11's rack_id) reads from a replica in that rack, the
leader when it is there, else the most caught-up one (highest log end offset, then the one
caught up most recently, then the highest broker id: Kafka's ReplicaView comparator); with no
rack, or no replica in it, the leader.

The leader offers only candidates Kafka's ReplicaManager.findPreferredReadReplica offers: in-sync
followers whose log holds the fetch offset (broker.replica_manager builds the views).
"""

from collections.abc import Iterable
from dataclasses import dataclass

RACK_AWARE_REPLICA_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """One replica as the selector sees it (Kafka's ReplicaView); `rack` is None for a replica
    without one or not reachable on the consumer's listener."""

    broker_id: int
    rack: str | None
    log_end_offset: int
    time_since_last_caught_up_ms: int

    def caught_up_order(self) -> tuple[int, int, int]:
        """Larger is more caught up (Kafka's ReplicaView.comparator)."""
        return self.log_end_offset, -self.time_since_last_caught_up_ms, self.broker_id


class RackAwareReplicaSelector:
    def select(self, client_rack: str | None, replicas: Iterable[ReplicaView], leader: ReplicaView) -> ReplicaView:
        """The replica the consumer in `client_rack` should read from; `replicas` includes the
        leader."""
        if not client_rack:
            return leader
        same_rack = [replica for replica in replicas if replica.rack == client_rack]
        if not same_rack or leader in same_rack:
            return leader
        return max(same_rack, key=ReplicaView.caught_up_order)


def replica_selector(class_name: str | None) -> RackAwareReplicaSelector | None:
    """The selector `replica.selector.class` names; None when unset (the leader serves every
    read). ValueError for any class logway does not have."""
    name = (class_name or "").strip()
    if not name:
        return None
    if name == RACK_AWARE_REPLICA_SELECTOR:
        return RackAwareReplicaSelector()
    raise ValueError(
        f"Invalid value {name} for configuration replica.selector.class: logway's only replica "
        f"selector is {RACK_AWARE_REPLICA_SELECTOR}"
    )
