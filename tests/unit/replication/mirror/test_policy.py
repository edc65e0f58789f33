import re

import pytest

from replication.mirror.policy import ReplicationPolicy

EVERYTHING = re.compile(".*")
NOTHING = re.compile("(?!)")
policy = ReplicationPolicy()


def test_remote_topics_carry_the_source_alias():
    assert policy.remote_topic("A", "orders") == "A.orders"
    assert ReplicationPolicy("_").remote_topic("A", "orders") == "A_orders"
    assert policy.topic_source("A.orders") == "A"
    assert policy.upstream_topic("B.A.orders") == "A.orders"
    assert policy.topic_source("orders") is None


def test_offsets_topic_is_named_by_source_alias():
    assert policy.offsets_topic("A") == "mm2-offsets.A.internal"


@pytest.mark.parametrize(
    ("topic", "target", "cycle"),
    [
        ("orders", "A", False),
        ("A.orders", "A", True),  # came from A: mirroring it back to A would loop
        ("B.orders", "A", False),
        ("C.A.orders", "A", True),  # A -> C -> B, going back to A
        ("C.B.orders", "A", False),
    ],
)
def test_topics_that_came_from_the_target_are_cycles(topic, target, cycle):
    assert policy.is_cycle(topic, target) is cycle


def test_internal_topics_are_never_replicated_even_when_included():
    for topic in ("__consumer_offsets", "mm2-offsets.A.internal", "x-internal", ".hidden"):
        assert not policy.should_replicate(topic, "B", EVERYTHING, NOTHING)


def test_heartbeats_are_replicated_even_when_not_included():
    assert policy.should_replicate("heartbeats", "B", NOTHING, NOTHING)
    assert policy.should_replicate("C.heartbeats", "B", NOTHING, NOTHING)
    assert not policy.should_replicate("B.heartbeats", "B", NOTHING, NOTHING)


def test_include_and_exclude_patterns_select_topics():
    include, exclude = re.compile("orders.*"), re.compile("orders-test")
    assert policy.should_replicate("orders-eu", "B", include, exclude)
    assert not policy.should_replicate("orders-test", "B", include, exclude)
    assert not policy.should_replicate("payments", "B", include, exclude)
