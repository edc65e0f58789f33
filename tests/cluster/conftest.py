"""Fixtures of the cluster tests: real ZooKeeper and broker processes (tests/cluster/harness.py).

- `zookeeper`: one ZooKeeper per test module (and xdist worker) on a free loopback port; the
  loopback clusters of the module share it, each in its own chroot.
- `cluster_factory(brokers=3, namespaces=False, overrides=None, start=True)`: a Cluster whose
  data and logs are under the test's tmp_path; every cluster is closed at the end (processes
  killed, namespaces removed), whatever the test did. `namespaces=True` skips the test, with
  the reason, where network namespaces cannot be made (not root).
- `cluster`: three brokers in loopback mode, started, each knowing the others and the controller.

A broker log with a Python traceback fails the test at teardown: brokers must not crash,
whatever the fault.
"""

import contextlib
from collections.abc import Callable, Mapping

import pytest

from broker.local_cluster import ZooKeeperServer
from tests.cluster.clients import SMALL_INDEXES, wait_formed
from tests.cluster.harness import TICK_MS, Cluster, namespaces_unavailable

ClusterFactory = Callable[..., Cluster]


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory) -> ZooKeeperServer:
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper") / "zookeeper", tick_ms=TICK_MS)
    server.start()
    yield server
    server.kill()


@pytest.fixture
def cluster_factory(tmp_path, request) -> ClusterFactory:
    clusters: list[Cluster] = []

    def create(
        brokers: int = 3,
        *,
        namespaces: bool = False,
        overrides: Mapping[str, str] | None = None,
        start: bool = True,
    ) -> Cluster:
        if namespaces and (reason := namespaces_unavailable()):
            pytest.skip(reason)
        cluster = Cluster.create(
            tmp_path / f"cluster-{len(clusters)}",
            brokers=brokers,
            namespaces=namespaces,
            zookeeper=None if namespaces else request.getfixturevalue("zookeeper"),
            overrides=overrides,
        )
        clusters.append(cluster)
        return cluster.start() if start else cluster

    yield create
    with contextlib.ExitStack() as closing:  # closes every cluster, even if one close fails
        for cluster in clusters:
            closing.callback(cluster.close)
    for cluster in clusters:
        for broker in cluster.brokers.values():
            assert "Traceback" not in broker.log(), f"{broker.name} ({broker.log_path}):\n{broker.log()[-5000:]}"


@pytest.fixture
def cluster(cluster_factory) -> Cluster:
    """Three brokers that all know each other and the controller (listening comes before
    joining the cluster)."""
    cluster = cluster_factory(overrides=SMALL_INDEXES)
    wait_formed(cluster)
    return cluster
