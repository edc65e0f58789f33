"""`logway-admin`, the venv's console script, run as an operator runs it against a live broker
process: the state it shows or changes is made and checked with a real client (confluent-kafka,
librdkafka). Reassignment and leader election need a cluster: tests/cluster/test_admin_cli.py.
log-dirs against a broker with two log dirs: tests/compat/test_log_dirs.py (its output against a
decoded response in tests/unit/broker/admin/test_log_dirs.py)."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trustme
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    ResourcePatternType,
    ResourceType,
)

from tests.compat.test_sasl import ADMIN, SCRAM_USER, start_sasl_broker
from tests.harness import BrokerProcess, unique_topic

pytestmark = pytest.mark.compat

LOGWAY_ADMIN = Path(sys.executable).with_name("logway-admin")
TIMEOUT_S = 30


def logway_admin(broker, *args: str, config: Path | None = None, expect: int = 0) -> subprocess.CompletedProcess:
    command = [str(LOGWAY_ADMIN), args[0], "--bootstrap-server", broker.bootstrap, *args[1:]]
    if config is not None:
        command += ["--command-config", str(config)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode == expect, f"{command}: {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result


def produce(bootstrap: str, topic: str, count: int, partitions: int = 1, **settings) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, **settings})
    for i in range(count):
        producer.produce(topic, key=f"key-{i}".encode(), value=f"value-{i}".encode(), partition=i % partitions)
    assert producer.flush(TIMEOUT_S) == 0


def consume_and_commit(bootstrap: str, topic: str, group: str, count: int) -> None:
    """Reads `count` records as member of `group`, commits what it read and leaves."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    read = 0
    deadline = time.monotonic() + TIMEOUT_S
    while read < count and time.monotonic() < deadline:
        message = consumer.poll(1)
        if message is not None and message.error() is None:
            read += 1
    assert read == count
    consumer.commit(asynchronous=False)
    consumer.close()


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    offsets = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=TIMEOUT_S)
    consumer.close()
    return [tp.offset for tp in offsets]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    process = BrokerProcess(tmp_path_factory.mktemp("admin-cli") / "data").start()
    yield process
    process.kill()
    assert "Traceback" not in process.log(), process.log()[-5000:]


def test_cluster_prints_id_controller_brokers_and_api_versions(broker):
    metadata = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=TIMEOUT_S)
    out = logway_admin(broker, "cluster").stdout.splitlines()
    assert out[0] == f"Cluster ID: {metadata.cluster_id}"
    assert out[1] == f"Controller: {metadata.controller_id}"
    assert f"address: {broker.bootstrap}" in out[3]
    assert logway_admin(broker, "cluster", "cluster-id").stdout == f"Cluster ID: {metadata.cluster_id}\n"
    versions = logway_admin(broker, "cluster", "api-versions").stdout
    assert versions.startswith(f"{broker.bootstrap} (id: 0 rack: null) -> (\n\tProduce(0): ")
    assert "\tApiVersions(18): 0 to 3 [usable: 3]" in versions


