"""A failed log dir in a three-broker cluster, and the replacement of its disk, under a bounded
acks=all producer (tests/cluster/workload.py) judged by the checker (tests/cluster/checker.py).

Broker 1 has two log dirs and leads a topic of three replicas with min.insync.replicas=2. The
dir holding its replica fails: the harness swaps the directory for a regular file, so the
broker's next write there (a high watermark checkpoint, within
replica.high.watermark.checkpoint.interval.ms) fails with an I/O error, as on a dead disk. The
broker takes the dir offline, DescribeLogDirs answers KAFKA_STORAGE_ERROR for it, and the
controller, told through /log_dir_event_notification, moves the leadership to another in-sync
replica and broker 1 out of the ISR; the producer goes on. Then the procedure of
docs/operations.md ("Replacing a failed disk"): stop the broker, put an empty directory (the new
disk) in place, start it; its replica is fetched again from the leader, the ISR is full again,
and every acknowledged record is read back, the same batches on every replica.

And a follower's replica moved to the other log dir of its broker (AlterReplicaLogDirs) while
the producer writes: the follower goes on fetching into it, nothing is lost, every replica ends
with the same batches."""

import json
import shutil
from pathlib import Path

import pytest
from confluent_kafka.admin import NewTopic
from kafka.admin import KafkaAdminClient

from tests.cluster.checker import check, partition_batches, replicas_agree
from tests.cluster.clients import admin_client, topic_view, wait_formed
from tests.cluster.harness import Cluster, wait_until
from tests.cluster.workload import ProducerWorkload, read_topic
from tests.harness import unique_topic

pytestmark = pytest.mark.slow

TIMEOUT_S = 45
BROKERS = (1, 2, 3)
FAST_FAILURES = {
    "replica.lag.time.max.ms": "2000",
    "replica.high.watermark.checkpoint.interval.ms": "1000",
    "log.segment.delete.delay.ms": "500",  # a moved replica's old directory goes at once
}


def _state(cluster: Cluster, topic: str) -> dict | None:
    with cluster.zookeeper_client() as zk:
        path = f"/brokers/topics/{topic}/partitions/0/state"
        return json.loads(zk.get(path)[0]) if zk.exists(path) else None


def _wait_state(cluster: Cluster, topic: str, condition, what: str, timeout: float = TIMEOUT_S) -> dict:
    return wait_until(lambda: (state := _state(cluster, topic)) and condition(state) and state, timeout, what,
                      interval=0.2)


def _log_dir_errors(cluster: Cluster, broker_id: int) -> dict[str, int]:
    """log dir -> the error code broker `broker_id` answers DescribeLogDirs with."""
    admin = KafkaAdminClient(bootstrap_servers=cluster.broker(broker_id).bootstrap, request_timeout_ms=10_000)
    try:
        [described] = admin.describe_log_dirs(brokers=[broker_id])
    finally:
        admin.close()
    return {d["log_dir"]: d["error_code"] for d in described["log_dirs"]}


def _acked_more(workload: ProducerWorkload, more: int, what: str) -> None:
    target = workload.acked_count + more
    wait_until(lambda: workload.acked_count >= target, TIMEOUT_S, f"{more} more acknowledged writes {what}")


def _two_disks_under_load(cluster_factory, broker_id: int, label: str):
    """Three brokers, `broker_id` with two log dirs (disk-a, disk-b); a topic of one partition on
    all three, led by broker 1 with a full ISR, min.insync.replicas 2; a producer writing to it.
    Returns the cluster, the two dirs, the topic and the running workload."""
    cluster = cluster_factory(overrides=FAST_FAILURES, start=False)
    dirs = [cluster.root / f"broker-{broker_id}" / name for name in ("disk-a", "disk-b")]
    cluster.broker(broker_id).settings["log.dirs"] = ",".join(str(d) for d in dirs)
    cluster.start()
    wait_formed(cluster)
    topic = unique_topic(label)
    admin = admin_client(cluster.bootstrap)  # kept: the futures die with their client
    admin.create_topics(
        [NewTopic(topic, num_partitions=1, replica_assignment=[list(BROKERS)], config={"min.insync.replicas": "2"})],
        operation_timeout=30,
    )[topic].result(timeout=TIMEOUT_S)
    _wait_state(cluster, topic, lambda s: s["leader"] == 1 and sorted(s["isr"]) == list(BROKERS), "a full ISR led by 1")
    workload = ProducerWorkload(cluster.bootstrap, topic, 1, count=20_000, duration_s=120, rate_per_s=100).start()
    return cluster, dirs, topic, workload


