"""What the mirror tests share: the logway-mirror process, reading a topic as read_committed
readers see it, and the checker of exactly once in order per partition."""

import signal
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.harness import REPO

TIMEOUT_S = 60


def mirror_properties(a: str, b: str, *flows: str, replication_factor: int = 1, **settings: str) -> str:
    """A configuration of clusters A and B (bootstrap strings `a`, `b`) with `flows` enabled,
    refreshing topics and configs every second; `settings`' underscores stand for dots."""
    lines = ["clusters = A, B", f"A.bootstrap.servers = {a}", f"B.bootstrap.servers = {b}"]
    lines += [f"{flow}.enabled = true" for flow in flows]
    lines += [f"replication.factor = {replication_factor}", "refresh.topics.interval.seconds = 1", "sync.topic.configs.interval.seconds = 1"]
    lines += [f"{key.replace('_', '.')} = {value}" for key, value in settings.items()]
    return "\n".join(lines) + "\n"


class Mirror:
    """The logway-mirror process, started, killed and restarted on one properties file. Every
    process started is in `Mirror.started`, for the tests' teardown (`kill_mirrors`) to end it
    whatever the test did."""

    started: list[subprocess.Popen] = []

    def __init__(self, directory: Path, properties: str) -> None:
        self.config = directory / "mirror.properties"
        self.config.write_text(properties)
        self.log_path = directory / "mirror.log"
        self._started_at = 0  # the log's length when the running process started
        self.process: subprocess.Popen | None = None

    def start(self) -> "Mirror":
        with open(self.log_path, "ab") as log:
            self._started_at = log.tell()
            self.process = subprocess.Popen(
                [sys.executable, "-m", "replication.mirror.cli", str(self.config), "--log-level", "DEBUG"],
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        Mirror.started.append(self.process)
        return self

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(TIMEOUT_S)

    def stop(self) -> int:
        """SIGTERM once the process has its signal handlers (it logs "mirroring" after setting
        them): a SIGTERM during the interpreter's start would kill it instead."""
        deadline = time.monotonic() + TIMEOUT_S
        while b"logway.mirror: mirroring " not in self.log_path.read_bytes()[self._started_at :] and self.process.poll() is None:
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(TIMEOUT_S)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def kill_mirrors() -> None:
    """SIGKILL every mirror process a test started and left running."""
    while Mirror.started:
        process = Mirror.started.pop()
        if process.poll() is None:
            process.kill()
            process.wait(TIMEOUT_S)


def topic_names(bootstrap: str) -> set[str]:
    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=TIMEOUT_S).topics)


def read_committed(bootstrap: str, topic: str) -> dict[int, list[bytes]]:
    """Every partition's values from the start to its end, as read_committed readers see them."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "mirror-checker",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    try:
        metadata = consumer.list_topics(topic, timeout=TIMEOUT_S).topics[topic]
        if metadata.error is not None:
            return {}
        partitions = sorted(metadata.partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        return _read_to_end(consumer, topic, partitions)
    finally:
        consumer.close()


def exactly_once_in_order(source: dict[int, list[bytes]], target: dict[int, list[bytes]]) -> list[str]:
    """What is wrong with the target, partition by partition: each must hold the source's records,
    each once and in the source's order. Empty when nothing is."""
    problems = []
    for partition, expected in sorted(source.items()):
        got = target.get(partition, [])
        if got == expected:
            continue
        seen = set()
        duplicated = sorted({v for v in got if v in seen or seen.add(v)})
        missing = sorted(set(expected) - set(got))
        extra = sorted(set(got) - set(expected))
        order = "" if duplicated or missing or extra else "; same records in another order"
        problems.append(
            f"partition {partition}: {len(got)} records for {len(expected)}; duplicated {duplicated[:5]}, "
            f"missing {missing[:5]}, not in the source {extra[:5]}{order}"
        )
    for partition in sorted(set(target) - set(source)):
        if target[partition]:
            problems.append(f"partition {partition}: {len(target[partition])} records the source has not")
    return problems


def wait_until_mirrored(source: str, topic: str, target: str, remote: str) -> tuple[dict, dict]:
    """Read both sides until the target holds as many records as the source (or the time is up)."""
    expected = read_committed(source, topic)
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        got = read_committed(target, remote) if remote in topic_names(target) else {}
        if sum(map(len, got.values())) >= sum(map(len, expected.values())) or time.monotonic() > deadline:
            return expected, got
        time.sleep(0.5)


