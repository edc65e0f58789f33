"""logway-mirror between two three-broker clusters, each through ZooKeeper (two chroots of the
module's ZooKeeper): while records are written to A, the leader of a source partition is killed
(kill -9) and comes back, and the mirror is killed twice and restarted; a read_committed reader
of B then finds every record of A once, in order, partition by partition."""

import threading
import time

import pytest

from tests.cluster.clients import SMALL_INDEXES, TIMEOUT_S, agreed_view, create_topic, wait_formed
from tests.cluster.harness import wait_until
from tests.mirror_support import Mirror, exactly_once_in_order, mirror_properties, produce_numbered, wait_until_mirrored

pytestmark = pytest.mark.slow

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
