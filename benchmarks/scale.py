"""The `scale` part: one standalone broker with many one-replica partitions, at Kafka's defaults.

Measured (issue 14's targets in brackets): one CreateTopics request for all the partitions
(100 topics, up to 30 s for 10,000 partitions), the broker's RSS (up to 1 GiB), its open
descriptors and the allocated disk; then a clean restart until Metadata answers with a leader
for every partition (up to 10 s), and a restart after kill -9 (up to 20 s). Before each restart
every partition gets one record, so the kill -9 leaves every partition with records past its
recovery point, which the restart re-validates. A restart is timed from the process's spawn to
the first complete Metadata answer.

Every wait is bounded by a deadline; the broker's data lives in the run's scratch directory.
"""

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

TOPICS = 100
_DEADLINE_S = 300.0
_POLL_S = 0.2


@dataclass
class ScaleResult:
    partitions: int
    create_s: float | None = None
    create_to_metadata_s: float | None = None
    clean_stop_s: float | None = None
    clean_restart_s: float | None = None
    crash_restart_s: float | None = None
    values: dict[str, float] | None = None


def _broker_stats(pid: int, data_dir: Path) -> dict[str, float]:
    """RSS and its peak (MiB), open descriptors, allocated and apparent size of the data (MiB)."""
    status = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            status[key] = value.strip()
    allocated = apparent = 0
    for root, _, files in os.walk(data_dir):
        for name in files:
            try:
                st = os.stat(os.path.join(root, name))
            except FileNotFoundError:
                continue
            allocated += st.st_blocks * 512
            apparent += st.st_size
    return {
        "rss_mib": int(status["VmRSS"].split()[0]) / 1024,
        "peak_rss_mib": int(status["VmHWM"].split()[0]) / 1024,
        "descriptors": len(os.listdir(f"/proc/{pid}/fd")),
        "allocated_mib": allocated / 2**20,
        "apparent_mib": apparent / 2**20,
    }


class _Broker:
    """A broker process at Kafka's defaults (index files of 10 MiB), started without waiting
    for it to listen: the restarts are timed until Metadata is complete."""

    def __init__(self, data_dir: Path) -> None:
        from tests.harness import BrokerProcess

        # Kafka's default index size, not the test brokers' smaller one.
        self.process_spec = BrokerProcess(data_dir, {"log.index.size.max.bytes": "10485760"})
        self.log_path = self.process_spec.log_path
        self.process: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return self.process_spec.bootstrap

    def spawn(self) -> None:
        from tests.harness import REPO, SERVER_PROPERTIES, broker_python

        command = [*broker_python(), "-m", "broker", "--config", str(SERVER_PROPERTIES)]
        for key, value in self.process_spec.overrides.items():
            command += ["--override", f"{key}={value}"]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def stop(self) -> float:
        """SIGTERM (a clean shutdown); seconds until the process exited."""
        started = time.perf_counter()
        self.process.terminate()
        self.process.wait(_DEADLINE_S)
        return time.perf_counter() - started

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def _wait_for_metadata(broker: _Broker, topics: list[str], partitions_per_topic: int, started: float) -> float:
    """Seconds from `started` until one Metadata answer names a leader for every partition."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    wanted = set(topics)
    while time.perf_counter() - started < _DEADLINE_S:
        if broker.process.poll() is not None:
            raise RuntimeError(f"broker exited with {broker.process.returncode}; see {broker.log_path}")
        try:
            metadata = admin.list_topics(timeout=5)
        except KafkaException:
            time.sleep(_POLL_S)
            continue
        complete = all(
            name in metadata.topics
            and metadata.topics[name].error is None
            and len(metadata.topics[name].partitions) == partitions_per_topic
            and all(p.leader >= 0 and p.error is None for p in metadata.topics[name].partitions.values())
            for name in wanted
        )
        if complete:
            return time.perf_counter() - started
        time.sleep(_POLL_S)
    raise TimeoutError(f"no complete Metadata answer within {_DEADLINE_S:.0f} s")


def _produce_one_record_each(broker: _Broker, topics: list[str], partitions_per_topic: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50, "acks": 1, "log_level": 0})
    failures = []
    for topic in topics:
        for partition in range(partitions_per_topic):
            producer.produce(
                topic, b"v", partition=partition, on_delivery=lambda err, _: err and failures.append(err)
            )
            producer.poll(0)
    left = producer.flush(_DEADLINE_S)
    if left or failures:
        raise RuntimeError(f"{left} records undelivered, {len(failures)} failed: {failures[:3]}")


def _end_offsets(broker: _Broker, topic: str, partitions: list[int]) -> list[int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "scale-bench", "log_level": 0})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in partitions]
    finally:
        consumer.close()


def run(scratch: Path, partitions: int) -> ScaleResult:
    from confluent_kafka.admin import AdminClient, NewTopic

    per_topic = max(1, partitions // TOPICS)
    topics = [f"scale-{n:03d}" for n in range(min(TOPICS, partitions))]
    result = ScaleResult(partitions=per_topic * len(topics), values={})
    broker = _Broker(scratch / "scale-data")
    try:
        started = time.perf_counter()
        broker.spawn()
        _wait_for_metadata(broker, [], per_topic, started)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
        started = time.perf_counter()
        futures = admin.create_topics(
            [NewTopic(topic, per_topic, 1) for topic in topics], operation_timeout=_DEADLINE_S, request_timeout=_DEADLINE_S
        )
        for future in futures.values():
            future.result(_DEADLINE_S)
        result.create_s = time.perf_counter() - started
        result.create_to_metadata_s = _wait_for_metadata(broker, topics, per_topic, started)
        for key, value in _broker_stats(broker.process.pid, broker.process_spec.data_dir).items():
            result.values[f"created_{key}"] = value

        _produce_one_record_each(broker, topics, per_topic)
        result.clean_stop_s = broker.stop()
        started = time.perf_counter()
        broker.spawn()
        result.clean_restart_s = _wait_for_metadata(broker, topics, per_topic, started)
        for key, value in _broker_stats(broker.process.pid, broker.process_spec.data_dir).items():
            result.values[f"clean_restart_{key}"] = value

        _produce_one_record_each(broker, topics, per_topic)
        broker.kill()
        started = time.perf_counter()
        broker.spawn()
        result.crash_restart_s = _wait_for_metadata(broker, topics, per_topic, started)
        for key, value in _broker_stats(broker.process.pid, broker.process_spec.data_dir).items():
            result.values[f"crash_restart_{key}"] = value
        sample = list(range(0, per_topic, max(1, per_topic // 10)))
        ends = _end_offsets(broker, topics[-1], sample)
        if ends != [2] * len(sample):
            raise RuntimeError(f"after kill -9, end offsets of {topics[-1]} {sample}: {ends}, not 2 each")
        broker.stop()
    finally:
        broker.kill()
    return result