def produce_numbered(bootstrap: str, topic: str, partitions: int, count: int, pace_s: float = 0.0, first: int = 0) -> None:
    """`count` records spread round-robin over the partitions, each value naming its partition
    and number (from `first` on), so the checker can tell a duplicate from a reordering."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for number in range(first, first + count):
        partition = number % partitions
        producer.produce(topic, value=f"{partition}:{number}".encode(), key=str(number).encode(), partition=partition)
        producer.poll(0)
        if pace_s and (number - first) % 50 == 49:
            time.sleep(pace_s)
    assert producer.flush(TIMEOUT_S) == 0


def consume_and_commit(bootstrap: str, group: str, topic: str, count: int) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    read = 0
    deadline = time.monotonic() + TIMEOUT_S
    while read < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            read += 1
    assert read == count
    consumer.commit(asynchronous=False)
    consumer.close()


def committed(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    result = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(TIMEOUT_S)
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions if tp.offset >= 0}


def wait_for_committed(bootstrap: str, group: str, partitions: set[tuple[str, int]]) -> None:
    """Until the group has offsets on every one of `partitions` (the mirror's group sync)."""
    deadline = time.monotonic() + TIMEOUT_S
    while set(committed(bootstrap, group)) < partitions and time.monotonic() < deadline:
        time.sleep(0.5)
    assert set(committed(bootstrap, group)) >= partitions


def read_as_group(bootstrap: str, group: str, topic: str) -> dict[int, list[bytes]]:
    """What a member of `group` subscribed to `topic` reads from the group's offsets to the end."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    partitions = len(consumer.list_topics(topic, timeout=TIMEOUT_S).topics[topic].partitions)
    consumer.subscribe([topic])
    try:
        return _read_to_end(consumer, topic, range(partitions))
    finally:
        consumer.close()


def _read_to_end(consumer: Consumer, topic: str, partitions) -> dict[int, list[bytes]]:
    """Each partition's values from the consumer's positions until it reports the end of them
    all (enable.partition.eof)."""
    values: dict[int, list[bytes]] = {p: [] for p in partitions}
    at_end: set[int] = set()
    deadline = time.monotonic() + TIMEOUT_S
    while len(at_end) < len(values) and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None:
            continue
        if message.error() is not None:
            if message.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(message.partition())
            continue
        values[message.partition()].append(message.value())
    assert len(at_end) == len(values), f"{topic}: did not reach the end of every partition: {_where(consumer, topic, values, at_end)}"
    return values


def _where(consumer: Consumer, topic: str, values: dict[int, list[bytes]], at_end: set[int]) -> str:
    """Where a reader that did not reach every end stood, for a failure seen only in CI: what
    it read, its assignment, its positions and the partitions' watermarks."""
    assigned = [tp.partition for tp in consumer.assignment()]
    positions = {tp.partition: tp.offset for tp in consumer.position([TopicPartition(topic, p) for p in values])}
    watermarks = {}
    for partition in values:
        try:
            watermarks[partition] = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=5)
        except KafkaException as exc:
            watermarks[partition] = str(exc)
    read = {p: len(v) for p, v in values.items()}
    return f"at the end {sorted(at_end)}, read {read}, assigned {sorted(assigned)}, positions {positions}, watermarks {watermarks}"


def failover_problems(
    source: dict[int, list[bytes]], positions: dict[tuple[str, int], int], topic: str, moved: dict[int, list[bytes]], max_repeats: int
) -> list[str]:
    """What is wrong with what a group moved to the target read (`moved`), given the source's
    records and the group's positions there: it must end with every record the group had not
    read, in order (no loss), after at most `max_repeats` records it had read, those just before
    its position (bounded repeats)."""
    problems = []
    for partition, records in sorted(source.items()):
        position = positions.get((topic, partition), 0)
        unread, got = records[position:], moved.get(partition, [])
        cut = len(got) - len(unread)
        if cut < 0 or got[cut:] != unread:
            problems.append(f"partition {partition}: the {len(unread)} records after position {position} are not all there, in order")
            continue
        if got[:cut] != records[position - cut : position]:
            problems.append(f"partition {partition}: the {cut} records before them are not those before position {position}")
        if cut > max_repeats:
            problems.append(f"partition {partition}: {cut} records read again, more than {max_repeats}")
    return problems