def test_topics_are_created_described_altered_listed_and_deleted(broker):
    topic = unique_topic("admin-topics")
    created = logway_admin(broker, "topics", "--create", "--topic", topic, "--partitions", "2",
                           "--config", "retention.ms=60000")
    assert created.stdout == f"Created topic {topic}.\n"
    assert topic in logway_admin(broker, "topics", "--list").stdout.split()
    logway_admin(broker, "topics", "--alter", "--topic", topic, "--partitions", "3")
    assert len(AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(topic, timeout=TIMEOUT_S)
               .topics[topic].partitions) == 3
    lines = logway_admin(broker, "topics", "--describe", "--topic", topic).stdout.splitlines()
    assert lines[0].startswith(f"Topic: {topic}\tTopicId: ")
    assert "\tPartitionCount: 3\tReplicationFactor: 1\tConfigs: " in lines[0] and "retention.ms=60000" in lines[0]
    assert lines[1:] == [f"\tTopic: {topic}\tPartition: {p}\tLeader: 0\tReplicas: 0\tIsr: 0\tElr: N/A\tLastKnownElr: N/A"
                         for p in range(3)]
    assert logway_admin(broker, "topics", "--describe", "--under-replicated-partitions").stdout == ""
    assert logway_admin(broker, "topics", "--describe", "--unavailable-partitions").stdout == ""
    overrides = logway_admin(broker, "topics", "--describe", "--topics-with-overrides", "--topic", topic).stdout
    assert overrides.count("\n") == 1 and overrides.startswith(f"Topic: {topic}\t")
    again = logway_admin(broker, "topics", "--create", "--topic", topic, expect=1)
    assert "TOPIC_ALREADY_EXISTS" in again.stderr
    logway_admin(broker, "topics", "--create", "--topic", topic, "--if-not-exists")
    logway_admin(broker, "topics", "--delete", "--topic", topic)
    deadline = time.monotonic() + TIMEOUT_S
    while topic in logway_admin(broker, "topics", "--list").stdout.split() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert topic not in logway_admin(broker, "topics", "--list").stdout.split()
    missing = logway_admin(broker, "topics", "--describe", "--topic", topic, expect=1)
    assert "UNKNOWN_TOPIC_OR_PARTITION" in missing.stderr


def test_topic_configs_are_altered_and_described(broker):
    topic = unique_topic("admin-configs")
    logway_admin(broker, "topics", "--create", "--topic", topic)
    done = logway_admin(broker, "configs", "--alter", "--topic", topic,
                        "--add-config", "cleanup.policy=[compact,delete],max.message.bytes=2000")
    assert done.stdout == f"Completed updating config for topic {topic}.\n"
    resource = ConfigResource("TOPIC", topic)
    client = AdminClient({"bootstrap.servers": broker.bootstrap})
    described = client.describe_configs([resource])[resource].result()
    assert described["cleanup.policy"].value == "compact,delete"
    assert described["max.message.bytes"].value == "2000"
    lines = logway_admin(broker, "configs", "--describe", "--entity-type", "topics", "--entity-name", topic).stdout.splitlines()
    assert lines[0] == f"Dynamic configs for topic {topic} are:"
    assert lines[1].startswith("  cleanup.policy=compact,delete sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:")
    logway_admin(broker, "configs", "--alter", "--topic", topic, "--delete-config", "max.message.bytes")
    assert "max.message.bytes" not in logway_admin(broker, "configs", "--describe", "--topic", topic).stdout
    wrong = logway_admin(broker, "configs", "--alter", "--topic", topic, "--add-config", "retention.ms=soon", expect=1)
    assert "INVALID_CONFIG" in wrong.stderr
    assert "All configs for broker 0 are:" in logway_admin(broker, "configs", "--describe", "--broker", "0", "--all").stdout


def test_user_and_client_quotas_and_scram_credentials(broker):
    logway_admin(broker, "configs", "--alter", "--user", "ops-user", "--add-config", "producer_byte_rate=1024")
    logway_admin(broker, "configs", "--alter", "--user", "ops-user", "--client", "app",
                 "--add-config", "request_percentage=50")
    logway_admin(broker, "configs", "--alter", "--client-defaults", "--add-config", "consumer_byte_rate=4096")
    logway_admin(broker, "configs", "--alter", "--user", "ops-user",
                 "--add-config", "SCRAM-SHA-256=[iterations=8192,password=ops-secret]")
    user = logway_admin(broker, "configs", "--describe", "--user", "ops-user").stdout.splitlines()
    assert user == ["Quota configs for user-principal 'ops-user' are producer_byte_rate=1024.0",
                    "SCRAM credential configs for user-principal 'ops-user' are SCRAM-SHA-256=iterations=8192"]
    both = logway_admin(broker, "configs", "--describe", "--user", "ops-user", "--client", "app").stdout
    assert both == "Quota configs for user-principal 'ops-user', client-id 'app' are request_percentage=50.0\n"
    assert "Quota configs for the default client-id are consumer_byte_rate=4096.0" in logway_admin(
        broker, "configs", "--describe", "--entity-type", "clients").stdout
    logway_admin(broker, "configs", "--alter", "--user", "ops-user", "--delete-config", "producer_byte_rate")
    logway_admin(broker, "configs", "--alter", "--user", "ops-user", "--delete-config", "SCRAM-SHA-256")
    # as Kafka's tool, a user named without credentials is reported
    assert logway_admin(broker, "configs", "--describe", "--user", "ops-user").stdout.startswith(
        "Error retrieving SCRAM credential configs for user-principal 'ops-user': ")


