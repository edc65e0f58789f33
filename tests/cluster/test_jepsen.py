"""A randomized schedule of faults under concurrent producers, judged in the spirit of Jepsen's
queue workload (issue 5): kill -9 and restart, SIGSTOP/SIGCONT pauses, broker-broker cuts and
broker-ZooKeeper cuts, one at a time, each healed after a few seconds, while three idempotent
acks=all producers write to a three-partition topic with three replicas and min.insync.replicas=2.

At the end every fault is healed and every replica back in the ISR; then
- no acknowledged write is lost or moved, nothing is read that nobody wrote, and each producer's
  records keep their send order per partition (checker.check, per producer by value prefix);
- no offset holds two different records: no two producers were acknowledged the same offset,
  and the replicas of every partition are byte-for-byte identical;
- offsets never go backwards: one producer's acknowledged offsets in a partition grow with its
  send order (idempotent, so kept across leader changes);
- every partition is readable to its high watermark.

The schedule is seeded: the seed is in every assertion message, and LOGWAY_JEPSEN_SEED replays
it. Network cuts need namespace mode (root); the loopback variant kills and pauses only."""

import os
import random
import time
from collections.abc import Callable

import pytest
from confluent_kafka.admin import NewTopic

from tests.cluster.checker import (
    by_producer,
    check,
    offsets_acked_twice,
    offsets_going_backwards,
)
from tests.cluster.clients import admin_client, full_isrs, replicas_identical, wait_formed
from tests.cluster.harness import ZOOKEEPER, Cluster, wait_until
from tests.cluster.test_faults import _ACKS_ALL_TOPIC, _FAST_FAILURES
from tests.cluster.workload import ProducerWorkload, read_topic
from tests.harness import unique_topic

pytestmark = pytest.mark.slow

_TIMEOUT_S = 60
BROKERS = (1, 2, 3)
PARTITIONS = 3
PRODUCERS = ("p0", "p1", "p2")
FAULTS = 7
SEED_VARIABLE = "LOGWAY_JEPSEN_SEED"
# max.in.flight is per connection: when a partition moves to another leader, a plain producer may
# send later records to the new leader while an earlier request is still out to the old one, and
# retry it after them. The idempotent producer keeps a partition's order across leaders.
_ORDERED = {"enable.idempotence": True}

Fault = Callable[[Cluster, random.Random], tuple[str, Callable[[], None]]]  # -> (what, heal)


# ------------------------------------------------------------------ the faults


def _kill(cluster: Cluster, rng: random.Random):
    broker = cluster.broker(rng.choice(BROKERS))
    broker.kill()
    return f"kill -9 broker {broker.broker_id}", broker.start


def _pause(cluster: Cluster, rng: random.Random):
    broker = cluster.broker(rng.choice(BROKERS))
    broker.pause()
    return f"pause broker {broker.broker_id}", broker.resume


def _cut_brokers(cluster: Cluster, rng: random.Random):
    victim = rng.choice(BROKERS)
    peers = rng.choice([[p] for p in BROKERS if p != victim] + [[p for p in BROKERS if p != victim]])
    for peer in peers:
        cluster.cut(victim, peer)
    return f"cut broker {victim} from brokers {peers}", lambda: [cluster.heal(victim, peer) for peer in peers]


def _cut_zookeeper(cluster: Cluster, rng: random.Random):
    victim = rng.choice(BROKERS)
    cluster.cut(victim, ZOOKEEPER)
    return f"cut broker {victim} from ZooKeeper", lambda: cluster.heal(victim, ZOOKEEPER)


def _run_schedule(cluster: Cluster, faults: list[Fault], rng: random.Random) -> list[str]:
    """FAULTS faults drawn from `faults`, one at a time, each held 2-5 s, 1-3 s apart; the log."""
    log = []
    for _ in range(FAULTS):
        what, heal = rng.choice(faults)(cluster, rng)
        held = rng.uniform(2, 5)
        log.append(f"{what} for {held:.1f} s")
        time.sleep(held)
        heal()
        time.sleep(rng.uniform(1, 3))
    return log


# ------------------------------------------------------------------ the test


@pytest.mark.parametrize(
    ("namespaces", "faults"),
    [(True, [_kill, _pause, _cut_brokers, _cut_zookeeper]), (False, [_kill, _pause])],
    ids=["namespaces-kills-pauses-cuts", "loopback-kills-pauses"],
)
def test_a_random_schedule_of_faults_loses_no_acknowledged_write(cluster_factory, namespaces, faults):
    seed = int(os.environ.get(SEED_VARIABLE) or random.randrange(2**32))
    rng = random.Random(seed)
    cluster = cluster_factory(namespaces=namespaces, overrides=_FAST_FAILURES)
    wait_formed(cluster)
    topic = unique_topic("jepsen")
    admin = admin_client(cluster.bootstrap)
    created = admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=3,
                                            config=_ACKS_ALL_TOPIC)], operation_timeout=30)
    created[topic].result(timeout=_TIMEOUT_S)
    wait_until(lambda: full_isrs(cluster, topic, PARTITIONS), _TIMEOUT_S, "the new topic with full ISRs", interval=0.3)

    workloads = {prefix: ProducerWorkload(cluster.bootstrap, topic, PARTITIONS, count=10_000, duration_s=150,
                                          rate_per_s=40, prefix=prefix, config=_ORDERED).start()
                 for prefix in PRODUCERS}
    wait_until(lambda: all(w.acked_count >= 20 for w in workloads.values()), _TIMEOUT_S, "writes before the faults")
    schedule = _run_schedule(cluster, faults, rng)
    context = f"seed {seed} ({SEED_VARIABLE}={seed} replays it), schedule: {'; '.join(schedule)}"

    cluster.heal_everything()
    wait_until(lambda: full_isrs(cluster, topic, PARTITIONS), _TIMEOUT_S, f"every replica back in the ISR; {context}",
               interval=0.5)
    acked_at_heal = sum(w.acked_count for w in workloads.values())
    wait_until(lambda: sum(w.acked_count for w in workloads.values()) >= acked_at_heal + 60, _TIMEOUT_S,
               f"writes acknowledged after the heal; {context}")
    histories = {prefix: workload.stop() for prefix, workload in workloads.items()}

    read = read_topic(cluster.bootstrap, topic, PARTITIONS, timeout_s=_TIMEOUT_S)
    assert all(read[p] for p in range(PARTITIONS)), f"a partition read empty: {context}"
    written = {value for history in histories.values() for value in history.sent}
    nobody_wrote = [v for records in read.values() for _, v in records if v not in written]
    assert not nobody_wrote, f"values nobody wrote {nobody_wrote[:3]}; {context}"
    for prefix, history in histories.items():
        verdict = check(history, by_producer(read, prefix))
        assert verdict.valid, f"producer {prefix}: {verdict}; {context}"
        assert not (backwards := offsets_going_backwards(history)), f"producer {prefix}: {backwards[:3]}; {context}"
    twice = offsets_acked_twice(histories.values())
    assert not twice, f"offsets acknowledged to two values {list(twice.items())[:3]}; {context}"
    for partition in range(PARTITIONS):
        try:
            wait_until(lambda: replicas_identical(cluster, topic, partition) is None, _TIMEOUT_S,
                       f"partition {partition}'s replicas identical", interval=0.5)
        except TimeoutError:
            differ = replicas_identical(cluster, topic, partition)
            raise AssertionError(f"partition {partition}: {differ}; {context}") from None
    assert sum(len(h.acked) for h in histories.values()) >= 300, context
