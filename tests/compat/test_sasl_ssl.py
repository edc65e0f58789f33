"""SASL over TLS (listener protocol SASL_SSL) with real clients: the TLS layer under the SASL
exchange of tests/compat/test_sasl.py. confluent-kafka and kcat with PLAIN and SCRAM,
kafka-python with SCRAM, aiokafka and KafkaJS with PLAIN and SCRAM, a wrong password answered
with Kafka's message through TLS before the connection closes, and a client that does not trust
the broker's certificate."""

import shutil
import time

import confluent_kafka
import pytest
import trustme
from confluent_kafka.admin import AdminClient, NewTopic

from tests.compat.kafkajs_support import JS_DIR, KAFKAJS_MARKS
from tests.compat.test_sasl import (
    ADMIN,
    PLAIN_USER,
    SCRAM_USER,
    TIMEOUT_S,
    aiokafka_round_trip,
    create_scram_user,
    python_client_settings,
    sasl_overrides,
)
from tests.harness import BrokerProcess, free_port, run, unique_topic

pytestmark = pytest.mark.compat


@pytest.fixture(scope="module")
def ca_pem(tmp_path_factory):
    directory = tmp_path_factory.mktemp("sasl-ssl")
    ca = trustme.CA()
    (directory / "ca.pem").write_bytes(ca.cert_pem.bytes())
    (directory / "server.pem").write_bytes(ca.issue_cert("localhost", "127.0.0.1").private_key_and_cert_chain_pem.bytes())
    return directory


@pytest.fixture(scope="module")
def sasl_ssl_broker(tmp_path_factory, ca_pem):
    broker = BrokerProcess(tmp_path_factory.mktemp("sasl-ssl-broker") / "data")
    overrides = {
        key.replace("sasl_plaintext", "sasl_ssl"): value.replace("SASL_PLAINTEXT://", "SASL_SSL://")
        for key, value in sasl_overrides(broker.port).items()
    }
    broker.overrides.update({
        **overrides,
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(ca_pem / "server.pem"),
    })
    broker.start()
    create_scram_user(broker, SCRAM_USER, **{"security.protocol": "SASL_SSL", "ssl.ca.location": str(ca_pem / "ca.pem")})
    yield broker
    broker.stop()
    assert "Traceback" not in broker.log()


def settings(broker, ca_pem, mechanism: str, user: tuple[str, str]) -> dict[str, str]:
    return {
        "bootstrap.servers": broker.bootstrap,
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(ca_pem / "ca.pem"),
        "sasl.mechanisms": mechanism,
        "sasl.username": user[0],
        "sasl.password": user[1],
    }


@pytest.mark.parametrize("mechanism, user", [("PLAIN", PLAIN_USER), ("SCRAM-SHA-256", SCRAM_USER), ("SCRAM-SHA-512", SCRAM_USER)])
def test_confluent_kafka_produces_and_consumes_over_sasl_ssl(sasl_ssl_broker, ca_pem, mechanism, user):
    topic = unique_topic("sasl-ssl")
    client_settings = settings(sasl_ssl_broker, ca_pem, mechanism, user)
    producer = confluent_kafka.Producer(client_settings)
    for i in range(3):
        producer.produce(topic, f"m{i}".encode())
    assert producer.flush(TIMEOUT_S) == 0
    consumer = confluent_kafka.Consumer({**client_settings, "group.id": unique_topic("g"), "auto.offset.reset": "earliest"})
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    values = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(values) < 3 and time.monotonic() < deadline:
        message = consumer.poll(1)
        if message is not None and message.error() is None:
            values.append(message.value())
    consumer.close()
    assert values == [b"m0", b"m1", b"m2"]


def test_a_wrong_password_over_tls_gets_kafkas_message_before_the_close(sasl_ssl_broker, ca_pem):
    errors = []
    producer = confluent_kafka.Producer({
        **settings(sasl_ssl_broker, ca_pem, "PLAIN", (PLAIN_USER[0], "wrong")), "error_cb": errors.append,
    })
    deadline = time.monotonic() + TIMEOUT_S
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    assert errors and errors[0].code() == confluent_kafka.KafkaError._AUTHENTICATION
    assert "Authentication failed: Invalid username or password" in errors[0].str()


def test_a_client_that_does_not_trust_the_broker_never_reaches_sasl(sasl_ssl_broker, tmp_path):
    other_ca = tmp_path / "other-ca.pem"
    other_ca.write_bytes(trustme.CA().cert_pem.bytes())
    errors = []
    producer = confluent_kafka.Producer({
        **settings(sasl_ssl_broker, tmp_path, "PLAIN", ADMIN), "ssl.ca.location": str(other_ca), "error_cb": errors.append,
    })
    deadline = time.monotonic() + TIMEOUT_S
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    assert errors and "certificate verify failed" in errors[0].str()


