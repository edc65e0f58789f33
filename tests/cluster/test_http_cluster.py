"""The HTTP API in a cluster of three real brokers and ZooKeeper: one broker's HTTP listener
serves the whole cluster, as the REST Proxy does. It produces into partitions led by all three
brokers, serves a v2 consumer instance of a group another broker coordinates, and produces
through the kill -9 of a partition's leader with every record written once (checked by reading
the partition with a Kafka client). A v2 consumer instance goes on reading through the kill of its
group's coordinator. Under basic authentication and ACLs, a request forwarded to the leader is
authorized there as the HTTP user."""

import base64
import socket
import threading
import time

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from tests.cluster.clients import (
    SMALL_INDEXES,
    TIMEOUT_S,
    admin_client,
    agreed_view,
    create_topic,
    full_isrs,
    read_values,
    wait_formed,
)
from tests.cluster.harness import wait_until
from tests.harness import free_port, unique_topic
from tests.http_client import Http
from tests.kafka_wire import call

pytestmark = pytest.mark.slow

V2 = "application/vnd.kafka.v2+json"
BINARY = "application/vnd.kafka.binary.v2+json"
PARTITIONS = 6
PER_PARTITION = 5


def _http_cluster(cluster_factory, overrides: dict | None = None, authorization: str | None = None):
    """A started three-broker cluster whose brokers all serve HTTP; (cluster, {id: Http})."""
    cluster = cluster_factory(
        overrides={**SMALL_INDEXES, "group.initial.rebalance.delay.ms": "0", **(overrides or {})}, start=False
    )
    https = {}
    for broker_id, broker in cluster.brokers.items():
        port = free_port()
        broker.settings["http.listeners"] = f"http://127.0.0.1:{port}"
        # Longer than a produce's retries through a leader's failover.
        https[broker_id] = Http(f"http://127.0.0.1:{port}", authorization, timeout_s=TIMEOUT_S)
    cluster.start()
    wait_formed(cluster)
    return cluster, https


def _leaders(cluster, topic: str, partitions: int) -> dict[int, int]:
    view = wait_until(lambda: agreed_view(cluster, topic, (1, 2, 3), partitions), TIMEOUT_S, "leaders agreed")
    return {partition: leader for partition, (leader, _, _) in view.items()}


def _coordinator(cluster, group: str) -> int | None:
    host, _, port = cluster.broker(1).bootstrap.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=TIMEOUT_S) as sock:
        answer = call(sock, ApiKey.FIND_COORDINATOR, 3, FindCoordinatorRequest(key=group, key_type=0))
    return answer.node_id if answer.error_code == ErrorCode.none else None


def _end_offset(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("watermarks")})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT_S)[1]
    finally:
        consumer.close()


def _group_coordinated_elsewhere(cluster, broker_id: int) -> str:
    """A new group whose coordinator is not `broker_id` (FindCoordinator makes __consumer_offsets)."""
    return wait_until(
        lambda: next((g for g in (unique_topic("httpg") for _ in range(20))
                      if _coordinator(cluster, g) not in (None, broker_id)), None),
        TIMEOUT_S, f"a group coordinated by another broker than {broker_id}",
    )


def _consumer_instance(http: Http, group: str, topic: str) -> str:
    """The path of a new v2 binary consumer instance of `group`, subscribed to `topic`, reading
    from the start."""
    status, created = http.call("POST", f"/consumers/{group}", {"name": "c", "format": "binary",
                                                               "auto.offset.reset": "earliest"}, V2)
    assert status == 200, created
    instance = f"/consumers/{group}/instances/c"
    assert http.call("POST", f"{instance}/subscription", {"topics": [topic]}, V2)[0] == 204
    return instance


def _read(http: Http, instance: str, count: int) -> dict[int, list[bytes]]:
    """The values the instance hands out, per partition, until `count` (or the timeout)."""
    records = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(records) < count and time.monotonic() < deadline:
        status, got = http.call("GET", f"{instance}/records?timeout=1000", accept=BINARY)
        assert status == 200, got
        records += got
    return {p: [base64.b64decode(r["value"]) for r in records if r["partition"] == p]
            for p in sorted({r["partition"] for r in records})}


