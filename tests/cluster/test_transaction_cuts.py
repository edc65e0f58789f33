"""Transactions through network cuts (namespace mode, root only), against three real brokers and
ZooKeeper (confluent-kafka):

- a data partition's leader is cut off from its follower and from ZooKeeper just before the
  producer commits: the coordinator, which still reaches it, has it append the COMMIT markers,
  which the follower never copies, so the leader cannot answer them; its session expires, the
  controller elects the follower while the transaction is in PrepareCommit, the coordinator
  writes the markers again to the new leader; after the heal the old leader truncates its own
  markers and the replicas are byte for byte the same. A transaction aborted meanwhile stays
  invisible, and a later transaction is read (the LSO moved on);
- the transaction coordinator (not the controller) is cut off from ZooKeeper and its peers, but
  not from clients, while a transaction is open: its PrepareCommit cannot be replicated, another
  broker takes the id's __transaction_state partition, and the producer commits through it (or,
  were it fenced, the transaction is aborted): readers see the transaction whole or not at all,
  and back in touch the old coordinator no longer holds it open.

Shares its helpers with tests/cluster/test_transaction_faults.py."""

import json

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import NewTopic

from tests.cluster.checker import control_batch_offsets, partition_batches, replicas_agree
from tests.cluster.clients import admin_client, agreed_view, wait_formed, zk_controller_or_none
from tests.cluster.harness import ZOOKEEPER, wait_until
from tests.cluster.test_transaction_faults import (
    _BROKERS,
    _OVERRIDES,
    _PARTITIONS,
    _TIMEOUT_S,
    _committed_later,
    _coordinator,
    _producer,
    _read_committed,
    _topic,
    _transaction_state,
    _write,
)
from tests.harness import unique_topic

pytestmark = pytest.mark.slow

# A cut-off leader's session ends 4 s after it lost ZooKeeper (the harness's tick is 500 ms).
_CUT_OVERRIDES = {**_OVERRIDES, "zookeeper.session.timeout.ms": "4000"}
# What the coordinator may describe before the markers are written: the controller's ISR change
# of its __transaction_state partition (the old leader leaving) makes it load the id again.
_PREPARED = {"PrepareCommit", "coordinator_load_in_progress"}


@pytest.fixture
def cluster(cluster_factory):
    cluster = cluster_factory(namespaces=True, overrides=_CUT_OVERRIDES)
    wait_formed(cluster)
    return cluster


def _topic_on(cluster, leader: int, follower: int) -> str:
    """A new topic whose every partition has two replicas, `leader` leading, both in sync."""
    topic = unique_topic("txn-cuts")
    assignment = [[leader, follower]] * _PARTITIONS
    admin = admin_client(cluster.bootstrap)  # kept: the futures die with their client
    created = admin.create_topics(
        [NewTopic(topic, num_partitions=_PARTITIONS, replica_assignment=assignment)], operation_timeout=30,
    )
    created[topic].result(timeout=_TIMEOUT_S)
    wait_until(
        lambda: (now := agreed_view(cluster, topic, _BROKERS, _PARTITIONS))
        and all(now_leader == leader and sorted(isr) == sorted((leader, follower))
                for now_leader, _, isr in now.values()),
        _TIMEOUT_S, "the topic led by its first replica with a full ISR everywhere",
    )
    return topic


def _producer_not_coordinated_by(cluster, broker_id: int, label: str):
    """A transactional producer whose coordinator is not `broker_id`, and its coordinator."""
    for _ in range(20):
        transactional_id = unique_topic(label)
        coordinator = _coordinator(cluster, transactional_id)
        if coordinator != broker_id:
            return _producer(cluster, transactional_id), transactional_id, coordinator
    raise AssertionError(f"20 transactional ids all coordinated by broker {broker_id}")


def _partition_dirs(cluster, broker_id: int, topic: str) -> list[str]:
    return [str(cluster.broker(broker_id).data_dirs[0] / f"{topic}-{p}") for p in range(_PARTITIONS)]


def _markers_in(cluster, broker_id: int, topic: str) -> list[list[int]]:
    """The offsets of the control batches in each partition of the broker's replica."""
    return [control_batch_offsets(directory) for directory in _partition_dirs(cluster, broker_id, topic)]


def _zookeeper_leaders(zookeeper, topic: str) -> set[int]:
    """The leaders of the topic's partitions in their state znodes, which the controller writes
    before it tells any broker."""
    paths = (f"/brokers/topics/{topic}/partitions/{p}/state" for p in range(_PARTITIONS))
    return {json.loads(zookeeper.get(path)[0])["leader"] for path in paths}


