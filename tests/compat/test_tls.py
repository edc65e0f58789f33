"""TLS listeners with real clients over real sockets: confluent-kafka, kcat, kafka-python,
aiokafka and KafkaJS with their usual SSL settings, against a broker with an SSL listener
(server certificate only) and another that requires a client certificate. Certificates are made
by the test (trustme). Failures: a client that does not trust the broker's CA, a client without
a certificate or with an expired one under ssl.client.auth=required, and a broker whose keystore
password is wrong, which does not start."""

import asyncio
import datetime
import json
import re
import shutil
import subprocess

import pytest
import trustme

from tests.compat.kafkajs_support import JS_DIR, KAFKAJS_MARKS
from tests.harness import BrokerProcess, free_port, run, unique_topic

pytestmark = pytest.mark.compat

TIMEOUT_S = 30
RECORDS = [(f"key-{i}".encode(), f"value-{i}".encode()) for i in range(20)]


class TlsFiles:
    """A CA, the broker's key and chain, and client certificates, as PEM files in `directory`."""

    def __init__(self, directory):
        self.ca = trustme.CA()
        self.directory = directory
        self.ca_pem = self._write("ca.pem", self.ca.cert_pem.bytes())
        server = self.ca.issue_cert("localhost", "127.0.0.1")
        self.server_pem = self._write("server.pem", server.private_key_and_cert_chain_pem.bytes())
        self.client_cert, self.client_key = self._client("alice", self.ca.issue_cert("alice.example", common_name="alice"))
        now = datetime.datetime.now(datetime.timezone.utc)
        expired = self.ca.issue_cert(
            "old.example",
            common_name="old",
            not_before=now - datetime.timedelta(days=30),
            not_after=now - datetime.timedelta(days=1),
        )
        self.expired_cert, self.expired_key = self._client("expired", expired)
        other_ca = trustme.CA()
        self.other_ca_pem = self._write("other-ca.pem", other_ca.cert_pem.bytes())

    def _client(self, name, cert):
        return (
            self._write(f"{name}.crt", b"".join(blob.bytes() for blob in cert.cert_chain_pems)),
            self._write(f"{name}.key", cert.private_key_pem.bytes()),
        )

    def _write(self, name, data: bytes) -> str:
        path = self.directory / name
        path.write_bytes(data)
        return str(path)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return TlsFiles(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory, files):
    """Listener SSL (server certificate only) on `port`, MTLS (client certificate required) on
    `mtls_port`."""
    broker = BrokerProcess(tmp_path_factory.mktemp("tls-broker") / "data")
    broker.mtls_port = free_port()
    listeners = f"SSL://127.0.0.1:{broker.port},MTLS://127.0.0.1:{broker.mtls_port}"
    broker.overrides.update(
        {
            "listeners": listeners,
            "advertised.listeners": listeners,
            "listener.security.protocol.map": "SSL:SSL,MTLS:SSL",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": files.server_pem,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": files.ca_pem,
            "listener.name.mtls.ssl.client.auth": "required",
        }
    )
    broker.start()
    yield broker
    broker.kill()
    assert "Traceback" not in broker.log(), broker.log()[-5000:]


def mtls_bootstrap(broker) -> str:
    return f"127.0.0.1:{broker.mtls_port}"


def confluent_settings(broker, files, client_cert: bool) -> dict:
    settings = {
        "bootstrap.servers": mtls_bootstrap(broker) if client_cert else broker.bootstrap,
        "security.protocol": "SSL",
        "ssl.ca.location": files.ca_pem,
    }
    if client_cert:
        settings.update({"ssl.certificate.location": files.client_cert, "ssl.key.location": files.client_key})
    return settings


