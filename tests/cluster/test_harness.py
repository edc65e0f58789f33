"""The cluster harness does what the fault tests will rely on: a real ZooKeeper that answers,
brokers started with zookeeper.connect that answer over the wire, kill -9, pause/resume,
restart and clean stops, ZooKeeper sessions that really end (by expiry, by a long pause, by a
cut from ZooKeeper), and in namespace mode network cuts that really stop TCP between two hosts
until healed, leaving nothing behind. Every wait is bounded."""

import errno
import json
import os
import socket
import subprocess
import uuid
from pathlib import Path

import pytest
from kazoo.client import KazooState

from broker.local_cluster import BrokerServer
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from tests.cluster.harness import (
    BROKER_PORT,
    ZOOKEEPER,
    ZOOKEEPER_PORT,
    Network,
    api_versions_error,
    expire_session,
    expire_sessions_of,
    kazoo_client,
    live_sessions,
    namespaces_unavailable,
    process_sessions,
    read_frame,
    send_api_versions,
    wait_until,
)
from tests.kafka_wire import decode_response

WAIT_S = 20


def cluster_id(broker: BrokerServer) -> str:
    """The cluster id the broker keeps in its log dir, once it has agreed on it with ZooKeeper
    (after its listener answers)."""
    path = broker.data_dirs[0] / "logway-metadata.json"
    wait_until(path.exists, WAIT_S, f"{path} to be written")
    return json.loads(path.read_text())["cluster_id"]


# ------------------------------------------------------------------ ZooKeeper and brokers


def test_zookeeper_answers_a_kazoo_client(zookeeper):
    assert zookeeper.ruok(timeout=WAIT_S)  # a loaded machine can take over a second
    with kazoo_client(zookeeper.connect_string) as client:
        path = f"/harness-{uuid.uuid4().hex}"
        client.create(path, b"hello", makepath=True)
        assert client.get(path)[0] == b"hello"
        client.delete(path)


def test_brokers_start_with_zookeeper_connect_and_answer_api_versions(cluster):
    with cluster.zookeeper_client(chroot="") as client:
        assert client.exists(cluster.chroot)
    for broker in cluster.brokers.values():
        assert broker.settings["zookeeper.connect"] == cluster.zookeeper_connect
        command_line = open(f"/proc/{broker.pid}/cmdline", "rb").read().split(b"\0")
        assert f"zookeeper.connect={cluster.zookeeper_connect}".encode() in command_line
        assert api_versions_error(broker.host, broker.port) == ErrorCode.none
        assert "Unknown broker config" not in broker.log()
    assert len({broker.port for broker in cluster.brokers.values()}) == 3
    assert len({str(dir) for broker in cluster.brokers.values() for dir in broker.data_dirs}) == 3


def test_brokers_run_the_packages_the_suites_other_brokers_run(cluster):
    """With LOGWAY_BROKER_PACKAGES (in CI the compiled build, .ci/run-tests), a cluster's brokers
    import that directory's packages, as tests/harness.py's brokers do; without it the
    worktree's. Each broker's start line names its build."""
    packages = os.environ.get("LOGWAY_BROKER_PACKAGES")
    compiled = packages is not None and any(Path(packages).glob("broker/*.so"))
    build = "modules compiled with mypyc)" if compiled else "(pure Python)"
    for broker in cluster.brokers.values():
        assert build in broker.log(), broker.log()[-2000:]


def test_clusters_sharing_a_zookeeper_live_in_their_own_chroots(cluster_factory):
    first, second = cluster_factory(brokers=1), cluster_factory(brokers=1)
    assert first.zookeeper is second.zookeeper
    assert first.chroot != second.chroot
    assert first.broker(1).settings["zookeeper.connect"] != second.broker(1).settings["zookeeper.connect"]


def test_pause_stops_answers_and_resume_brings_them(cluster_factory):
    broker = cluster_factory(brokers=1).broker(1)
    broker.pause()
    with socket.create_connection((broker.host, broker.port), timeout=1) as sock:
        send_api_versions(sock)  # the kernel takes the connection and the bytes
        with pytest.raises(TimeoutError):
            read_frame(sock)
        broker.resume()
        sock.settimeout(WAIT_S)
        assert decode_response(ApiKey.API_VERSIONS, 3, read_frame(sock)).error_code == ErrorCode.none


