"""Transactions through faults, against three real brokers and ZooKeeper (confluent-kafka):

- a data partition's leader dies (kill -9) or stops cleanly (controlled shutdown) while two
  transactions that wrote to it are open; both write more after the move, one commits, one
  aborts: read_committed readers see each committed record once and nothing of the aborted one,
  also from the killed leader when it came back during the transactions and leads again;
- the transaction coordinator (leader of the id's __transaction_state partition) is killed or
  stopped cleanly before EndTxn: the producer finds the new coordinator, which loaded the open
  transaction, and commits;
- the coordinator is killed or stopped after writing PrepareCommit, with the markers held back
  by a paused partition leader: the new coordinator loads PrepareCommit and writes the markers;
- the coordinator is killed under an open transaction whose producer never comes back: the new
  coordinator aborts it at its timeout, so the last stable offset moves on and read_committed
  readers get the transactions after it.

Each test ends with a committed transaction of a new producer written after the fault: a reader
that gets it was not held back by a transaction left open."""

import time

import pytest
from confluent_kafka import Consumer, ElectionType, Producer, TopicPartition

from protocol.errors import ErrorCode
from tests.cluster.clients import admin_client, agreed_view, create_topic, describe_transaction, wait_formed
from tests.cluster.harness import wait_until
from tests.cluster.test_cluster_transactions import _TRANSACTION, _find_coordinator
from tests.harness import unique_topic

pytestmark = pytest.mark.slow

_TIMEOUT_S = 60
_PARTITIONS = 3
_BROKERS = (1, 2, 3)
_OVERRIDES = {
    "log.index.size.max.bytes": "65536",
    "replica.lag.time.max.ms": "2000",  # a paused broker leaves the ISRs quickly
    "transaction.state.log.num.partitions": "5",
    "offsets.topic.num.partitions": "5",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
}
_DRAIN_S = 3  # how long a reader goes on after the records it expects, to catch duplicates


@pytest.fixture
def cluster(cluster_factory):
    cluster = cluster_factory(overrides=_OVERRIDES)
    wait_formed(cluster)
    return cluster


def _topic(cluster) -> tuple[str, dict[int, int]]:
    """A new topic of three replicas, one partition led by each broker; partition -> leader."""
    topic = unique_topic("txn-faults")
    create_topic(cluster, topic, _PARTITIONS, 3)
    agreed = wait_until(lambda: agreed_view(cluster, topic, _BROKERS, _PARTITIONS), _TIMEOUT_S, "metadata agreement")
    leaders = {partition: leader for partition, (leader, _, _) in agreed.items()}
    assert sorted(leaders.values()) == list(_BROKERS)
    return topic, leaders


def _producer(cluster, transactional_id: str, **config) -> Producer:
    producer = Producer({
        "bootstrap.servers": cluster.bootstrap, "transactional.id": transactional_id, "socket.timeout.ms": 10_000,
        **config,
    })
    producer.init_transactions(_TIMEOUT_S)
    return producer


def _coordinator(cluster, transactional_id: str, alive=_BROKERS) -> int:
    """The broker that coordinates `transactional_id`, as live brokers answer FindCoordinator."""
    def found():
        answer = _find_coordinator(cluster.broker(alive[0]), _TRANSACTION, transactional_id)
        return answer.node_id if answer.error_code == ErrorCode.none and answer.node_id in alive else None

    return wait_until(found, _TIMEOUT_S, f"a live coordinator for {transactional_id}")


def _transaction_state(cluster, broker_id: int, transactional_id: str) -> str:
    """The state broker `broker_id` describes for the id (DescribeTransactions), or its error."""
    state = describe_transaction(cluster, broker_id, transactional_id)
    return state.transaction_state if state.error_code == ErrorCode.none else ErrorCode(state.error_code).name


def _write(producer: Producer, topic: str, label: str) -> list[bytes]:
    """One record per partition, flushed (acknowledged by each leader's ISR)."""
    values = [f"{label}-{partition}".encode() for partition in range(_PARTITIONS)]
    for partition, value in enumerate(values):
        producer.produce(topic, value, partition=partition)
    assert producer.flush(_TIMEOUT_S) == 0
    return values


