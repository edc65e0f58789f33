import asyncio

from broker.metadata_cache import LEADER_DURING_DELETE, BrokerNode, MetadataCache, PartitionInfo
from storage.topic_partition import TopicPartition

T0, T1, U0 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0)


def _cache() -> MetadataCache:
    cache = MetadataCache("PLAINTEXT")
    brokers = [
        BrokerNode(1, {"PLAINTEXT": ("h1", 9092), "INTERNAL": ("i1", 9093)}, "r1"),
        BrokerNode(2, {"INTERNAL": ("i2", 9093)}),
    ]
    cache.update(1, 3, brokers, {
        T1: PartitionInfo(2, 4, (2, 1), (2, 1)),
        T0: PartitionInfo(1, 0, (1, 2), (1,), (3,)),
        U0: PartitionInfo(3, 1, (3,), (3,)),
    })
    return cache


def test_update_fills_brokers_partitions_and_controller():
    cache = _cache()
    assert (cache.controller_id, cache.controller_epoch) == (1, 3)
    assert cache.live_broker_ids() == [1, 2]
    assert list(cache.partitions("t")) == [0, 1]
    assert cache.partition(T0).offline_replicas == (3,)
    assert cache.partitions("nope") == {}
    assert sorted(cache.topic_names()) == ["t", "u"]


def test_endpoints_are_per_listener_and_nodes_need_the_client_listener():
    cache = _cache()
    assert cache.endpoint(1) == ("h1", 9092)
    assert cache.endpoint(2) is None
    assert cache.endpoint(2, "INTERNAL") == ("i2", 9093)
    assert cache.alive_nodes() == [(1, "h1", 9092, "r1")]


def test_leader_must_be_alive():
    cache = _cache()
    assert cache.leader_of(T0) == 1
    assert cache.leader_of(U0) is None  # broker 3 is not alive
    assert cache.leader_of(TopicPartition("t", 9)) is None


def test_leader_during_delete_removes_partitions_and_then_the_topic():
    cache = _cache()
    removed = cache.update(1, 3, cache.brokers.values(), {
        T0: PartitionInfo(LEADER_DURING_DELETE, 0, (), ()),
        T1: PartitionInfo(LEADER_DURING_DELETE, 0, (), ()),
        TopicPartition("gone", 0): PartitionInfo(LEADER_DURING_DELETE, 0, (), ()),
    })
    assert removed == [T0, T1]
    assert not cache.has_topic("t") and cache.has_topic("u")


def test_wait_until_wakes_on_update_or_times_out():
    async def scenario():
        cache = MetadataCache("PLAINTEXT")
        waiting = asyncio.create_task(cache.wait_until(lambda: cache.has_topic("t"), 10))
        await asyncio.sleep(0.01)
        cache.update(1, 1, [], {T0: PartitionInfo(1, 0, (1,), (1,))})
        assert await waiting
        assert not await cache.wait_until(lambda: cache.has_topic("x"), 0.05)

    asyncio.run(scenario())


def test_a_broker_that_stopped_leading_on_its_own_names_no_leader_until_the_controller_says():
    cache = _cache()
    cache.forget_leaderships_of(1)
    assert cache.partition(T0).leader == -1
    assert cache.leader_of(T0) is None  # FindCoordinator: COORDINATOR_NOT_AVAILABLE, not "me"
    assert cache.partition(T0).leader_epoch == 0  # the epoch stays: the next leader's is higher
    assert cache.partition(T1).leader == 2
    cache.update(1, 3, cache.brokers.values(), {T0: PartitionInfo(2, 1, (1, 2), (2,))})
    assert cache.leader_of(T0) == 2