def test_the_broker_wide_ssl_client_auth_asks_ssl_clients_only_for_a_certificate(tmp_path, ca_pem):
    # KIP-684: ssl.client.auth=required is the SSL listener's; password clients of a SASL_SSL
    # listener beside it need no certificate.
    broker = BrokerProcess(tmp_path / "data")
    ssl_port = free_port()
    overrides = sasl_overrides(broker.port)
    endpoints = f"SASL_SSL://127.0.0.1:{broker.port},SSL://127.0.0.1:{ssl_port}"
    broker.overrides.update({
        **{key.replace("sasl_plaintext", "sasl_ssl"): value for key, value in overrides.items()},
        "listeners": endpoints,
        "advertised.listeners": endpoints,
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(ca_pem / "server.pem"),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(ca_pem / "ca.pem"),
        "ssl.client.auth": "required",
    })
    broker.start()
    try:
        password_client = AdminClient(settings(broker, ca_pem, "PLAIN", ADMIN))
        assert broker.bootstrap.split(":")[1] in str(password_client.list_topics(timeout=TIMEOUT_S).brokers)
        certificate_less = AdminClient({"bootstrap.servers": f"127.0.0.1:{ssl_port}", "security.protocol": "SSL",
                                        "ssl.ca.location": str(ca_pem / "ca.pem")})
        with pytest.raises(confluent_kafka.KafkaException):
            certificate_less.list_topics(timeout=5)
    finally:
        broker.stop()


def test_kafka_python_with_scram_over_sasl_ssl(sasl_ssl_broker, ca_pem):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = unique_topic("sasl-ssl-kp")
    client_settings = {
        **python_client_settings("SCRAM-SHA-256"), "security_protocol": "SASL_SSL", "ssl_cafile": str(ca_pem / "ca.pem"),
    }
    producer = KafkaProducer(bootstrap_servers=sasl_ssl_broker.bootstrap, **client_settings)
    producer.send(topic, b"hello").get(timeout=TIMEOUT_S)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=sasl_ssl_broker.bootstrap, consumer_timeout_ms=10_000, **client_settings)
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    assert [m.value for m in consumer][:1] == [b"hello"]
    consumer.close()


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (.ci/setup test)")
def test_kcat_with_scram_over_sasl_ssl(sasl_ssl_broker, ca_pem):
    topic = unique_topic("sasl-ssl-kcat")
    options = [
        arg for key, value in settings(sasl_ssl_broker, ca_pem, "SCRAM-SHA-512", SCRAM_USER).items()
        if key != "bootstrap.servers" for arg in ("-X", f"{key}={value}")
    ]
    base = ["kcat", "-b", sasl_ssl_broker.bootstrap, "-q", *options]
    produced = run([*base, "-P", "-t", topic], timeout=TIMEOUT_S, input=b"one\ntwo\n")
    assert produced.returncode == 0, produced.stderr
    consumed = run([*base, "-C", "-t", topic, "-o", "beginning", "-e"], timeout=TIMEOUT_S)
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.decode().split() == ["one", "two"]


def create_topic(broker, ca_pem, topic: str) -> None:
    admin = AdminClient(settings(broker, ca_pem, "PLAIN", ADMIN))
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(timeout=TIMEOUT_S)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_aiokafka_over_sasl_ssl(sasl_ssl_broker, ca_pem, mechanism):
    from aiokafka.helpers import create_ssl_context

    topic = unique_topic("sasl-ssl-aio")
    create_topic(sasl_ssl_broker, ca_pem, topic)
    settings = {
        "bootstrap_servers": sasl_ssl_broker.bootstrap, **python_client_settings(mechanism),
        "security_protocol": "SASL_SSL", "ssl_context": create_ssl_context(cafile=str(ca_pem / "ca.pem")),
    }
    assert aiokafka_round_trip(topic, **settings) == b"hello"


@KAFKAJS_MARKS[1]  # node installed
@KAFKAJS_MARKS[2]  # kafkajs installed
@pytest.mark.parametrize("mechanism", ["plain", "scram-sha-512"])
def test_kafkajs_over_sasl_ssl(sasl_ssl_broker, ca_pem, mechanism, monkeypatch):
    topic = unique_topic("sasl-ssl-js")
    create_topic(sasl_ssl_broker, ca_pem, topic)
    name, password = SCRAM_USER if mechanism.startswith("scram") else PLAIN_USER
    monkeypatch.setenv("SASL_SSL_CA", str(ca_pem / "ca.pem"))
    result = run(["node", str(JS_DIR / "sasl.js"), sasl_ssl_broker.bootstrap, mechanism, name, password, topic, "a", "b"], timeout=60)
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    assert result.stdout.decode().strip() == '{"produced":[0],"offsets":[2]}'


@KAFKAJS_MARKS[1]  # node installed
@KAFKAJS_MARKS[2]  # kafkajs installed
def test_kafkajs_without_the_ca_is_refused_over_sasl_ssl(sasl_ssl_broker, tmp_path, monkeypatch):
    # The same script, trusting another CA: TLS fails before SASL, so the CA setting is used.
    other_ca = tmp_path / "other-ca.pem"
    other_ca.write_bytes(trustme.CA().cert_pem.bytes())
    monkeypatch.setenv("SASL_SSL_CA", str(other_ca))
    result = run(["node", str(JS_DIR / "sasl.js"), sasl_ssl_broker.bootstrap, "plain", *PLAIN_USER, "t", "a"], timeout=60)
    assert result.returncode == 1
