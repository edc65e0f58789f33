"""The failures the design documents require the cluster to survive (DIGEST.md 003, issue 5),
each under a bounded acks=all producer (tests/cluster/workload.py) on a three-broker topic with
three replicas and min.insync.replicas=2, and judged at the end by the checker
(tests/cluster/checker.py): no acknowledged record lost or moved, nothing nobody wrote, order
kept per partition; then, once every broker is back and in the ISR and the logs stopped moving,
every replica's partition directory holds the same batches, byte for byte.

- a follower cut off from the other brokers but not from ZooKeeper: its leader takes it out of
  the ISR after replica.lag.time.max.ms (in ZooKeeper and in Metadata), acks=all goes on with
  two in-sync replicas, and after the heal the follower catches up and rejoins;
- a leader cut off from ZooKeeper and from the other brokers: its session expires, the
  controller elects another ISR member, the old leader commits nothing more, clients move, and
  back it follows and truncates to the new leader by epoch;
- the controller losing ZooKeeper (session expiry, kill -9, /controller deleted by hand): a new
  controller with a higher epoch, requests with the old epoch fenced, topics still created and
  written;
- a controller whose ZooKeeper connection drops and comes back within its session: it still
  sees brokers die (kazoo forgets watches with the connection);
- repeated kill -9 and restart of the leader under load (loopback and namespace mode);
- too few in-sync replicas: acks=all refused (NOT_ENOUGH_REPLICAS); the last in-sync replica
  dead and unclean election off: the partition waits offline for it, nothing lost;
- acks=1 with unclean.leader.election.enable: the loss that setting allows, documented.

Network cuts need namespace mode (root); those tests are skipped with the reason elsewhere."""

import asyncio
import datetime
import json
import time

import pytest
from confluent_kafka.admin import NewTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.legacy import StopReplicaRequest, StopReplicaTopic
from protocol.records import Record, build_batch
from replication.broker_client import BrokerClient
from tests.cluster.checker import History, Verdict, check, partition_batches, replicas_agree, values_in
from tests.cluster.clients import admin_client, topic_view, wait_formed, zk_controller_or_none
from tests.cluster.harness import ZOOKEEPER, Cluster, wait_until
from tests.cluster.workload import ProducerWorkload, read_topic
from tests.harness import unique_topic

pytestmark = pytest.mark.slow

_TIMEOUT_S = 45
BROKERS = (1, 2, 3)
# Faults show quickly: followers leave the ISR after 2 s behind, sessions end 4 s after contact
# is lost (ZooKeeper's tick is 500 ms in the harness: 4 s is within its 1-10 s).
_FAST_FAILURES = {
    "replica.lag.time.max.ms": "2000",
    "zookeeper.session.timeout.ms": "4000",
    "log.index.size.max.bytes": "65536",
}
_ACKS_ALL_TOPIC = {"min.insync.replicas": "2"}
# What a leader that cannot replicate may answer an acks=all write: anything but success.
_CANNOT_COMMIT = {
    ErrorCode.request_timed_out,
    ErrorCode.not_leader_or_follower,
    ErrorCode.not_enough_replicas,
    ErrorCode.not_enough_replicas_after_append,
}


# ------------------------------------------------------------------ cluster, topic, ZooKeeper


def _formed_cluster(cluster_factory, *, namespaces: bool, overrides: dict | None = None) -> Cluster:
    cluster = cluster_factory(namespaces=namespaces, overrides={**_FAST_FAILURES, **(overrides or {})})
    wait_formed(cluster)
    return cluster


def _create_topic(cluster: Cluster, name: str, replicas: list[int], config: dict | None = None) -> str:
    """A one-partition topic on `replicas` (the first leads), in sync everywhere."""
    topic = unique_topic(name)
    admin = admin_client(cluster.bootstrap)
    created = admin.create_topics(
        [NewTopic(topic, num_partitions=1, replica_assignment=[replicas], config=config or _ACKS_ALL_TOPIC)],
        operation_timeout=30,
    )
    created[topic].result(timeout=_TIMEOUT_S)
    _wait_state(cluster, topic, lambda s: s["leader"] == replicas[0] and sorted(s["isr"]) == sorted(replicas),
                "the new topic led by its first replica with a full ISR")
    return topic


