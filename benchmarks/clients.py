"""Client workloads with real Kafka clients: confluent-kafka (librdkafka) and kafka-python.

Every workload is bounded by a record count and a deadline, starts with an untimed warm-up
(metadata, connections, the first fetch), and reports payload bytes (records x value size).
Client settings are the module constants below, printed by benchmarks.run.
"""

import json
import struct
import time
from collections import Counter
from dataclasses import dataclass, field

from benchmarks.cpu import CpuMeter

# Producer batching: up to 1 MiB batches, sent after at most 5 ms.
LINGER_MS = 5
BATCH_BYTES = 1024 * 1024
# Consumer fetch sizes: librdkafka's defaults.
FETCH_MAX_BYTES = 50 * 1024 * 1024
PARTITION_FETCH_BYTES = 1024 * 1024  # librdkafka's default
CONSUME_BATCH = 10_000
# A fetch at the end of the log waits at most this long: keeps a seek back to the start of a
# window from waiting out a long poll (librdkafka's default is 500 ms), on both brokers alike.
FETCH_WAIT_MS = 10
# librdkafka stops fetching for fetch.queue.backoff.ms (default 1000) whenever its local queue
# passes queued.min.messages (100k) or queued.max.messages.kbytes (64 MiB): any read of more than
# that stalls a second at a time, whatever the broker. Measured: 175k -> 920k records/s.
FETCH_QUEUE_BACKOFF_MS = 10
# kafka-python 3.0 fails against librdkafka's mock unless pinned to an old protocol level (the
# mock answers ApiVersions v4 in a form it cannot decode, and Metadata hangs at 2.8): both
# brokers get the same pin, so both see Produce v3 / Fetch v4 requests from it.
KP_API_VERSION = (0, 11, 0)
GROUP = "logway-bench"
# The latency workload's percentiles of per-record round-trip times.
LATENCY_PERCENTILES = (50, 90, 99, 99.9)  # required by librdkafka's consumer; no group is joined (assign only)
# How often librdkafka reports its statistics, where the end-to-end workload counts the requests
# its clients sent: each end of the count lags its moment by at most this much.
STATS_INTERVAL_MS = 100


@dataclass
class Measurement:
    label: str
    records: int
    bytes: int
    seconds: float
    client_cpu: float | None = None
    broker_cpu: float | None = None
    timed_out: bool = False
    notes: list[str] = field(default_factory=list)
    # latency workloads: milliseconds at each of LATENCY_PERCENTILES ("p50", ..., "max")
    latency_ms: dict[str, float] | None = None
    # the end-to-end workload: the requests its clients sent over the run, by type (a plain
    # dict: the run's JSON is made with dataclasses.asdict, which cannot rebuild a Counter)
    requests: dict[str, int] = field(default_factory=dict)

    @property
    def broker_cpu_per_request(self) -> float | None:
        total = sum(self.requests.values())
        return self.broker_cpu / total if self.broker_cpu is not None and total else None

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.bytes / self.seconds / 1e6 if self.seconds > 0 else 0.0


def producer_config(bootstrap: str, acks: str, record_size: int, security: dict | None = None) -> dict:
    """`security`: librdkafka settings of the listener, e.g. {"security.protocol": "SSL",
    "ssl.ca.location": ...}; none for PLAINTEXT."""
    return {
        **(security or {}),
        "bootstrap.servers": bootstrap,
        "acks": acks,
        "linger.ms": LINGER_MS,
        "batch.size": max(BATCH_BYTES, record_size + 1024),
        "batch.num.messages": 1_000_000,
        "message.max.bytes": max(2 * BATCH_BYTES, 2 * record_size + 1024),
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1024 * 1024,
        "compression.type": "none",
        "log_level": 3,
    }


def consumer_config(bootstrap: str, security: dict | None = None) -> dict:
    return {
        **(security or {}),
        "bootstrap.servers": bootstrap,
        "group.id": GROUP,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": False,
        "fetch.max.bytes": FETCH_MAX_BYTES,
        "max.partition.fetch.bytes": PARTITION_FETCH_BYTES,
        "receive.message.max.bytes": FETCH_MAX_BYTES + 1024 * 1024,
        "fetch.wait.max.ms": FETCH_WAIT_MS,
        "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
        "log_level": 3,
    }