def test_a_failed_log_dir_loses_its_leaderships_and_a_replaced_disk_fetches_its_replicas_again(cluster_factory):
    cluster, dirs, topic, workload = _two_disks_under_load(cluster_factory, 1, "disk")
    broker = cluster.broker(1)
    try:
        _acked_more(workload, 200, "before the failure")
        [failing] = [d for d in dirs if (d / f"{topic}-0").is_dir()]
        failing.rename(failing.with_name(failing.name + "-dead"))
        failing.write_text("a dead disk")  # every write by the dir's path now fails (ENOTDIR)

        state = _wait_state(cluster, topic, lambda s: s["leader"] in (2, 3) and 1 not in s["isr"],
                            "the leadership off broker 1 and broker 1 out of the ISR")
        assert sorted(state["isr"]) == [2, 3]
        wait_until(lambda: _log_dir_errors(cluster, 1).get(str(failing)) == 56, TIMEOUT_S,  # KAFKA_STORAGE_ERROR
                   "DescribeLogDirs: the failed dir answers KAFKA_STORAGE_ERROR")
        assert _log_dir_errors(cluster, 1)[str(dirs[1 - dirs.index(failing)])] == 0
        _acked_more(workload, 300, "after the failure")

        # The documented replacement: stop the broker, an empty dir for the new disk, start it.
        broker.stop()
        failing.unlink()
        shutil.rmtree(failing.with_name(failing.name + "-dead"))
        failing.mkdir()
        broker.start()
        _wait_state(cluster, topic, lambda s: sorted(s["isr"]) == list(BROKERS), "broker 1 back in the ISR", timeout=60)
        for broker_id in BROKERS:
            wait_until(lambda: (view := topic_view(cluster.broker(broker_id).bootstrap, topic))
                       and tuple(sorted(view[0][2])) == BROKERS, TIMEOUT_S, f"broker {broker_id}'s Metadata: a full ISR")
        _acked_more(workload, 100, "after the replacement")
    finally:
        history = workload.stop()
    verdict = check(history, read_topic(cluster.bootstrap, topic, 1, timeout_s=TIMEOUT_S))
    assert verdict.valid, verdict
    assert len(history.acked) >= 600
    assert all(d.is_dir() for d in dirs) and _log_dir_errors(cluster, 1) == {str(d): 0 for d in dirs}
    replicas = [str(next(d for d in cluster.broker(b).data_dirs if (d / f"{topic}-0").is_dir()) / f"{topic}-0")
                for b in BROKERS]

    def identical() -> bool:
        return replicas_agree(replicas) is None and len({len(partition_batches(d)) for d in replicas}) == 1

    wait_until(identical, TIMEOUT_S, "every replica's log the same", interval=0.5)


def test_a_follower_replica_moves_to_its_brokers_other_log_dir_under_load(cluster_factory):
    """AlterReplicaLogDirs on a follower: its future replica copies the log the follower goes on
    appending to from the leader, and takes its place; the follower never leaves the ISR for
    long, and every replica ends with the same batches."""
    cluster, dirs, topic, workload = _two_disks_under_load(cluster_factory, 2, "follower-move")
    follower = cluster.broker(2)
    try:
        _acked_more(workload, 300, "before the move")
        [source] = [d for d in dirs if (d / f"{topic}-0").is_dir()]
        [target] = [d for d in dirs if d != source]
        mover = KafkaAdminClient(bootstrap_servers=follower.bootstrap, request_timeout_ms=10_000)
        try:
            answer = mover.alter_replica_log_dirs({(topic, 0, 2): str(target)})
        finally:
            mover.close()
        assert [error.__name__ for error in answer.values()] == ["NoError"]
        wait_until(lambda: (target / f"{topic}-0").is_dir() and not list(source.glob(f"{topic}-0*")), TIMEOUT_S,
                   "the follower's replica in the other dir, the old one removed")
        _acked_more(workload, 300, "after the move")
        _wait_state(cluster, topic, lambda s: sorted(s["isr"]) == list(BROKERS), "a full ISR")
    finally:
        history = workload.stop()
    verdict = check(history, read_topic(cluster.bootstrap, topic, 1, timeout_s=TIMEOUT_S))
    assert verdict.valid, verdict
    replicas = [str(next(d for d in cluster.broker(b).data_dirs if (d / f"{topic}-0").is_dir()) / f"{topic}-0")
                for b in BROKERS]

    def identical() -> bool:
        return replicas_agree(replicas) is None and len({len(partition_batches(d)) for d in replicas}) == 1

    wait_until(identical, TIMEOUT_S, "every replica's log the same", interval=0.5)