def _state(cluster: Cluster, topic: str) -> dict | None:
    """Partition 0's state znode (leader, leader_epoch, isr, controller_epoch)."""
    with cluster.zookeeper_client() as zk:
        found = zk.exists(f"/brokers/topics/{topic}/partitions/0/state")
        return json.loads(zk.get(f"/brokers/topics/{topic}/partitions/0/state")[0]) if found else None


def _wait_state(cluster: Cluster, topic: str, condition, what: str, timeout: float = _TIMEOUT_S) -> dict:
    return wait_until(lambda: (state := _state(cluster, topic)) and condition(state) and state, timeout, what,
                      interval=0.2)


def _controller(cluster: Cluster) -> tuple[int, int]:
    return wait_until(lambda: zk_controller_or_none(cluster), _TIMEOUT_S, "a controller")


def _metadata_isr(cluster: Cluster, broker_id: int, topic: str) -> tuple[int, ...] | None:
    described = topic_view(cluster.broker(broker_id).bootstrap, topic)
    return tuple(sorted(described[0][2])) if described else None


def _broker_epoch(cluster: Cluster, broker_id: int) -> int | None:
    """The czxid of the broker's registration, None while it has none."""
    with cluster.zookeeper_client() as zk:
        registration = zk.exists(f"/brokers/ids/{broker_id}")
    return registration.czxid if registration else None


# ------------------------------------------------------------------ load and verdict


def _workload(cluster: Cluster, topic: str, *, prefix: str = "w", count: int = 20_000, config=None) -> ProducerWorkload:
    return ProducerWorkload(cluster.bootstrap, topic, 1, count=count, duration_s=90, rate_per_s=100,
                            prefix=prefix, config=config).start()


def _wait_for_acks(workload: ProducerWorkload, more: int, what: str, timeout: float = _TIMEOUT_S) -> int:
    """Wait until `more` writes more than now are acknowledged; returns the new count."""
    target = workload.acked_count + more
    wait_until(lambda: workload.acked_count >= target, timeout, f"{more} more acknowledged writes {what}")
    return workload.acked_count


def _quiesce(cluster: Cluster, topics: list[str]) -> None:
    """Every cut healed, every broker running, every topic's ISR full in ZooKeeper and in every
    broker's Metadata."""
    if cluster.network is not None:
        cluster.heal_all()
    for broker in cluster.brokers.values():
        if broker.paused:
            broker.resume()
        if not broker.running:
            broker.start()
    for topic in topics:
        _wait_state(cluster, topic, lambda s: sorted(s["isr"]) == list(BROKERS) and s["leader"] in BROKERS,
                    f"{topic}: every replica back in the ISR", timeout=60)
        for broker_id in BROKERS:
            wait_until(lambda: _metadata_isr(cluster, broker_id, topic) == BROKERS, _TIMEOUT_S,
                       f"broker {broker_id}'s Metadata: {topic} with a full ISR")


def _verdict(cluster: Cluster, topic: str, history: History) -> Verdict:
    return check(history, read_topic(cluster.bootstrap, topic, 1, timeout_s=_TIMEOUT_S))


def _assert_replicas_identical(cluster: Cluster, topic: str) -> None:
    """Once the followers fetched everything: the same batches, byte for byte, on every replica
    (compared below the shortest log until the logs end alike)."""
    dirs = [str(cluster.broker(b).data_dirs[0] / f"{topic}-0") for b in BROKERS]

    def identical() -> bool:
        return replicas_agree(dirs) is None and len({len(partition_batches(d)) for d in dirs}) == 1

    try:
        wait_until(identical, _TIMEOUT_S, f"{topic}: every replica's log the same", interval=0.5)
    except TimeoutError:
        lengths = {d: len(partition_batches(d)) for d in dirs}
        raise AssertionError(f"{topic}: {replicas_agree(dirs)}; batches per replica {lengths}") from None


def _assert_nothing_lost(cluster: Cluster, topic: str, workload: ProducerWorkload, *, at_least: int) -> History:
    history = workload.stop()
    _quiesce(cluster, [topic])
    verdict = _verdict(cluster, topic, history)
    assert verdict.valid, verdict
    assert len(history.acked) >= at_least
    _assert_replicas_identical(cluster, topic)
    return history


def _produce_directly(broker, topic: str, value: bytes, timeout_ms: int) -> ErrorCode:
    """One acks=all record sent straight to `broker` for partition 0, whatever the metadata says;
    the partition's error code."""
    batch = build_batch([Record(0, int(time.time() * 1000), None, value)])
    request = _produce_request(topic, batch, timeout_ms)
    response = _call(broker, ApiKey.PRODUCE, 9, request, timeout_s=timeout_ms / 1000 + 15)
    return response.responses[0].partition_responses[0].error_code


