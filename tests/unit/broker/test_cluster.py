"""broker.cluster against a real ZooKeeper: the broker id (stored in meta.properties,
configured, or generated from /brokers/seqid) and its check at start."""

import asyncio

import pytest

from broker import meta_properties
from broker.cluster import ClusterStartError, resolve_broker_id
from broker.server import Broker
from replication import znodes
from tests.in_process import broker_config
from tests.zookeeper_sessions import expire_session


def _cluster_config(log_dir, zookeeper, chroot: str, extra: dict | None = None):
    log_dir.mkdir(parents=True, exist_ok=True)
    return broker_config(log_dir, {
        "zookeeper.connect": f"{zookeeper.connect_string}/{chroot}",
        "zookeeper.session.timeout.ms": "6000",
        # Connecting may take longer than a session on a loaded machine (CI missed 6 s once).
        "zookeeper.connection.timeout.ms": "30000",
        "controlled.shutdown.enable": "false",
        **(extra or {}),
    })


def _run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 60))


def test_generated_ids_come_after_the_reserved_ones_and_differ(tmp_path, zookeeper):
    chroot = tmp_path.name
    first = _run(resolve_broker_id(_cluster_config(tmp_path / "a", zookeeper, chroot)))
    second = _run(resolve_broker_id(_cluster_config(tmp_path / "b", zookeeper, chroot)))
    assert (first, second) == (1001, 1002)
    third = _run(resolve_broker_id(_cluster_config(tmp_path / "c", zookeeper, chroot, {"reserved.broker.max.id": "10"})))
    assert third == 13


def test_the_stored_id_wins_and_the_configured_one_must_match_it(tmp_path, zookeeper):
    config = _cluster_config(tmp_path / "a", zookeeper, tmp_path.name)
    meta_properties.write_broker_id(config.log_dirs, 1007)
    assert _run(resolve_broker_id(config)) == 1007
    configured = _cluster_config(tmp_path / "a", zookeeper, tmp_path.name, {"broker.id": "4"})
    with pytest.raises(meta_properties.BrokerMetadataError, match="log dirs belong to broker 1007"):
        _run(resolve_broker_id(configured))


def test_without_generation_an_unset_broker_id_is_refused(tmp_path, zookeeper):
    config = _cluster_config(tmp_path / "a", zookeeper, tmp_path.name, {"broker.id.generation.enable": "false"})
    with pytest.raises(meta_properties.BrokerMetadataError, match="broker.id is not set"):
        _run(resolve_broker_id(config))


def test_a_cluster_broker_writes_its_id_and_refuses_log_dirs_of_another(tmp_path, zookeeper):
    config = _cluster_config(tmp_path / "a", zookeeper, tmp_path.name, {"broker.id": "1"})

    async def start_and_stop(broker: Broker) -> None:
        await broker.start()
        await broker.stop()

    _run(start_and_stop(Broker(config)))
    assert meta_properties.read_broker_id(config.log_dirs) == 1
    other = _cluster_config(tmp_path / "a", zookeeper, tmp_path.name, {"broker.id": "2"})
    with pytest.raises(ClusterStartError, match="log dirs belong to broker 1 "):
        _run(Broker(other).start())


def test_a_standalone_broker_keeps_its_default_id_and_writes_no_meta_properties(tmp_path):
    async def start_and_stop(broker: Broker) -> int:
        await broker.start()
        await broker.stop()
        return broker.broker_id

    assert _run(start_and_stop(Broker(broker_config(tmp_path)))) == 0
    assert not (tmp_path / meta_properties.FILE).exists()



def test_config_change_notifications_older_than_the_expiry_are_purged(tmp_path, zookeeper):
    config = _cluster_config(tmp_path / "a", zookeeper, tmp_path.name, {"broker.id": "1"})

    async def scenario() -> tuple[list[str], list[str]]:
        broker = Broker(config)
        await broker.start()
        try:
            zk = broker.cluster.zk
            path = f"{znodes.CONFIG_CHANGES}/{znodes.CONFIG_CHANGE_PREFIX}"
            old = [await zk.create(path, znodes.encode_config_change("t"), sequence=True) for _ in range(3)]
            await asyncio.sleep(0.5)
            broker.cluster.config_change_expiration_ms = 400
            new = await zk.create(path, znodes.encode_config_change("t"), sequence=True)
            deadline = asyncio.get_running_loop().time() + 20
            while any([await zk.exists(p) for p in old]) and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.05)
            return await zk.get_children(znodes.CONFIG_CHANGES), [p.rsplit("/", 1)[1] for p in old + [new]]
        finally:
            await broker.stop()

    left, created = _run(scenario())
    assert left == [created[-1]]  # the fresh one stays


def test_unclean_election_follows_the_brokers_setting_in_effect_unless_the_topic_overrides_it(tmp_path, zookeeper):
    config = _cluster_config(tmp_path / "a", zookeeper, tmp_path.name, {"broker.id": "1"})

    async def scenario() -> None:
        broker = Broker(config)
        await broker.start()
        try:
            zk = broker.cluster.zk
            await zk.create(znodes.topic_config_path("own"), znodes.encode_topic_config({"unclean.leader.election.enable": "false"}), makepath=True)
            assert await broker.cluster._topic_unclean_election("plain") is False
            # The cluster default, as another broker would have written it, then announced.
            await broker.dynamic_config.store.write("<default>", {"unclean.leader.election.enable": "true"})
            deadline = asyncio.get_running_loop().time() + 20
            while not broker.config.get("unclean.leader.election.enable") and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.05)
            assert await broker.cluster._topic_unclean_election("plain") is True
            assert await broker.cluster._topic_unclean_election("own") is False
        finally:
            await broker.stop()

    _run(scenario())


def test_a_broker_whose_session_expires_while_it_joins_joins_in_the_new_session(tmp_path, zookeeper):
    """A broker paused while it starts finds its session expired: what it set so far (the
    topic watches) went with the session, so it joins again in the new one rather than die."""
    config = _cluster_config(tmp_path / "a", zookeeper, tmp_path.name, {"broker.id": "1"})

    async def scenario():
        broker = Broker(config)
        cluster = broker.cluster
        follow_topics = cluster._follow_topics
        sessions = []

        async def follow_topics_after_an_expiry_the_first_time():
            sessions.append(cluster.zk.session_id[0])
            if len(sessions) == 1:
                await asyncio.to_thread(expire_session, zookeeper.connect_string, cluster.zk.session_id)
            await follow_topics()

        cluster._follow_topics = follow_topics_after_an_expiry_the_first_time
        await broker.start()
        try:
            _, stat = await cluster.zk.get(znodes.broker_path(1))
            return sessions, stat.ephemeral_owner, cluster.zk.session_id[0], cluster.registered
        finally:
            await broker.stop()

    sessions, owner, session, registered = _run(scenario())
    assert len(sessions) == 2 and sessions[0] != sessions[1]
    assert owner == session == sessions[1] and registered
