"""The HTTP API (REST Proxy v2 and v3) against a broker process, with urllib as the HTTP client
(aiohttp for a streamed produce) and confluent-kafka (librdkafka) on the Kafka side: records
produced over HTTP are read by a Kafka consumer and records produced by a Kafka producer are read
by a v2 consumer instance; a streamed produce answered record by record while it is sent;
the proxy's status codes for bad JSON, unknown topics and oversize bodies; an instance that
expires; basic authentication of a SCRAM user whose ACLs decide what it may write."""

import asyncio
import base64
import json
import socket
import time
import urllib.request

import aiohttp
import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest

from protocol.api_keys import ApiKey
from tests.harness import BrokerProcess, free_port, unique_topic
from tests.http_client import Http
from tests.kafka_wire import call

pytestmark = pytest.mark.compat

TIMEOUT_S = 20
INSTANCE_TIMEOUT_MS = 3000
MAX_REQUEST_BYTES = 100_000
V2 = "application/vnd.kafka.v2+json"
BINARY = "application/vnd.kafka.binary.v2+json"


def start(tmp_path, overrides: dict) -> tuple[BrokerProcess, str]:
    port = free_port()
    broker = BrokerProcess(tmp_path / "data", {"http.listeners": f"http://127.0.0.1:{port}", **overrides}).start()
    return broker, f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def http_broker(tmp_path_factory):
    broker, base = start(tmp_path_factory.mktemp("http"), {
        "http.consumer.instance.timeout.ms": str(INSTANCE_TIMEOUT_MS),
        "http.max.request.bytes": str(MAX_REQUEST_BYTES),
        "group.initial.rebalance.delay.ms": "0",
    })
    yield broker, Http(base)
    broker.stop()


def create_topic(broker: BrokerProcess, partitions: int = 1) -> str:
    topic = unique_topic("http")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(TIMEOUT_S)
    return topic


def cluster_path(http: Http) -> str:
    status, clusters = http.call("GET", "/v3/clusters")
    assert status == 200
    return f"/v3/clusters/{clusters['data'][0]['cluster_id']}"


def test_records_produced_over_http_v3_are_read_by_a_kafka_consumer(http_broker):
    broker, http = http_broker
    topic = create_topic(broker, 2)
    cluster = cluster_path(http)
    single = http.call("POST", f"{cluster}/topics/{topic}/records", {
        "partition_id": 0, "key": {"type": "STRING", "data": "k0"}, "value": {"type": "JSON", "data": {"n": 0}},
        "headers": [{"name": "h", "value": base64.b64encode(b"hv").decode()}]})
    streamed = b"\n".join(json.dumps({"partition_id": n % 2, "value": {"type": "BINARY",
                                     "data": base64.b64encode(b"v%d" % n).decode()}}).encode() for n in range(1, 5))
    request = urllib.request.Request(f"{http.base}{cluster}/topics/{topic}/records", data=streamed, method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
        results = [json.loads(line) for line in response.read().splitlines()]
    assert single[0] == 200 and (single[1]["partition_id"], single[1]["offset"]) == (0, 0)
    assert [(r["error_code"], r["partition_id"], r["offset"]) for r in results] == [
        (200, 1, 0), (200, 0, 1), (200, 1, 1), (200, 0, 2)]

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": topic, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    seen = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(seen) < 5 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            seen.append((message.partition(), message.offset(), message.key(), message.value(), message.headers()))
    consumer.close()
    assert sorted(seen) == [
        (0, 0, b"k0", b'{"n":0}', [("h", b"hv")]), (0, 1, None, b"v2", None), (0, 2, None, b"v4", None),
        (1, 0, None, b"v1", None), (1, 1, None, b"v3", None)]


def read_all(broker: BrokerProcess, topic: str, count: int) -> list:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": topic,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    seen = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(seen) < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            seen.append(message.value())
    consumer.close()
    return seen


def test_a_streamed_v3_produce_is_answered_record_by_record_while_it_is_sent(http_broker):
    # The proxy's streamed mode (a chunked body of records): the client reads the first
    # result while it still writes, and the stream may outgrow http.max.request.bytes, which
    # bounds each record.
    broker, http = http_broker
    topic = create_topic(broker)
    url = f"{http.base}{cluster_path(http)}/topics/{topic}/records"
    values = [b"%d-" % n + b"x" * 1000 for n in range(150)]  # 150 KB in all, over MAX_REQUEST_BYTES
    first_result = asyncio.Event()
    sent_after_first_result = []

    async def body():
        for n, value in enumerate(values):
            record = json.dumps({"value": {"type": "BINARY", "data": base64.b64encode(value).decode()}}).encode()
            yield record[:20]
            await asyncio.sleep(0.002)
            yield record[20:] + b"\n"
            if n == 0:
                await asyncio.wait_for(first_result.wait(), TIMEOUT_S)
            sent_after_first_result.append(first_result.is_set())

    async def produce() -> tuple[int, list]:
        async with aiohttp.ClientSession() as session, session.post(url, data=body()) as response:
            results = []
            while line := await response.content.readline():
                results.append(json.loads(line))
                first_result.set()
            return response.status, results

    status, results = asyncio.run(produce())
    assert all(sent_after_first_result)
    assert status == 200
    assert [(r["error_code"], r["offset"]) for r in results] == [(200, n) for n in range(150)]
    assert read_all(broker, topic, 150) == values


def _active_producers(broker: BrokerProcess, topic: str) -> list:
    host, _, port = broker.bootstrap.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=TIMEOUT_S) as sock:
        answer = call(sock, ApiKey.DESCRIBE_PRODUCERS, 0, DescribeProducersRequest(
            topics=(TopicRequest(name=topic, partition_indexes=(0,)),)))
    return answer.topics[0].partitions[0].active_producers