def test_commit_markers_only_on_a_leader_cut_off_are_written_again_to_its_successor(cluster):
    controller, _ = wait_until(lambda: zk_controller_or_none(cluster), _TIMEOUT_S, "a controller")
    committer_id = unique_topic("committer")
    committer = _producer(cluster, committer_id)
    coordinator = _coordinator(cluster, committer_id)
    # The cut-off leader is neither the controller nor the coordinator: both must stay in touch.
    old_leader = next(b for b in _BROKERS if b not in (controller, coordinator))
    follower = next(b for b in _BROKERS if b not in (old_leader, coordinator))
    aborter, _, _ = _producer_not_coordinated_by(cluster, old_leader, "aborter")
    topic = _topic_on(cluster, old_leader, follower)

    committer.begin_transaction()
    aborter.begin_transaction()
    committed = _write(committer, topic, "committed")
    aborted = _write(aborter, topic, "aborted")
    assert _markers_in(cluster, old_leader, topic) == [[]] * _PARTITIONS

    # The coordinator still reaches the old leader; the follower and ZooKeeper do not.
    cluster.cut(old_leader, follower)
    cluster.cut(old_leader, ZOOKEEPER)
    committer.commit_transaction(_TIMEOUT_S)  # answered once PrepareCommit is written
    wait_until(lambda: all(_markers_in(cluster, old_leader, topic)), _TIMEOUT_S,
               "the COMMIT markers appended on the cut-off leader")
    assert _markers_in(cluster, follower, topic) == [[]] * _PARTITIONS

    def moved_while_prepared(zookeeper) -> bool:
        state = _transaction_state(cluster, coordinator, committer_id)  # asked first: then the move is later
        if _zookeeper_leaders(zookeeper, topic) == {follower}:
            return True
        assert state in _PREPARED, f"the transaction {state} before its partitions' leader moved"
        return False

    with cluster.zookeeper_client() as zookeeper:
        wait_until(lambda: moved_while_prepared(zookeeper), _TIMEOUT_S,
                   "the follower elected once the old leader's session expired")
    wait_until(lambda: _transaction_state(cluster, coordinator, committer_id) == "CompleteCommit",
               _TIMEOUT_S, "the coordinator writing the markers to the new leader")
    assert all(_markers_in(cluster, follower, topic))
    aborter.abort_transaction(_TIMEOUT_S)

    cluster.heal_all()
    wait_until(
        lambda: (now := agreed_view(cluster, topic, _BROKERS, _PARTITIONS))
        and all(sorted(isr) == sorted((old_leader, follower)) for _, _, isr in now.values()),
        _TIMEOUT_S, "the old leader back in the ISR",
    )
    committed += _committed_later(cluster, topic)
    for dirs in zip(_partition_dirs(cluster, old_leader, topic), _partition_dirs(cluster, follower, topic)):
        wait_until(lambda: replicas_agree(dirs) is None and len({len(partition_batches(d)) for d in dirs}) == 1,
                   _TIMEOUT_S, f"{dirs}: both replicas the same", interval=0.5)

    read = _read_committed(cluster, topic, len(committed))
    assert read == sorted(committed)
    assert not set(read) & set(aborted)


def test_a_coordinator_cut_off_mid_transaction_is_replaced_and_the_commit_goes_through_once(cluster):
    controller, _ = wait_until(lambda: zk_controller_or_none(cluster), _TIMEOUT_S, "a controller")
    producer, transactional_id, coordinator = _producer_not_coordinated_by(cluster, controller, "cut-coordinator")
    survivors = tuple(b for b in _BROKERS if b != coordinator)
    topic, _ = _topic(cluster)

    producer.begin_transaction()
    values = _write(producer, topic, "open")
    # Cut off from ZooKeeper and its peers, not from clients: it may go on believing it coordinates.
    for host in (ZOOKEEPER, *survivors):
        cluster.cut(coordinator, host)
    new_coordinator = wait_until(
        lambda: (found := _coordinator(cluster, transactional_id, survivors)) != coordinator and found,
        _TIMEOUT_S, "another broker coordinating the transactional id",
    )
    try:
        producer.commit_transaction(_TIMEOUT_S)
        outcome = "CompleteCommit"
    except KafkaException as error:
        assert not error.args[0].retriable(), error
        if error.args[0].txn_requires_abort():
            producer.abort_transaction(_TIMEOUT_S)
        outcome = "CompleteAbort"  # fenced: the new coordinator aborts it, at the latest on its timeout
    wait_until(lambda: _transaction_state(cluster, new_coordinator, transactional_id) == outcome,
               _TIMEOUT_S, f"{outcome} at the new coordinator")

    cluster.heal_all()
    # Back in touch, the old coordinator gave up the transactional id, or loaded it again as it ended.
    wait_until(lambda: _transaction_state(cluster, coordinator, transactional_id) in {"not_coordinator", outcome},
               _TIMEOUT_S, "the old coordinator no longer holding the transaction open")
    later = _committed_later(cluster, topic)
    read = _read_committed(cluster, topic, len(later) + (len(values) if outcome == "CompleteCommit" else 0))
    assert read == sorted(later + values if outcome == "CompleteCommit" else later)
    assert _transaction_state(cluster, _coordinator(cluster, transactional_id), transactional_id) == outcome
