"""The metrics of a three-broker cluster (real ZooKeeper and broker processes), each broker
serving metrics.listener: the controller, ZooKeeper session, ISR, under-replicated and offline
partition metrics while a broker is paused and then killed."""

import urllib.error
import urllib.request

import pytest
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from broker.local_cluster import free_port
from tests.cluster.clients import (
    TIMEOUT_S,
    create_topic,
    full_isrs,
    topic_view,
    wait_formed,
    zk_controller,
    zk_controller_or_none,
)
from tests.cluster.harness import wait_until
from tests.harness import unique_topic

pytestmark = pytest.mark.slow

# A follower is out of the ISR 2 s after it stops fetching: well within a pause shorter than the
# ZooKeeper session timeout (6 s), so the leader's own ISR shrink is what is seen.
OVERRIDES = {"replica.lag.time.max.ms": "2000"}


def metered_cluster(cluster_factory):
    cluster = cluster_factory(overrides=OVERRIDES, start=False)
    for broker in cluster.brokers.values():
        broker.metrics_url = f"http://127.0.0.1:{free_port()}"
        broker.settings["metrics.listener"] = broker.metrics_url
    cluster.start()
    wait_formed(cluster)
    return cluster


# No test scrapes a paused or killed broker, so a long wait costs nothing; a 5 s one was passed
# once in CI, on a loaded machine, by a live broker right after a topic's creation.
SCRAPE_TIMEOUT_S = 20


def scrape(broker) -> dict[tuple[str, frozenset], float] | None:
    """The broker's samples; None when it does not answer."""
    try:
        with urllib.request.urlopen(broker.metrics_url + "/metrics", timeout=SCRAPE_TIMEOUT_S) as answer:
            text = answer.read().decode()
    except (urllib.error.URLError, OSError):
        return None
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def total(cluster, name: str, broker_ids, **labels) -> float | None:
    """The sum of a sample over brokers; None if one of them does not answer."""
    values = []
    for broker_id in broker_ids:
        samples = scrape(cluster.broker(broker_id))
        if samples is None:
            return None
        values.append(samples.get((name, frozenset(labels.items())), 0.0))
    return sum(values)


def health(broker) -> int:
    try:
        with urllib.request.urlopen(broker.metrics_url + "/health", timeout=SCRAPE_TIMEOUT_S) as answer:
            return answer.status
    except urllib.error.HTTPError as refused:
        return refused.code


def produce(bootstrap: str, topic: str, count: int, partitions=None, acks: str = "all") -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5})
    for i in range(count):
        if partitions is None:
            producer.produce(topic, b"v%d" % i)
        else:
            producer.produce(topic, b"v%d" % i, partition=partitions[i % len(partitions)])
    assert producer.flush(TIMEOUT_S) == 0


def test_a_cluster_reports_one_controller_and_connected_zookeeper_sessions(cluster_factory):
    cluster = metered_cluster(cluster_factory)
    everyone = (1, 2, 3)
    assert [health(cluster.broker(b)) for b in everyone] == [200, 200, 200]
    assert total(cluster, "kafka_controller_kafkacontroller_activecontrollercount", everyone) == 1
    assert total(cluster, "kafka_server_sessionexpirelistener_sessionstate", everyone, state="CONNECTED") == 3
    assert total(cluster, "kafka_server_sessionexpirelistener_zookeepersyncconnects_total", everyone) >= 3
    assert total(cluster, "kafka_server_zookeeperclientmetrics_zookeeperrequestlatencyms_count", everyone) > 0
    topic = unique_topic("metered")
    create_topic(cluster, topic, 3, 3)
    wait_until(lambda: full_isrs(cluster, topic, 3), TIMEOUT_S, "full ISRs")
    wait_until(
        lambda: (total(cluster, "kafka_controller_kafkacontroller_globalpartitioncount", everyone) or 0) >= 3,
        TIMEOUT_S,
        "the partitions counted by the controller",
    )
    # Each partition counted once: by its leader.
    wait_until(
        lambda: total(cluster, "kafka_server_replicamanager_leadercount", everyone) == 3, TIMEOUT_S, "leaders counted"
    )
    assert total(cluster, "kafka_server_replicamanager_partitioncount", everyone) == 9

    # The controller dies: another takes over, and the count stays one over the live brokers.
    controller, _ = zk_controller(cluster)
    cluster.broker(controller).kill()
    survivors = tuple(b for b in everyone if b != controller)
    wait_until(
        lambda: (c := zk_controller_or_none(cluster)) is not None
        and c[0] in survivors
        and total(cluster, "kafka_controller_kafkacontroller_activecontrollercount", survivors) == 1,
        TIMEOUT_S,
        "a new active controller",
    )