def _produce_request(topic: str, batch: bytes, timeout_ms: int) -> ProduceRequest:
    return ProduceRequest(
        transactional_id=None, acks=-1, timeout=datetime.timedelta(milliseconds=timeout_ms),
        topic_data=(TopicProduceData(name=topic, partition_data=(PartitionProduceData(index=0, records=batch),)),),
    )


def _call(broker, api_key: ApiKey, version: int, request, timeout_s: float = 30):
    async def call():
        client = BrokerClient(broker.host, broker.port, "fault-test", connect_timeout_s=5, request_timeout_s=timeout_s)
        try:
            return await client.send(api_key, version, request)
        finally:
            await client.close()

    return asyncio.run(call())


# ------------------------------------------------------------------ 1. a follower cut off from its peers


def test_a_follower_cut_off_from_the_brokers_leaves_the_isr_and_rejoins_after_the_heal(cluster_factory):
    cluster = _formed_cluster(cluster_factory, namespaces=True)
    controller, _ = _controller(cluster)
    leader = next(b for b in BROKERS if b != controller)
    follower = next(b for b in BROKERS if b not in (controller, leader))
    other = controller  # the follower that stays connected
    topic = _create_topic(cluster, "follower-cut", [leader, other, follower])
    workload = _workload(cluster, topic)
    _wait_for_acks(workload, 100, "before the cut")

    for peer in (leader, other):
        cluster.cut(follower, peer)
    shrunk = _wait_state(cluster, topic, lambda s: sorted(s["isr"]) == sorted((leader, other)),
                         "the leader takes the cut-off follower out of the ISR in ZooKeeper")
    assert shrunk["leader"] == leader
    for broker_id in (leader, other):
        wait_until(lambda: _metadata_isr(cluster, broker_id, topic) == tuple(sorted((leader, other))), _TIMEOUT_S,
                   f"broker {broker_id}'s Metadata shows the smaller ISR")
    _wait_for_acks(workload, 200, "with two in-sync replicas of three (min.insync.replicas=2)")

    cluster.heal_all()
    rejoined = _wait_state(cluster, topic, lambda s: sorted(s["isr"]) == list(BROKERS),
                           "the healed follower back in the ISR")
    assert rejoined["leader"] == leader and rejoined["leader_epoch"] == shrunk["leader_epoch"]
    _wait_for_acks(workload, 100, "after the heal")
    _assert_nothing_lost(cluster, topic, workload, at_least=400)


# ------------------------------------------------------------------ 2. a leader cut off from ZooKeeper


def test_a_leader_cut_off_from_zookeeper_is_replaced_and_truncates_to_the_new_leader(cluster_factory):
    cluster = _formed_cluster(cluster_factory, namespaces=True)
    controller, _ = _controller(cluster)
    victim = next(b for b in BROKERS if b != controller)
    others = [b for b in BROKERS if b != victim]
    topic = _create_topic(cluster, "leader-cut", [victim, *others])
    before = _state(cluster, topic)
    workload = _workload(cluster, topic)
    _wait_for_acks(workload, 100, "before the cut")

    # Cut off from ZooKeeper and from the followers' fetches; clients (this process) still reach it.
    for host in (ZOOKEEPER, *others):
        cluster.cut(victim, host)
    after = _wait_state(cluster, topic, lambda s: s["leader"] in others,
                        "the controller elects another ISR member once the session expires")
    assert after["leader_epoch"] > before["leader_epoch"]
    assert victim not in after["isr"]
    zombie = f"zombie-{topic}".encode()
    refused = _produce_directly(cluster.broker(victim), topic, zombie, timeout_ms=3000)
    assert refused in _CANNOT_COMMIT, f"the old leader answered {refused!r} to an acks=all write it cannot replicate"
    _wait_for_acks(workload, 200, "through the new leader")

    cluster.heal_all()
    history = _assert_nothing_lost(cluster, topic, workload, at_least=300)
    takeover = _epoch_start(cluster.broker(after["leader"]).data_dirs[0] / f"{topic}-0", after["leader_epoch"])
    assert any(offset >= takeover for _, offset in history.acked.values()), "no write acknowledged by the new leader"
    # Back as a follower, the old leader truncated what it alone had (the refused write with it).
    assert _state(cluster, topic)["leader"] == after["leader"]
    assert zombie not in {value for _, value in values_in(str(cluster.broker(victim).data_dirs[0] / f"{topic}-0"))}


