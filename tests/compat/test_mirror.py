"""logway-mirror between two standalone logway brokers (two "clusters", A and B): exactly once
across kill -9 of the mirror at random points, topics deleted and created again on either side,
topics following the source's partition count and configs, aborted source transactions left out,
active-active without loops, heartbeats, and the configuration errors the process refuses to
start with."""

import random
import subprocess
import sys
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)

from replication.mirror.records import decode_checkpoint, decode_heartbeat
from tests.harness import REPO, BrokerProcess, free_port
from tests.cuttable_proxy import CuttableProxy
from tests.mirror_support import (
    TIMEOUT_S,
    Mirror,
    committed,
    consume_and_commit,
    exactly_once_in_order,
    failover_problems,
    kill_mirrors,
    mirror_properties,
    produce_numbered,
    read_as_group,
    read_committed,
    topic_names,
    wait_for_committed,
    wait_until_mirrored,
)

pytestmark = [pytest.mark.compat, pytest.mark.slow]


@pytest.fixture(autouse=True)
def _no_mirror_left_running():
    yield
    kill_mirrors()

KILLS = 5
TRANSACTIONS = {
    "transaction.state.log.num.partitions": "3",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
}


@pytest.fixture
def clusters(broker_factory):
    overrides = {key.replace(".", "_"): value for key, value in TRANSACTIONS.items()}
    return broker_factory("a", **overrides), broker_factory("b", **overrides)


def properties(a, b, *flows: str, **settings: str) -> str:
    return mirror_properties(a.bootstrap, b.bootstrap, *flows, **settings)


def create_topic(bootstrap: str, topic: str, partitions: int, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config=configs)])[topic].result(TIMEOUT_S)


def test_mirror_killed_at_random_points_copies_every_record_once_and_in_order(clusters, tmp_path):
    a, b = clusters
    create_topic(a.bootstrap, "orders", 3)
    writer = threading.Thread(target=produce_numbered, args=(a.bootstrap, "orders", 3, 6000, 0.05))
    writer.start()
    mirror = Mirror(tmp_path, properties(a, b, "A->B")).start()
    rng = random.Random(17)
    for _ in range(KILLS):
        # the mirror starts in about 2 s: kills land before, during and after its first commits
        time.sleep(rng.uniform(0.2, 4.0))
        mirror.kill()
        mirror.start()
    writer.join(TIMEOUT_S)
    assert not writer.is_alive()

    source, target = wait_until_mirrored(a.bootstrap, "orders", b.bootstrap, "A.orders")
    assert mirror.stop() == 0
    assert sum(map(len, source.values())) == 6000
    assert exactly_once_in_order(source, target) == [], mirror.log()[-3000:]
    assert "Traceback" not in mirror.log()


def delete_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic])[topic].result(TIMEOUT_S)


