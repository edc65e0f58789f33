"""The controller with three real broker processes and ZooKeeper (tests/cluster/harness.py):
topic creation with three replicas, the same metadata from every broker, controller failover
with a higher epoch, leader failover within the ISR (acks=all records survive it), controlled
shutdown, session expiry, reassignment, preferred leader election, and the admin requests only
the controller serves."""

import datetime
import time

import pytest
from confluent_kafka import Consumer, ElectionType, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)
from kio.schema.alter_partition_reassignments.v0.request import (
    AlterPartitionReassignmentsRequest,
    ReassignablePartition,
    ReassignableTopic,
)
from kio.schema.list_partition_reassignments.v0.request import ListPartitionReassignmentsRequest

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode

from tests.cluster.clients import send_request as _send
from tests.cluster.clients import (
    TIMEOUT_S,
    admin_client,
    agreed_view,
    create_topic,
    read_values,
    topic_view,
    wait_formed,
    zk_controller,
    zk_controller_or_none,
)
from tests.cluster.harness import wait_until
from tests.harness import unique_topic

def test_a_topic_with_three_replicas_looks_the_same_from_every_broker(cluster):
    topic = unique_topic("rf3")
    create_topic(cluster, topic, 6, 3)
    agreed = wait_until(lambda: agreed_view(cluster, topic, (1, 2, 3), 6), TIMEOUT_S, "metadata agreement")
    for leader, replicas, isr in agreed.values():
        assert sorted(replicas) == [1, 2, 3]
        assert leader == replicas[0]
        assert sorted(isr) == [1, 2, 3]
    assert sorted({replicas[0] for _, replicas, _ in agreed.values()}) == [1, 2, 3]  # leaders spread
    metadata = admin_client(cluster.broker(2).bootstrap).list_topics(timeout=10)
    assert sorted(metadata.brokers) == [1, 2, 3]
    assert metadata.controller_id == zk_controller(cluster)[0]


def test_more_replicas_than_brokers_is_refused(cluster):
    topic = unique_topic("rf4")
    admin = admin_client(cluster.bootstrap)
    futures = admin.create_topics([NewTopic(topic, 1, 4)], operation_timeout=30)
    with pytest.raises(KafkaException) as error:
        futures[topic].result(timeout=TIMEOUT_S)
    assert error.value.args[0].name() == "INVALID_REPLICATION_FACTOR"


def test_killing_the_controller_elects_another_with_a_higher_epoch(cluster):
    old_controller, old_epoch = zk_controller(cluster)
    cluster.broker(old_controller).kill()
    # The winner creates /controller, then increments /controller_epoch.
    new_controller, new_epoch = wait_until(
        lambda: (c := zk_controller_or_none(cluster)) and c[0] != old_controller and c[1] > old_epoch and c,
        TIMEOUT_S, "a new controller with a higher epoch",
    )
    assert new_controller != old_controller and new_epoch == old_epoch + 1
    survivors = [b for b in (1, 2, 3) if b != old_controller]
    for broker_id in survivors:
        wait_until(
            lambda: admin_client(cluster.broker(broker_id).bootstrap).list_topics(timeout=5).controller_id == new_controller,
            TIMEOUT_S, f"broker {broker_id} names the new controller",
        )
    topic = unique_topic("after-failover")
    create_topic(cluster, topic, 2, 2)
    wait_until(lambda: agreed_view(cluster, topic, survivors, 2), TIMEOUT_S, "a topic made by the new controller")


def test_killing_a_leader_elects_a_new_one_from_the_isr(cluster):
    topic = unique_topic("leader-kill")
    create_topic(cluster, topic, 3, 3)
    before = wait_until(lambda: agreed_view(cluster, topic, (1, 2, 3), 3), TIMEOUT_S, "metadata agreement")
    controller, _ = zk_controller(cluster)
    partition, (victim, _, isr) = next((p, s) for p, s in before.items() if s[0] != controller)
    cluster.broker(victim).kill()
    survivors = [b for b in (1, 2, 3) if b != victim]

    def moved():
        after = agreed_view(cluster, topic, survivors, 3)
        return after if after and after[partition][0] != victim else None

    after = wait_until(moved, TIMEOUT_S, "a new leader")
    leader, replicas, new_isr = after[partition]
    assert leader in isr and leader != victim
    assert victim not in new_isr
    assert replicas == before[partition][1]
    cluster.broker(victim).start()
    wait_until(
        lambda: victim in admin_client(cluster.broker(leader).bootstrap).list_topics(timeout=5).brokers,
        TIMEOUT_S, "the killed broker back in the metadata",
    )


