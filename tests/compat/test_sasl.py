"""SASL on a SASL_PLAINTEXT listener with real clients over real sockets: confluent-kafka and
kcat (librdkafka), kafka-python, aiokafka and KafkaJS with PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
and (librdkafka) OAUTHBEARER's unsecured tokens; SCRAM users created with
AlterUserScramCredentials by confluent-kafka's AdminClient; wrong passwords; requests before
authentication; an expired session (KIP-368)."""

import asyncio
import concurrent.futures
import shutil
import socket
import time

import confluent_kafka
import pytest
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kio.schema.describe_user_scram_credentials.v0.request import DescribeUserScramCredentialsRequest
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.primitives import INT32
from tests.compat.kafkajs_support import JS_DIR, KAFKAJS_MARKS
from tests.harness import BrokerProcess, run, unique_topic
from tests.kafka_wire import decode_response, encode_request

pytestmark = pytest.mark.compat

ADMIN = ("admin", "admin-secret")
PLAIN_USER = ("alice", "alice-secret")
SCRAM_USER = ("scram-user", "scram-secret")
SCRAM_MECHANISMS = ["SCRAM-SHA-256", "SCRAM-SHA-512"]
TIMEOUT_S = 30


def sasl_overrides(port: int, **extra: str) -> dict[str, str]:
    endpoint = f"SASL_PLAINTEXT://127.0.0.1:{port}"
    scram_jaas = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    return {
        "listeners": endpoint,
        "advertised.listeners": endpoint,
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="{ADMIN[0]}" password="{ADMIN[1]}" '
            f'user_{ADMIN[0]}="{ADMIN[1]}" user_{PLAIN_USER[0]}="{PLAIN_USER[1]}";'
        ),
        "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": scram_jaas,
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": scram_jaas,
        "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": (
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
        ),
        **extra,
    }


def start_sasl_broker(data_dir, log_level: str = "INFO", **extra: str) -> BrokerProcess:
    broker = BrokerProcess(data_dir, log_level=log_level)
    broker.overrides.update(sasl_overrides(broker.port, **extra))
    return broker.start()


def librdkafka_settings(mechanism: str, user: tuple[str, str] | None = None) -> dict[str, str]:
    settings = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": mechanism}
    if mechanism == "OAUTHBEARER":
        settings |= {"enable.sasl.oauthbearer.unsecure.jwt": "true", "sasl.oauthbearer.config": "principal=carol"}
    else:
        name, password = user or (SCRAM_USER if mechanism.startswith("SCRAM") else PLAIN_USER)
        settings |= {"sasl.username": name, "sasl.password": password}
    return settings


def admin_client(broker, **settings) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap, **librdkafka_settings("PLAIN", ADMIN), **settings})


def create_scram_user(broker, user: tuple[str, str], mechanisms=SCRAM_MECHANISMS, **settings: str) -> None:
    """As an operator would, with confluent-kafka's AdminClient (AlterUserScramCredentials);
    `settings` for the admin's connection (SASL_SSL)."""
    upsertions = [
        UserScramCredentialUpsertion(user[0], ScramCredentialInfo(getattr(ScramMechanism, m.replace("-", "_")), 4096), user[1].encode())
        for m in mechanisms
    ]
    admin = admin_client(broker, **settings)  # kept alive until the futures are done
    for future in admin.alter_user_scram_credentials(upsertions).values():
        future.result(timeout=TIMEOUT_S)


def create_topic(broker, topic: str) -> None:
    admin = admin_client(broker)
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(timeout=TIMEOUT_S)


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory):
    broker = start_sasl_broker(tmp_path_factory.mktemp("sasl") / "data")
    create_scram_user(broker, SCRAM_USER)
    yield broker
    broker.stop()
    assert "Traceback" not in broker.log()


def confluent_round_trip(broker, settings: dict[str, str]) -> list[bytes]:
    topic = unique_topic("sasl")
    create_topic(broker, topic)
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, **settings})
    for i in range(3):
        producer.produce(topic, f"m{i}".encode())
    assert producer.flush(TIMEOUT_S) == 0
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": broker.bootstrap, "group.id": unique_topic("g"), "auto.offset.reset": "earliest", **settings,
    })
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    values = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(values) < 3 and time.monotonic() < deadline:
        message = consumer.poll(1)
        if message is not None and message.error() is None:
            values.append(message.value())
    consumer.close()
    return values


@pytest.mark.parametrize("mechanism", ["PLAIN", *SCRAM_MECHANISMS, "OAUTHBEARER"])
def test_confluent_kafka_produces_and_consumes_with_each_mechanism(sasl_broker, mechanism):
    assert confluent_round_trip(sasl_broker, librdkafka_settings(mechanism)) == [b"m0", b"m1", b"m2"]


