"""The load the fault tests put on a cluster while they break it: one confluent-kafka producer in
a thread writing distinct values, bounded in count and in time, recording what became of each
(checker.History), and a reader that takes a topic back out to the high watermark."""

import threading
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from tests.cluster.checker import History


class ProducerWorkload:
    """Writes `b"<prefix>-<n>"` for n = 0, 1, ... round-robin over the partitions until `count`
    values are sent, `duration_s` passes, or stop() is called; then waits up to `drain_s` for the
    answers still out. Values whose answer never came are History.unknown."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partitions: int,
        *,
        count: int,
        duration_s: float,
        rate_per_s: float = 200.0,
        drain_s: float = 30.0,
        prefix: str = "w",
        config: dict | None = None,
    ) -> None:
        self.topic, self.partitions, self.count = topic, partitions, count
        self.duration_s, self.interval_s, self.drain_s = duration_s, 1.0 / rate_per_s, drain_s
        self.prefix = prefix
        self.history = History()
        self._stop = threading.Event()
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": False,
                # One request in flight per broker keeps a partition's order through retries.
                "max.in.flight.requests.per.connection": 1,
                "linger.ms": 2,
                "message.timeout.ms": 20_000,
                "request.timeout.ms": 5_000,
                "retry.backoff.ms": 200,
                "topic.metadata.refresh.interval.ms": 1_000,
                **(config or {}),
            }
        )
        self._thread = threading.Thread(target=self._run, name=f"workload-{topic}", daemon=True)

    def start(self) -> "ProducerWorkload":
        self._thread.start()
        return self

    def stop(self) -> History:
        self._stop.set()
        return self.join()

    def join(self) -> History:
        self._thread.join(self.duration_s + self.drain_s + 10)
        assert not self._thread.is_alive(), "the workload did not end in time"
        return self.history

    @property
    def acked_count(self) -> int:
        return len(self.history.acked)

    def _run(self) -> None:
        deadline = time.monotonic() + self.duration_s
        for n in range(self.count):
            if self._stop.is_set() or time.monotonic() >= deadline:
                break
            self._send(f"{self.prefix}-{n}".encode(), n % self.partitions)
            self._producer.poll(self.interval_s)
        self._producer.flush(self.drain_s)

    def _send(self, value: bytes, partition: int) -> None:
        def on_delivery(err, msg) -> None:
            if err is None:
                self.history.acked[value] = (msg.partition(), msg.offset())
            else:
                self.history.failed[value] = str(err)

        while True:
            try:
                self._producer.produce(self.topic, value, partition=partition, on_delivery=on_delivery)
                break
            except BufferError:  # the local queue is full: let answers drain it
                self._producer.poll(0.1)
        self.history.sent.append(value)


def read_topic(bootstrap: str, topic: str, partitions: int, timeout_s: float = 30.0) -> dict[int, list[tuple[int, bytes]]]:
    """Every committed record of the topic: partition -> [(offset, value)] up to the high
    watermark each partition has when reading starts."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"checker-{topic}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
        }
    )
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)[1] for p in range(partitions)}
        wanted = {p for p, end in ends.items() if end > 0}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in wanted])
        read: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
        deadline = time.monotonic() + timeout_s
        while wanted:
            if time.monotonic() >= deadline:
                raise AssertionError(f"could not read {topic} to its end within {timeout_s} s: {wanted} left")
            message = consumer.poll(0.5)
            if message is None:
                continue
            partition = message.partition()
            if message.error() is not None:
                # Errors during faults are passing (the client retries); the deadline bounds them.
                at_end = message.error().code() == KafkaError._PARTITION_EOF
                if at_end and message.offset() >= ends[partition]:
                    wanted.discard(partition)
                continue
            if message.offset() < ends[partition]:
                read[partition].append((message.offset(), message.value()))
            if message.offset() + 1 >= ends[partition]:
                wanted.discard(partition)
        return read
    finally:
        consumer.close()
