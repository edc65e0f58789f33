"""Fixtures of the cluster tests: real ZooKeeper and broker processes (tests/cluster/harness.py).

- `zookeeper`: one ZooKeeper per test module (and xdist worker) on a free loopback port; the
  loopback clusters of the module share it, each in its own chroot.
- `cluster_factory(brokers=3, namespaces=False, overrides=None, start=True)`: a Cluster whose
  data and logs are under the test's tmp_path; every cluster is closed at the end (processes
  killed, namespaces removed), whatever the test did. `namespaces=True` skips the test, with
  the reason, where network namespaces cannot be made (not root).
- `cluster`: three brokers in loopback mode, started, each knowing the others and the controller.

A broker log with a Python traceback fails the test at teardown: brokers must not crash,
whatever the fault. When a test fails, each broker's warnings and last lines are printed at
teardown, so that a failure seen only in CI (whose tmp_path is gone) can be read.
"""

import contextlib
import sys
from collections.abc import Callable, Mapping

import pytest

from broker.local_cluster import ZooKeeperServer
from tests.cluster.clients import SMALL_INDEXES, wait_formed
from tests.cluster.harness import TICK_MS, Cluster, namespaces_unavailable

ClusterFactory = Callable[..., Cluster]

_LAST_LINES = 40  # of each broker's log printed after a failure, besides its warnings
_PRINTED_WARNINGS = 60


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    """Keep each phase's report on the test item, for the fixtures' teardown to see."""
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


def _log_digest(log: str) -> str:
    """A broker log's WARNING and ERROR lines (the last _PRINTED_WARNINGS), then its last lines."""
    lines = log.splitlines()
    warnings = [line for line in lines if " WARNING " in line or " ERROR " in line][-_PRINTED_WARNINGS:]
    return "\n".join([*warnings, "...", *lines[-_LAST_LINES:]])


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
    call = getattr(request.node, "report_call", None)
    if call is not None and call.failed:
        for cluster in clusters:
            for broker in cluster.brokers.values():
                print(f"----- {broker.name} ({broker.log_path})\n{_log_digest(broker.log())}", file=sys.stderr)
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