def test_http_produce_with_acks_all_is_one_idempotent_producer_and_acks_1_is_not(http_broker):
    # As the REST Proxy's Java producer since Kafka 3.0: idempotent (a producer id, sequences)
    # when acks is all, plain otherwise.
    broker, http = http_broker
    topic = create_topic(broker)
    for n in range(3):
        body = {"records": [{"value": base64.b64encode(b"v%d-%d" % (n, i)).decode(), "partition": 0} for i in range(2)]}
        status, answer = http.call("POST", f"/topics/{topic}", body, BINARY)
        assert (status, [o["offset"] for o in answer["offsets"]]) == (200, [2 * n, 2 * n + 1])
    status, answer = http.call("POST", f"/topics/{topic}?acks=1", {"records": [{"value": "eA==", "partition": 0}]}, BINARY)
    assert (status, answer["offsets"][0]["offset"]) == (200, 6)
    (producer,) = _active_producers(broker, topic)
    assert (producer.producer_id >= 0, producer.producer_epoch, producer.last_sequence) == (True, 0, 5)


def test_records_produced_by_a_kafka_producer_are_read_by_a_v2_consumer_instance(http_broker):
    broker, http = http_broker
    topic = create_topic(broker)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for n in range(10):
        producer.produce(topic, key=b"k%d" % n, value=b"v%d" % n)
    assert producer.flush(TIMEOUT_S) == 0
    group = f"{topic}-http"
    assert http.call("POST", f"/consumers/{group}", {"name": "c", "format": "binary",
                                                      "auto.offset.reset": "earliest"}, V2)[0] == 200
    instance = f"/consumers/{group}/instances/c"
    assert http.call("POST", f"{instance}/subscription", {"topics": [topic]}, V2)[0] == 204
    records = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(records) < 10 and time.monotonic() < deadline:
        status, got = http.call("GET", f"{instance}/records?timeout=1000", accept=BINARY)
        assert status == 200
        records += got
    assert [(base64.b64decode(r["key"]), base64.b64decode(r["value"]), r["offset"]) for r in records] == [
        (b"k%d" % n, b"v%d" % n, n) for n in range(10)]
    assert http.call("POST", f"{instance}/offsets", {"offsets": [{"topic": topic, "partition": 0, "offset": 9}]}, V2)[0] == 200
    assert http.call("DELETE", instance)[0] == 204

    # The group's committed offset is the Kafka protocol's: a Kafka consumer of the group
    # starts after the ten records.
    producer.produce(topic, value=b"after")
    producer.flush(TIMEOUT_S)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    message = None
    deadline = time.monotonic() + TIMEOUT_S
    while message is None and time.monotonic() < deadline:
        message = consumer.poll(0.5)
    consumer.close()
    assert (message.offset(), message.value()) == (10, b"after")


