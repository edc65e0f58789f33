"""metrics.listener and metrics.graphite.* of a broker process, read after a workload of real
clients (confluent-kafka): plain and transactional produces, a consumer group that commits, a
compacted topic for the cleaner. Each metric the workload must move is checked to have moved."""

import socket
import threading
import time
import urllib.error
import urllib.request
import uuid

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import NewTopic
from prometheus_client.parser import text_string_to_metric_families

from tests.compat.group_support import TIMEOUT_S, admin_for, assert_clean_log, wait_until
from tests.harness import BrokerProcess, free_port

pytestmark = pytest.mark.compat

RECORDS = 200
TOPIC, COMPACTED, GROUP = "metered", "compacted", "metered-readers"


class _Carbon(threading.Thread):
    """A graphite plaintext port: keeps every line pushed to it."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.lines: list[str] = []

    def run(self) -> None:
        while True:
            try:
                connection, _ = self.sock.accept()
            except OSError:  # closed by the test
                return
            with connection:
                data = b""
                while chunk := connection.recv(65536):
                    data += chunk
            self.lines.extend(data.decode("ascii").splitlines())


@pytest.fixture(scope="module")
def carbon():
    server = _Carbon()
    server.start()
    yield server
    server.sock.close()


@pytest.fixture(scope="module")
def metered_broker(tmp_path_factory, carbon):
    metrics_port = free_port()
    broker = BrokerProcess(
        tmp_path_factory.mktemp("metrics") / "data",
        {
            "metrics.listener": f"http://127.0.0.1:{metrics_port}",
            "metrics.graphite.host": "127.0.0.1",
            "metrics.graphite.port": str(carbon.port),
            "metrics.graphite.interval.ms": "1000",
            "metrics.graphite.prefix": "test",
            "group.initial.rebalance.delay.ms": "0",
            "offsets.topic.num.partitions": "3",
            "transaction.state.log.num.partitions": "3",
            "log.cleaner.backoff.ms": "200",
        },
    ).start()
    broker.metrics_url = f"http://127.0.0.1:{metrics_port}"
    yield broker
    broker.kill()
    assert_clean_log(broker)


def scrape(broker) -> dict[tuple[str, frozenset], float]:
    with urllib.request.urlopen(broker.metrics_url + "/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def sample(samples, name: str, **labels) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def create_topics(bootstrap: str) -> None:
    admin = admin_for(bootstrap)
    futures = admin.create_topics(
        [
            NewTopic(TOPIC, 2, 1, config={"flush.messages": "1"}),
            NewTopic(COMPACTED, 1, 1, config={"cleanup.policy": "compact", "segment.bytes": "1024", "min.cleanable.dirty.ratio": "0.01"}),
        ],
        operation_timeout=TIMEOUT_S,
        request_timeout=TIMEOUT_S,
    )
    for future in futures.values():
        future.result(TIMEOUT_S)


def produce(bootstrap: str, topic: str, count: int, keys: int | None = None, **config) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})
    if "transactional.id" in config:
        producer.init_transactions(TIMEOUT_S)
        producer.begin_transaction()
    for i in range(count):
        key = None if keys is None else b"k%d" % (i % keys)
        producer.produce(topic, b"v%d" % i, key=key, partition=i % 2 if topic == TOPIC else 0)
    if "transactional.id" in config:
        producer.commit_transaction(TIMEOUT_S)
    assert producer.flush(TIMEOUT_S) == 0


def consume_all(bootstrap: str) -> None:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": GROUP, "auto.offset.reset": "earliest", "enable.auto.commit": False}
    )
    consumer.subscribe([TOPIC])
    seen = 0
    deadline = time.monotonic() + TIMEOUT_S
    while seen < RECORDS + 10 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            seen += 1
    # Caught up: the consumer's next fetches wait fetch.wait.max.ms for data (remote time).
    assert consumer.poll(1.5) is None
    consumer.commit(asynchronous=False)
    consumer.close()
    assert seen == RECORDS + 10


@pytest.fixture(scope="module")
def workload(metered_broker):
    bootstrap = metered_broker.bootstrap
    before = scrape(metered_broker)
    create_topics(bootstrap)
    produce(bootstrap, TOPIC, RECORDS)
    produce(bootstrap, TOPIC, 10, **{"transactional.id": f"metered-{uuid.uuid4().hex[:6]}"})
    # Small batches in small segments: several segments for the cleaner to compact.
    produce(bootstrap, COMPACTED, 300, keys=3, **{"batch.num.messages": 5})
    consume_all(bootstrap)
    return before


def test_health_is_ready_once_started(metered_broker):
    with urllib.request.urlopen(metered_broker.metrics_url + "/health", timeout=10) as answer:
        assert (answer.status, answer.read()) == (200, b"ready\n")


def test_topic_request_and_log_metrics_moved_with_the_workload(metered_broker, workload):
    now = scrape(metered_broker)
    topic = {"topic": TOPIC}
    assert sample(workload, "kafka_server_brokertopicmetrics_messagesin_total", **topic) is None
    # 200 records and 10 transactional ones (not the transaction's markers: producers' records only).
    assert sample(now, "kafka_server_brokertopicmetrics_messagesin_total", **topic) == RECORDS + 10
    for name in ("bytesin", "bytesout", "totalproducerequests", "totalfetchrequests"):
        assert sample(now, f"kafka_server_brokertopicmetrics_{name}_total", **topic) > 0, name
    assert sample(now, "kafka_server_brokertopicmetrics_messagesin_total") > RECORDS
    for request in ("Produce", "FetchConsumer", "Metadata", "JoinGroup", "OffsetCommit", "EndTxn"):
        assert sample(now, "kafka_network_requestmetrics_totaltimems_count", request=request) > 0, request
    assert sample(now, "kafka_network_requestmetrics_remotetimems_sum", request="FetchConsumer") > 0
    for metric in ("requestqueuetimems", "localtimems", "responsesendtimems"):
        assert sample(now, f"kafka_network_requestmetrics_{metric}_count", request="Produce") == sample(
            now, "kafka_network_requestmetrics_totaltimems_count", request="Produce"
        ), metric
    partition = {"topic": TOPIC, "partition": "0"}
    assert sample(now, "kafka_log_log_size", **partition) > 0
    assert sample(now, "kafka_log_log_numlogsegments", **partition) == 1
    assert sample(now, "kafka_log_log_logendoffset", **partition) > RECORDS / 2
    # flush.messages=1: every append was flushed.
    assert sample(now, "kafka_log_logflushstats_logflushrateandtimems_count") > sample(
        workload, "kafka_log_logflushstats_logflushrateandtimems_count"
    )
    assert sample(now, "kafka_log_logmanager_offlinelogdirectorycount") == 0


def test_replica_controller_network_and_coordinator_metrics_moved_with_the_workload(metered_broker, workload):
    now = scrape(metered_broker)
    # The two topics and the internal ones, every partition led here.
    assert sample(now, "kafka_server_replicamanager_partitioncount") == 2 + 1 + 3 + 3
    assert sample(now, "kafka_server_replicamanager_leadercount") == 2 + 1 + 3 + 3
    assert sample(now, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert sample(now, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert sample(now, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    listener = {"listener": "PLAINTEXT", "networkprocessor": "0"}
    assert sample(now, "kafka_server_socket_server_metrics_connection_creation_total", **listener) > 3
    assert 0 <= sample(now, "kafka_network_socketserver_networkprocessoravgidle_percent") <= 1
    groups = "kafka_coordinator_group_groupmetadatamanager_"
    assert sample(now, groups + "numgroups") == 1
    assert sample(now, groups + "numgroupsempty") == 1  # the consumer left after its commit
    lag = {"consumergroup": GROUP, "topic": TOPIC, "partition": "0"}
    committed_offset = sample(now, "kafka_consumergroup_current_offset", **lag)
    high_watermark = sample(now, "kafka_topic_partition_current_offset", topic=TOPIC, partition="0")
    assert committed_offset > RECORDS / 2
    # The consumer read everything; the commit may stop before the transaction's last marker.
    assert sample(now, "kafka_consumergroup_lag", **lag) == high_watermark - committed_offset <= 1
    committed = sample(
        now, "kafka_coordinator_transaction_transactionstatemanager_numtransactions", state="CompleteCommit"
    )
    assert committed == 1


def test_the_cleaner_metrics_show_its_runs(metered_broker, workload):
    def cleaned() -> bool:
        return scrape(metered_broker).get(("kafka_log_logcleaner_max_clean_time_secs", frozenset()), 0) > 0

    wait_until(cleaned, "cleaning of the compacted topic")
    now = scrape(metered_broker)
    assert sample(now, "kafka_log_logcleaner_time_since_last_run_ms") < 60_000
    assert sample(now, "kafka_log_logcleanermanager_uncleanable_partitions_count", logdirectory=str(metered_broker.data_dir)) == 0


def test_graphite_receives_the_same_registry(metered_broker, carbon, workload):
    path = f"test.kafka_server_brokertopicmetrics_messagesin_total.topic.{TOPIC}"

    def pushed() -> bool:
        return any(line.startswith(path + " ") and float(line.split(" ")[1]) > RECORDS for line in list(carbon.lines))

    wait_until(pushed, "graphite push of the workload's counts")


def test_a_bad_metrics_listener_stops_the_start(tmp_path):
    broker = BrokerProcess(tmp_path / "data", {"metrics.listener": "127.0.0.1:9404"})
    with pytest.raises(RuntimeError, match="for configuration metrics.listener"):
        broker.start()


def test_the_endpoint_answers_404_elsewhere(metered_broker):
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(metered_broker.metrics_url + "/jmx", timeout=10)
    assert refused.value.code == 404


def test_a_log_dir_unusable_at_start_is_counted_offline_and_the_broker_is_ready(tmp_path):
    bad, good = tmp_path / "not-a-directory", tmp_path / "good"
    bad.write_text("a log dir cannot be a file\n")
    metrics_port = free_port()
    broker = BrokerProcess(
        tmp_path / "broker", {"log.dirs": f"{bad},{good}", "metrics.listener": f"http://127.0.0.1:{metrics_port}"}
    )
    broker.metrics_url = f"http://127.0.0.1:{metrics_port}"
    broker.start()
    try:
        samples = scrape(broker)
        with urllib.request.urlopen(broker.metrics_url + "/health", timeout=10) as answer:
            assert answer.status == 200  # the other dir serves
    finally:
        broker.kill()
    assert sample(samples, "kafka_log_logmanager_offlinelogdirectorycount") == 1
    assert sample(samples, "kafka_log_logmanager_logdirectoryoffline", logdirectory=str(bad)) == 1
    assert sample(samples, "kafka_log_logmanager_logdirectoryoffline", logdirectory=str(good)) == 0