def test_controlled_shutdown_moves_leadership_away_first(cluster):
    topic = unique_topic("controlled")
    create_topic(cluster, topic, 3, 3)
    wait_until(lambda: agreed_view(cluster, topic, (1, 2, 3), 3), TIMEOUT_S, "metadata agreement")
    stopping = 3
    assert cluster.broker(stopping).stop() == 0
    assert "controlled shutdown done" in cluster.broker(stopping).log()

    def moved_away():
        after = agreed_view(cluster, topic, (1, 2), 3)
        return after and all(leader != stopping and stopping not in isr for leader, _, isr in after.values())

    wait_until(moved_away, TIMEOUT_S, "leaders and ISRs without the stopped broker")


def test_partitions_added_and_topic_deleted_through_the_controller(cluster):
    topic = unique_topic("grow")
    create_topic(cluster, topic, 2, 2)
    admin = admin_client(cluster.bootstrap)
    admin.create_partitions([NewPartitions(topic, 5)], operation_timeout=30)[topic].result(timeout=TIMEOUT_S)
    grown = wait_until(lambda: agreed_view(cluster, topic, (1, 2, 3), 5), TIMEOUT_S, "five partitions everywhere")
    assert all(len(replicas) == 2 for _, replicas, _ in grown.values())
    admin.delete_topics([topic], operation_timeout=30)[topic].result(timeout=TIMEOUT_S)
    wait_until(
        lambda: all(topic_view(cluster.broker(b).bootstrap, topic) is None for b in (1, 2, 3)),
        TIMEOUT_S, "the topic gone from every broker",
    )
    with cluster.zookeeper_client() as zk:
        wait_until(
            lambda: not any(zk.exists(path) for path in (
                f"/brokers/topics/{topic}", f"/config/topics/{topic}", f"/admin/delete_topics/{topic}"
            )),
            TIMEOUT_S, "the topic's znodes removed once its replicas are deleted",
        )


def test_session_expiry_re_registers_the_broker_and_re_elects_the_controller(cluster):
    controller, epoch = zk_controller(cluster)
    with cluster.zookeeper_client() as zk:
        _, registration = zk.get(f"/brokers/ids/{controller}")
    cluster.expire_session(controller)

    def registered_again():
        with cluster.zookeeper_client() as zk:
            found = zk.exists(f"/brokers/ids/{controller}")
        return found is not None and found.czxid > registration.czxid

    wait_until(registered_again, TIMEOUT_S, "a new registration (new broker epoch)")
    wait_until(
        lambda: (c := zk_controller_or_none(cluster)) and c[1] > epoch, TIMEOUT_S, "a controller with a higher epoch"
    )
    wait_formed(cluster)
    topic = unique_topic("after-expiry")
    create_topic(cluster, topic, 3, 3)
    wait_until(lambda: agreed_view(cluster, topic, (1, 2, 3), 3), TIMEOUT_S, "metadata agreement after the expiry")


def test_records_acknowledged_by_all_replicas_survive_the_leaders_death(cluster):
    topic = unique_topic("acks-all")
    create_topic(cluster, topic, 1, 3)
    before = wait_until(lambda: agreed_view(cluster, topic, (1, 2, 3), 1), TIMEOUT_S, "metadata agreement")
    leader = before[0][0]
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": False})
    delivered = []

    def on_delivery(error, message):
        if error is None:
            delivered.append(message.value())

    values = [b"record-%d" % i for i in range(200)]
    for value in values:
        producer.produce(topic, value, partition=0, on_delivery=on_delivery)
    assert producer.flush(TIMEOUT_S) == 0
    assert sorted(delivered) == sorted(values)
    cluster.broker(leader).kill()
    survivors = [b for b in (1, 2, 3) if b != leader]
    wait_until(
        lambda: (after := agreed_view(cluster, topic, survivors, 1)) and after[0][0] not in (leader, -1),
        TIMEOUT_S, "a new leader",
    )
    assert read_values(cluster.broker(survivors[0]).bootstrap, topic, len(values)) == values