def confluent_round_trip(settings: dict, topic: str) -> list[tuple[bytes, bytes]]:
    from confluent_kafka import Consumer, Producer

    producer = Producer({**settings, "acks": "all"})
    for key, value in RECORDS:
        producer.produce(topic, value, key)
    assert producer.flush(TIMEOUT_S) == 0
    consumer = Consumer({**settings, "group.id": unique_topic("g"), "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    received = []
    try:
        while len(received) < len(RECORDS):
            message = consumer.poll(TIMEOUT_S)
            assert message is not None, f"only {len(received)} records came back"
            assert message.error() is None, message.error()
            received.append((message.key(), message.value()))
    finally:
        consumer.close()
    return received


def test_confluent_kafka_produces_and_consumes_over_ssl(tls_broker, files):
    topic = unique_topic("tls-confluent")
    assert confluent_round_trip(confluent_settings(tls_broker, files, client_cert=False), topic) == RECORDS


def test_confluent_kafka_with_a_client_certificate_under_required_client_auth(tls_broker, files):
    topic = unique_topic("mtls-confluent")
    assert confluent_round_trip(confluent_settings(tls_broker, files, client_cert=True), topic) == RECORDS


def kcat(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return run(["kcat", "-q", "-X", "socket.timeout.ms=10000", "-X", "message.timeout.ms=20000", *args],
               timeout=TIMEOUT_S, input=stdin)


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (.ci/setup test)")
def test_kcat_over_ssl_and_with_a_client_certificate(tls_broker, files):
    for bootstrap, extra in (
        (tls_broker.bootstrap, []),
        (mtls_bootstrap(tls_broker), ["-X", f"ssl.certificate.location={files.client_cert}",
                                      "-X", f"ssl.key.location={files.client_key}"]),
    ):
        topic = unique_topic("tls-kcat")
        common = ["-b", bootstrap, "-X", "security.protocol=SSL", "-X", f"ssl.ca.location={files.ca_pem}", *extra]
        produced = kcat(*common, "-P", "-t", topic, "-K", ":", stdin=b"a:1\nb:2\nc:3\n")
        assert produced.returncode == 0, produced.stderr
        consumed = kcat(*common, "-C", "-t", topic, "-o", "beginning", "-e", "-J")
        assert consumed.returncode == 0, consumed.stderr
        records = [json.loads(line) for line in consumed.stdout.decode().splitlines()]
        assert [(r["key"], r["payload"]) for r in records] == [("a", "1"), ("b", "2"), ("c", "3")]


def test_kafka_python_with_a_client_certificate(tls_broker, files):
    from kafka import KafkaConsumer, KafkaProducer

    topic = unique_topic("mtls-kafka-python")
    ssl_settings = {
        "bootstrap_servers": mtls_bootstrap(tls_broker),
        "security_protocol": "SSL",
        "ssl_cafile": files.ca_pem,
        "ssl_certfile": files.client_cert,
        "ssl_keyfile": files.client_key,
    }
    producer = KafkaProducer(acks="all", **ssl_settings)
    for key, value in RECORDS:
        producer.send(topic, value, key)
    producer.flush(TIMEOUT_S)
    producer.close()
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=TIMEOUT_S * 1000, **ssl_settings)
    received = []
    for message in consumer:
        received.append((message.key, message.value))
        if len(received) == len(RECORDS):
            break
    consumer.close()
    assert received == RECORDS


def test_aiokafka_with_an_ssl_context(tls_broker, files):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    async def scenario():
        context = create_ssl_context(cafile=files.ca_pem, certfile=files.client_cert, keyfile=files.client_key)
        topic = unique_topic("mtls-aiokafka")
        common = {"bootstrap_servers": mtls_bootstrap(tls_broker), "security_protocol": "SSL", "ssl_context": context}
        producer = AIOKafkaProducer(acks="all", **common)
        await producer.start()
        try:
            for key, value in RECORDS:
                await producer.send_and_wait(topic, value, key)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **common)
        await consumer.start()
        received = []
        try:
            while len(received) < len(RECORDS):
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), TIMEOUT_S)
                for messages in batch.values():
                    received.extend((m.key, m.value) for m in messages)
        finally:
            await consumer.stop()
        return received

    assert asyncio.run(scenario()) == RECORDS


