"""RackAwareReplicaSelector: which replica a consumer in a rack reads (Kafka's), and the
replica.selector.class values logway takes."""

import pytest

from replication.replica_selector import (
    RACK_AWARE_REPLICA_SELECTOR,
    RackAwareReplicaSelector,
    ReplicaView,
    replica_selector,
)

LEADER = ReplicaView(1, "a", 100, 0)


def select(client_rack, *followers: ReplicaView) -> int:
    return RackAwareReplicaSelector().select(client_rack, [LEADER, *followers], LEADER).broker_id


def test_a_consumer_without_a_rack_or_with_one_no_replica_is_in_reads_the_leader():
    follower = ReplicaView(2, "b", 100, 0)
    assert select(None, follower) == 1
    assert select("", follower) == 1
    assert select("z", follower) == 1


def test_a_consumer_in_the_leaders_rack_reads_the_leader_even_with_a_follower_there():
    assert select("a", ReplicaView(2, "a", 100, 0)) == 1


def test_a_consumer_in_a_followers_rack_reads_that_follower():
    assert select("b", ReplicaView(2, "b", 90, 50), ReplicaView(3, "c", 100, 0)) == 2


def test_among_followers_of_the_rack_the_most_caught_up_wins_then_the_latest_caught_up_then_the_highest_id():
    assert select("b", ReplicaView(2, "b", 90, 0), ReplicaView(3, "b", 95, 500)) == 3
    assert select("b", ReplicaView(2, "b", 95, 10), ReplicaView(3, "b", 95, 500)) == 2
    assert select("b", ReplicaView(2, "b", 95, 10), ReplicaView(3, "b", 95, 10)) == 3


def test_replica_selector_class_is_unset_or_kafkas_rack_aware_selector():
    assert replica_selector(None) is None
    assert replica_selector(" ") is None
    assert isinstance(replica_selector(RACK_AWARE_REPLICA_SELECTOR), RackAwareReplicaSelector)
    with pytest.raises(ValueError, match="replica.selector.class: logway's only replica selector is"):
        replica_selector("com.example.NearestSelector")