def test_a_leader_whose_session_expired_stops_leading_until_the_controller_says(cluster_factory):
    cluster = _formed_cluster(cluster_factory, namespaces=True)
    controller, _ = _controller(cluster)
    victim = next(b for b in BROKERS if b != controller)
    others = [b for b in BROKERS if b != victim]
    topic = _create_topic(cluster, "expired-leader", [victim, *others])
    before = _state(cluster, topic)
    assert _produce_directly(cluster.broker(victim), topic, b"before", timeout_ms=10_000) == ErrorCode.none

    # Cut off from its peers, the victim never hears the controller's requests; ZooKeeper drops
    # its session, so the controller elects another leader and the victim learns of the expiry
    # (and registers again) at once.
    for host in others:
        cluster.cut(victim, host)
    cluster.expire_session(victim)
    _wait_state(cluster, topic, lambda s: s["leader"] in others and s["leader_epoch"] > before["leader_epoch"],
                "another leader elected")
    wait_until(lambda: "ZooKeeper session expired" in cluster.broker(victim).log(), _TIMEOUT_S,
               "the victim told of the expiry")
    # Nor does it name itself leader any more: clients it told so would come straight back to be
    # refused, in a tight loop (librdkafka's InitProducerId did, 900 times a second).
    assert topic_view(cluster.broker(victim).bootstrap, topic)[0][0] != victim
    zombie = f"zombie-{topic}".encode()
    assert _produce_directly(cluster.broker(victim), topic, zombie, timeout_ms=3000) == ErrorCode.not_leader_or_follower
    assert zombie not in {value for _, value in values_in(str(cluster.broker(victim).data_dirs[0] / f"{topic}-0"))}

    cluster.heal_all()
    wait_until(lambda: _produce_directly(cluster.broker(victim), topic, b"after", timeout_ms=3000)
               == ErrorCode.not_leader_or_follower and _metadata_isr(cluster, victim, topic) == tuple(sorted(BROKERS)),
               _TIMEOUT_S, "the victim back as a follower in the ISR", interval=0.5)


# ------------------------------------------------------------------ 3. the controller losing ZooKeeper


def _depose_by_session_expiry(cluster: Cluster, controller: int) -> None:
    cluster.expire_session(controller)


def _depose_by_kill(cluster: Cluster, controller: int) -> None:
    cluster.broker(controller).kill()


def _depose_by_deleting_the_znode(cluster: Cluster, controller: int) -> None:
    with cluster.zookeeper_client() as zk:
        zk.delete("/controller")


@pytest.mark.parametrize("depose", [_depose_by_session_expiry, _depose_by_kill, _depose_by_deleting_the_znode],
                         ids=["session-expiry", "kill-9", "znode-deleted"])