def _committed_later(cluster, topic: str) -> list[bytes]:
    """A transaction of a new producer, committed: what readers must reach past the fault."""
    producer = _producer(cluster, unique_topic("later"))
    producer.begin_transaction()
    values = _write(producer, topic, "later")
    producer.commit_transaction(_TIMEOUT_S)
    return values


def _read_committed(cluster, topic: str, expected: int, alive=_BROKERS) -> list[bytes]:
    """Every value a read_committed reader gets from the start of each partition: until
    `expected` are read (or the timeout), then for _DRAIN_S more, so duplicates show."""
    consumer = Consumer({
        "bootstrap.servers": ",".join(cluster.broker(b).bootstrap for b in alive),
        "group.id": unique_topic("reader"), "enable.auto.commit": False, "isolation.level": "read_committed",
    })
    consumer.assign([TopicPartition(topic, partition, 0) for partition in range(_PARTITIONS)])
    read: list[bytes] = []
    deadline = time.monotonic() + _TIMEOUT_S
    drain_end = None
    while time.monotonic() < (drain_end or deadline):
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            read.append(message.value())
        if drain_end is None and len(read) >= expected:
            drain_end = time.monotonic() + _DRAIN_S
    consumer.close()
    return sorted(read)


_FAULTS = ["kill", "controlled_shutdown"]


def _fail(cluster, broker_id: int, fault: str) -> None:
    """kill -9 the broker, or stop it cleanly (its leaderships moved away first)."""
    if fault == "kill":
        cluster.broker(broker_id).kill()
    else:
        assert cluster.broker(broker_id).stop() == 0


def _transactions_across_a_leader_move(cluster, fault: str, before_ending=lambda topic, moved, victim: None):
    """A committed and an aborted transaction, both writing to every partition before and after
    the leader of one partition (not a coordinator of theirs) is killed or stopped, and
    `before_ending` is done: the topic, the committed and aborted values, the partition that
    moved and its old leader."""
    topic, leaders = _topic(cluster)
    committer_id, aborter_id = unique_topic("committer"), unique_topic("aborter")
    committer, aborter = _producer(cluster, committer_id), _producer(cluster, aborter_id)
    coordinators = {_coordinator(cluster, committer_id), _coordinator(cluster, aborter_id)}
    moved, victim = next((p, leader) for p, leader in leaders.items() if leader not in coordinators)
    survivors = tuple(b for b in _BROKERS if b != victim)

    committer.begin_transaction()
    aborter.begin_transaction()
    committed = _write(committer, topic, "committed-before")
    aborted = _write(aborter, topic, "aborted-before")
    _fail(cluster, victim, fault)
    wait_until(
        lambda: (now := agreed_view(cluster, topic, survivors, _PARTITIONS)) and now[moved][0] != victim,
        _TIMEOUT_S, f"a new leader for partition {moved}",
    )
    committed += _write(committer, topic, "committed-after")
    aborted += _write(aborter, topic, "aborted-after")
    before_ending(topic, moved, victim)
    committer.commit_transaction(_TIMEOUT_S)
    aborter.abort_transaction(_TIMEOUT_S)
    committed += _committed_later(cluster, topic)
    return topic, committed, aborted, moved, victim


@pytest.mark.parametrize("fault", _FAULTS)
def test_transactions_open_across_a_partition_leader_move_commit_and_abort_exactly(cluster, fault):
    topic, committed, aborted, _, victim = _transactions_across_a_leader_move(cluster, fault)
    read = _read_committed(cluster, topic, len(committed), tuple(b for b in _BROKERS if b != victim))
    assert read == sorted(committed)
    assert not set(read) & set(aborted)


