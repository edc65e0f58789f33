import pytest

from broker.local_cluster import ZooKeeperServer, ZooKeeperUnavailable


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory):
    """A real ZooKeeper for the module's tests (skipped where none can run)."""
    server = ZooKeeperServer(tmp_path_factory.mktemp("zk") / "zookeeper", tick_ms=500)
    try:
        server.start()
    except ZooKeeperUnavailable as exc:
        pytest.skip(str(exc))
    yield server
    server.kill()