def test_a_controller_losing_zookeeper_is_replaced_fenced_and_the_cluster_keeps_serving(cluster_factory, depose):
    cluster = _formed_cluster(cluster_factory, namespaces=False)
    old_controller, old_epoch = _controller(cluster)
    topic = _create_topic(cluster, "controller-loss", [b for b in BROKERS if b != old_controller] + [old_controller])
    workload = _workload(cluster, topic)
    _wait_for_acks(workload, 100, "before the controller goes")

    depose(cluster, old_controller)
    new_controller, new_epoch = wait_until(
        lambda: (c := zk_controller_or_none(cluster)) and c[1] > old_epoch and c, _TIMEOUT_S,
        "a controller with a higher epoch",
    )
    if depose is _depose_by_kill:
        assert new_controller != old_controller
    live = [b for b in BROKERS if cluster.broker(b).running]
    for broker_id in live:
        wait_until(lambda: admin_client(cluster.broker(broker_id).bootstrap).list_topics(timeout=5).controller_id == new_controller,
                   _TIMEOUT_S, f"broker {broker_id} names the new controller")
    # A request from the deposed controller (its epoch) is refused, and changes nothing. The
    # target learns the new epoch from the new controller's first request: until then (and when
    # the same broker won again, its Metadata looks unchanged) only a harmless stale request is
    # sent, with no partition in it.
    target = next(b for b in live if b != new_controller)
    target_epoch = wait_until(lambda: _broker_epoch(cluster, target), _TIMEOUT_S, f"broker {target} registered")

    def stale_stop(*partitions: int):
        topics = (StopReplicaTopic(name=topic, partition_indexes=partitions),) if partitions else ()
        request = StopReplicaRequest(controller_id=old_controller, controller_epoch=old_epoch, broker_epoch=target_epoch,
                                     delete_partitions=False, topics=topics)
        return _call(cluster.broker(target), ApiKey.STOP_REPLICA, 1, request).error_code

    wait_until(lambda: stale_stop() == ErrorCode.stale_controller_epoch, _TIMEOUT_S,
               f"broker {target} fences the old controller epoch")
    assert stale_stop(0) == ErrorCode.stale_controller_epoch
    _wait_for_acks(workload, 100, "after the controller changed")

    created = _create_topic(cluster, "after-controller-loss", list(BROKERS) if depose is not _depose_by_kill else live)
    later = ProducerWorkload(cluster.bootstrap, created, 1, count=300, duration_s=30, prefix="later").start()
    later_history = later.join()
    assert len(later_history.acked) == 300
    verdict = _verdict(cluster, created, later_history)
    assert verdict.valid, verdict
    _assert_nothing_lost(cluster, topic, workload, at_least=200)
    assert _state(cluster, topic)["controller_epoch"] <= _controller(cluster)[1]


def test_a_controller_whose_zookeeper_connection_drops_within_its_session_still_sees_brokers_die(cluster_factory):
    """A connection lost and found again within the session is no election, but kazoo forgets
    its watches with the connection: the controller must still hear of a broker leaving."""
    cluster = _formed_cluster(cluster_factory, namespaces=True, overrides={"zookeeper.session.timeout.ms": "10000"})
    controller, epoch = _controller(cluster)
    victim = next(b for b in BROKERS if b != controller)
    topic = _create_topic(cluster, "controller-blip", [victim, *(b for b in BROKERS if b != victim)])
    workload = _workload(cluster, topic)
    _wait_for_acks(workload, 100, "before the blip")

    log = cluster.broker(controller).log
    suspended, connected = log().count("ZooKeeper session suspended"), log().count("ZooKeeper session connected")
    cluster.cut(controller, ZOOKEEPER)
    wait_until(lambda: log().count("ZooKeeper session suspended") > suspended, _TIMEOUT_S,
               "the controller's ZooKeeper connection to drop")
    cluster.heal(controller, ZOOKEEPER)  # well before ZooKeeper's 10 s session timeout runs out
    wait_until(lambda: log().count("ZooKeeper session connected") > connected, _TIMEOUT_S,
               "the controller reconnected")
    assert "ZooKeeper session expired" not in log()
    assert _controller(cluster) == (controller, epoch), "the session (and the controllership) should have survived"

    before = _state(cluster, topic)
    cluster.broker(victim).kill()
    after = _wait_state(cluster, topic, lambda s: s["leader"] not in (victim, -1),
                        "the controller elects a new leader when the old one's session ends")
    assert after["leader_epoch"] > before["leader_epoch"] and victim not in after["isr"]
    _wait_for_acks(workload, 100, "through the new leader")
    _assert_nothing_lost(cluster, topic, workload, at_least=200)


# ------------------------------------------------------------------ 4. repeated leader kills


@pytest.mark.parametrize("namespaces", [False, True], ids=["loopback", "namespaces"])
def test_repeated_leader_kills_under_load_lose_nothing_and_leave_identical_replicas(cluster_factory, namespaces):
    cluster = _formed_cluster(cluster_factory, namespaces=namespaces)
    topic = _create_topic(cluster, "leader-kills", list(BROKERS))
    workload = _workload(cluster, topic)
    _wait_for_acks(workload, 100, "before the first kill")
    for round_number in range(3):
        state = _state(cluster, topic)
        victim = state["leader"]
        cluster.broker(victim).kill()
        _wait_state(cluster, topic, lambda s: s["leader"] not in (victim, -1) and s["leader_epoch"] > state["leader_epoch"],
                    f"round {round_number}: a new leader after broker {victim}'s death")
        _wait_for_acks(workload, 100, f"round {round_number}: through the new leader")
        cluster.broker(victim).start()
        _wait_state(cluster, topic, lambda s: sorted(s["isr"]) == list(BROKERS),
                    f"round {round_number}: broker {victim} back in the ISR")
    _assert_nothing_lost(cluster, topic, workload, at_least=400)


