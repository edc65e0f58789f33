import pytest

from broker.local_cluster import ZooKeeperServer, ZooKeeperUnavailable


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory):
    """A real ZooKeeper for the module's tests (skipped where none can run). Their clients wait
    up to 30 s to connect (`connection_timeout_ms`): on a loaded CI machine a first session took
    longer than the 6 s of their session timeouts."""
    server = ZooKeeperServer(tmp_path_factory.mktemp("zk") / "zookeeper", tick_ms=500)
    try:
        server.start()
    except ZooKeeperUnavailable as exc:
        pytest.skip(str(exc))
    yield server
    server.kill()
