"""A throttled reassignment on three brokers (real ZooKeeper): `logway-admin reassign --execute
--throttle` (the console script) sets leader/follower.replication.throttled.rate on the brokers
and the topic's throttled replica lists, as Kafka's kafka-reassign-partitions.sh does; the new
replica's copy is then held near the throttle (replication quotas, broker/replication_quotas.py)
instead of going as fast as the brokers can, and `--verify` removes the throttle once done."""

import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import ConfigResource, ConfigSource

from tests.cluster.checker import replicas_agree
from tests.cluster.clients import SMALL_INDEXES, TIMEOUT_S, admin_client, agreed_view, read_values, wait_formed
from tests.cluster.harness import wait_until
from tests.cluster.test_admin_cli import logway_admin
from tests.harness import unique_topic

pytestmark = pytest.mark.slow

RECORDS, VALUE_BYTES = 2400, 1000  # about 2.4 MB of records
THROTTLE = 300_000  # B/s: the copy takes about 8 s, unthrottled well under one
# Small fetches, so that the throttle is kept to within a fetch or two.
FETCH_BYTES = 65_536


def _replica_bytes(directory: Path) -> int:
    """The bytes of a replica's segments on disk (its progress while it is copied)."""
    return sum(f.stat().st_size for f in directory.glob("*.log")) if directory.exists() else 0


def _broker_throttles(cluster, broker_id: int) -> dict[str, str]:
    resource = ConfigResource("BROKER", str(broker_id))
    admin = admin_client(cluster.bootstrap)  # kept: the futures die with their client
    described = admin.describe_configs([resource])[resource].result(timeout=TIMEOUT_S)
    return {
        name: entry.value for name, entry in described.items()
        if name.endswith("replication.throttled.rate")
        and entry.source in (ConfigSource.DYNAMIC_BROKER_CONFIG, ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    }


def test_a_throttled_reassignment_copies_at_the_throttle_and_verify_removes_it(cluster_factory, tmp_path):
    cluster = cluster_factory(overrides={**SMALL_INDEXES, "replica.fetch.max.bytes": str(FETCH_BYTES)})
    wait_formed(cluster)
    topic = unique_topic("throttled")
    logway_admin(cluster, "topics", "--create", "--topic", topic, "--replica-assignment", "1")
    wait_until(lambda: agreed_view(cluster, topic, (1, 2, 3), 1), TIMEOUT_S, "metadata agreement")
    # Small batches: a fetch returns whole batches, so they bound how far a fetch may overshoot.
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 20, "batch.size": 16384})
    for index in range(RECORDS):
        producer.produce(topic, value=index.to_bytes(4, "big") * (VALUE_BYTES // 4))
        producer.poll(0)
    assert producer.flush(TIMEOUT_S) == 0
    source = cluster.broker(1).data_dirs[0] / f"{topic}-0"
    total = _replica_bytes(source)
    assert total > 2_000_000

    plan = tmp_path / "plan.json"
    plan.write_text(f'{{"version":1,"partitions":[{{"topic":"{topic}","partition":0,"replicas":[1,2]}}]}}')
    started = time.monotonic()
    executed = logway_admin(cluster, "reassign", "--execute", "--reassignment-json-file", str(plan),
                            "--throttle", str(THROTTLE))
    assert f"The inter-broker throttle limit was set to {THROTTLE} B/s" in executed.stdout
    assert _broker_throttles(cluster, 1) == {
        "leader.replication.throttled.rate": str(THROTTLE), "follower.replication.throttled.rate": str(THROTTLE),
    }

    # The new replica's progress, sampled until it holds everything: never far above the
    # throttle (a window's worth and a couple of fetches of slack).
    target = cluster.broker(2).data_dirs[0] / f"{topic}-0"
    progress = []
    deadline = started + 4 * total / THROTTLE + TIMEOUT_S
    while (copied := _replica_bytes(target)) < total and time.monotonic() < deadline:
        progress.append((time.monotonic() - started, copied))
        time.sleep(0.25)
    elapsed = time.monotonic() - started
    assert copied >= total, f"copied {copied} of {total} B in {elapsed:.1f}s"
    for at, copied_then in progress:
        assert copied_then <= 1.5 * THROTTLE * at + THROTTLE + 2 * FETCH_BYTES, (at, copied_then, progress)
    assert elapsed >= 0.6 * total / THROTTLE, f"{total} B copied in {elapsed:.1f}s despite the throttle"

    verified = logway_admin(cluster, "reassign", "--verify", "--reassignment-json-file", str(plan), "--wait").stdout
    assert f"Reassignment of partition {topic}-0 is completed." in verified
    assert "Clearing broker-level throttles on brokers 1,2,3" in verified
    assert f"Clearing topic-level throttles on topic {topic}" in verified
    assert _broker_throttles(cluster, 1) == {} and _broker_throttles(cluster, 2) == {}
    after = wait_until(lambda: agreed_view(cluster, topic, (1, 2, 3), 1), TIMEOUT_S, "metadata agreement")
    assert after[0][1] == (1, 2) and sorted(after[0][2]) == [1, 2]
    assert replicas_agree([str(source), str(target)]) is None
    values = read_values(cluster.bootstrap, topic, RECORDS)
    assert [int.from_bytes(v[:4], "big") for v in values] == list(range(RECORDS))