def wait_for_records(bootstrap: str, topic: str, count: int) -> dict[int, list[bytes]]:
    """What read_committed readers of `topic` see, once it holds `count` records (or the time is up)."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        got = read_committed(bootstrap, topic) if topic in topic_names(bootstrap) else {}
        if sum(map(len, got.values())) >= count or time.monotonic() > deadline:
            return got
        time.sleep(0.5)


def mirrored_orders(a, b, tmp_path, count: int, **settings: str) -> tuple[Mirror, dict[int, list[bytes]]]:
    """`count` records in a 2-partition `orders` on A, mirrored to B: the mirror, and the records."""
    create_topic(a.bootstrap, "orders", 2)
    produce_numbered(a.bootstrap, "orders", 2, count)
    mirror = Mirror(tmp_path, properties(a, b, "A->B", **settings)).start()
    source, _ = wait_until_mirrored(a.bootstrap, "orders", b.bootstrap, "A.orders")
    return mirror, source


def test_a_source_topic_deleted_and_recreated_is_mirrored_from_its_beginning_after_the_old_one(clusters, tmp_path):
    a, b = clusters
    mirror, first = mirrored_orders(a, b, tmp_path, 200)

    # recreated while the mirror runs, with fewer records than the old topic had: every one of
    # them is below the source offset the old topic's pairs resume at
    delete_topic(a.bootstrap, "orders")
    create_topic(a.bootstrap, "orders", 2)
    produce_numbered(a.bootstrap, "orders", 2, 60, first=1000)
    second = read_committed(a.bootstrap, "orders")
    expected = {p: first[p] + second[p] for p in first}  # A.orders keeps both, in order
    target = wait_for_records(b.bootstrap, "A.orders", 260)
    assert exactly_once_in_order(expected, target) == [], mirror.log()[-3000:]

    # recreated while the mirror is stopped, with more records than the last pairs' offsets
    assert mirror.stop() == 0
    delete_topic(a.bootstrap, "orders")
    create_topic(a.bootstrap, "orders", 2)
    produce_numbered(a.bootstrap, "orders", 2, 300, first=2000)
    mirror.start()
    produce_numbered(a.bootstrap, "orders", 2, 40, first=3000)
    third = read_committed(a.bootstrap, "orders")
    expected = {p: first[p] + second[p] + third[p] for p in first}
    target = wait_for_records(b.bootstrap, "A.orders", 600)
    assert exactly_once_in_order(expected, target) == [], mirror.log()[-3000:]
    assert mirror.stop() == 0
    assert "Traceback" not in mirror.log()


def test_a_target_topic_deleted_while_mirroring_is_recreated_with_the_whole_source(clusters, tmp_path):
    a, b = clusters
    mirror, _ = mirrored_orders(a, b, tmp_path, 200)

    delete_topic(b.bootstrap, "A.orders")
    produce_numbered(a.bootstrap, "orders", 2, 60, first=1000)
    source, target = wait_until_mirrored(a.bootstrap, "orders", b.bootstrap, "A.orders")
    assert exactly_once_in_order(source, target) == [], mirror.log()[-3000:]

    # and while the mirror copies: the transaction writing to the deleted topic must not count
    writer = threading.Thread(target=produce_numbered, args=(a.bootstrap, "orders", 2, 2000, 0.05, 2000))
    writer.start()
    time.sleep(2)
    delete_topic(b.bootstrap, "A.orders")
    writer.join(TIMEOUT_S)
    assert not writer.is_alive()
    source, target = wait_until_mirrored(a.bootstrap, "orders", b.bootstrap, "A.orders")
    assert sum(map(len, source.values())) == 2260
    assert exactly_once_in_order(source, target) == [], mirror.log()[-3000:]
    assert mirror.stop() == 0
    assert "Traceback" not in mirror.log()


def test_every_transaction_checks_that_its_topics_were_not_recreated_meanwhile(clusters, tmp_path):
    a, b = clusters
    # no topic refresh during the test: only the check before each commit can notice
    mirror, first = mirrored_orders(a, b, tmp_path, 100, **{"A->B.refresh.topics.interval.seconds": "600"})

    # the consumer goes on at offset 50 of each partition of the new source topic: those records
    # must not be committed as if they followed the old topic's
    delete_topic(a.bootstrap, "orders")
    create_topic(a.bootstrap, "orders", 2)
    produce_numbered(a.bootstrap, "orders", 2, 300, first=1000)
    second = read_committed(a.bootstrap, "orders")
    expected = {p: first[p] + second[p] for p in first}
    target = wait_for_records(b.bootstrap, "A.orders", 400)
    assert exactly_once_in_order(expected, target) == [], mirror.log()[-3000:]

    # the target topic recreated by someone else: the producer writes into the new one, which
    # must get the whole source, not only what follows the old topic's pairs
    delete_topic(b.bootstrap, "A.orders")
    create_topic(b.bootstrap, "A.orders", 2)
    produce_numbered(a.bootstrap, "orders", 2, 60, first=2000)
    source, target = wait_until_mirrored(a.bootstrap, "orders", b.bootstrap, "A.orders")
    assert sum(map(len, source.values())) == 360
    assert exactly_once_in_order(source, target) == [], mirror.log()[-3000:]
    assert mirror.stop() == 0
    assert "Traceback" not in mirror.log()


def test_the_mirror_rides_out_network_cuts_to_the_source_and_to_the_target(tmp_path):
    proxies = {"a": CuttableProxy(), "b": CuttableProxy()}
    brokers = {}
    try:
        for name, proxy in proxies.items():
            # PLAINTEXT for the test's own clients; REMOTE, advertised at the proxy, for the mirror
            broker = BrokerProcess(tmp_path / name)
            remote_port = free_port()
            broker.overrides.update(
                {
                    "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},REMOTE://127.0.0.1:{remote_port}",
                    "advertised.listeners": f"PLAINTEXT://127.0.0.1:{broker.port},REMOTE://127.0.0.1:{proxy.port}",
                    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,REMOTE:PLAINTEXT",
                    "inter.broker.listener.name": "PLAINTEXT",
                    **TRANSACTIONS,
                }
            )
            brokers[name] = broker.start()
            proxy.start(remote_port)
        a, b = brokers["a"], brokers["b"]
        create_topic(a.bootstrap, "orders", 2)
        writer = threading.Thread(target=produce_numbered, args=(a.bootstrap, "orders", 2, 4000, 0.05))
        writer.start()
        text = mirror_properties(f"127.0.0.1:{proxies['a'].port}", f"127.0.0.1:{proxies['b'].port}", "A->B")
        mirror = Mirror(tmp_path, text).start()
        for side in ("a", "b"):  # the source cut off while it is written, then the target
            time.sleep(3)
            proxies[side].cut()
            time.sleep(6)
            proxies[side].heal()
        writer.join(TIMEOUT_S)
        assert not writer.is_alive()
        source, target = wait_until_mirrored(a.bootstrap, "orders", b.bootstrap, "A.orders")
        assert mirror.stop() == 0
        assert sum(map(len, source.values())) == 4000
        assert exactly_once_in_order(source, target) == [], mirror.log()[-3000:]
    finally:
        for proxy in proxies.values():
            proxy.close()
        for broker in brokers.values():
            broker.kill()


def test_a_second_mirror_of_the_same_flow_fences_the_first(clusters, tmp_path):
    a, b = clusters
    create_topic(a.bootstrap, "orders", 2)
    writer = threading.Thread(target=produce_numbered, args=(a.bootstrap, "orders", 2, 3000, 0.05))
    writer.start()
    (tmp_path / "first").mkdir()
    (tmp_path / "second").mkdir()
    first = Mirror(tmp_path / "first", properties(a, b, "A->B")).start()
    time.sleep(3)
    second = Mirror(tmp_path / "second", properties(a, b, "A->B")).start()
    # the first finds out at its next transaction, while the writer still writes
    assert first.process.wait(TIMEOUT_S) == 1
    assert "fenced by another instance" in first.log()
    writer.join(TIMEOUT_S)
    source, target = wait_until_mirrored(a.bootstrap, "orders", b.bootstrap, "A.orders")
    assert exactly_once_in_order(source, target) == []
    assert second.stop() == 0


def test_target_topics_follow_partitions_and_configs_and_leave_out_aborted_transactions(clusters, tmp_path):
    a, b = clusters
    create_topic(a.bootstrap, "payments", 2, **{"retention.ms": "86400000", "min.insync.replicas": "1"})
    produce_numbered(a.bootstrap, "payments", 2, 100)
    aborting = Producer({"bootstrap.servers": a.bootstrap, "transactional.id": "aborting"})
    aborting.init_transactions(TIMEOUT_S)
    aborting.begin_transaction()
    aborting.produce("payments", b"aborted", partition=0)
    aborting.abort_transaction(TIMEOUT_S)
    mirror = Mirror(tmp_path, properties(a, b, "A->B")).start()
    source, target = wait_until_mirrored(a.bootstrap, "payments", b.bootstrap, "A.payments")
    assert exactly_once_in_order(source, target) == []
    assert b"aborted" not in target[0]

    admin_a, admin_b = AdminClient({"bootstrap.servers": a.bootstrap}), AdminClient({"bootstrap.servers": b.bootstrap})
    configs = admin_b.describe_configs([ConfigResource("topic", "A.payments")])
    entries = next(iter(configs.values())).result(TIMEOUT_S)
    assert entries["retention.ms"].value == "86400000"
    assert entries["min.insync.replicas"].is_default  # excluded, as MirrorMaker 2's filter does

    admin_a.create_partitions([NewPartitions("payments", 3)])["payments"].result(TIMEOUT_S)
    retention = ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource("topic", "payments", incremental_configs=[retention])
    next(iter(admin_a.incremental_alter_configs([resource]).values())).result(TIMEOUT_S)
    produce_numbered(a.bootstrap, "payments", 3, 90)
    source, target = wait_until_mirrored(a.bootstrap, "payments", b.bootstrap, "A.payments")
    assert len(source) == 3
    assert exactly_once_in_order(source, target) == []
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        entries = next(iter(admin_b.describe_configs([ConfigResource("topic", "A.payments")]).values())).result(TIMEOUT_S)
        if entries["retention.ms"].value == "3600000":
            break
        time.sleep(0.5)
    assert entries["retention.ms"].value == "3600000"

    back_to_default = ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)
    resource = ConfigResource("topic", "payments", incremental_configs=[back_to_default])
    next(iter(admin_a.incremental_alter_configs([resource]).values())).result(TIMEOUT_S)
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        entries = next(iter(admin_b.describe_configs([ConfigResource("topic", "A.payments")]).values())).result(TIMEOUT_S)
        if entries["retention.ms"].is_default:
            break
        time.sleep(0.5)
    assert entries["retention.ms"].is_default
    assert mirror.stop() == 0


def test_active_active_mirrors_each_way_without_loops_and_emits_heartbeats(clusters, tmp_path):
    a, b = clusters
    create_topic(a.bootstrap, "events", 2)
    create_topic(b.bootstrap, "events", 2)
    produce_numbered(a.bootstrap, "events", 2, 200)
    produce_numbered(b.bootstrap, "events", 2, 300)
    mirror = Mirror(tmp_path, properties(a, b, "A->B", "B->A")).start()

    source, target = wait_until_mirrored(a.bootstrap, "events", b.bootstrap, "A.events")
    assert exactly_once_in_order(source, target) == []
    source, target = wait_until_mirrored(b.bootstrap, "events", a.bootstrap, "B.events")
    assert exactly_once_in_order(source, target) == []
    # Each side's heartbeats arrive on the other, so both flows have run several refreshes of
    # their topic lists by then: a loop would have made B.A.* or A.B.* topics.
    for cluster, remote in ((a, "B.heartbeats"), (b, "A.heartbeats")):
        deadline = time.monotonic() + TIMEOUT_S
        while remote not in topic_names(cluster.bootstrap) and time.monotonic() < deadline:
            time.sleep(0.5)
    time.sleep(3)  # three more refreshes (refresh.topics.interval.seconds = 1)
    for cluster in (a, b):
        looped = {t for t in topic_names(cluster.bootstrap) if t.startswith(("A.B.", "B.A.", "A.A.", "B.B."))}
        assert looped == set()

    heartbeats = read_committed(b.bootstrap, "A.heartbeats")[0]
    assert heartbeats
    # MirrorMaker 2's emitter for the pair B->A writes Heartbeat(B, A) into A's heartbeats topic;
    # A->B copies them to B, where their age is the replication latency an operator reads.
    consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "heartbeat-reader"})
    consumer.assign([TopicPartition("A.heartbeats", 0, 0)])
    message = consumer.poll(TIMEOUT_S)
    consumer.close()
    heartbeat = decode_heartbeat(message.key(), message.value())
    assert (heartbeat.source_alias, heartbeat.target_alias) == ("B", "A")
    assert abs(heartbeat.timestamp_ms - message.timestamp()[1]) < 1000
    assert mirror.stop() == 0
    assert "Traceback" not in mirror.log()


def test_a_group_moved_to_the_target_resumes_from_its_translated_offsets(clusters, tmp_path):
    a, b = clusters
    create_topic(a.bootstrap, "orders", 2)
    settings = {
        "emit.checkpoints.interval.seconds": "1",
        "sync.group.offsets.enabled": "true",
        "sync.group.offsets.interval.seconds": "1",
    }
    mirror = Mirror(tmp_path, properties(a, b, "A->B", **settings)).start()
    for _ in range(3):  # three rounds, so that the mirror commits (and pairs) several times
        produce_numbered(a.bootstrap, "orders", 2, 100)
        wait_until_mirrored(a.bootstrap, "orders", b.bootstrap, "A.orders")
    consume_and_commit(a.bootstrap, "billing", "orders", 175)
    source_positions = committed(a.bootstrap, "billing")
    wait_for_committed(b.bootstrap, "billing", {("A.orders", 0), ("A.orders", 1)})
    assert mirror.stop() == 0

    source = read_committed(a.bootstrap, "orders")
    moved = read_as_group(b.bootstrap, "billing", "A.orders")
    # fewer repeats than one mirror transaction holds: here a round, 50 records per partition
    assert failover_problems(source, source_positions, "orders", moved, max_repeats=49) == []

    checkpoints = [decode_checkpoint(m_key, m_value) for m_key, m_value in read_keyed(b.bootstrap, "A.checkpoints.internal")]
    assert {(c.group, c.topic) for c in checkpoints} == {("billing", "A.orders")}


def read_keyed(bootstrap: str, topic: str) -> list[tuple[bytes, bytes]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "mirror-checker", "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, 0)])
    records = []
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None:
            continue
        if message.error() is not None:
            break
        records.append((message.key(), message.value()))
    consumer.close()
    return records


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("clusters = A, B\nA.bootstrap.servers = a:1\nB.bootstrap.servers = b:1\nA->B.enabled = true\ntasks.max = 4\n", "'tasks.max'"),
        ("clusters = A, B\nA.bootstrap.servers = a:1\nB.bootstrap.servers = b:1\n", "no flow is enabled"),
    ],
)
def test_the_mirror_refuses_to_start_on_a_bad_configuration(tmp_path, text, message):
    config = tmp_path / "mirror.properties"
    config.write_text(text)
    result = subprocess.run(
        [sys.executable, "-m", "replication.mirror.cli", str(config)], cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert result.returncode == 2
    assert message in result.stderr