def test_bad_requests_get_the_proxys_status_codes(http_broker):
    broker, http = http_broker
    topic = create_topic(broker)
    cluster = cluster_path(http)
    codes = {
        "bad json v3": http.call("POST", f"{cluster}/topics", b"{not json"),
        "bad json v2": http.call("POST", f"/topics/{topic}", b"{not json", BINARY),
        "unknown topic v3": http.call("GET", f"{cluster}/topics/no-such-topic"),
        "unknown topic v3 produce": http.call("POST", f"{cluster}/topics/no-such-topic/records", {"value": None}),
        "unknown topic v2": http.call("POST", "/topics/no-such-topic", {"records": [{"value": None}]}, BINARY),
        "oversize": http.call("POST", f"/topics/{topic}", {"records": [{"value": "A" * MAX_REQUEST_BYTES}]}, BINARY),
        "unknown instance": http.call("GET", "/consumers/g/instances/none/records", accept=BINARY),
    }
    assert {name: (status, body["error_code"]) for name, (status, body) in codes.items()} == {
        "bad json v3": (400, 400),
        "bad json v2": (400, 400),
        "unknown topic v3": (404, 40403),
        "unknown topic v3 produce": (404, 40403),
        "unknown topic v2": (404, 40401),
        "oversize": (413, 413),
        "unknown instance": (404, 40403),
    }


def test_an_idle_consumer_instance_expires(http_broker):
    _broker, http = http_broker
    assert http.call("POST", "/consumers/idle-group", {"name": "idle"}, V2)[0] == 200
    assert http.call("GET", "/consumers/idle-group/instances/idle/subscription")[0] == 200
    status = 200
    deadline = time.monotonic() + INSTANCE_TIMEOUT_MS / 1000 * 4
    while status == 200 and time.monotonic() < deadline:
        time.sleep(INSTANCE_TIMEOUT_MS / 1000 + 0.5)
        status, body = http.call("GET", "/consumers/idle-group/instances/idle/subscription")
    assert (status, body["error_code"]) == (404, 40403)


def test_basic_auth_maps_to_a_scram_user_whose_acls_decide(tmp_path):
    broker, base = start(tmp_path, {
        "http.authentication.method": "BASIC",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:ANONYMOUS",  # the Kafka-side admin on PLAINTEXT
    })
    try:
        allowed, denied = create_topic(broker), create_topic(broker)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"bob-secret")])["bob"].result(TIMEOUT_S)
        for operation in (AclOperation.WRITE, AclOperation.DESCRIBE):
            binding = AclBinding(ResourceType.TOPIC, allowed, ResourcePatternType.LITERAL, "User:bob", "*",
                                 operation, AclPermissionType.ALLOW)
            admin.create_acls([binding])[binding].result(TIMEOUT_S)
        bob = Http(base, "Basic " + base64.b64encode(b"bob:bob-secret").decode())
        wrong = Http(base, "Basic " + base64.b64encode(b"bob:nope").decode())
        record = {"records": [{"value": base64.b64encode(b"x").decode()}]}
        assert Http(base).call("POST", f"/topics/{allowed}", record, BINARY)[0] == 401
        assert wrong.call("POST", f"/topics/{allowed}", record, BINARY)[0] == 401
        status, body = bob.call("POST", f"/topics/{allowed}", record, BINARY)
        assert (status, body["offsets"][0]["offset"]) == (200, 0)
        status, body = bob.call("POST", f"/topics/{denied}", record, BINARY)
        assert (status, body["error_code"]) == (403, 40301)
    finally:
        broker.stop()
