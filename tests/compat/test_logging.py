"""The broker's logs with real clients against a broker process: a log file rotated by size, a
request log line per request at DEBUG, JSON lines, and logger levels changed at run time through
IncrementalAlterConfigs on the BROKER_LOGGER resource (confluent-kafka's AdminClient)."""

import json
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kafka.admin import AlterConfigOp, KafkaAdminClient
from kafka.admin import ConfigResource as KpConfigResource

from tests.harness import BrokerProcess, unique_topic

pytestmark = pytest.mark.compat

TIMEOUT_S = 20


def create_topic(broker, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "socket.timeout.ms": 10_000})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(TIMEOUT_S)


def produce(broker, topic: str, count: int, client_id: str = "logging-test") -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "client.id": client_id, "linger.ms": 0})
    for i in range(count):
        producer.produce(topic, b"value-%d" % i)
        producer.flush(TIMEOUT_S)  # one Produce request per record


def request_lines(path, client_id: str) -> list[dict]:
    return [
        json.loads(line)["request"]
        for line in path.read_text().splitlines()
        if '"kafka.request.logger"' in line and f'"clientId": "{client_id}"' in line
    ]


def set_logger_level(admin: KafkaAdminClient, logger: str, level: str | None) -> str:
    """The broker's answer: "OK" or the error."""
    op = AlterConfigOp.DELETE if level is None else AlterConfigOp.SET
    resource = KpConfigResource("BROKER_LOGGER", "0", {logger: (op, level)})
    return admin.alter_configs([resource], raise_on_unknown=False, incremental=True)["broker_logger"]["0"]


def logger_levels(admin: KafkaAdminClient) -> dict[str, str]:
    described = admin.describe_configs([KpConfigResource("BROKER_LOGGER", "0")], config_filter="all")
    return {name: entry["value"] for name, entry in described["broker_logger"]["0"].items()}


def test_log_file_rotates_and_the_request_log_has_a_line_per_request(tmp_path):
    log_file = tmp_path / "logs" / "server.log"
    args = ["--log-file", str(log_file), "--log-file-max-bytes", "20000", "--log-file-backups", "3", "--log-format", "json"]
    with BrokerProcess(tmp_path / "data", log_level="DEBUG", args=args) as broker:
        topic = unique_topic("requests")
        create_topic(broker, topic)
        produce(broker, topic, 50)
        consumer = KafkaConsumer(
            topic, bootstrap_servers=broker.bootstrap, client_id="logging-reader",
            auto_offset_reset="earliest", consumer_timeout_ms=5000,
        )
        assert len(list(consumer)) == 50
        consumer.close()
        # Every line so far is JSON; the request log is in the same file at DEBUG.
        files = sorted(log_file.parent.iterdir())
        assert [f.name for f in files][:2] == ["server.log", "server.log.1"]
        assert all(f.stat().st_size <= 20000 for f in files)
        lines = [json.loads(line) for f in files for line in f.read_text().splitlines()]
        produces = [
            line["request"] for line in lines
            if line["logger"] == "kafka.request.logger" and line["request"]["api"] == "PRODUCE"
        ]
        # The files kept hold the newest lines; the last produce requests are there, one line each.
        assert produces and all(p["clientId"] == "logging-test" for p in produces)
        assert {p["principal"] for p in produces} == {"User:ANONYMOUS"}
        assert {p["listener"] for p in produces} == {"PLAINTEXT"}
        assert all(p["responseBytes"] > 0 and p["latencyMs"] >= 0 for p in produces)
        assert len({p["correlationId"] for p in produces}) == len(produces)
        fetches = [line["request"] for line in lines if line.get("request", {}).get("clientId") == "logging-reader"]
        assert any(f["api"] == "FETCH" for f in fetches)
    assert broker.log() == ""  # stderr stays empty: the logs went to the file


def test_a_logger_level_changed_at_run_time_shows_in_the_output(tmp_path):
    log_file = tmp_path / "server.log"
    args = ["--log-file", str(log_file), "--log-format", "json"]
    with BrokerProcess(tmp_path / "data", log_level="INFO", args=args) as broker:
        topic = unique_topic("levels")
        create_topic(broker, topic)
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, client_id="level-changer")
        produce(broker, topic, 3, client_id="before")
        assert logger_levels(admin)["kafka.request.logger"] == "INFO"

        assert set_logger_level(admin, "kafka.request.logger", "DEBUG") == "OK"
        assert logger_levels(admin)["kafka.request.logger"] == "DEBUG"
        produce(broker, topic, 3, client_id="during")
        assert set_logger_level(admin, "kafka.request.logger", None) == "OK"  # back to the root's INFO
        produce(broker, topic, 3, client_id="after")

        assert request_lines(log_file, "before") == []
        assert [line["api"] for line in request_lines(log_file, "during")].count("PRODUCE") == 3
        assert request_lines(log_file, "after") == []
        changes = [json.loads(line) for line in log_file.read_text().splitlines() if "log level of" in line]
        assert [c["message"] for c in changes] == [
            "Updated the log level of kafka.request.logger to DEBUG",
            "Unset the log level of kafka.request.logger",
        ]
        assert set_logger_level(admin, "root", "LOUD").startswith("[Error 40] InvalidConfigurationError")
        admin.close()


def test_a_bad_logging_config_stops_the_start_with_a_message(tmp_path):
    broker = BrokerProcess(tmp_path / "data", args=["--log-config", str(tmp_path / "missing.json")])
    with pytest.raises(RuntimeError, match="cannot use the logging configuration"):
        broker.start()
    deadline = time.monotonic() + 5
    while broker.process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert broker.process.returncode == 2


def test_the_broker_tells_systemd_when_it_is_ready_and_when_it_stops(tmp_path, monkeypatch):
    import socket

    path = str(tmp_path / "notify")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
        listener.bind(path)
        listener.settimeout(TIMEOUT_S)
        monkeypatch.setenv("NOTIFY_SOCKET", path)  # as systemd sets it for Type=notify
        broker = BrokerProcess(tmp_path / "data").start()
        try:
            assert listener.recv(100) == b"READY=1"
        finally:
            assert broker.stop() == 0
        assert listener.recv(100) == b"STOPPING=1"