def test_the_old_leader_back_in_the_lead_serves_the_transactions_as_its_successor(cluster):
    """The killed leader restarts while the transactions are open, catches up as a follower
    (their records, then their markers), and leads again (preferred election): its
    read_committed answers (LSO, aborted transactions) are its successor's."""

    def back_in_the_isr(topic: str, moved: int, victim: int) -> None:
        cluster.broker(victim).start()
        wait_until(
            lambda: (now := agreed_view(cluster, topic, _BROKERS, _PARTITIONS)) and victim in now[moved][2],
            _TIMEOUT_S, f"broker {victim} back in the ISR of partition {moved}",
        )

    topic, committed, aborted, moved, victim = _transactions_across_a_leader_move(cluster, "kill", back_in_the_isr)
    admin = admin_client(cluster.bootstrap)  # kept: the future dies with its client
    elected = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, moved)]).result(timeout=_TIMEOUT_S)
    assert elected[TopicPartition(topic, moved)] is None
    wait_until(
        lambda: (now := agreed_view(cluster, topic, _BROKERS, _PARTITIONS)) and now[moved][0] == victim,
        _TIMEOUT_S, f"broker {victim} leading partition {moved} again",
    )
    read = _read_committed(cluster, topic, len(committed))
    assert read == sorted(committed)
    assert not set(read) & set(aborted)


@pytest.mark.parametrize("fault", _FAULTS)
def test_the_coordinator_lost_before_end_txn_its_successor_commits(cluster, fault):
    topic, _ = _topic(cluster)
    transactional_id = unique_topic("tid")
    producer = _producer(cluster, transactional_id)
    coordinator = _coordinator(cluster, transactional_id)
    survivors = tuple(b for b in _BROKERS if b != coordinator)

    producer.begin_transaction()
    values = _write(producer, topic, "open")
    _fail(cluster, coordinator, fault)
    producer.commit_transaction(_TIMEOUT_S)
    assert _coordinator(cluster, transactional_id, survivors) != coordinator
    values += _committed_later(cluster, topic)

    assert _read_committed(cluster, topic, len(values), survivors) == sorted(values)


@pytest.mark.parametrize("fault", _FAULTS)
def test_the_coordinator_lost_after_prepare_commit_its_successor_writes_the_markers(cluster, fault):
    topic, leaders = _topic(cluster)
    transactional_id = unique_topic("tid")
    producer = _producer(cluster, transactional_id)
    coordinator = _coordinator(cluster, transactional_id)
    holding_back = next(leader for leader in leaders.values() if leader != coordinator)
    survivors = tuple(b for b in _BROKERS if b != coordinator)

    producer.begin_transaction()
    values = _write(producer, topic, "prepared")
    # The paused leader cannot take its marker; it leaves the ISRs, so PrepareCommit is written.
    cluster.broker(holding_back).pause()
    try:
        producer.commit_transaction(_TIMEOUT_S)
        assert _transaction_state(cluster, coordinator, transactional_id) == "PrepareCommit"
        if fault == "kill":
            cluster.broker(coordinator).kill()
        else:  # not waited for here: its controlled shutdown may need the paused broker (the controller)
            cluster.broker(coordinator).terminate()
    finally:
        cluster.broker(holding_back).resume()
    if fault == "controlled_shutdown":
        assert cluster.broker(coordinator).process.wait(_TIMEOUT_S) == 0
    values += _committed_later(cluster, topic)

    assert _read_committed(cluster, topic, len(values), survivors) == sorted(values)
    new_coordinator = _coordinator(cluster, transactional_id, survivors)
    wait_until(
        lambda: _transaction_state(cluster, new_coordinator, transactional_id) == "CompleteCommit",
        _TIMEOUT_S, "the new coordinator completing the commit",
    )


def test_an_abandoned_transaction_is_aborted_by_the_new_coordinator_so_readers_move_on(cluster):
    topic, _ = _topic(cluster)
    transactional_id = unique_topic("abandoned")
    abandoned = _producer(cluster, transactional_id, **{"transaction.timeout.ms": 6000, "socket.timeout.ms": 5000})
    coordinator = _coordinator(cluster, transactional_id)
    survivors = tuple(b for b in _BROKERS if b != coordinator)

    abandoned.begin_transaction()
    left_open = _write(abandoned, topic, "abandoned")  # never committed nor aborted by its producer
    cluster.broker(coordinator).kill()
    later = _committed_later(cluster, topic)

    read = _read_committed(cluster, topic, len(later), survivors)
    assert read == sorted(later)
    assert not set(read) & set(left_open)
    new_coordinator = _coordinator(cluster, transactional_id, survivors)
    assert _transaction_state(cluster, new_coordinator, transactional_id) == "CompleteAbort"
