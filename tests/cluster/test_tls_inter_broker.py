"""Three brokers whose inter-broker listener is SSL with client certificates required: the
controller's requests, follower fetches and WriteTxnMarkers go over TLS, each broker presenting
its own keystore as client certificate (as Kafka does). Clients use the PLAINTEXT listener, so
the shared client helpers serve; replication can only work if the TLS listener and the
inter-broker TLS client both do. An acks=all producer goes on through the leader's death with
every acknowledged record kept, and a transaction over partitions led by every broker commits
(its markers sent to the other brokers over TLS)."""

import trustme
from confluent_kafka import Producer

from tests.cluster.clients import TIMEOUT_S, agreed_view, create_topic, full_isrs, read_values, wait_formed
from tests.cluster.harness import wait_until
from tests.harness import free_port, unique_topic


def ssl_inter_broker_cluster(cluster_factory, tmp_path):
    ca = trustme.CA()
    keystore = tmp_path / "broker.pem"
    ca.issue_cert("localhost", "127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(keystore))
    truststore = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(truststore))
    cluster = cluster_factory(
        overrides={
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SSL",
            "inter.broker.listener.name": "INTERNAL",
            "listener.name.internal.ssl.keystore.type": "PEM",
            "listener.name.internal.ssl.keystore.location": str(keystore),
            "listener.name.internal.ssl.truststore.type": "PEM",
            "listener.name.internal.ssl.truststore.location": str(truststore),
            "listener.name.internal.ssl.client.auth": "required",
        },
        start=False,
    )
    for broker_id in (1, 2, 3):
        broker = cluster.broker(broker_id)
        listeners = f"PLAINTEXT://{broker.host}:{broker.port},INTERNAL://{broker.host}:{free_port()}"
        broker.settings["listeners"] = broker.settings["advertised.listeners"] = listeners
    cluster.start()
    wait_formed(cluster)
    return cluster


def test_replication_over_ssl_survives_a_leader_kill_with_acks_all(cluster_factory, tmp_path):
    cluster = ssl_inter_broker_cluster(cluster_factory, tmp_path)
    topic = unique_topic("tls-replicated")
    create_topic(cluster, topic, 1, 3, {"min.insync.replicas": "2"})
    wait_until(lambda: full_isrs(cluster, topic, 1), TIMEOUT_S, "every replica in sync over TLS")
    leader = wait_until(lambda: agreed_view(cluster, topic, (1, 2, 3), 1), TIMEOUT_S, "metadata agreement")[0][0]

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    values = [b"record-%d" % i for i in range(200)]
    delivered = []

    def produce(batch):
        for value in batch:
            producer.produce(topic, value, partition=0, on_delivery=lambda e, m: delivered.append(e))
        assert producer.flush(TIMEOUT_S) == 0

    produce(values[:100])
    cluster.broker(leader).kill()
    survivors = [b for b in (1, 2, 3) if b != leader]
    wait_until(
        lambda: (after := agreed_view(cluster, topic, survivors, 1)) and after[0][0] not in (leader, -1),
        TIMEOUT_S, "a new leader",
    )
    produce(values[100:])
    assert delivered == [None] * len(values)
    assert read_values(cluster.broker(survivors[0]).bootstrap, topic, len(values)) == values


def test_transaction_markers_reach_the_other_brokers_over_ssl(cluster_factory, tmp_path):
    cluster = ssl_inter_broker_cluster(cluster_factory, tmp_path)
    topic = unique_topic("tls-txn")
    create_topic(cluster, topic, 3, 3)
    agreed = wait_until(lambda: agreed_view(cluster, topic, (1, 2, 3), 3), TIMEOUT_S, "metadata agreement")
    assert sorted(leader for leader, _, _ in agreed.values()) == [1, 2, 3]  # whoever coordinates, two are remote

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": unique_topic("tid")})
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    values = [b"committed-%d" % p for p in range(3)]
    for partition, value in enumerate(values):
        producer.produce(topic, value, partition=partition)
    producer.commit_transaction(TIMEOUT_S)
    read = read_values(cluster.bootstrap, topic, len(values), range(3), "read_committed")
    assert sorted(read) == values