def watermarks(bootstrap: str, topic: str, security: dict | None = None) -> tuple[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(consumer_config(bootstrap, security))
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        consumer.close()


# --------------------------------------------------------------------------- confluent-kafka


class RequestCounter:
    """The requests one librdkafka client has sent, by type and summed over its brokers, as its
    latest statistics report them (`config()` asks for them every STATS_INTERVAL_MS; they
    arrive in whatever thread polls the client)."""

    def __init__(self) -> None:
        self.sent: Counter[str] = Counter()

    def config(self) -> dict:
        return {"statistics.interval.ms": STATS_INTERVAL_MS, "stats_cb": self.on_stats}

    def on_stats(self, text: str) -> None:
        self.sent = requests_sent(json.loads(text))


def requests_sent(stats: dict) -> Counter[str]:
    """The request counts of a librdkafka statistics object, by type, over all its brokers."""
    sent: Counter[str] = Counter()
    for broker in stats.get("brokers", {}).values():
        sent.update({kind: count for kind, count in broker.get("req", {}).items() if count})
    return sent


def _warmed_up_producer(label: str, config: dict, topic: str, value: bytes):
    """A confluent-kafka producer that has sent one record to partition 0, untimed: metadata
    fetched and connection made."""
    from confluent_kafka import Producer

    producer = Producer(config)
    producer.produce(topic, value, partition=0)
    if producer.flush(30) != 0:
        raise RuntimeError(f"{label}: warm-up record was not acknowledged")
    return producer


def ck_produce(
    label: str,
    bootstrap: str,
    topic: str,
    count: int,
    record_size: int,
    acks: str,
    meter: CpuMeter,
    deadline_s: float,
    security: dict | None = None,
) -> Measurement:
    """Produce `count` records of `record_size` bytes to partition 0 and wait for every ack."""
    errors: list[str] = []
    config = producer_config(bootstrap, acks, record_size, security)
    config["error_cb"] = lambda err: errors.append(str(err))
    value = b"v" * record_size
    producer = _warmed_up_producer(label, config, topic, value)
    produce, poll = producer.produce, producer.poll
    meter.start()
    start = time.perf_counter()
    deadline = start + deadline_s
    sent = 0
    timed_out = False
    while sent < count:
        try:
            produce(topic, value, partition=0)
            sent += 1
        except BufferError:
            poll(0.001)
            if time.perf_counter() > deadline:
                timed_out = True
                break
        if not sent % 50_000 and time.perf_counter() > deadline:
            timed_out = True
            break
    unacked = producer.flush(max(1.0, deadline - time.perf_counter()))
    seconds = time.perf_counter() - start
    client_cpu, broker_cpu = meter.stop()
    done = sent - unacked
    result = Measurement(label, done, done * record_size, seconds, client_cpu, broker_cpu, timed_out or unacked > 0)
    if errors:
        result.notes.append(f"client errors: {errors[:3]}")
    return result


def percentiles(samples: list[float]) -> dict[str, float]:
    """LATENCY_PERCENTILES of `samples` by nearest rank ("p50", "p99.9", ...), and "max"."""
    ordered = sorted(samples)
    found = {}
    for point in LATENCY_PERCENTILES:
        rank = max(1, -(-len(ordered) * point // 100))  # ceil, at least the first
        found[f"p{point:g}"] = ordered[min(len(ordered), int(rank)) - 1]
    found["max"] = ordered[-1]
    return found


def ck_produce_latency(
    label: str,
    bootstrap: str,
    topic: str,
    count: int,
    record_size: int,
    acks: str,
    meter: CpuMeter,
    deadline_s: float,
) -> Measurement:
    """Produce `count` records one at a time (linger.ms=0, each acknowledged before the next is
    sent): the round trip of each from produce() to its delivery report, as percentiles."""
    config = producer_config(bootstrap, acks, record_size)
    config["linger.ms"] = 0
    value = b"v" * record_size
    producer = _warmed_up_producer(label, config, topic, value)
    samples: list[float] = []
    errors: list[str] = []
    sent_at = 0.0

    def delivered(err, _message) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            samples.append((time.perf_counter() - sent_at) * 1000)

    meter.start()
    start = time.perf_counter()
    deadline = start + deadline_s
    timed_out = False
    for _ in range(count):
        if time.perf_counter() > deadline:
            timed_out = True
            break
        sent_at = time.perf_counter()
        producer.produce(topic, value, partition=0, on_delivery=delivered)
        if producer.flush(max(0.1, deadline - sent_at)) != 0:
            timed_out = True
            break
    seconds = time.perf_counter() - start
    client_cpu, broker_cpu = meter.stop()
    result = Measurement(label, len(samples), len(samples) * record_size, seconds, client_cpu, broker_cpu,
                         timed_out or bool(errors))
    return _with_latencies(result, samples, errors)


def ck_end_to_end(
    label: str,
    bootstrap: str,
    topic: str,
    count: int,
    record_size: int,
    meter: CpuMeter,
    deadline_s: float,
    interval_s: float = 0.001,
) -> Measurement:
    """A steady trickle read as it comes: one record every `interval_s` (linger.ms=0, acks=1,
    paced by the clock, not by acknowledgements), and a consumer tailing the partition with
    librdkafka's default fetch settings (fetch.wait.max.ms 500, so its fetches long-poll). Each
    record carries its send time: the percentiles of send to consume, and the broker's CPU over
    the run, and the requests the clients sent meanwhile, by type, from their statistics: so
    that brokers that serve a tailing consumer differently (logway answers a waiting fetch when
    a record comes; the mock lets a fetch that finds nothing wait out fetch.wait.max.ms, then
    answers one batch a fetch) are compared a request as well as a record."""
    import threading

    from confluent_kafka import Consumer, TopicPartition

    produced, fetched = RequestCounter(), RequestCounter()
    config = {**producer_config(bootstrap, "1", record_size), "linger.ms": 0, **produced.config()}
    padding = b"v" * max(0, record_size - 8)
    producer = _warmed_up_producer(label, config, topic, struct.pack(">d", 0.0) + padding)
    consumer = Consumer({
        **consumer_config(bootstrap), "fetch.wait.max.ms": 500, "fetch.queue.backoff.ms": 1000, **fetched.config(),
    })
    _, start_offset = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    consumer.assign([TopicPartition(topic, 0, start_offset)])
    samples: list[float] = []
    errors: list[str] = []
    stop = threading.Event()

    def tail() -> None:
        while len(samples) < count and not stop.is_set():
            message = consumer.poll(0.1)
            if message is None:
                continue
            if message.error():
                errors.append(str(message.error()))
                continue
            (sent_at,) = struct.unpack_from(">d", message.value())
            samples.append((time.perf_counter() - sent_at) * 1000)

    reader = threading.Thread(target=tail, name="end-to-end consumer")
    reader.start()
    time.sleep(0.5)  # the consumer's first fetch is out, as a tailing consumer's always is
    producer.poll(0)
    sent_before = produced.sent + fetched.sent
    meter.start()
    start = time.perf_counter()
    deadline = start + deadline_s
    timed_out = False
    for sent in range(count):
        now = time.perf_counter()
        if now > deadline:
            timed_out = True
            break
        pause = start + sent * interval_s - now
        if pause > 0:
            time.sleep(pause)
        producer.produce(topic, struct.pack(">d", time.perf_counter()) + padding, partition=0)
        producer.poll(0)
    if producer.flush(max(0.1, deadline - time.perf_counter())) != 0:
        timed_out = True
    reader.join(max(0.1, deadline - time.perf_counter()))
    seconds = time.perf_counter() - start
    client_cpu, broker_cpu = meter.stop()
    producer.poll(0)
    sent = produced.sent + fetched.sent - sent_before
    stop.set()
    reader.join(5)
    consumer.close()
    result = Measurement(label, len(samples), len(samples) * record_size, seconds, client_cpu, broker_cpu,
                         timed_out or bool(errors) or len(samples) < count, requests=dict(sent))
    if sent:
        result.notes.append(
            f"requests: {sum(sent.values()):,} ({', '.join(f'{kind} {n:,}' for kind, n in sent.most_common())}); "
            f"broker CPU a request {result.broker_cpu_per_request * 1e6:.1f} us"
        )
    return _with_latencies(result, samples, errors)


def _with_latencies(result: Measurement, samples: list[float], errors: list[str]) -> Measurement:
    """`result` with the percentiles of `samples` (milliseconds) and the first client errors."""
    if samples:
        result.latency_ms = percentiles(samples)
        result.notes.append("latency ms: " + ", ".join(f"{k} {v:.3f}" for k, v in result.latency_ms.items()))
    if errors:
        result.notes.append(f"client errors: {errors[:3]}")
    return result


class CkReader:
    """A confluent-kafka consumer assigned partition 0 of a topic, reading offset ranges."""

    def __init__(self, bootstrap: str, topic: str, start: int, security: dict | None = None) -> None:
        from confluent_kafka import Consumer, TopicPartition

        self._tp = TopicPartition
        self.topic = topic
        self.consumer = Consumer(consumer_config(bootstrap, security))
        self.consumer.assign([TopicPartition(topic, 0, start)])
        self._assigned_at = start

    def read(self, start: int, end: int, deadline: float) -> tuple[int, bool]:
        """Consume offsets [start, end); return (records, timed out)."""
        if start != self._assigned_at:
            self.consumer.seek(self._tp(self.topic, 0, start))
        self._assigned_at = None
        consume = self.consumer.consume
        records = 0
        last = start - 1
        while last < end - 1:
            if time.perf_counter() > deadline:
                return records, True
            # consume() waits out its timeout unless it fills the batch: never ask for more
            # than the range still holds
            messages = consume(min(CONSUME_BATCH, end - 1 - last), 1.0)
            for message in messages:
                if message.error():
                    raise RuntimeError(f"consume from {self.topic}: {message.error()}")
            if messages:
                records += len(messages)
                last = messages[-1].offset()
        return records, False

    def close(self) -> None:
        self.consumer.close()


def ck_consume(
    label: str,
    bootstrap: str,
    topic: str,
    start: int,
    end: int,
    record_size: int,
    meter: CpuMeter,
    deadline_s: float,
    repeats: int = 1,
    warm_up: bool = True,
    security: dict | None = None,
) -> Measurement:
    """Consume [start, end) `repeats` times (seeking back each time), after a warm-up read of
    up to 1000 records (connection, metadata, first fetch) unless `warm_up` is false."""
    reader = CkReader(bootstrap, topic, start, security)
    try:
        if warm_up:
            reader.read(start, min(end, start + 1000), time.perf_counter() + 30)
        meter.start()
        began = time.perf_counter()
        deadline = began + deadline_s
        records = 0
        timed_out = False
        for _ in range(repeats):
            got, timed_out = reader.read(start, end, deadline)
            records += got
            if timed_out:
                break
        seconds = time.perf_counter() - began
        client_cpu, broker_cpu = meter.stop()
    finally:
        reader.close()
    return Measurement(label, records, records * record_size, seconds, client_cpu, broker_cpu, timed_out)


# ------------------------------------------------------------------------------ kafka-python


def kp_produce(
    label: str,
    bootstrap: str,
    topic: str,
    count: int,
    record_size: int,
    acks: int | str,
    meter: CpuMeter,
    deadline_s: float,
) -> Measurement:
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        api_version=KP_API_VERSION,
        acks=acks,
        linger_ms=LINGER_MS,
        batch_size=max(BATCH_BYTES, record_size + 1024),
        max_request_size=max(2 * BATCH_BYTES, 2 * record_size + 1024),
    )
    value = b"v" * record_size
    try:
        producer.send(topic, value, partition=0).get(timeout=30)  # warm-up
        meter.start()
        start = time.perf_counter()
        deadline = start + deadline_s
        send = producer.send
        sent = 0
        timed_out = False
        future = None
        while sent < count:
            future = send(topic, value, partition=0)
            sent += 1
            if not sent % 10_000 and time.perf_counter() > deadline:
                timed_out = True
                break
        producer.flush(timeout=max(1.0, deadline - time.perf_counter()))
        if future is not None:
            future.get(timeout=1)  # raises if the last record failed
        seconds = time.perf_counter() - start
        client_cpu, broker_cpu = meter.stop()
    finally:
        producer.close(timeout=5)
    return Measurement(label, sent, sent * record_size, seconds, client_cpu, broker_cpu, timed_out)


def kp_consume(
    label: str,
    bootstrap: str,
    topic: str,
    start: int,
    end: int,
    record_size: int,
    meter: CpuMeter,
    deadline_s: float,
    repeats: int = 1,
) -> Measurement:
    from kafka import KafkaConsumer, TopicPartition

    tp = TopicPartition(topic, 0)
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        api_version=KP_API_VERSION,
        group_id=None,
        enable_auto_commit=False,
        fetch_max_bytes=FETCH_MAX_BYTES,
        max_partition_fetch_bytes=PARTITION_FETCH_BYTES,
        fetch_max_wait_ms=FETCH_WAIT_MS,
    )

    def read(first: int, stop: int, deadline: float) -> tuple[int, bool]:
        consumer.seek(tp, first)
        records, last = 0, first - 1
        while last < stop - 1:
            if time.perf_counter() > deadline:
                return records, True
            batches = consumer.poll(timeout_ms=1000, max_records=CONSUME_BATCH)
            for messages in batches.values():
                records += len(messages)
                last = messages[-1].offset
        return records, False

    try:
        consumer.assign([tp])
        read(start, min(end, start + 1000), time.perf_counter() + 30)
        meter.start()
        began = time.perf_counter()
        deadline = began + deadline_s
        records = 0
        timed_out = False
        for _ in range(repeats):
            got, timed_out = read(start, end, deadline)
            records += got
            if timed_out:
                break
        seconds = time.perf_counter() - began
        client_cpu, broker_cpu = meter.stop()
    finally:
        consumer.close()
    return Measurement(label, records, records * record_size, seconds, client_cpu, broker_cpu, timed_out)
