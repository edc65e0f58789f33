"""JBOD with real clients: a standalone broker with two log.dirs. kafka-python's admin client
describes the log dirs (DescribeLogDirs) and moves a replica from one to the other
(AlterReplicaLogDirs) while confluent-kafka produces to it with acks=all; every acknowledged
record reads back at its offset, and afterwards the partition's files are only in the target
dir. A kill -9 in the middle of a move loses nothing either: the restarted broker finishes the
move from the future replica it finds. And `logway-admin log-dirs --describe` (the console
script) shows the dirs and their replicas as Kafka's kafka-log-dirs.sh does.
"""

import json
import time
from pathlib import Path

import pytest
from kafka.admin import KafkaAdminClient

from tests.compat.test_admin_cli import logway_admin
from tests.compat.test_restart import (
    TIMEOUT_S,
    Acked,
    Streamer,
    check_partition,
    create_topic,
    make_producer,
    produce,
)
from tests.harness import BrokerProcess, unique_topic

pytestmark = pytest.mark.compat

BASE_TS = 1_700_000_000_000
DELETE_DELAY_MS = 200


# A move copies at most this many bytes a second in the kill test: a throttled copy of its 20 MB
# takes about five seconds, so the kill lands in the middle of it however fast the disk and the
# scheduler are (unthrottled, a copy from the page cache can finish before the kill is sent).
MOVE_BYTES_PER_SECOND = 4_000_000


def start_broker(tmp_path, **config: str) -> BrokerProcess:
    """A broker with two log dirs, a and b, under tmp_path."""
    return BrokerProcess(
        tmp_path / "data",
        {"log.dirs": f"{tmp_path / 'a'},{tmp_path / 'b'}", "log.segment.delete.delay.ms": str(DELETE_DELAY_MS), **config},
    ).start()


@pytest.fixture
def broker(request, tmp_path):
    process = start_broker(tmp_path, **getattr(request, "param", {}))
    yield process
    process.kill()


@pytest.fixture
def admin(broker):
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=TIMEOUT_S * 1000)
    yield client
    client.close()


def replicas(admin, topic: str) -> dict[str, list[tuple[int, bool]]]:
    """Log dir -> (partition, is future) of `topic`'s replicas in it."""
    [broker] = admin.describe_log_dirs(topic_partitions=[topic])
    found = {}
    for log_dir in broker["log_dirs"]:
        assert log_dir["error_code"] == 0, log_dir
        found[log_dir["log_dir"]] = [
            (p["partition_index"], p["is_future_key"]) for t in log_dir["topics"] if t["name"] == topic for p in t["partitions"]
        ]
    return found


def wait_until(condition, what: str, timeout_s: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout_s} s: {what}")


def partition_dirs(log_dir: str, topic: str) -> list[str]:
    return sorted(name for name in Path(log_dir).iterdir() if name.name.startswith(f"{topic}-0"))


def seeded(broker, admin, prefix: str, count: int, size: int) -> tuple[str, Acked, str, str]:
    """A new one-partition topic holding `count` records of `size` bytes: (topic, what was
    acknowledged, the log dir of its replica, the other log dir)."""
    topic = unique_topic(prefix)
    create_topic(broker, topic, 1)
    acked = Acked()
    produce(make_producer(broker), topic, acked, range(count), BASE_TS, 1, size=size)
    [source] = [d for d, found in replicas(admin, topic).items() if found == [(0, False)]]
    [target] = [d for d in replicas(admin, topic) if d != source]
    return topic, acked, source, target


def move(admin, topic: str, target: str) -> None:
    answer = admin.alter_replica_log_dirs({(topic, 0, 0): target})
    assert [error.__name__ for error in answer.values()] == ["NoError"]


def test_a_replica_moves_to_the_other_log_dir_while_a_producer_writes_to_it(broker, admin):
    topic, acked, source, target = seeded(broker, admin, "move", 20_000, 100)
    streamer = Streamer(broker, topic, acked, 20_000, BASE_TS, 1, limit=200_000, size=100)
    streamer.start()
    try:
        wait_until(lambda: acked.count() >= 22_000, "records acknowledged before the move")
        move(admin, topic, target)
        wait_until(lambda: replicas(admin, topic) == {source: [], target: [(0, False)]}, "the move")
        moved_at = acked.count()
        wait_until(lambda: acked.count() >= moved_at + 2_000, "records acknowledged after the move")
    finally:
        streamer.stop_requested.set()
        streamer.join(TIMEOUT_S + 10)
    assert streamer.unflushed == 0 and acked.errors == []
    sent = set(range(20_000 + streamer.sent))
    check_partition(broker, topic, 0, acked, sent, exact=True)
    wait_until(lambda: partition_dirs(source, topic) == [], "the old replica's files removed")
    assert [path.name for path in partition_dirs(target, topic)] == [f"{topic}-0"]
    assert " ERROR " not in broker.log() and "Traceback" not in broker.log()


@pytest.mark.parametrize(
    "broker",
    [{"replica.alter.log.dirs.io.max.bytes.per.second": str(MOVE_BYTES_PER_SECOND)}],
    indirect=True,
    ids=["move-throttled"],
)
def test_a_kill_mid_move_loses_nothing_and_the_restarted_broker_finishes_the_move(broker, admin):
    topic, acked, source, target = seeded(broker, admin, "kill", 2_000, 10_000)
    streamer = Streamer(broker, topic, acked, 2_000, BASE_TS, 1, limit=200_000, size=100)
    streamer.start()
    try:
        wait_until(lambda: acked.count() >= 3_000, "records acknowledged before the move")
        move(admin, topic, target)
        broker.kill()
    finally:
        streamer.stop_requested.set()
        streamer.join(TIMEOUT_S + 10)
    assert streamer.unflushed == 0
    assert [path.name.endswith("-future") for path in partition_dirs(target, topic)] == [True], "the kill came too late"
    acked.errors.clear()  # records sent once the broker was gone failed, as they should
    broker.start()
    restarted = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=TIMEOUT_S * 1000)
    try:
        wait_until(lambda: replicas(restarted, topic) == {source: [], target: [(0, False)]}, "the move finished")
    finally:
        restarted.close()
    check_partition(broker, topic, 0, acked, set(range(2_000 + streamer.sent)), exact=False)
    wait_until(lambda: partition_dirs(source, topic) == [], "the old replica's files removed")
    assert [path.name for path in partition_dirs(target, topic)] == [f"{topic}-0"]


def test_logway_admin_log_dirs_shows_each_dir_with_its_replicas(broker, admin):
    topic, _, source, target = seeded(broker, admin, "cli", 100, 100)
    out = logway_admin(broker, "log-dirs", "--describe", "--topic-list", topic).stdout.splitlines()
    assert out[:2] == ["Querying brokers for log directories information", "Received log directory information from brokers 0"]
    [described] = json.loads(out[2])["brokers"]
    dirs = {d["logDir"]: d for d in described["logDirs"]}
    assert set(dirs) == {source, target} and all(d["error"] is None for d in dirs.values())
    [replica] = dirs[source]["partitions"]
    assert (replica["partition"], replica["offsetLag"], replica["isFuture"]) == (f"{topic}-0", 0, False)
    assert replica["size"] > 100 * 100 and dirs[target]["partitions"] == []