def test_a_scram_user_created_with_the_admin_client_connects_and_is_described(sasl_broker):
    user = ("created-later", "later-secret")
    create_scram_user(sasl_broker, user, ["SCRAM-SHA-512"])
    assert confluent_round_trip(sasl_broker, librdkafka_settings("SCRAM-SHA-512", user)) == [b"m0", b"m1", b"m2"]
    admin = admin_client(sasl_broker)
    described = admin.describe_user_scram_credentials([user[0]])[user[0]].result(timeout=TIMEOUT_S)
    [info] = described.scram_credential_infos
    assert (info.mechanism, info.iterations) == (ScramMechanism.SCRAM_SHA_512, 4096)


@pytest.mark.parametrize("mechanism, error", [
    ("PLAIN", "Authentication failed: Invalid username or password"),
    ("SCRAM-SHA-256", "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256"),
])
def test_a_wrong_password_is_reported_to_confluent_kafka_with_kafkas_message(sasl_broker, mechanism, error):
    user = (SCRAM_USER if mechanism.startswith("SCRAM") else PLAIN_USER)[0], "wrong"
    errors = []
    producer = confluent_kafka.Producer({
        "bootstrap.servers": sasl_broker.bootstrap, **librdkafka_settings(mechanism, user), "error_cb": errors.append,
    })
    deadline = time.monotonic() + TIMEOUT_S
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    assert errors and errors[0].code() == confluent_kafka.KafkaError._AUTHENTICATION
    assert error in errors[0].str()


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (.ci/setup test)")
@pytest.mark.parametrize("mechanism", ["PLAIN", *SCRAM_MECHANISMS, "OAUTHBEARER"])
def test_kcat_produces_and_consumes_with_each_mechanism(sasl_broker, mechanism):
    topic = unique_topic("sasl-kcat")
    create_topic(sasl_broker, topic)
    options = [arg for key, value in librdkafka_settings(mechanism).items() for arg in ("-X", f"{key}={value}")]
    base = ["kcat", "-b", sasl_broker.bootstrap, "-q", *options]
    produced = run([*base, "-P", "-t", topic], timeout=TIMEOUT_S, input=b"one\ntwo\n")
    assert produced.returncode == 0, produced.stderr
    consumed = run([*base, "-C", "-t", topic, "-o", "beginning", "-e"], timeout=TIMEOUT_S)
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.decode().split() == ["one", "two"]


def python_client_settings(mechanism: str) -> dict[str, str]:
    name, password = SCRAM_USER if mechanism.startswith("SCRAM") else PLAIN_USER
    return {
        "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": mechanism,
        "sasl_plain_username": name, "sasl_plain_password": password,
    }


@pytest.mark.parametrize("mechanism", ["PLAIN", *SCRAM_MECHANISMS])
def test_kafka_python_produces_and_consumes_with_each_mechanism(sasl_broker, mechanism):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = unique_topic("sasl-kp")
    create_topic(sasl_broker, topic)
    producer = KafkaProducer(bootstrap_servers=sasl_broker.bootstrap, **python_client_settings(mechanism))
    producer.send(topic, b"hello").get(timeout=TIMEOUT_S)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=sasl_broker.bootstrap, consumer_timeout_ms=10_000, **python_client_settings(mechanism))
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    assert [m.value for m in consumer][:1] == [b"hello"]
    consumer.close()


@pytest.mark.parametrize("mechanism", ["PLAIN", *SCRAM_MECHANISMS])
def test_kafka_python_as_a_0_10_client_authenticates_with_raw_tokens(sasl_broker, mechanism):
    # With api_version (0, 10, 1) kafka-python sends SaslHandshake v0 and then the mechanism's
    # tokens raw (KIP-43), as clients before Kafka 1.0 do. (Producing is left out: a 0.10
    # client writes message format v1, which logway does not take.)
    from kafka import KafkaConsumer

    topic = unique_topic("sasl-v0")
    create_topic(sasl_broker, topic)
    consumer = KafkaConsumer(bootstrap_servers=sasl_broker.bootstrap, api_version=(0, 10, 1), **python_client_settings(mechanism))
    try:
        # topics() retries without end while authentication fails: bounded here.
        pool = concurrent.futures.ThreadPoolExecutor(1)
        assert topic in pool.submit(consumer.topics).result(timeout=TIMEOUT_S)
        pool.shutdown(wait=False)
    finally:
        consumer.close()


def test_kafka_python_reports_a_wrong_password(sasl_broker):
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    settings = python_client_settings("PLAIN") | {"sasl_plain_password": "wrong"}
    with pytest.raises(KafkaError):
        # kafka-python (3.0) tries the bootstrap again after each refusal until
        # bootstrap_timeout_ms (30 s by default) runs out: the first refusal is the broker's part.
        KafkaProducer(bootstrap_servers=sasl_broker.bootstrap, max_block_ms=5000, bootstrap_timeout_ms=5000,
                      **settings).send("t", b"x").get(timeout=10)