@KAFKAJS_MARKS[1]  # node installed
@KAFKAJS_MARKS[2]  # kafkajs installed
def test_kafkajs_with_ca_cert_and_key(tls_broker, files):
    from confluent_kafka import Consumer

    topic = unique_topic("mtls-kafkajs")
    result = run(
        ["node", str(JS_DIR / "tls.js"), mtls_bootstrap(tls_broker), topic, files.ca_pem, files.client_cert,
         files.client_key],
        timeout=60,
    )
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    offsets = json.loads(result.stdout)["offsets"]
    assert [(o["partition"], o["high"]) for o in offsets] == [(0, "10")]
    consumer = Consumer({**confluent_settings(tls_broker, files, client_cert=False), "group.id": unique_topic("g"),
                        "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    values = []
    while len(values) < 10:
        message = consumer.poll(TIMEOUT_S)
        assert message is not None and message.error() is None
        values.append(message.value())
    consumer.close()
    assert values == [f"kafkajs-{i}".encode() for i in range(10)]


# ------------------------------------------------------------------------------ refusals


def metadata_error(settings: dict) -> str:
    """What librdkafka says when asked for metadata with `settings`."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({**settings, "socket.timeout.ms": 3000, "reconnect.backoff.max.ms": 200})
    with pytest.raises(KafkaException) as failure:
        admin.list_topics(timeout=5)
    return str(failure.value)


def test_a_client_that_does_not_trust_the_broker_refuses_it(tls_broker, files):
    settings = {**confluent_settings(tls_broker, files, client_cert=False), "ssl.ca.location": files.other_ca_pem}
    metadata_error(settings)
    assert re.search(r"TLS handshake with 127\.0\.0\.1:\d+ failed: .*unknown ca", tls_broker.log())


def test_required_client_auth_refuses_a_client_without_certificate(tls_broker, files):
    settings = {**confluent_settings(tls_broker, files, client_cert=False), "bootstrap.servers": mtls_bootstrap(tls_broker)}
    metadata_error(settings)
    assert re.search(r"TLS handshake with 127\.0\.0\.1:\d+ failed: .*peer did not return a certificate", tls_broker.log())


def test_required_client_auth_refuses_an_expired_client_certificate(tls_broker, files):
    settings = {
        **confluent_settings(tls_broker, files, client_cert=True),
        "ssl.certificate.location": files.expired_cert,
        "ssl.key.location": files.expired_key,
    }
    metadata_error(settings)
    assert "client certificate verify failed: certificate has expired" in tls_broker.log()


def test_a_wrong_keystore_password_stops_the_start_with_kafkas_message(tmp_path, files):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12
    from cryptography import x509

    server_pem = open(files.server_pem, "rb").read()
    key = serialization.load_pem_private_key(server_pem, None)
    certificate = x509.load_pem_x509_certificate(server_pem)
    keystore = tmp_path / "server.p12"
    keystore.write_bytes(
        pkcs12.serialize_key_and_certificates(
            b"server", key, certificate, None, serialization.BestAvailableEncryption(b"right")
        )
    )
    broker = BrokerProcess(tmp_path / "data")
    broker.overrides.update(
        {
            "listeners": f"SSL://127.0.0.1:{broker.port}",
            "advertised.listeners": f"SSL://127.0.0.1:{broker.port}",
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(keystore),
            "ssl.keystore.password": "wrong",
        }
    )
    with pytest.raises(RuntimeError, match="broker exited with 1"):
        broker.start()
    assert f"Failed to load SSL keystore {keystore} of type PKCS12: keystore password was incorrect" in broker.log()


# ------------------------------------------------------------------------------ reloading


def serving_serial(port: int, ca_pem: str) -> int:
    """The serial number of the certificate a new TLS connection to `port` is served."""
    import socket
    import ssl

    from cryptography import x509

    context = ssl.create_default_context(cafile=ca_pem)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
            return x509.load_der_x509_certificate(sock.getpeercert(binary_form=True)).serial_number


def test_incremental_alter_configs_reloads_a_listeners_keystore(tmp_path, files):
    """What `kafka-configs --entity-type brokers --entity-name 0 --alter --add-config
    listener.name.ssl.ssl.keystore.location=...` sends; new connections get the new certificate."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    def broker_cert(unit="brokers"):
        cert = files.ca.issue_cert("localhost", "127.0.0.1", common_name="broker", organization_unit_name=unit)
        return cert, cert.private_key_and_cert_chain_pem.bytes()

    first, first_pem = broker_cert()
    (tmp_path / "first.pem").write_bytes(first_pem)
    broker = BrokerProcess(tmp_path / "data")
    broker.overrides.update(
        {
            "listeners": f"SSL://127.0.0.1:{broker.port}",
            "advertised.listeners": f"SSL://127.0.0.1:{broker.port}",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(tmp_path / "first.pem"),
        }
    )
    with broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "security.protocol": "SSL",
                             "ssl.ca.location": files.ca_pem})

        def alter(location: str):
            resource = ConfigResource(
                ResourceType.BROKER, "0",
                incremental_configs=[ConfigEntry("listener.name.ssl.ssl.keystore.location", location,
                                                 incremental_operation=AlterConfigOpType.SET)],
            )
            admin.incremental_alter_configs([resource])[resource].result(timeout=TIMEOUT_S)

        def serial(cert) -> int:
            from cryptography import x509

            return x509.load_pem_x509_certificate(cert.cert_chain_pems[0].bytes()).serial_number

        assert serving_serial(broker.port, files.ca_pem) == serial(first)
        renewed, renewed_pem = broker_cert()
        (tmp_path / "renewed.pem").write_bytes(renewed_pem)
        alter(str(tmp_path / "renewed.pem"))
        assert serving_serial(broker.port, files.ca_pem) == serial(renewed)

        # Kafka's rule: the certificate's subject must stay.
        _, other_pem = broker_cert(unit="elsewhere")
        (tmp_path / "other.pem").write_bytes(other_pem)
        from confluent_kafka import KafkaException

        with pytest.raises(KafkaException, match="Keystore DistinguishedName does not match"):
            alter(str(tmp_path / "other.pem"))
        assert serving_serial(broker.port, files.ca_pem) == serial(renewed)

        # A file replaced in place is read again when the same location is set.
        again, again_pem = broker_cert()
        (tmp_path / "renewed.pem").write_bytes(again_pem)
        alter(str(tmp_path / "renewed.pem"))
        assert serving_serial(broker.port, files.ca_pem) == serial(again)

        # Kept in the log dirs as a dynamic broker config: a restart serves it again.
        broker.restart()
        assert serving_serial(broker.port, files.ca_pem) == serial(again)
    assert "listener SSL: TLS keystore and truststore reloaded" in broker.log()
