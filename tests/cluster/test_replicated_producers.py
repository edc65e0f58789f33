"""Idempotent producers against three real brokers and ZooKeeper: producer ids come from
ZooKeeper's /latest_producer_id_block, and a producer goes on through a leader's death with every
record once, in order (the new leader knows the producer from its follower appends)."""

import json

from confluent_kafka import Producer

from tests.cluster.clients import TIMEOUT_S, agreed_view, create_topic, read_values
from tests.cluster.harness import wait_until
from tests.harness import unique_topic


def _produce(cluster, producer: Producer, topic: str, values: list[bytes]) -> None:
    delivered = []
    for value in values:
        producer.produce(topic, value, partition=0, on_delivery=lambda e, m: delivered.append(e))
    assert producer.flush(TIMEOUT_S) == 0
    assert delivered == [None] * len(values)


def test_an_idempotent_producer_goes_on_through_a_leaders_death(cluster):
    topic = unique_topic("idempotent")
    create_topic(cluster, topic, 1, 3)
    leader = wait_until(lambda: agreed_view(cluster, topic, (1, 2, 3), 1), TIMEOUT_S, "metadata agreement")[0][0]
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "linger.ms": 5})
    values = [b"record-%d" % i for i in range(200)]
    _produce(cluster, producer, topic, values[:100])
    with cluster.zookeeper_client() as client:
        block = json.loads(client.get("/latest_producer_id_block")[0])
    assert (block["version"], block["block_start"], block["block_end"]) == (1, "0", "999")
    assert block["broker"] in (1, 2, 3)

    cluster.broker(leader).kill()
    survivors = [b for b in (1, 2, 3) if b != leader]
    wait_until(
        lambda: (after := agreed_view(cluster, topic, survivors, 1)) and after[0][0] not in (leader, -1),
        TIMEOUT_S, "a new leader",
    )
    _produce(cluster, producer, topic, values[100:])

    assert read_values(cluster.broker(survivors[0]).bootstrap, topic, len(values)) == values
