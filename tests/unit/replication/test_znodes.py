import json
import uuid

from replication import znodes
from storage.topic_partition import TopicPartition


def test_broker_registration_round_trips_in_kafkas_version_5_layout():
    registration = znodes.BrokerRegistration(
        3,
        (znodes.EndPoint("PLAINTEXT", "10.0.0.3", 9092), znodes.EndPoint("INTERNAL", "::1", 9093)),
        rack="r1",
        timestamp="1700000000000",
    )
    data = znodes.encode_broker(registration)
    value = json.loads(data)
    assert value["version"] == 5
    assert value["endpoints"] == ["PLAINTEXT://10.0.0.3:9092", "INTERNAL://[::1]:9093"]
    assert value["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT", "INTERNAL": "PLAINTEXT"}
    assert (value["host"], value["port"], value["jmx_port"], value["rack"]) == ("10.0.0.3", 9092, -1, "r1")
    assert value["timestamp"] == "1700000000000"
    assert znodes.decode_broker(3, data) == registration


def test_broker_without_rack_or_plaintext_listener():
    registration = znodes.BrokerRegistration(1, (znodes.EndPoint("INTERNAL", "h", 1),))
    value = json.loads(znodes.encode_broker(registration))
    assert "rack" not in value
    assert (value["host"], value["port"]) == (None, -1)
    assert znodes.decode_broker(1, znodes.encode_broker(registration)).rack is None


def test_topic_assignment_round_trips_with_kafka_topic_id_text():
    topic_id = uuid.uuid4()
    assignment = znodes.TopicAssignment(topic_id, {0: (1, 2, 3), 1: (2, 3, 1)}, {1: (3,)}, {1: (4,)})
    data = znodes.encode_topic(assignment)
    value = json.loads(data)
    assert value["version"] == 3
    assert value["partitions"] == {"0": [1, 2, 3], "1": [2, 3, 1]}
    assert len(value["topic_id"]) == 22 and "=" not in value["topic_id"]
    assert znodes.decode_topic(data) == assignment


def test_partition_state_round_trips_with_its_znode_version():
    state = znodes.LeaderIsr(leader=2, leader_epoch=7, isr=(2, 3), controller_epoch=4, zk_version=9)
    data = znodes.encode_partition_state(state)
    assert json.loads(data) == {"controller_epoch": 4, "leader": 2, "version": 1, "leader_epoch": 7, "isr": [2, 3]}
    decoded = znodes.decode_partition_state(data, 9)
    assert decoded == state and decoded.zk_version == 9
    assert znodes.partition_state_path(TopicPartition("t", 5)) == "/brokers/topics/t/partitions/5/state"


def test_controller_cluster_id_and_epoch():
    assert znodes.decode_controller(znodes.encode_controller(7)) == 7
    assert json.loads(znodes.encode_controller(7))["version"] == 1
    assert znodes.encode_controller_epoch(12) == b"12"
    assert znodes.decode_controller_epoch(b"12") == 12
    assert json.loads(znodes.encode_cluster_id("abc")) == {"version": "1", "id": "abc"}
    assert znodes.decode_cluster_id(znodes.encode_cluster_id("abc")) == "abc"


def test_admin_and_notification_values():
    reassignment = {TopicPartition("t", 0): (1, 2), TopicPartition("u", 3): (3,)}
    assert znodes.decode_reassignment(znodes.encode_reassignment(reassignment)) == reassignment
    assert json.loads(znodes.encode_reassignment(reassignment))["partitions"][0] == {
        "topic": "t", "partition": 0, "replicas": [1, 2]
    }
    changed = [TopicPartition("t", 1), TopicPartition("t", 0)]
    assert znodes.decode_isr_change(znodes.encode_isr_change(changed)) == sorted(changed)
    assert znodes.decode_topic_config(znodes.encode_topic_config({"retention.ms": "10"})) == {"retention.ms": "10"}
    assert json.loads(znodes.encode_config_change("t")) == {"version": 2, "entity_path": "topics/t"}
    assert znodes.decode_config_change(znodes.encode_config_change("t")) == ("topics", "t")