def test_topic_configs_reach_every_broker(cluster):
    topic = unique_topic("configs")
    create_topic(cluster, topic, 1, 2)
    admin = admin_client(cluster.bootstrap)
    resource = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("retention.ms", "123456", incremental_operation=AlterConfigOpType.SET)
    ])
    admin.incremental_alter_configs([resource])[resource].result(timeout=TIMEOUT_S)

    def retention(broker_id: int) -> str | None:
        client = admin_client(cluster.broker(broker_id).bootstrap)  # kept while its future is read
        described = client.describe_configs([ConfigResource("topic", topic)])
        entries = next(iter(described.values())).result(timeout=10)
        return entries["retention.ms"].value

    for broker_id in (1, 2, 3):
        wait_until(lambda: retention(broker_id) == "123456", TIMEOUT_S, f"broker {broker_id} has the new config")


def test_a_consumer_group_is_coordinated_by_the_leader_of_its_offsets_partition(cluster):
    topic = unique_topic("grouped")
    create_topic(cluster, topic, 2, 3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": False})
    values = [b"v%d" % i for i in range(20)]
    for value in values:
        producer.produce(topic, value)
    assert producer.flush(TIMEOUT_S) == 0
    group = unique_topic("group")
    consumer = Consumer({
        "bootstrap.servers": cluster.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    })
    consumer.subscribe([topic])
    read = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(read) < len(values) and time.monotonic() < deadline:
        message = consumer.poll(1)
        if message is not None and message.error() is None:
            read.append(message.value())
    consumer.commit(asynchronous=False)
    consumer.close()
    assert sorted(read) == sorted(values)
    offsets = wait_until(
        lambda: topic_view(cluster.broker(1).bootstrap, "__consumer_offsets"), TIMEOUT_S, "__consumer_offsets"
    )
    assert all(len(replicas) == 3 for _, replicas, _ in offsets.values())


def test_a_reassignment_moves_replicas_and_leadership(cluster):
    topic = unique_topic("moves")
    admin = admin_client(cluster.bootstrap)
    admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[[1, 2]])])[topic].result(timeout=TIMEOUT_S)
    wait_until(lambda: agreed_view(cluster, topic, (1, 2, 3), 1), TIMEOUT_S, "metadata agreement")
    controller, _ = zk_controller(cluster)
    started = _send(cluster.broker(controller).bootstrap, ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0,
                    AlterPartitionReassignmentsRequest(timeout=datetime.timedelta(seconds=30), topics=(
                        ReassignableTopic(name=topic, partitions=(ReassignablePartition(partition_index=0, replicas=(2, 3)),)),
                    )))
    assert started.error_code == ErrorCode.none
    assert [p.error_code for t in started.responses for p in t.partitions] == [ErrorCode.none]

    def moved():
        after = agreed_view(cluster, topic, (1, 2, 3), 1)
        return after if after and after[0][1] == (2, 3) and sorted(after[0][2]) == [2, 3] else None

    leader, _, _ = wait_until(moved, TIMEOUT_S, "replicas moved to brokers 2 and 3")[0]
    assert leader in (2, 3)
    listed = _send(cluster.broker(controller).bootstrap, ApiKey.LIST_PARTITION_REASSIGNMENTS, 0,
                   ListPartitionReassignmentsRequest(timeout=datetime.timedelta(seconds=30), topics=None))
    assert listed.error_code == ErrorCode.none and listed.topics == ()


def test_preferred_leader_election_gives_leadership_back(cluster):
    topic = unique_topic("preferred")
    admin = admin_client(cluster.bootstrap)
    admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[[1, 2]])])[topic].result(timeout=TIMEOUT_S)
    wait_until(lambda: agreed_view(cluster, topic, (1, 2, 3), 1), TIMEOUT_S, "metadata agreement")
    assert cluster.broker(1).stop() == 0  # controlled shutdown: broker 2 leads
    cluster.broker(1).start()
    wait_until(
        lambda: (after := agreed_view(cluster, topic, (1, 2, 3), 1)) and after[0][0] == 2 and sorted(after[0][2]) == [1, 2],
        TIMEOUT_S, "broker 1 back in the ISR under leader 2",
    )
    elect_admin = admin_client(cluster.bootstrap)
    result = elect_admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)]).result(timeout=TIMEOUT_S)
    assert result[TopicPartition(topic, 0)] is None
    wait_until(
        lambda: (after := agreed_view(cluster, topic, (1, 2, 3), 1)) and after[0][0] == 1,
        TIMEOUT_S, "the preferred replica leads again",
    )


def _partition_dirs(cluster, broker_id: int, topic: str, partitions: int) -> list[str]:
    """The live partition directories of `topic` on a broker (a deleted one is renamed away)."""
    return [
        str(d / f"{topic}-{p}") for d in cluster.broker(broker_id).data_dirs for p in range(partitions)
        if (d / f"{topic}-{p}").is_dir()
    ]