# ------------------------------------------------------------------ 5. too few replicas, unclean election off


def test_with_too_few_replicas_writes_are_refused_and_without_unclean_election_the_partition_waits(cluster_factory):
    """min.insync.replicas refuses acks=all writes the ISR cannot hold; when the last in-sync
    replica dies, an out-of-sync one does not take over (unclean.leader.election.enable is
    false by default): the partition stays offline until an ISR member is back, and nothing
    acknowledged is lost."""
    cluster = _formed_cluster(cluster_factory, namespaces=False)
    leader, stale, third = BROKERS
    topic = _create_topic(cluster, "clean-only", [leader, stale, third])
    workload = _workload(cluster, topic)
    _wait_for_acks(workload, 100, "with three replicas")

    cluster.broker(stale).kill()
    cluster.broker(third).kill()
    _wait_state(cluster, topic, lambda s: s["isr"] == [leader], "the leader alone in the ISR")
    wait_until(lambda: _metadata_isr(cluster, leader, topic) == (leader,), _TIMEOUT_S, "the leader knows it is alone")
    refused = _produce_directly(cluster.broker(leader), topic, f"refused-{topic}".encode(), timeout_ms=3000)
    assert refused == ErrorCode.not_enough_replicas

    cluster.broker(leader).kill()
    cluster.broker(stale).start()
    wait_until(lambda: _broker_epoch(cluster, stale) is not None, _TIMEOUT_S, "the out-of-sync replica registered")
    offline = _wait_state(cluster, topic, lambda s: s["leader"] == -1, "the partition offline")
    time.sleep(3)  # what an unclean election would have needed; it must not happen
    assert _state(cluster, topic)["leader"] == -1
    assert offline["isr"] == [leader]

    cluster.broker(leader).start()
    _wait_state(cluster, topic, lambda s: s["leader"] == leader, "the last in-sync replica leads again")
    _assert_nothing_lost(cluster, topic, workload, at_least=100)


# ------------------------------------------------------------------ 6. unclean election, documented


def test_unclean_election_with_acks_1_may_lose_acknowledged_writes_but_invents_none(cluster_factory):
    """Kafka's documented trade: with acks=1 and unclean.leader.election.enable, a replica that
    was out of the ISR may lead, and what only the old leader had is gone. The checker must
    still find nothing nobody wrote, and the replicas end identical."""
    cluster = _formed_cluster(cluster_factory, namespaces=False)
    leader, stale, third = BROKERS
    topic = _create_topic(cluster, "unclean", [leader, stale, third],
                          config={"min.insync.replicas": "1", "unclean.leader.election.enable": "true"})
    workload = _workload(cluster, topic, config={"acks": "1"})
    _wait_for_acks(workload, 100, "with three replicas")

    cluster.broker(stale).kill()
    cluster.broker(third).kill()
    _wait_state(cluster, topic, lambda s: s["isr"] == [leader], "the leader alone in the ISR")
    _wait_for_acks(workload, 100, "by the leader alone")

    cluster.broker(leader).kill()
    cluster.broker(stale).start()
    elected = _wait_state(cluster, topic, lambda s: s["leader"] == stale, "the out-of-sync replica elected (unclean)")
    _wait_for_acks(workload, 100, "by the uncleanly elected leader")
    history = workload.stop()
    _quiesce(cluster, [topic])
    verdict = _verdict(cluster, topic, history)
    assert not verdict.unexpected, verdict
    assert not verdict.reordered, verdict
    # Lost: exactly writes the old leader had beyond the new leader's log end when it took over.
    takeover = _epoch_start(cluster.broker(stale).data_dirs[0] / f"{topic}-0", elected["leader_epoch"])
    assert verdict.lost, "the writes only the old leader had should be gone"
    assert all(offset >= takeover for _, offset in verdict.lost.values()), verdict
    _assert_replicas_identical(cluster, topic)


def _epoch_start(partition_dir, epoch: int) -> int:
    """The first offset of leader epoch `epoch` in a replica's leader-epoch-checkpoint."""
    lines = (partition_dir / "leader-epoch-checkpoint").read_text().split("\n")[2:]
    return next(int(start) for line in lines if line.strip() for found, start in [line.split()] if int(found) == epoch)