def _value(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_one_brokers_http_listener_produces_to_every_leader_and_serves_a_group_coordinated_elsewhere(cluster_factory):
    cluster, https = _http_cluster(cluster_factory)
    topic = unique_topic("httpc")
    create_topic(cluster, topic, PARTITIONS, 3)
    leaders = _leaders(cluster, topic, PARTITIONS)
    assert set(leaders.values()) == {1, 2, 3}, leaders

    http = https[1]
    sent = {p: [b"p%d-r%d" % (p, n) for n in range(PER_PARTITION)] for p in range(PARTITIONS)}
    body = {"records": [{"partition": p, "value": _value(v)} for p, values in sent.items() for v in values]}
    status, answer = http.call("POST", f"/topics/{topic}", body, BINARY)
    assert status == 200, answer
    assert [(o["partition"], o["offset"], o["error_code"]) for o in answer["offsets"]] == [
        (p, n, None) for p in range(PARTITIONS) for n in range(PER_PARTITION)]
    for partition, values in sent.items():
        assert read_values(cluster.bootstrap, topic, len(values), (partition,)) == values

    group = _group_coordinated_elsewhere(cluster, 1)
    instance = _consumer_instance(http, group, topic)
    assert _read(http, instance, PARTITIONS * PER_PARTITION) == sent
    assert http.call("POST", f"{instance}/offsets", b"")[0] == 200  # no body: what was handed out
    status, committed = http.call("GET", f"{instance}/offsets", {"partitions": [
        {"topic": topic, "partition": p} for p in range(PARTITIONS)]}, V2)
    assert status == 200, committed
    assert sorted((o["partition"], o["offset"]) for o in committed["offsets"]) == [
        (p, PER_PARTITION) for p in range(PARTITIONS)]
    assert http.call("DELETE", instance)[0] == 204


def test_http_produce_through_a_leader_kill_writes_every_record_once(cluster_factory):
    cluster, https = _http_cluster(cluster_factory, {"min.insync.replicas": "2"})
    topic = unique_topic("httpk")
    create_topic(cluster, topic, 1, 3)
    wait_until(lambda: full_isrs(cluster, topic, 1), TIMEOUT_S, "a full ISR")
    victim = _leaders(cluster, topic, 1)[0]
    http = https[min({1, 2, 3} - {victim})]

    requests, per_request = 200, 5
    kill_after = 60
    sent: list[bytes] = []
    failures: list = []
    killed = threading.Event()

    def produce() -> None:
        deadline = time.monotonic() + 3 * TIMEOUT_S
        for n in range(requests):
            if time.monotonic() > deadline:
                failures.append("out of time")
                return
            values = [b"r%04d-%d" % (n, i) for i in range(per_request)]
            status, answer = http.call(
                "POST", f"/topics/{topic}", {"records": [{"partition": 0, "value": _value(v)} for v in values]}, BINARY)
            if status != 200 or any(o["error_code"] is not None for o in answer["offsets"]):
                failures.append((n, status, answer))
                return
            sent.extend(values)
            if n == kill_after:
                killed.set()

    producer = threading.Thread(target=produce)
    producer.start()
    # The kill lands while requests are in flight: the HTTP broker retries them at the new leader.
    assert killed.wait(TIMEOUT_S)
    cluster.broker(victim).kill()
    producer.join(4 * TIMEOUT_S)
    assert not producer.is_alive()
    assert failures == []
    assert len(sent) == requests * per_request
    survivors = ",".join(cluster.broker(b).bootstrap for b in (1, 2, 3) if b != victim)
    assert read_values(survivors, topic, len(sent)) == sent  # each record once, in order
    assert _end_offset(survivors, topic) == len(sent)  # and nothing after them


def test_a_v2_consumer_instance_reads_on_through_the_kill_of_its_groups_coordinator(cluster_factory):
    cluster, https = _http_cluster(cluster_factory)
    topic = unique_topic("httpf")
    create_topic(cluster, topic, 3, 3)
    wait_until(lambda: full_isrs(cluster, topic, 3), TIMEOUT_S, "full ISRs")
    group = _group_coordinated_elsewhere(cluster, 1)
    coordinator = _coordinator(cluster, group)
    http = https[1]

    def produce(first: int) -> dict[int, list[bytes]]:
        values = {p: [b"p%d-r%d" % (p, n) for n in range(first, first + PER_PARTITION)] for p in range(3)}
        body = {"records": [{"partition": p, "value": _value(v)} for p, vs in values.items() for v in vs]}
        status, answer = http.call("POST", f"/topics/{topic}", body, BINARY)
        assert status == 200 and all(o["error_code"] is None for o in answer["offsets"]), answer
        return values

    before = produce(0)
    instance = _consumer_instance(http, group, topic)
    assert _read(http, instance, 3 * PER_PARTITION) == before
    assert http.call("POST", f"{instance}/offsets", b"")[0] == 200
    cluster.broker(coordinator).kill()
    after = produce(PER_PARTITION)
    # The group moves to another coordinator; the instance rejoins there and reads on from its
    # positions: every record once.
    assert _read(http, instance, 3 * PER_PARTITION) == after
    assert http.call("DELETE", instance)[0] == 204


def test_a_request_forwarded_to_the_leader_is_authorized_there_as_the_http_user(cluster_factory):
    # The brokers talk PLAINTEXT as User:ANONYMOUS, a super user: were the forwarded Produce
    # run as the forwarding broker's principal, bob could write where he may only describe.
    bob = "Basic " + base64.b64encode(b"bob:bob-secret").decode()
    cluster, https = _http_cluster(cluster_factory, {
        "http.authentication.method": "BASIC",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:ANONYMOUS",
    }, bob)
    writable, readable = unique_topic("httpw"), unique_topic("httpr")
    for topic in (writable, readable):
        create_topic(cluster, topic, 3, 3)
    elsewhere = {topic: min(p for p, leader in _leaders(cluster, topic, 3).items() if leader != 1)
                 for topic in (writable, readable)}
    admin = admin_client(cluster.bootstrap)
    admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"bob-secret")])["bob"].result(TIMEOUT_S)
    grants = [(writable, AclOperation.WRITE), (writable, AclOperation.DESCRIBE), (readable, AclOperation.DESCRIBE)]
    for topic, operation in grants:
        binding = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:bob", "*", operation,
                             AclPermissionType.ALLOW)
        admin.create_acls([binding])[binding].result(TIMEOUT_S)

    def produce(topic: str):
        body = {"records": [{"partition": elsewhere[topic], "value": _value(b"x")}]}
        status, answer = https[1].call("POST", f"/topics/{topic}", body, BINARY)
        return status, answer["offsets"][0]["error_code"] if status == 200 else answer

    # Once the credential and the ACLs have reached every broker (ZooKeeper notifications).
    wait_until(lambda: produce(writable) == (200, None), TIMEOUT_S, "bob writing through broker 1")
    # Broker 1 lets bob describe the topic (200), its leader refuses him the write.
    answer = wait_until(lambda: (r := produce(readable))[0] == 200 and r, TIMEOUT_S, "bob's Describe on broker 1")
    assert answer == (200, 40301)