def test_kill_then_start_on_the_same_port_and_data(cluster_factory):
    broker = cluster_factory(brokers=1).broker(1)
    identity = cluster_id(broker)
    broker.kill()
    assert broker.returncode == -9
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((broker.host, broker.port), timeout=2)
    broker.start()
    assert api_versions_error(broker.host, broker.port) == ErrorCode.none
    assert cluster_id(broker) == identity


def test_restart_and_stop_are_clean(cluster_factory):
    broker = cluster_factory(brokers=1).broker(1)
    broker.restart()
    assert broker.log().count("stopped cleanly") == 1
    assert api_versions_error(broker.host, broker.port) == ErrorCode.none
    assert broker.stop() == 0
    assert broker.log().count("stopped cleanly") == 2
    assert not broker.running


def test_cuts_need_namespace_mode(cluster_factory):
    cluster = cluster_factory(brokers=1)
    with pytest.raises(RuntimeError, match="namespace mode"):
        cluster.cut(1, ZOOKEEPER)


# ------------------------------------------------------------------ ZooKeeper sessions


def test_expire_session_ends_the_session_of_a_kazoo_client(zookeeper):
    states = []
    with kazoo_client(zookeeper.connect_string) as client, kazoo_client(zookeeper.connect_string) as watcher:
        client.add_listener(states.append)
        path = f"/harness-{uuid.uuid4().hex}"
        client.create(path, ephemeral=True)
        session_id = client.client_id[0]
        assert watcher.exists(path)
        # The harness finds the session from outside, as it will a broker's.
        assert session_id in process_sessions(zookeeper, os.getpid())
        expire_session(zookeeper, session_id)
        assert session_id not in live_sessions(zookeeper)
        assert watcher.exists(path) is None
        wait_until(lambda: KazooState.LOST in states, WAIT_S, "the client to learn its session expired")


def test_expire_sessions_of_a_process(cluster_factory):
    cluster = cluster_factory(brokers=1)
    probe = cluster.start_probe(1, "/probe")
    with cluster.zookeeper_client() as watcher:
        assert watcher.exists("/probe")
        assert expire_sessions_of(cluster.zookeeper, probe) == {probe.session_id}
        assert watcher.exists("/probe") is None
    lost = probe.wait_for("^state LOST$", WAIT_S)
    probe.wait_for("^state CONNECTED$", WAIT_S, after=probe.events().index(lost.string))


def test_expire_session_of_a_broker(cluster):
    try:
        sessions = cluster.expire_session(1, timeout=3)
    except TimeoutError:
        pytest.skip("brokers do not hold ZooKeeper sessions yet (issue 5: the controller and replication)")
    assert not sessions & live_sessions(cluster.zookeeper)
    assert api_versions_error(cluster.broker(1).host, cluster.broker(1).port) == ErrorCode.none


def test_a_pause_longer_than_the_session_timeout_expires_the_session(cluster_factory):
    cluster = cluster_factory(brokers=1)
    probe = cluster.start_probe(1, "/paused", session_timeout_ms=2000)
    probe.pause()
    wait_until(lambda: probe.session_id not in live_sessions(cluster.zookeeper), WAIT_S,
               "ZooKeeper to expire the paused client's session")
    with cluster.zookeeper_client() as watcher:
        assert watcher.exists("/paused") is None
    probe.resume()
    probe.wait_for("^state LOST$", WAIT_S)


# ------------------------------------------------------------------ namespace mode


def test_every_host_has_its_namespace_and_address(cluster_factory):
    cluster = cluster_factory(brokers=3, namespaces=True)
    addresses = {host.address for host in cluster.hosts.values()}
    assert len(addresses) == 4 and all(address.startswith("10.213.") for address in addresses)
    assert cluster.zookeeper.port == ZOOKEEPER_PORT
    for name, server in [(ZOOKEEPER, cluster.zookeeper), *cluster.brokers.items()]:
        identify = subprocess.run(["ip", "netns", "identify", str(server.pid)], capture_output=True, text=True)
        assert identify.stdout.strip() == cluster.host(name).namespace
    for broker in cluster.brokers.values():
        assert broker.port == BROKER_PORT
        assert api_versions_error(broker.host, broker.port) == ErrorCode.none  # from the test's own namespace, via the bridge