def _topic_znodes(cluster, topic: str) -> list[str]:
    with cluster.zookeeper_client() as zk:
        return [path for path in (
            f"/brokers/topics/{topic}", f"/config/topics/{topic}", f"/admin/delete_topics/{topic}"
        ) if zk.exists(path)]


def test_a_topic_deleted_while_a_replica_is_down_is_deleted_there_when_it_comes_back(cluster):
    topic = unique_topic("delete-down")
    create_topic(cluster, topic, 2, 3)
    wait_until(lambda: agreed_view(cluster, topic, (1, 2, 3), 2), TIMEOUT_S, "metadata agreement")
    wait_until(lambda: all(len(_partition_dirs(cluster, b, topic, 2)) == 2 for b in (1, 2, 3)),
               TIMEOUT_S, "the partition directories on every broker")
    controller, _ = zk_controller(cluster)
    down = next(b for b in (3, 2, 1) if b != controller)
    live = [b for b in (1, 2, 3) if b != down]
    assert cluster.broker(down).stop() == 0
    admin = admin_client(cluster.broker(controller).bootstrap)
    admin.delete_topics([topic], operation_timeout=30)[topic].result(timeout=TIMEOUT_S)
    wait_until(lambda: all(topic_view(cluster.broker(b).bootstrap, topic) is None for b in live),
               TIMEOUT_S, "the topic gone from the metadata")
    wait_until(lambda: not any(_partition_dirs(cluster, b, topic, 2) for b in live),
               TIMEOUT_S, "the live replicas deleted")
    time.sleep(1)  # the controller had every chance to finish the deletion wrongly
    assert len(_topic_znodes(cluster, topic)) == 3, "the deletion waits for the stopped replica"
    assert len(_partition_dirs(cluster, down, topic, 2)) == 2
    again = admin.create_topics([NewTopic(topic, 1, 2)], operation_timeout=30)[topic]
    with pytest.raises(KafkaException) as refused:
        again.result(timeout=TIMEOUT_S)
    assert refused.value.args[0].name() == "TOPIC_ALREADY_EXISTS"
    assert "marked for deletion" in refused.value.args[0].str()
    deleted_again = admin.delete_topics([topic], operation_timeout=30)[topic]
    with pytest.raises(KafkaException) as unknown:
        deleted_again.result(timeout=TIMEOUT_S)
    assert unknown.value.args[0].name() == "UNKNOWN_TOPIC_OR_PART"

    cluster.broker(down).start()
    wait_until(lambda: not _partition_dirs(cluster, down, topic, 2), TIMEOUT_S, "the returning replica deleted")
    wait_until(lambda: not _topic_znodes(cluster, topic), TIMEOUT_S, "the topic's znodes removed")
    cluster.broker(down).restart()
    wait_formed(cluster)
    assert all(topic_view(cluster.broker(b).bootstrap, topic) is None for b in (1, 2, 3))
    assert not _topic_znodes(cluster, topic)
    assert not any(_partition_dirs(cluster, b, topic, 2) for b in (1, 2, 3))


def test_a_new_controller_resumes_a_pending_deletion(cluster):
    topic = unique_topic("delete-failover")
    create_topic(cluster, topic, 1, 3)
    wait_until(lambda: agreed_view(cluster, topic, (1, 2, 3), 1), TIMEOUT_S, "metadata agreement")
    controller, _ = zk_controller(cluster)
    down = next(b for b in (3, 2, 1) if b != controller)
    assert cluster.broker(down).stop() == 0
    admin = admin_client(cluster.broker(controller).bootstrap)  # kept: the futures die with their client
    admin.delete_topics([topic], operation_timeout=30)[topic].result(timeout=TIMEOUT_S)
    wait_until(lambda: not _partition_dirs(cluster, controller, topic, 1), TIMEOUT_S, "the controller's replica deleted")
    cluster.broker(controller).kill()
    wait_until(lambda: (c := zk_controller_or_none(cluster)) and c[0] != controller, TIMEOUT_S, "a new controller")
    assert f"/admin/delete_topics/{topic}" in _topic_znodes(cluster, topic)
    cluster.broker(down).start()
    cluster.broker(controller).start()
    wait_until(lambda: not _topic_znodes(cluster, topic), TIMEOUT_S, "the deletion completed")
    assert not any(_partition_dirs(cluster, b, topic, 1) for b in (1, 2, 3))
