"""docker-compose.yml describes the cluster `make cluster` runs (broker/local_cluster.py,
LocalCluster.on_loopback with three brokers): the same ZooKeeper address and tick, the same
broker ids, listeners and config keys, each broker's log dir on a volume of its own. No Docker
engine runs here, so the file is read and compared, and the Dockerfile checked for what the
compose file assumes of the image."""

import re
import shlex
import tomllib
from pathlib import Path

import pytest
import yaml

from broker.local_cluster import ZOOKEEPER_TICK_MS, LocalCluster

REPO = Path(__file__).resolve().parent.parent.parent
COMPOSE = yaml.safe_load((REPO / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
CLUSTER = LocalCluster.on_loopback(Path("/unused"), brokers=3)  # nothing is started or written
BROKERS = list(CLUSTER.brokers.values())


def overrides(service: dict) -> dict[str, str]:
    """The --override KEY=VALUE pairs of a broker service's command."""
    command = service["command"]
    assert command[:2] == ["--config", "/etc/logway/server.properties"]
    pairs = command[2:]
    assert pairs[::2] == ["--override"] * (len(pairs) // 2), command
    return dict(pair.split("=", 1) for pair in pairs[1::2])


def volume_targets(service: dict) -> dict[str, str]:
    """{container path: volume name} of a service's named volumes."""
    return {target: source for source, target in (entry.split(":")[:2] for entry in service["volumes"])}


def test_the_services_are_zookeeper_and_the_brokers():
    assert set(SERVICES) == {"zookeeper", *(f"broker-{broker.broker_id}" for broker in BROKERS)}
    assert all(service["network_mode"] == "host" for service in SERVICES.values())


def test_zookeeper_is_the_one_the_harness_runs():
    service = SERVICES["zookeeper"]
    environment = service["environment"]
    assert service["image"].startswith("zookeeper:3.8")
    client_address = environment["ZOO_SERVERS"].split(";")[1]
    assert client_address == CLUSTER.zookeeper.connect_string
    assert environment["ZOO_TICK_TIME"] == str(ZOOKEEPER_TICK_MS) == str(CLUSTER.zookeeper.tick_ms)
    assert environment["ZOO_4LW_COMMANDS_WHITELIST"] == "*"
    assert environment["ZOO_ADMINSERVER_ENABLED"] == "false"
    assert set(volume_targets(service)) == {"/data", "/datalog"}


@pytest.mark.parametrize("broker", BROKERS, ids=lambda broker: f"broker-{broker.broker_id}")
def test_each_broker_has_the_harness_settings(broker):
    service = SERVICES[f"broker-{broker.broker_id}"]
    settings = overrides(service)
    log_dir = settings.pop("log.dirs")
    expected = dict(broker.settings)
    del expected["log.dirs"]
    assert settings == expected
    assert log_dir in volume_targets(service)
    assert service["depends_on"]["zookeeper"]["condition"] == "service_healthy"
    assert service["build"] == "."


def test_every_broker_keeps_its_data_on_a_volume_of_its_own():
    volumes = [volume_targets(SERVICES[f"broker-{broker.broker_id}"]) for broker in BROKERS]
    names = [name for targets in volumes for name in targets.values()]
    assert len(set(names)) == len(BROKERS)
    assert set(names) | {"zookeeper-data", "zookeeper-datalog"} == set(COMPOSE["volumes"])


def test_the_dockerfile_makes_the_image_the_compose_file_runs():
    instructions = [
        line for line in (REPO / "Dockerfile").read_text().splitlines() if line and not line.startswith("#")
    ]
    stages = [line.split()[1] for line in instructions if line.startswith("FROM ")]
    assert stages == ["python:3.11", "python:3.11-slim"]  # the wheel is built where gcc is, run slim
    assert 'ENTRYPOINT ["logway"]' in instructions
    assert "COPY config/server.properties /etc/logway/server.properties" in instructions
    assert any(re.match(r"RUN LOGWAY_COMPILE=1 pip wheel .* \.$", line) for line in instructions)
    assert any(re.match(r"RUN pip install --no-cache-dir /wheels/\*\.whl", line) for line in instructions)
    copied = {shlex.split(line)[1] for line in instructions if line.startswith("COPY ") and "--from" not in line}
    assert "setup.py" in " ".join(line for line in instructions if line.startswith("COPY "))
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    packages = {pattern.rstrip("*") for pattern in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]}
    assert packages - {"spark_jobs"} <= copied  # every package but the Spark jobs, which are no broker's
