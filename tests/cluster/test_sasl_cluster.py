"""Three brokers whose only listener is SASL_PLAINTEXT, or SASL_SSL, inter-broker traffic
included (sasl.mechanism.inter.broker.protocol=PLAIN with the listener's JAAS username and
password; over TLS the brokers trust the test CA): the cluster forms, a SCRAM user created through one broker with AlterUserScramCredentials is
written to ZooKeeper in Kafka's format, with a change notification, and every broker
authenticates it at once; acks=all writes replicate over authenticated follower fetches and
survive the leader's kill."""

import json
import time

import confluent_kafka
import pytest
import trustme
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from broker.security import scram
from tests.cluster.harness import wait_until

pytestmark = pytest.mark.slow

TIMEOUT_S = 60
ADMIN = ("admin", "admin-secret")
SASL_OVERRIDES = {
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
    "sasl.mechanism.inter.broker.protocol": "PLAIN",
    "listener.name.plaintext.plain.sasl.jaas.config": (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{ADMIN[0]}" password="{ADMIN[1]}" user_{ADMIN[0]}="{ADMIN[1]}";'
    ),
    "listener.name.plaintext.scram-sha-256.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required;",
    "offsets.topic.replication.factor": "3",
}


def settings(transport: dict[str, str], mechanism: str, user: tuple[str, str]) -> dict[str, str]:
    """librdkafka settings: `transport` (security.protocol, and the CA over TLS) and a login."""
    return {
        "sasl.mechanisms": mechanism, "sasl.username": user[0], "sasl.password": user[1],
        "socket.timeout.ms": "5000", **transport,
    }


def admin(transport: dict[str, str], bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, **settings(transport, "PLAIN", ADMIN)})


def protocol_overrides(protocol: str, tmp_path) -> tuple[dict[str, str], dict[str, str]]:
    """The brokers' overrides (the harness's listener is named PLAINTEXT; its protocol becomes
    `protocol`) and the clients' transport settings."""
    transport = {"security.protocol": protocol}
    overrides = {"listener.security.protocol.map": f"PLAINTEXT:{protocol}"}
    if protocol == "SASL_SSL":
        ca = trustme.CA()
        keystore, truststore = tmp_path / "broker.pem", tmp_path / "ca.pem"
        ca.issue_cert("localhost", "127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(keystore))
        ca.cert_pem.write_to_path(str(truststore))
        overrides |= {
            "ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore),
            # The brokers' own client (inter-broker) trusts the test CA.
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(truststore),
        }
        transport["ssl.ca.location"] = str(truststore)
    return overrides, transport


def formed(transport: dict[str, str], cluster) -> bool:
    for broker_id in (1, 2, 3):
        try:
            metadata = admin(transport, cluster.broker(broker_id).bootstrap).list_topics(timeout=5)
        except confluent_kafka.KafkaException:
            return False
        if sorted(metadata.brokers) != [1, 2, 3] or metadata.controller_id < 0:
            return False
    return True


@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_a_sasl_only_cluster_replicates_and_shares_scram_users_through_zookeeper(cluster_factory, tmp_path, protocol):
    overrides, transport = protocol_overrides(protocol, tmp_path)
    cluster = cluster_factory(3, overrides={**SASL_OVERRIDES, **overrides})
    wait_until(lambda: formed(transport, cluster), TIMEOUT_S, "the SASL cluster formed")

    user = ("carol", "carol-secret")
    client = admin(transport, cluster.broker(1).bootstrap)
    upsertion = UserScramCredentialUpsertion(user[0], ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), user[1].encode())
    for future in client.alter_user_scram_credentials([upsertion]).values():
        future.result(timeout=TIMEOUT_S)

    with cluster.zookeeper_client() as zk:
        node = json.loads(zk.get("/config/users/carol")[0])
        changes = [json.loads(zk.get(f"/config/changes/{name}")[0]) for name in zk.get_children("/config/changes")]
    credential = scram.ScramCredential.from_kafka_string(node["config"]["SCRAM-SHA-256"])
    assert node["version"] == 1 and credential.iterations == 8192
    assert {"version": 2, "entity_path": "users/carol"} in changes

    # Each broker authenticates the new user on a connection of its own.
    for broker_id in (1, 2, 3):
        metadata = AdminClient({"bootstrap.servers": cluster.broker(broker_id).bootstrap, **settings(transport, "SCRAM-SHA-256", user)})
        assert sorted(metadata.list_topics(timeout=TIMEOUT_S).brokers) == [1, 2, 3]

    for future in client.create_topics([NewTopic("sasl-replicated", 1, 3)]).values():
        future.result(timeout=TIMEOUT_S)
    bootstrap = ",".join(cluster.broker(b).bootstrap for b in (1, 2, 3))
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", **settings(transport, "SCRAM-SHA-256", user)})

    def in_sync_replicas() -> int:
        topic = admin(transport, bootstrap).list_topics("sasl-replicated", timeout=5).topics["sasl-replicated"]
        return len(topic.partitions[0].isrs)

    wait_until(lambda: in_sync_replicas() == 3, TIMEOUT_S, "the followers caught up over SASL")
    for i in range(10):
        producer.produce("sasl-replicated", f"before-{i}".encode())
    assert producer.flush(TIMEOUT_S) == 0

    leader = admin(transport, bootstrap).list_topics("sasl-replicated", timeout=5).topics["sasl-replicated"].partitions[0].leader
    cluster.broker(leader).kill()
    for i in range(10):
        producer.produce("sasl-replicated", f"after-{i}".encode())
    assert producer.flush(TIMEOUT_S) == 0

    survivor = next(b for b in (1, 2, 3) if b != leader)
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": cluster.broker(survivor).bootstrap, "group.id": "sasl-check",
        "auto.offset.reset": "earliest", **settings(transport, "SCRAM-SHA-256", user),
    })
    consumer.assign([confluent_kafka.TopicPartition("sasl-replicated", 0, 0)])
    values = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(values) < 20 and time.monotonic() < deadline:
        message = consumer.poll(1)
        if message is not None and message.error() is None:
            values.append(message.value().decode())
    consumer.close()
    assert values == [f"before-{i}" for i in range(10)] + [f"after-{i}" for i in range(10)]