def test_a_paused_follower_shrinks_isrs_and_a_killed_broker_leaves_partitions_under_replicated_and_offline(
    cluster_factory,
):
    cluster = metered_cluster(cluster_factory)
    everyone = (1, 2, 3)
    replicated, single = unique_topic("replicated"), unique_topic("single")
    create_topic(cluster, replicated, 3, 3, {"min.insync.replicas": "3"})
    create_topic(cluster, single, 3, 1)
    wait_until(lambda: full_isrs(cluster, replicated, 3), TIMEOUT_S, "full ISRs")
    produce(cluster.bootstrap, replicated, 30)
    # What the leaders sent their followers, the followers appended: once they caught up, the
    # cluster's replication bytes out and in are the same.
    wait_until(
        lambda: 0 < (total(cluster, "kafka_server_brokertopicmetrics_replicationbytesout_total", everyone) or 0)
        == total(cluster, "kafka_server_brokertopicmetrics_replicationbytesin_total", everyone),
        TIMEOUT_S,
        "replication bytes out and in",
    )
    controller, _ = zk_controller(cluster)
    victim = next(b for b in everyone if b != controller)
    others = tuple(b for b in everyone if b != victim)
    # Records go to the partitions the others lead, through the others: the paused broker must
    # hold nothing up, or its session would expire first and the controller shrink the ISRs.
    led_by_others = [p for p, (leader, _, _) in topic_view(cluster.bootstrap, replicated).items() if leader != victim]
    others_bootstrap = ",".join(cluster.broker(b).bootstrap for b in others)

    # Paused while the leaders take records: they drop it from their ISRs themselves once it is
    # 2 s behind, before its session expires, then take it back once it fetches again.
    cluster.broker(victim).pause()
    try:
        produce(others_bootstrap, replicated, 30, led_by_others, acks="1")
        wait_until(
            lambda: (total(cluster, "kafka_server_replicamanager_isrshrinks_total", others) or 0) > 0
            and total(cluster, "kafka_server_replicamanager_underreplicatedpartitions", others) > 0,
            TIMEOUT_S,
            "ISR shrinks and under-replicated partitions",
        )
        assert total(cluster, "kafka_server_replicamanager_underminisrpartitioncount", others) > 0
    finally:
        cluster.broker(victim).resume()
    wait_until(
        lambda: (total(cluster, "kafka_server_replicamanager_isrexpands_total", others) or 0) > 0
        and full_isrs(cluster, replicated, 3),
        TIMEOUT_S,
        "the ISRs expanded again",
    )

    # Killed: its single-replica partition has no leader left; the others are under-replicated.
    elections = "kafka_controller_controllerstats_leaderelectionrateandtimems_count"
    before = total(cluster, elections, others)
    cluster.broker(victim).kill()
    wait_until(
        lambda: total(cluster, "kafka_controller_kafkacontroller_offlinepartitionscount", others) == 1
        and total(cluster, "kafka_server_replicamanager_underreplicatedpartitions", others) == 3,
        TIMEOUT_S,
        "an offline partition and three under-replicated ones",
    )
    # The controller timed the broker change it handled (Kafka's LeaderElectionRateAndTimeMs);
    # every leader it elected came from an ISR.
    assert total(cluster, elections, others) > before
    assert total(cluster, "kafka_controller_controllerstats_uncleanleaderelections_total", others) == 0
    cluster.broker(victim).start()
    wait_until(
        lambda: total(cluster, "kafka_controller_kafkacontroller_offlinepartitionscount", everyone) == 0
        and total(cluster, "kafka_server_replicamanager_underreplicatedpartitions", everyone) == 0,
        TIMEOUT_S,
        "the partitions back",
    )
