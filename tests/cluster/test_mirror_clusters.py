"""logway-mirror between two three-broker clusters, each through ZooKeeper (two chroots of the
module's ZooKeeper): while records are written to A, the leader of a source partition is killed
(kill -9) and comes back, and the mirror is killed twice and restarted; a read_committed reader
of B then finds every record of A once, in order, partition by partition. A consumer group
moved from A to B resumes from its translated offsets. In network namespaces, the mirror (on this
machine) is cut off from A, then from B, while A is written, and the cuts heal."""

import socket
import subprocess
import sys
import threading
import time

import pytest

from tests.cluster.clients import SMALL_INDEXES, TIMEOUT_S, agreed_view, create_topic, wait_formed
from tests.cluster.harness import wait_until
from tests.harness import REPO
from tests.mirror_support import (
    Mirror,
    committed,
    consume_and_commit,
    exactly_once_in_order,
    failover_problems,
    kill_mirrors,
    mirror_properties,
    produce_numbered,
    read_as_group,
    read_committed,
    wait_for_committed,
    wait_until_mirrored,
)

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _no_mirror_left_running():
    yield
    kill_mirrors()

_PARTITIONS = 3


def test_mirror_between_zookeeper_clusters_survives_a_source_leader_failover_and_its_own_kills(cluster_factory, tmp_path):
    a = cluster_factory(overrides=SMALL_INDEXES)
    b = cluster_factory(overrides=SMALL_INDEXES)
    wait_formed(a)
    wait_formed(b)
    create_topic(a, "orders", _PARTITIONS, 3, {"min.insync.replicas": "2"})
    view = wait_until(lambda: agreed_view(a, "orders", (1, 2, 3), _PARTITIONS), TIMEOUT_S, "metadata agreement")
    writer = threading.Thread(target=produce_numbered, args=(a.bootstrap, "orders", _PARTITIONS, 3000, 0.05))
    writer.start()
    mirror = Mirror(tmp_path, mirror_properties(a.bootstrap, b.bootstrap, "A->B", replication_factor=3)).start()

    time.sleep(4)
    leader, _, _ = view[0]
    a.broker(leader).kill()  # the source partition 0 fails over while the mirror reads it
    time.sleep(3)
    mirror.kill()
    mirror.start()
    time.sleep(3)
    a.broker(leader).start()
    time.sleep(2)
    mirror.kill()
    mirror.start()
    writer.join(TIMEOUT_S * 2)
    assert not writer.is_alive()

    source, target = wait_until_mirrored(a.bootstrap, "orders", b.bootstrap, "A.orders")
    assert mirror.stop() == 0
    assert sum(map(len, source.values())) >= 3000  # the producer's retries may add (librdkafka #4953)
    assert exactly_once_in_order(source, target) == [], mirror.log()[-3000:]
    assert "Traceback" not in mirror.log()


def test_a_group_moved_between_zookeeper_clusters_resumes_without_loss(cluster_factory, tmp_path):
    a = cluster_factory(overrides=SMALL_INDEXES)
    b = cluster_factory(overrides=SMALL_INDEXES)
    wait_formed(a)
    wait_formed(b)
    create_topic(a, "orders", _PARTITIONS, 3)
    settings = {"emit.checkpoints.interval.seconds": "1", "sync.group.offsets.enabled": "true", "sync.group.offsets.interval.seconds": "1"}
    text = mirror_properties(a.bootstrap, b.bootstrap, "A->B", replication_factor=3, **settings)
    mirror = Mirror(tmp_path, text).start()
    for _ in range(3):  # rounds of 50 records a partition: no mirror transaction holds more
        produce_numbered(a.bootstrap, "orders", _PARTITIONS, 150)
        wait_until_mirrored(a.bootstrap, "orders", b.bootstrap, "A.orders")
    consume_and_commit(a.bootstrap, "billing", "orders", 400)  # more than two partitions hold: all three have a position
    positions = committed(a.bootstrap, "billing")
    wait_for_committed(b.bootstrap, "billing", {("A.orders", p) for p in range(_PARTITIONS)})
    assert mirror.stop() == 0

    moved = read_as_group(b.bootstrap, "billing", "A.orders")
    assert failover_problems(read_committed(a.bootstrap, "orders"), positions, "orders", moved, max_repeats=49) == []


def _cut_from_this_machine(cluster, heal: bool = False) -> None:
    """Drop (or stop dropping) every packet between this machine's namespace, where the mirror
    runs, and the cluster's brokers: blackhole routes to the bridge's address in each broker's
    namespace. Established connections hang; the cluster's own traffic goes on."""
    here = f"{cluster.network.subnet}.1"
    for broker_id in cluster.brokers:
        namespace = cluster.host(broker_id).namespace
        command = ["ip", "-n", namespace, "route", "del" if heal else "add", "blackhole", f"{here}/32"]
        subprocess.run(command, check=True, capture_output=True, timeout=30)


def test_mirror_rides_out_network_cuts_between_the_data_centres(cluster_factory, tmp_path):
    a = cluster_factory(namespaces=True, overrides=SMALL_INDEXES)
    b = cluster_factory(namespaces=True, overrides=SMALL_INDEXES)
    wait_formed(a)
    wait_formed(b)
    create_topic(a, "orders", _PARTITIONS, 3)
    wait_until(lambda: agreed_view(a, "orders", (1, 2, 3), _PARTITIONS), TIMEOUT_S, "metadata agreement")
    # the writer lives in A's data centre: the cuts do not reach it
    writer_host = a.add_host("writer")
    script = f"from tests.mirror_support import produce_numbered; produce_numbered({a.bootstrap!r}, 'orders', {_PARTITIONS}, 5000, 0.05)"
    writer = subprocess.Popen([*writer_host.prefix, sys.executable, "-c", script], cwd=REPO)
    text = mirror_properties(a.bootstrap, b.bootstrap, "A->B", replication_factor=3, topics="orders")
    mirror = Mirror(tmp_path, text).start()
    try:
        for cluster in (a, b):  # the source cut off while it is written, then the target
            time.sleep(3)
            _cut_from_this_machine(cluster)
            with pytest.raises(OSError):  # the cut is real: no connection from here gets through
                socket.create_connection((cluster.broker(1).host, cluster.broker(1).port), timeout=2).close()
            time.sleep(6)
            _cut_from_this_machine(cluster, heal=True)
        assert writer.wait(TIMEOUT_S * 2) == 0
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    source, target = wait_until_mirrored(a.bootstrap, "orders", b.bootstrap, "A.orders")
    assert mirror.stop() == 0
    assert sum(map(len, source.values())) == 5000
    assert exactly_once_in_order(source, target) == [], mirror.log()[-3000:]
