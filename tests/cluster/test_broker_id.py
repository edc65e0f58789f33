"""Broker id generation with real broker processes and ZooKeeper: brokers started without a
broker.id get reserved.broker.max.id + a /brokers/seqid version, keep it in meta.properties
across restarts, and refuse to start with another configured broker.id."""

import json

import pytest

from tests.cluster.harness import wait_until

_TIMEOUT_S = 60


def _stored_id(broker) -> str:
    lines = (broker.data_dirs[0] / "meta.properties").read_text().splitlines()
    return next(line.split("=", 1)[1] for line in lines if line.startswith("broker.id="))


def _registered(cluster) -> set[int]:
    with cluster.zookeeper_client() as zk:
        return {int(name) for name in zk.get_children("/brokers/ids")}


def test_brokers_without_an_id_get_generated_ones_and_keep_them(cluster_factory):
    cluster = cluster_factory(3, start=False)
    for unnamed in (2, 3):
        cluster.broker(unnamed).settings["broker.id"] = "-1"
    cluster.start()
    wait_until(lambda: _registered(cluster) == {1, 1001, 1002}, _TIMEOUT_S, "brokers 1, 1001 and 1002 registered")
    generated = {_stored_id(cluster.broker(b)) for b in (2, 3)}
    assert generated == {"1001", "1002"}
    assert _stored_id(cluster.broker(1)) == "1"
    with cluster.zookeeper_client() as zk:
        assert zk.exists("/brokers/seqid").version == 2
        # A broker runs for controller once registered: the last to register may be first.
        wait_until(lambda: zk.exists("/controller") is not None, _TIMEOUT_S, "a controller")
        controller = json.loads(zk.get("/controller")[0])["brokerid"]
    assert controller in {1, 1001, 1002}

    restarted = cluster.broker(2)
    kept = _stored_id(restarted)
    restarted.restart()
    wait_until(lambda: _registered(cluster) == {1, 1001, 1002}, _TIMEOUT_S, "the restarted broker under its old id")
    assert _stored_id(restarted) == kept
    with cluster.zookeeper_client() as zk:
        assert zk.exists("/brokers/seqid").version == 2  # nothing generated for the restart

    restarted.stop()
    restarted.settings["broker.id"] = "7"
    with pytest.raises(RuntimeError):
        restarted.start(timeout=30)
    assert f"broker.id 7 is configured but the log dirs belong to broker {kept} " in restarted.log()