def aiokafka_round_trip(topic: str, **settings) -> bytes:
    """What an aiokafka consumer reads back of one record an aiokafka producer wrote to
    partition 0 of `topic`, both with `settings` (bootstrap servers and security)."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    async def scenario():
        producer = AIOKafkaProducer(**settings)
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"hello")
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(**settings)
        await consumer.start()
        try:
            consumer.assign([TopicPartition(topic, 0)])
            await consumer.seek_to_beginning()
            return (await asyncio.wait_for(consumer.getone(), TIMEOUT_S)).value
        finally:
            await consumer.stop()

    return asyncio.run(scenario())


@pytest.mark.parametrize("mechanism", ["PLAIN", *SCRAM_MECHANISMS])
def test_aiokafka_produces_and_consumes_with_each_mechanism(sasl_broker, mechanism):
    topic = unique_topic("sasl-aio")
    create_topic(sasl_broker, topic)
    settings = python_client_settings(mechanism)
    assert aiokafka_round_trip(topic, bootstrap_servers=sasl_broker.bootstrap, **settings) == b"hello"


def unsecured_jws(subject: str) -> str:
    """A token Kafka's unsecured validator takes: header alg=none, claims sub and exp, no signature."""
    import base64
    import json

    def part(value: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'none'})}.{part({'sub': subject, 'exp': int(time.time()) + 3600})}."


def test_kafka_python_and_aiokafka_authenticate_with_oauthbearer(sasl_broker):
    from aiokafka import AIOKafkaProducer
    from aiokafka.abc import AbstractTokenProvider as AioTokenProvider
    from kafka import KafkaProducer
    from kafka.net.sasl.oauth import AbstractTokenProvider

    class Token(AbstractTokenProvider):
        def token(self):
            return unsecured_jws("carol")

    class AioToken(AioTokenProvider):
        async def token(self):
            return unsecured_jws("carol")

    topic = unique_topic("sasl-oauth")
    create_topic(sasl_broker, topic)
    producer = KafkaProducer(
        bootstrap_servers=sasl_broker.bootstrap, security_protocol="SASL_PLAINTEXT", sasl_mechanism="OAUTHBEARER",
        sasl_oauth_token_provider=Token(),
    )
    producer.send(topic, b"kafka-python").get(timeout=TIMEOUT_S)
    producer.close()

    async def scenario():
        producer = AIOKafkaProducer(
            bootstrap_servers=sasl_broker.bootstrap, security_protocol="SASL_PLAINTEXT", sasl_mechanism="OAUTHBEARER",
            sasl_oauth_token_provider=AioToken(),
        )
        await producer.start()
        try:
            return (await producer.send_and_wait(topic, b"aiokafka")).offset
        finally:
            await producer.stop()

    assert asyncio.run(scenario()) == 1


@KAFKAJS_MARKS[1]  # node installed
@KAFKAJS_MARKS[2]  # kafkajs installed
@pytest.mark.parametrize("mechanism", ["plain", "scram-sha-256", "scram-sha-512"])
def test_kafkajs_produces_with_each_mechanism(sasl_broker, mechanism):
    topic = unique_topic("sasl-js")
    create_topic(sasl_broker, topic)
    name, password = SCRAM_USER if mechanism.startswith("scram") else PLAIN_USER
    result = run(["node", str(JS_DIR / "sasl.js"), sasl_broker.bootstrap, mechanism, name, password, topic, "a", "b"], timeout=60)
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    assert result.stdout.decode().strip() == '{"produced":[0],"offsets":[2]}'


@KAFKAJS_MARKS[1]  # node installed
@KAFKAJS_MARKS[2]  # kafkajs installed
def test_kafkajs_reports_a_wrong_password(sasl_broker):
    result = run(["node", str(JS_DIR / "sasl.js"), sasl_broker.bootstrap, "plain", PLAIN_USER[0], "wrong", "t", "a"], timeout=60)
    assert result.returncode == 1
    assert "Invalid username or password" in result.stderr.decode()