def test_groups_are_listed_described_reset_and_deleted(broker):
    topic, group = unique_topic("admin-groups"), unique_topic("admin-group")
    logway_admin(broker, "topics", "--create", "--topic", topic, "--partitions", "2")
    produce(broker.bootstrap, topic, 20, partitions=2)
    consume_and_commit(broker.bootstrap, topic, group, 20)
    produce(broker.bootstrap, topic, 6, partitions=2)
    assert group in logway_admin(broker, "groups", "--list").stdout.split()
    assert f"{group}" in logway_admin(broker, "groups", "--list", "--state", "Empty").stdout
    described = logway_admin(broker, "groups", "--describe", "--group", group)
    assert f"Consumer group '{group}' has no active members." in described.stderr
    lines = described.stdout.strip("\n").splitlines()
    assert lines[0].split() == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                                "CONSUMER-ID", "HOST", "CLIENT-ID"]
    assert sorted(line.split()[:9] for line in lines[1:]) == [
        [group, topic, "0", "10", "13", "3", "-", "-", "-"], [group, topic, "1", "10", "13", "3", "-", "-", "-"]]

    dry_run = logway_admin(broker, "groups", "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest")
    assert dry_run.stdout.splitlines()[1].split() == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
    assert committed(broker.bootstrap, group, topic, 2) == [10, 10]  # a dry run changes nothing
    logway_admin(broker, "groups", "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute")
    assert committed(broker.bootstrap, group, topic, 2) == [0, 0]
    logway_admin(broker, "groups", "--reset-offsets", "--group", group, "--topic", f"{topic}:1", "--shift-by", "4", "--execute")
    assert committed(broker.bootstrap, group, topic, 2) == [0, 4]
    logway_admin(broker, "groups", "--reset-offsets", "--group", group, "--all-topics", "--to-latest", "--execute")
    assert committed(broker.bootstrap, group, topic, 2) == [13, 13]
    logway_admin(broker, "groups", "--reset-offsets", "--group", group, "--all-topics", "--to-offset", "5", "--execute")
    assert committed(broker.bootstrap, group, topic, 2) == [5, 5]
    logway_admin(broker, "groups", "--reset-offsets", "--group", group, "--all-topics",
                 "--to-datetime", "2000-01-01T00:00:00.000", "--execute")
    assert committed(broker.bootstrap, group, topic, 2) == [0, 0]

    logway_admin(broker, "groups", "--delete", "--group", group)
    assert group not in logway_admin(broker, "groups", "--list").stdout.split()
    gone = logway_admin(broker, "groups", "--delete", "--group", group, expect=1)
    assert f"* Group '{group}' could not be deleted due to: GROUP_ID_NOT_FOUND" in gone.stdout


def test_describe_shows_the_members_of_an_active_group_and_reset_refuses_it(broker):
    topic, group = unique_topic("admin-active"), unique_topic("admin-active-group")
    logway_admin(broker, "topics", "--create", "--topic", topic)
    produce(broker.bootstrap, topic, 5)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "client.id": "admin-cli-test"})
    consumer.subscribe([topic])
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.5)
        members = logway_admin(broker, "groups", "--describe", "--group", group, "--members", "--verbose").stdout
        header, member = members.strip("\n").splitlines()
        assert header.split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
        assert member.split()[0] == group and member.split()[3:] == ["admin-cli-test", "1", f"{topic}(0)"]
        state = logway_admin(broker, "groups", "--describe", "--group", group, "--state").stdout.strip("\n").splitlines()
        assert state[1].split()[-3:] == ["range", "Stable", "1"]
        refused = logway_admin(broker, "groups", "--reset-offsets", "--group", group, "--all-topics", "--to-earliest",
                               "--execute", expect=1)
        assert "can only be reset if the group" in refused.stdout
    finally:
        consumer.close()


