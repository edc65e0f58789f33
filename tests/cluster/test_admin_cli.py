"""`logway-admin reassign`, `elect` and `topics --describe` on three brokers (real ZooKeeper):
the console script run as an operator runs it, what it changed checked in every broker's
metadata."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cluster.clients import TIMEOUT_S, agreed_view
from tests.cluster.harness import wait_until
from tests.harness import unique_topic

pytestmark = pytest.mark.slow

LOGWAY_ADMIN = Path(sys.executable).with_name("logway-admin")


def logway_admin(cluster, *args: str, expect: int = 0) -> subprocess.CompletedProcess:
    command = [str(LOGWAY_ADMIN), args[0], "--bootstrap-server", cluster.bootstrap, *args[1:]]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == expect, f"{command}: {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result


def test_reassign_generates_executes_and_verifies(cluster, tmp_path):
    """Without --throttle: the brokers' leader/follower.replication.throttled.rate are dynamic
    broker configs, which logway does not take yet (the throttle plan: tests/unit)."""
    topic = unique_topic("admin-reassign")
    logway_admin(cluster, "topics", "--create", "--topic", topic, "--replica-assignment", "1:2,2:1")
    wait_until(lambda: agreed_view(cluster, topic, (1, 2, 3), 2), TIMEOUT_S, "metadata agreement")
    described = logway_admin(cluster, "topics", "--describe", "--topic", topic).stdout.splitlines()
    assert "\tPartitionCount: 2\tReplicationFactor: 2\t" in described[0]

    to_move = tmp_path / "topics.json"
    to_move.write_text(json.dumps({"version": 1, "topics": [{"topic": topic}]}))
    generated = logway_admin(cluster, "reassign", "--generate", "--topics-to-move-json-file", str(to_move),
                             "--broker-list", "2,3").stdout.split("\n\n")
    proposed = json.loads(generated[1].splitlines()[1])
    assert all(set(p["replicas"]) == {2, 3} for p in proposed["partitions"])

    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [2, 3]}, {"topic": topic, "partition": 1, "replicas": [3, 2]}]}))
    executed = logway_admin(cluster, "reassign", "--execute", "--reassignment-json-file", str(plan), "--wait")
    assert "Save this to use as the --reassignment-json-file option during rollback" in executed.stdout
    assert f"Successfully started partition reassignments for {topic}-0,{topic}-1" in executed.stdout
    assert "Reassigning partitions: 2/2 done" in executed.stderr
    after = wait_until(lambda: agreed_view(cluster, topic, (1, 2, 3), 2), TIMEOUT_S, "metadata agreement")
    assert after[0][1] == (2, 3) and after[1][1] == (3, 2)

    verified = logway_admin(cluster, "reassign", "--verify", "--reassignment-json-file", str(plan)).stdout
    assert f"Reassignment of partition {topic}-0 is completed." in verified
    assert f"Clearing topic-level throttles on topic {topic}" in verified


def test_elect_gives_leadership_back_to_the_preferred_replica(cluster):
    topic = unique_topic("admin-elect")
    logway_admin(cluster, "topics", "--create", "--topic", topic, "--replica-assignment", "1:2")
    wait_until(lambda: agreed_view(cluster, topic, (1, 2, 3), 1), TIMEOUT_S, "metadata agreement")
    assert cluster.broker(1).stop() == 0  # controlled shutdown: broker 2 leads
    cluster.broker(1).start()
    wait_until(
        lambda: (after := agreed_view(cluster, topic, (1, 2, 3), 1)) and after[0][0] == 2 and sorted(after[0][2]) == [1, 2],
        TIMEOUT_S, "broker 1 back in the ISR under leader 2",
    )
    elected = logway_admin(cluster, "elect", "--election-type", "PREFERRED", "--topic", topic, "--partition", "0")
    assert elected.stdout == f"Successfully completed leader election (PREFERRED) for partitions {topic}-0\n"
    wait_until(lambda: (after := agreed_view(cluster, topic, (1, 2, 3), 1)) and after[0][0] == 1,
               TIMEOUT_S, "the preferred replica leads again")
    again = logway_admin(cluster, "elect", "--election-type", "PREFERRED", "--topic", topic, "--partition", "0")
    assert again.stdout == f"Valid replica already elected for partitions {topic}-0\n"


def test_describe_filters_find_the_partitions_a_dead_broker_leaves_behind(cluster):
    shared, alone = unique_topic("admin-under-replicated"), unique_topic("admin-unavailable")
    logway_admin(cluster, "topics", "--create", "--topic", shared, "--replica-assignment", "1:3")
    logway_admin(cluster, "topics", "--create", "--topic", alone, "--replica-assignment", "3")
    wait_until(lambda: agreed_view(cluster, shared, (1, 2, 3), 1) and agreed_view(cluster, alone, (1, 2, 3), 1),
               TIMEOUT_S, "metadata agreement")
    assert logway_admin(cluster, "topics", "--describe", "--under-replicated-partitions", "--topic", "admin-.*").stdout == ""
    cluster.broker(3).kill()

    def reported(flag: str) -> str:
        out = logway_admin(cluster, "topics", "--describe", flag, "--topic", "admin-.*").stdout
        return out or None

    under = wait_until(lambda: reported("--under-replicated-partitions"), TIMEOUT_S, "an under-replicated partition")
    assert f"\tTopic: {shared}\tPartition: 0\tLeader: 1\tReplicas: 1,3\tIsr: 1\t" in under
    unavailable = wait_until(lambda: reported("--unavailable-partitions"), TIMEOUT_S, "an unavailable partition")
    assert f"\tTopic: {alone}\tPartition: 0\tLeader: none\tReplicas: 3\t" in unavailable