class RawConnection:
    """Kafka requests over a plain socket, to see exactly what the broker answers and when it
    closes."""

    def __init__(self, broker) -> None:
        self.sock = socket.create_connection(("127.0.0.1", broker.port), timeout=10)

    def call(self, api_key, version, request):
        self.sock.sendall(encode_request(api_key, version, request))
        return decode_response(api_key, version, self.read_frame())

    def read_frame(self) -> bytes:
        size = self.read(4)
        return size + self.read(INT32.unpack(size)[0])

    def read(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed by the broker")
            data += chunk
        return data

    def closed_by_broker(self) -> bool:
        return self.sock.recv(1) == b""


METADATA = MetadataRequest(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)


def test_a_request_before_authentication_is_answered_illegal_sasl_state_then_closed(sasl_broker):
    connection = RawConnection(sasl_broker)
    answer = connection.call(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, DescribeUserScramCredentialsRequest(users=None))
    assert answer.error_code is ErrorCode.illegal_sasl_state
    assert connection.closed_by_broker()


def test_a_session_past_connections_max_reauth_ms_is_closed_at_its_next_request(tmp_path):
    broker = start_sasl_broker(tmp_path / "data", **{"connections.max.reauth.ms": "1000"})
    try:
        connection = RawConnection(broker)
        assert connection.call(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN")).error_code is ErrorCode.none
        done = connection.call(ApiKey.SASL_AUTHENTICATE, 1, SaslAuthenticateRequest(auth_bytes=b"\0alice\0alice-secret"))
        assert done.error_code is ErrorCode.none
        assert done.session_lifetime.total_seconds() == 1
        assert connection.call(ApiKey.METADATA, 12, METADATA).brokers
        time.sleep(1.2)  # past the session's lifetime, without re-authenticating
        connection.sock.sendall(encode_request(ApiKey.METADATA, 12, METADATA))
        assert connection.closed_by_broker()
    finally:
        broker.stop()


def test_a_session_re_authenticated_in_time_goes_on_past_its_first_lifetime(tmp_path):
    broker = start_sasl_broker(tmp_path / "data", **{"connections.max.reauth.ms": "1500"})
    try:
        connection = RawConnection(broker)
        for _ in range(2):  # the first authentication, then a re-authentication on the connection
            assert connection.call(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN")).error_code is ErrorCode.none
            done = connection.call(ApiKey.SASL_AUTHENTICATE, 1, SaslAuthenticateRequest(auth_bytes=b"\0alice\0alice-secret"))
            assert (done.error_code, done.session_lifetime.total_seconds()) == (ErrorCode.none, 1.5)
            time.sleep(1.0)
        # 2 s after the first authentication, 1 s after the second: the renewed session serves.
        assert connection.call(ApiKey.METADATA, 12, METADATA).brokers
    finally:
        broker.stop()


def test_confluent_kafka_and_kafka_python_re_authenticate_before_their_sessions_expire(tmp_path):
    from kafka import KafkaProducer

    broker = start_sasl_broker(tmp_path / "data", log_level="DEBUG", **{"connections.max.reauth.ms": "2000"})
    try:
        create_topic(broker, "reauth")
        create_scram_user(broker, SCRAM_USER, ["SCRAM-SHA-256"])
        librdkafka = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, **librdkafka_settings("PLAIN")})
        kafka_python = KafkaProducer(bootstrap_servers=broker.bootstrap, **python_client_settings("SCRAM-SHA-256"))
        for _ in range(10):  # 5 s: past two session lifetimes
            librdkafka.produce("reauth", b"x")
            assert librdkafka.flush(TIMEOUT_S) == 0
            kafka_python.send("reauth", b"y").get(timeout=TIMEOUT_S)
            time.sleep(0.5)
        kafka_python.close()
    finally:
        broker.stop()
    log = broker.log()
    assert log.count("SASL re-authentication of alice begins") >= 2
    assert log.count(f"SASL re-authentication of {SCRAM_USER[0]} begins") >= 2
    assert "SASL session expired" not in log


def test_acls_decide_on_the_sasl_user(tmp_path):
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    broker = start_sasl_broker(tmp_path / "data", **{
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "super.users": f"User:{ADMIN[0]}",
    })
    try:
        topic = unique_topic("acl")
        create_topic(broker, topic)  # as the admin, a super user
        create_scram_user(broker, SCRAM_USER, ["SCRAM-SHA-256"])

        def produce_as(mechanism: str):
            outcome = []
            producer = confluent_kafka.Producer({
                "bootstrap.servers": broker.bootstrap, "message.timeout.ms": 10_000, **librdkafka_settings(mechanism),
            })
            producer.produce(topic, b"x", callback=lambda err, msg: outcome.append(err))
            producer.flush(TIMEOUT_S)
            return outcome[0]

        assert produce_as("PLAIN").code() == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED
        admin = admin_client(broker)
        write = AclBinding(
            ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, f"User:{PLAIN_USER[0]}", "*",
            AclOperation.WRITE, AclPermissionType.ALLOW,
        )
        for future in admin.create_acls([write], request_timeout=TIMEOUT_S).values():
            future.result(TIMEOUT_S)
        assert produce_as("PLAIN") is None  # User:alice, over PLAIN
        assert produce_as("SCRAM-SHA-256").code() == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED  # User:scram-user
    finally:
        broker.stop()
