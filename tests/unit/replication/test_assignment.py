import random
from collections import Counter

import pytest

from protocol.errors import ErrorCode, KafkaError
from replication import assignment as a


@pytest.mark.parametrize("seed", range(20))
def test_assignment_spreads_replicas_and_leaders(seed):
    brokers = {1: None, 2: None, 3: None, 4: None}
    result = a.assign_replicas(8, 3, brokers, rng=random.Random(seed))
    assert sorted(result) == list(range(8))
    for replicas in result.values():
        assert len(replicas) == 3 and len(set(replicas)) == 3
        assert set(replicas) <= set(brokers)
    assert Counter(r[0] for r in result.values()) == {1: 2, 2: 2, 3: 2, 4: 2}


def test_assignment_continues_round_robin_for_added_partitions():
    brokers = {1: None, 2: None, 3: None}
    result = a.assign_replicas(3, 1, brokers, first_partition=3, rng=random.Random(1))
    assert sorted(result) == [3, 4, 5]
    assert sorted(r[0] for r in result.values()) == [1, 2, 3]


def test_replication_factor_above_live_brokers_is_refused():
    with pytest.raises(KafkaError) as error:
        a.assign_replicas(1, 3, {1: None, 2: None})
    assert error.value.error_code == ErrorCode.invalid_replication_factor


@pytest.mark.parametrize("seed", range(20))
def test_rack_aware_assignment_puts_replicas_on_distinct_racks(seed):
    brokers = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    result = a.assign_replicas(6, 3, brokers, rng=random.Random(seed))
    for replicas in result.values():
        assert len({brokers[r] for r in replicas}) == 3


def test_rack_alternated_list():
    assert a.rack_alternated({1: "a", 2: "a", 3: "b", 4: "c", 5: "b"}) == [1, 3, 4, 2, 5]


def test_election_takes_first_live_in_sync_replica_in_assignment_order():
    assert a.elect_leader((3, 1, 2), (1, 2, 3), live={1, 2}, unclean=False) == a.Election(1, (1, 2))


def test_election_without_in_sync_replica_leaves_partition_offline_unless_unclean():
    assert a.elect_leader((1, 2), (1,), live={2}, unclean=False).leader == a.NO_LEADER
    assert a.elect_leader((1, 2), (1,), live={2}, unclean=True) == a.Election(2, (2,))
    assert a.elect_leader((1, 2), (1,), live=set(), unclean=True).leader == a.NO_LEADER


def test_preferred_leader_must_be_alive_and_in_sync():
    assert a.preferred_leader((1, 2), (2, 1), {1, 2}) == 1
    assert a.preferred_leader((1, 2), (2,), {1, 2}) is None
    assert a.preferred_leader((1, 2), (1, 2), {2}) is None


def test_shutdown_election_moves_leadership_off_stopping_brokers():
    assert a.elect_for_shutdown((1, 2, 3), (1, 2, 3), {1, 2, 3}, {1}) == a.Election(2, (2, 3))
    assert a.elect_for_shutdown((1, 2), (1,), {1, 2}, {1}) is None


def test_imbalance_picks_brokers_over_the_threshold():
    leaders = {"p0": (2, (1, 2)), "p1": (1, (1, 2)), "p2": (2, (2, 1))}
    assert a.imbalanced_partitions(leaders, 10) == ["p0"]
    assert a.imbalanced_partitions(leaders, 50) == []


def test_reassignment_steps():
    plan = a.plan_reassignment((1, 2, 3), (3, 4, 5))
    assert plan == a.ReassignmentPlan((3, 4, 5, 1, 2), (4, 5), (1, 2))
    assert plan.target == (3, 4, 5)
    assert not a.reassignment_caught_up(plan, (1, 2, 3, 4))
    assert a.reassignment_caught_up(plan, (1, 2, 3, 4, 5))
    assert a.finish_reassignment(plan, 1, (1, 2, 3, 4, 5), {1, 2, 3, 4, 5}) == a.Election(3, (3, 4, 5))
    assert a.finish_reassignment(plan, 3, (1, 3, 4, 5), {1, 3, 4, 5}) == a.Election(3, (3, 4, 5))
