"""`python -m broker.local_cluster` (what `make cluster` runs): ZooKeeper and the brokers come
up and answer, SIGTERM stops them cleanly, a second run on the same --data finds the same
brokers, and a taken port is refused up front. Ports are free ones, not the defaults, so the
test runs next to anything."""

import json
import signal
import socket
import subprocess
import sys
from pathlib import Path

from broker.local_cluster import PACKAGE_ROOT, free_port, port_is_free
from protocol.errors import ErrorCode
from tests.cluster.harness import api_versions_error, kazoo_client, wait_until

WAIT_S = 60


def two_free_ports() -> int:
    """A port p with p + 1 free too (the brokers' consecutive ports)."""
    for _ in range(100):
        port = free_port()
        if port_is_free("127.0.0.1", port + 1):
            return port
    raise RuntimeError("no two consecutive free ports")


def run_cluster(data: Path, first_port: int, zookeeper_port: int, output: Path) -> subprocess.Popen:
    command = [sys.executable, "-m", "broker.local_cluster", "--brokers", "2", "--data", str(data),
               "--port", str(first_port), "--zookeeper-port", str(zookeeper_port)]
    with open(output, "w") as out:
        return subprocess.Popen(command, cwd=PACKAGE_ROOT, stdout=out, stderr=subprocess.STDOUT)


def cluster_id(data: Path, broker_id: int) -> str:
    return json.loads((data / f"broker-{broker_id}" / "logway-metadata.json").read_text())["cluster_id"]


def serve_until_sigterm(data: Path, first_port: int, zookeeper_port: int, output: Path) -> None:
    process = run_cluster(data, first_port, zookeeper_port, output)
    try:
        wait_until(lambda: "bootstrap: " in output.read_text() or process.poll() is not None, WAIT_S,
                   "the cluster to start")
        assert process.poll() is None, output.read_text()
        assert f"bootstrap: 127.0.0.1:{first_port},127.0.0.1:{first_port + 1}" in output.read_text()
        for port in (first_port, first_port + 1):
            assert api_versions_error("127.0.0.1", port) == ErrorCode.none
        with kazoo_client(f"127.0.0.1:{zookeeper_port}") as client:
            assert "zookeeper" in client.get_children("/")
        process.send_signal(signal.SIGTERM)
        assert process.wait(WAIT_S) == 0, output.read_text()
    finally:
        process.kill()  # its servers die with it (setpriv --pdeathsig)
        process.wait()
    for broker_id in (1, 2):
        assert (data / "logs" / f"broker-{broker_id}.log").read_text().endswith(f"broker {broker_id} stopped cleanly\n")
    assert port_is_free("127.0.0.1", zookeeper_port)


def test_runs_until_sigterm_and_comes_back_with_the_same_data(tmp_path):
    data, first_port, zookeeper_port = tmp_path / "data", two_free_ports(), free_port()
    serve_until_sigterm(data, first_port, zookeeper_port, tmp_path / "first.out")
    identities = [cluster_id(data, 1), cluster_id(data, 2)]
    serve_until_sigterm(data, first_port, zookeeper_port, tmp_path / "second.out")
    assert [cluster_id(data, 1), cluster_id(data, 2)] == identities


def test_a_taken_port_is_refused_before_anything_starts(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        zookeeper_port = taken.getsockname()[1]
        output = tmp_path / "out"
        process = run_cluster(tmp_path / "data", two_free_ports(), zookeeper_port, output)
        assert process.wait(WAIT_S) == 1
    assert f"port(s) already in use: 127.0.0.1:{zookeeper_port}" in output.read_text()
    assert not (tmp_path / "data" / "zookeeper").exists()