def test_dump_log_prints_and_verifies_segments_the_broker_wrote(broker):
    topic = unique_topic("admin-dump")
    logway_admin(broker, "topics", "--create", "--topic", topic, "--config", "index.interval.bytes=100")
    for start in range(0, 30, 3):  # batches of three, so that the index gets entries
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
        for i in range(start, start + 3):
            producer.produce(topic, key=f"key-{i}".encode(), value=f"value-{i}".encode())
        producer.flush(TIMEOUT_S)
    segment = broker.data_dir / f"{topic}-0" / "00000000000000000000.log"
    dumped = subprocess.run([str(LOGWAY_ADMIN), "dump-log", "--files", str(segment), "--print-data-log"],
                            capture_output=True, text=True, timeout=60)
    assert dumped.returncode == 0, dumped.stderr
    lines = dumped.stdout.splitlines()
    batches = [line for line in lines if line.startswith("baseOffset: ")]
    records = [line for line in lines if line.startswith("| offset: ")]
    assert len(records) == 30 and all("isvalid: true" in b for b in batches)
    assert records[7].endswith("key: key-7 payload: value-7")
    index = segment.with_suffix(".index")
    verified = subprocess.run([str(LOGWAY_ADMIN), "dump-log", "--verify-index-only", "--files",
                               f"{index},{segment.with_suffix('.timeindex')}"], capture_output=True, text=True, timeout=60)
    assert verified.returncode == 0 and verified.stderr == "", verified.stderr
    listed = subprocess.run([str(LOGWAY_ADMIN), "dump-log", "--files", str(index)], capture_output=True, text=True, timeout=60)
    assert "offset: " in listed.stdout and "position: " in listed.stdout


def test_delete_records_moves_the_log_start(broker):
    topic = unique_topic("admin-delete-records")
    logway_admin(broker, "topics", "--create", "--topic", topic)
    produce(broker.bootstrap, topic, 10)
    offsets = broker.data_dir.parent / f"{topic}-offsets.json"
    offsets.write_text(json.dumps({"partitions": [{"topic": topic, "partition": 0, "offset": 6}], "version": 1}))
    out = logway_admin(broker, "delete-records", "--offset-json-file", str(offsets)).stdout
    assert out.splitlines() == ["Executing records delete operation", "Records delete operation completed:",
                                f"partition: {topic}-0\tlow_watermark: 6"]
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique_topic("g")})
    low, _ = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT_S)
    consumer.close()
    assert low == 6


def test_transactions_and_producers_show_an_open_transaction(broker):
    topic = unique_topic("admin-txn")
    logway_admin(broker, "topics", "--create", "--topic", topic)
    transactional_id = unique_topic("admin-tx")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": transactional_id})
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(topic, key=b"k", value=b"v", partition=0)
    assert producer.flush(TIMEOUT_S) == 0
    try:
        listed = logway_admin(broker, "transactions", "list").stdout.splitlines()
        assert listed[0].split() == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
        assert [transactional_id, "0"] == [row.split()[:2] for row in listed[1:] if row.startswith(transactional_id)][0]
        described = logway_admin(broker, "transactions", "describe", "--transactional-id", transactional_id).stdout
        row = described.splitlines()[1].split("\t")
        assert row[1].strip() == transactional_id and row[4].strip() == "Ongoing" and row[8].strip() == f"{topic}-0"
        producers = logway_admin(broker, "producers", "--topic", topic).stdout.splitlines()
        assert producers[0].split()[:3] == ["Topic", "Partition", "ProducerId"]
        assert producers[1].split()[:2] == [topic, "0"] and producers[1].split()[-1] == "0"  # the open txn's first offset
    finally:
        producer.commit_transaction(TIMEOUT_S)
    missing = logway_admin(broker, "transactions", "describe", "--transactional-id", "nobody", expect=1)
    assert "TRANSACTIONAL_ID_NOT_FOUND" in missing.stderr


