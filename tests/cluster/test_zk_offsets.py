"""`logway-admin zk-offsets` on a broker and a real ZooKeeper: offsets written into
/consumers/<group>/offsets as Kafka's old Scala consumer wrote them (kazoo, decimal text) are
imported (those outside the log moved to its nearest end), a confluent-kafka consumer of the
group resumes at them, its later commits are exported back into the znodes; and the
migration's dual-commit window (a client committing to both places) is checked with --verify."""

import json
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.cluster.clients import TIMEOUT_S, admin_client, create_topic
from tests.cluster.harness import wait_until
from tests.cluster.test_admin_cli import logway_admin
from tests.harness import unique_topic

pytestmark = pytest.mark.slow

RECORDS = 10  # per partition


def zk_offsets(cluster, *args: str, expect: int = 0):
    return logway_admin(cluster, "zk-offsets", "--zookeeper", cluster.zookeeper_connect, *args, expect=expect)


def produce(cluster, topic: str, partitions: int) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap})
    for partition in range(partitions):
        for i in range(RECORDS):
            producer.produce(topic, value=f"{partition}-{i}".encode(), partition=partition)
    assert producer.flush(TIMEOUT_S) == 0


def old_consumer_commit(cluster, group: str, topic: str, offsets: dict[int, bytes]) -> None:
    """What the old consumer's commitOffsetToZooKeeper did: the offset as text in a persistent znode."""
    with cluster.zookeeper_client() as zk:
        for partition, value in offsets.items():
            path = f"/consumers/{group}/offsets/{topic}/{partition}"
            if zk.exists(path):
                zk.set(path, value)
            else:
                zk.create(path, value, makepath=True)


def znodes(cluster, group: str, topic: str) -> dict[int, bytes]:
    with cluster.zookeeper_client() as zk:
        base = f"/consumers/{group}/offsets/{topic}"
        return {int(p): zk.get(f"{base}/{p}")[0] for p in zk.get_children(base)}


def one_broker(cluster_factory):
    """A broker of a ZooKeeper cluster, once it knows itself the controller (topics can be created)."""
    cluster = cluster_factory(brokers=1)
    wait_until(lambda: admin_client(cluster.bootstrap).list_topics(timeout=5).controller_id == 1, TIMEOUT_S,
               "the broker to become the controller")
    return cluster


def consumer(cluster, group: str, topic: str) -> Consumer:
    member = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False,
                       "auto.offset.reset": "earliest", "session.timeout.ms": 6000})
    member.subscribe([topic])
    return member


def consume(member: Consumer, count: int) -> list:
    """`count` messages (fewer at the timeout)."""
    messages = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(messages) < count and time.monotonic() < deadline:
        message = member.poll(1)
        if message is not None and message.error() is None:
            messages.append(message)
    return messages