def test_a_cut_stops_tcp_between_two_hosts_and_heal_restores_it(cluster_factory):
    cluster = cluster_factory(brokers=3, namespaces=True)
    assert cluster.can_connect(1, 2, BROKER_PORT)
    cluster.cut(1, 2)
    assert not cluster.can_connect(1, 2, BROKER_PORT)
    assert not cluster.can_connect(2, 1, BROKER_PORT)
    assert cluster.can_connect(1, 3, BROKER_PORT)
    assert cluster.can_connect(3, 2, BROKER_PORT)
    assert cluster.can_connect(2, ZOOKEEPER, ZOOKEEPER_PORT)
    cluster.heal(1, 2)
    assert cluster.can_connect(1, 2, BROKER_PORT)
    assert cluster.can_connect(2, 1, BROKER_PORT)


def test_a_client_host_can_be_cut_off_and_heal_all_restores_every_cut(cluster_factory):
    cluster = cluster_factory(brokers=2, namespaces=True)
    cluster.add_host("client")
    assert cluster.can_connect("client", 1, BROKER_PORT)
    cluster.cut("client", 1)
    cluster.cut(2, ZOOKEEPER)
    assert not cluster.can_connect("client", 1, BROKER_PORT)
    assert cluster.can_connect("client", 2, BROKER_PORT)
    assert not cluster.can_connect(2, ZOOKEEPER, ZOOKEEPER_PORT)
    cluster.heal_all()
    assert cluster.can_connect("client", 1, BROKER_PORT)
    assert cluster.can_connect(2, ZOOKEEPER, ZOOKEEPER_PORT)


def test_a_cut_from_zookeeper_loses_the_session_of_a_client_on_that_host(cluster_factory):
    cluster = cluster_factory(brokers=2, namespaces=True)
    cut_off = cluster.start_probe(1, "/cut-off", session_timeout_ms=2000)
    bystander = cluster.start_probe(2, "/bystander", session_timeout_ms=10000)  # no spurious suspension on a busy machine
    cluster.cut(1, ZOOKEEPER)
    cut_off.wait_for("^state SUSPENDED$", WAIT_S)
    wait_until(lambda: cut_off.session_id not in live_sessions(cluster.zookeeper), WAIT_S,
               "ZooKeeper to expire the session of the client cut off")
    with cluster.zookeeper_client() as watcher:
        assert watcher.exists("/cut-off") is None
        assert watcher.exists("/bystander")
    cluster.heal(1, ZOOKEEPER)
    lost = cut_off.wait_for("^state LOST$", WAIT_S)
    cut_off.wait_for("^state CONNECTED$", WAIT_S, after=cut_off.events().index(lost.string))
    assert bystander.events().count("state SUSPENDED") == 0
    assert bystander.session_id in live_sessions(cluster.zookeeper)


def test_close_removes_namespaces_and_interfaces_after_a_failed_start(cluster_factory):
    cluster = cluster_factory(brokers=1, namespaces=True, overrides={"num.partitions": "many"}, start=False)
    with pytest.raises(RuntimeError, match="broker 1 exited"):
        cluster.start()
    index = cluster.network.index
    cluster.close()
    assert f"logway-{index}-" not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"lw{index}-" not in subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout


@pytest.mark.skipif(namespaces_unavailable() is not None, reason=str(namespaces_unavailable()))
def test_a_network_left_by_a_killed_run_is_removed_by_the_next_on_its_index():
    abandoned = Network.create()
    abandoned.add_host("left")
    abandoned._release()  # a killed test process: its lock goes, its namespaces stay
    network = Network.create(index=abandoned.index)
    try:
        assert network._namespaces() == []
        assert network._interfaces() == [network.bridge]
        network.add_host("left")  # the names are free again
    finally:
        network.destroy()
    assert network._namespaces() == [] and network._interfaces() == []


@pytest.mark.skipif(namespaces_unavailable() is not None, reason=str(namespaces_unavailable()))
def test_the_address_of_a_destroyed_network_is_unreachable_not_routed_out():
    network = Network.create()
    address = network.add_host("gone").address
    network.destroy()
    with pytest.raises(OSError) as refused:
        socket.create_connection((address, 9092), timeout=5).close()
    assert refused.value.errno == errno.EHOSTUNREACH