def test_acls_are_added_listed_and_removed(tmp_path):
    broker = BrokerProcess(tmp_path / "data", {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                                               "super.users": "User:ANONYMOUS"}).start()
    try:
        added = logway_admin(broker, "acls", "--add", "--allow-principal", "User:alice", "--operation", "Read",
                             "--operation", "Describe", "--topic", "orders").stdout
        assert added.startswith("Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, "
                                "patternType=LITERAL)`: \n \t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)")
        logway_admin(broker, "acls", "--add", "--allow-principal", "User:bob", "--consumer", "--topic", "pay",
                     "--group", "billing", "--resource-pattern-type", "PREFIXED")
        listed = logway_admin(broker, "acls", "--list").stdout
        assert "ResourcePattern(resourceType=GROUP, name=billing, patternType=PREFIXED)" in listed
        assert listed.count("(principal=") == 5
        everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                      AclOperation.ANY, AclPermissionType.ANY)
        client = AdminClient({"bootstrap.servers": broker.bootstrap})
        assert len(client.describe_acls(everything).result()) == 5
        logway_admin(broker, "acls", "--remove", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "orders")
        remaining = logway_admin(broker, "acls", "--list", "--topic", "orders").stdout
        assert "operation=READ" not in remaining and "operation=DESCRIBE" in remaining
    finally:
        broker.kill()


def test_a_sasl_listener_is_reached_with_kafkas_command_config(tmp_path):
    broker = start_sasl_broker(tmp_path / "data")
    try:
        plain = tmp_path / "plain.properties"
        plain.write_text(
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
            "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\\n"
            f'  username="{ADMIN[0]}" password="{ADMIN[1]}";\n'
        )
        logway_admin(broker, "configs", "--alter", "--user", SCRAM_USER[0],
                     "--add-config", f"SCRAM-SHA-512=[password={SCRAM_USER[1]}]", config=plain)
        scram = tmp_path / "scram.properties"
        scram.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
                         f"sasl.username={SCRAM_USER[0]}\nsasl.password={SCRAM_USER[1]}\n")
        assert logway_admin(broker, "cluster", "cluster-id", config=scram).stdout.startswith("Cluster ID: ")
        wrong = tmp_path / "wrong.properties"
        wrong.write_text(f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username={ADMIN[0]}\n"
                         "sasl.password=nope\n")
        refused = logway_admin(broker, "cluster", config=wrong, expect=1)
        assert "SASL authentication" in refused.stderr
    finally:
        broker.kill()


def test_an_ssl_listener_is_reached_with_a_pem_truststore(tmp_path):
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "server.pem"))
    broker = BrokerProcess(tmp_path / "data")
    endpoint = f"SSL://127.0.0.1:{broker.port}"
    broker.overrides.update({"listeners": endpoint, "advertised.listeners": endpoint, "ssl.keystore.type": "PEM",
                             "ssl.keystore.location": str(tmp_path / "server.pem")})
    broker.start()
    try:
        config = tmp_path / "ssl.properties"
        config.write_text(f"security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location={tmp_path / 'ca.pem'}\n")
        assert logway_admin(broker, "topics", "--create", "--topic", "over-tls", config=config).stdout == \
            "Created topic over-tls.\n"
        untrusted = tmp_path / "untrusted.properties"
        other = trustme.CA()
        other.cert_pem.write_to_path(str(tmp_path / "other.pem"))
        untrusted.write_text(f"security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location={tmp_path / 'other.pem'}\n")
        assert "cannot reach any bootstrap server" in logway_admin(broker, "cluster", config=untrusted, expect=1).stderr
    finally:
        broker.kill()