def rows(output: str) -> dict[tuple[str, str], list[str]]:
    """(topic, partition) -> [zk offset, broker offset, action] of a zk-offsets table."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("GROUP "))
    table = {}
    for line in lines[start + 1:]:
        if not line:
            break  # the table ends; a summary may follow
        cells = line.split(None, 5)
        table[(cells[1], cells[2])] = cells[3:]
    return table


def test_import_resume_and_export_through_zookeeper(cluster_factory, tmp_path):
    cluster = one_broker(cluster_factory)
    topic, gone, group = unique_topic("zk-import"), unique_topic("zk-gone"), unique_topic("old-group")
    create_topic(cluster, topic, 3, 1)
    produce(cluster, topic, 3)
    # partition 1's log starts after the offset the old consumer kept for it
    deletion = tmp_path / "delete.json"
    deletion.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 1, "offset": 8}]}))
    logway_admin(cluster, "delete-records", "--offset-json-file", str(deletion))
    old_consumer_commit(cluster, group, topic, {0: b"3", 1: b"7", 2: b"50"})
    old_consumer_commit(cluster, group, gone, {0: b"5"})

    dry = zk_offsets(cluster, "--import", "--group", group)
    assert rows(dry.stdout) == {
        (topic, "0"): ["3", "-", "import"],
        (topic, "1"): ["7", "-", "import log start 8"],
        (topic, "2"): ["50", "-", f"import log end {RECORDS}"],
        (gone, "0"): ["5", "-", "skip: unknown topic"],
    }
    assert f"skipping {gone}-0 of group {group}" in dry.stderr and "UNKNOWN_TOPIC_OR_PARTITION" in dry.stderr
    assert "(7) of " + f"{topic}-1 of group {group} is lower than the log start offset; importing 8" in dry.stderr
    assert "a dry run" in dry.stderr
    # the dry run changed nothing: the group has no offsets in the broker
    assert rows(zk_offsets(cluster, "--import", "--group", group).stdout)[(topic, "0")] == ["3", "-", "import"]

    zk_offsets(cluster, "--import", "--group", group, "--execute")
    assert rows(zk_offsets(cluster, "--import", "--group", group).stdout)[(topic, "2")] == ["50", "10", "import log end 10"]

    member = consumer(cluster, group, topic)
    expected = (RECORDS - 3) + (RECORDS - 8)
    read = consume(member, expected)
    first = {}
    for message in read:
        first.setdefault(message.partition(), message.offset())
    assert len(read) == expected and first == {0: 3, 1: 8}, "the consumer resumes at the imported offsets"
    member.commit(asynchronous=False)
    committed = member.committed([TopicPartition(topic, p) for p in range(3)], timeout=TIMEOUT_S)
    assert [tp.offset for tp in committed] == [RECORDS] * 3
    member.close()

    exported = zk_offsets(cluster, "--export", "--group", group, "--execute")
    assert rows(exported.stdout) == {
        (topic, "0"): ["3", "10", "export"], (topic, "1"): ["7", "10", "export"], (topic, "2"): ["50", "10", "export"],
    }
    assert znodes(cluster, group, topic) == {0: b"10", 1: b"10", 2: b"10"}

    verified = zk_offsets(cluster, "--verify", "--group", group, expect=1)
    assert rows(verified.stdout)[(topic, "0")] == ["10", "10", "same"]
    assert rows(verified.stdout)[(gone, "0")] == ["5", "-", "only in zookeeper"]
    assert "1 of 4 partitions differ." in verified.stdout


def test_dual_commit_window_checked_by_verify(cluster_factory):
    cluster = one_broker(cluster_factory)
    topic, group = unique_topic("zk-dual"), unique_topic("dual-group")
    create_topic(cluster, topic, 2, 1)
    produce(cluster, topic, 2)
    member = consumer(cluster, group, topic)
    # offsets.storage=kafka with dual.commit.enabled=true: each commit goes to the broker, then,
    # once the broker took it, to ZooKeeper
    for _ in range(3):
        assert len(consume(member, 4)) == 4
        offsets = member.commit(asynchronous=False)
        old_consumer_commit(cluster, group, topic, {tp.partition: str(tp.offset).encode() for tp in offsets})

    # the group has a live member in the broker: importing over it is refused
    refused = zk_offsets(cluster, "--import", "--group", group, "--execute", expect=1)
    assert f"Offsets can only be imported if the group '{group}' is inactive, but the current state is Stable" in refused.stdout

    agreed = zk_offsets(cluster, "--verify", "--group", group)
    assert {r[2] for r in rows(agreed.stdout).values()} == {"same"}
    assert "ZooKeeper and the broker agree on all" in agreed.stdout

    # one commit after dual commit was turned off: the broker moves on, ZooKeeper does not
    assert len(consume(member, 4)) == 4
    moved = {tp.partition: tp.offset for tp in member.commit(asynchronous=False)}
    member.close()
    differing = zk_offsets(cluster, "--verify", "--group", group, expect=1)
    table = rows(differing.stdout)
    assert any(cells[2] == "differ" and cells[1] == str(moved[int(p)]) for (_, p), cells in table.items())

    # an old consumer of the group still registered in ZooKeeper: exporting under it is refused
    with cluster.zookeeper_client() as zk:
        zk.create(f"/consumers/{group}/ids/old-consumer-1", b"{}", ephemeral=True, makepath=True)
        refused = zk_offsets(cluster, "--export", "--group", group, "--execute", expect=1)
    assert "has no consumers registered in ZooKeeper, but it has 1" in refused.stdout

    zk_offsets(cluster, "--export", "--group", group, "--execute")
    assert {r[2] for r in rows(zk_offsets(cluster, "--verify", "--group", group).stdout).values()} == {"same"}


def test_a_group_without_offsets_and_a_missing_chroot_are_errors(cluster_factory):
    cluster = one_broker(cluster_factory)
    nobody = unique_topic("no-such-group")
    for action, where in (("--import", "in ZooKeeper"), ("--export", "committed in the broker"),
                          ("--verify", "in ZooKeeper or in the broker")):
        failed = zk_offsets(cluster, action, "--group", nobody, expect=1)
        assert f"Error: Consumer group '{nobody}' has no offsets {where}." in failed.stdout
    zk_offsets(cluster, "--import", "--all-groups")  # none at all is no error when none was named

    missing = cluster.zookeeper.connect_string + "/no-such-chroot"
    failed = logway_admin(cluster, "zk-offsets", "--zookeeper", missing, "--verify", "--all-groups", expect=1)
    assert "has no /no-such-chroot" in failed.stderr
    with cluster.zookeeper_client(chroot="") as zk:
        assert zk.exists("/no-such-chroot") is None
