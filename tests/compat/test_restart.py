"""Durability across restarts, with a real client: a clean restart (SIGTERM) keeps every record at
its offset; after kill -9 mid-stream every acknowledged record is still at its acknowledged
offset, the log end is consistent and producing carries on after it. The same with tiny segments,
so that restarts load (and recover) many segments and their sparse indexes, and with kills
landing while segments roll.

Records are produced by confluent-kafka with acks=all and read back with assign(); each record's
value names its sequence number, and its timestamp is base + sequence number, so the record at
any offset can be checked. Idempotence is off: these tests count on records failing once the
broker is gone (an idempotent producer across kill -9 is in test_idempotence.py).
"""

import os
import threading
import time
from dataclasses import dataclass, field

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.harness import unique_topic

pytestmark = pytest.mark.compat

TIMEOUT_S = 20
SMALL_SEGMENTS = {"log_segment_bytes": "65536", "log_index_interval_bytes": "512"}
# Batches must fit in a segment, or the broker refuses them (RECORD_LIST_TOO_LARGE, as Kafka).
SMALL_BATCHES = {"batch.size": 16384}


def assert_clean_log(broker) -> None:
    text = broker.log()
    assert "Traceback" not in text, text[-5000:]
    assert " ERROR " not in text, text[-5000:]


def create_topic(broker, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=TIMEOUT_S)


def make_producer(broker, **extra) -> Producer:
    return Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "acks": "all",
            "enable.idempotence": False,
            "linger.ms": 5,
            "message.timeout.ms": TIMEOUT_S * 1000,
            "socket.timeout.ms": 10_000,
            "reconnect.backoff.max.ms": 500,
            **extra,
        }
    )


def make_consumer(broker) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "logway-compat-unused",  # required by the client; never joined
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "socket.timeout.ms": 10_000,
        }
    )


def payload(seq: int, size: int = 100) -> bytes:
    head = f"seq={seq};".encode()
    return head + bytes((seq + i) % 251 for i in range(size - len(head)))


def seq_of(value: bytes) -> int:
    return int(value[4 : value.index(b";")])


@dataclass
class Acked:
    """What the broker acknowledged: (partition, offset) -> (sequence number, timestamp)."""

    records: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)
    errors: list = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def callback(self, seq: int, timestamp: int):
        def on_delivery(err, msg):
            with self.lock:
                if err is None:
                    key = (msg.partition(), msg.offset())
                    assert key not in self.records, f"offset {key} acknowledged twice"
                    self.records[key] = (seq, timestamp)
                else:
                    self.errors.append(err)

        return on_delivery

    def count(self) -> int:
        with self.lock:
            return len(self.records)

    def end_offsets(self, partitions: int) -> list[int]:
        """One past the largest acknowledged offset of each partition."""
        ends = [0] * partitions
        for partition, offset in self.records:
            ends[partition] = max(ends[partition], offset + 1)
        return ends


def produce(
    producer: Producer,
    topic: str,
    acked: Acked,
    seqs: range,
    base_ts: int,
    partitions: int,
    size: int = 100,
) -> None:
    """Produce and wait for every delivery report; all must succeed."""
    before = len(acked.errors)
    for seq in seqs:
        send(producer, topic, acked, seq, base_ts, partitions, size)
    assert producer.flush(TIMEOUT_S) == 0
    assert acked.errors[before:] == []


def send(
    producer: Producer,
    topic: str,
    acked: Acked,
    seq: int,
    base_ts: int,
    partitions: int,
    size: int = 100,
) -> None:
    timestamp = base_ts + seq
    for _ in range(200):  # bounded wait for room in the client's queue
        try:
            producer.produce(
                topic,
                value=payload(seq, size),
                key=str(seq).encode(),
                partition=seq % partitions,
                timestamp=timestamp,
                headers=[("seq", str(seq).encode())],
                on_delivery=acked.callback(seq, timestamp),
            )
            break
        except BufferError:
            producer.poll(0.05)
    else:
        raise AssertionError("the producer queue stayed full")
    producer.poll(0)


class Streamer(threading.Thread):
    """Produces sequence numbers from `first` on, until stopped or `limit` records were sent;
    then waits (bounded) for the outcome of everything sent."""

    def __init__(
        self,
        broker,
        topic: str,
        acked: Acked,
        first: int,
        base_ts: int,
        partitions: int,
        limit: int,
        size: int,
    ) -> None:
        super().__init__(daemon=True)
        # A short message timeout: once the broker is killed, pending records fail quickly.
        # A small queue keeps the backlog (and so each record's wait) well under that timeout
        # while the broker is up.
        self.producer = make_producer(
            broker,
            **{
                "message.timeout.ms": 3000,
                "linger.ms": 2,
                "queue.buffering.max.messages": 5000,
                **SMALL_BATCHES,
            },
        )
        self.topic, self.acked, self.first, self.base_ts = topic, acked, first, base_ts
        self.partitions, self.limit, self.size = partitions, limit, size
        self.stop_requested = threading.Event()
        self.sent = 0
        self.unflushed = -1

    def run(self) -> None:
        for seq in range(self.first, self.first + self.limit):
            if self.stop_requested.is_set():
                break
            send(
                self.producer, self.topic, self.acked, seq, self.base_ts, self.partitions, self.size
            )
            self.sent += 1
        self.unflushed = self.producer.flush(TIMEOUT_S)


def kill_mid_stream(
    broker,
    topic: str,
    acked: Acked,
    first: int,
    base_ts: int,
    partitions: int,
    size: int = 100,
    min_acked: int = 3000,
) -> int:
    """Stream records, SIGKILL the broker once at least `min_acked` more were acknowledged, and
    let the producer give up on the rest. Returns how many records were sent."""
    streamer = Streamer(broker, topic, acked, first, base_ts, partitions, limit=200_000, size=size)
    acked_before = acked.count()
    target = acked_before + min_acked
    streamer.start()
    deadline = time.monotonic() + TIMEOUT_S
    while acked.count() < target and time.monotonic() < deadline and streamer.is_alive():
        time.sleep(0.01)
    assert acked.count() >= target, "the producer made too little progress before the kill"
    broker.kill()
    streamer.stop_requested.set()
    streamer.join(TIMEOUT_S + 10)
    assert not streamer.is_alive()
    assert streamer.unflushed == 0
    # Every record sent has one outcome: acknowledged, or failed once the broker was gone.
    assert acked.count() - acked_before + len(acked.errors) == streamer.sent
    assert all(
        e.code() in (KafkaError._MSG_TIMED_OUT, KafkaError._TRANSPORT) for e in acked.errors
    ), acked.errors[:5]
    acked.errors.clear()
    return streamer.sent


def read_partition(broker, topic: str, partition: int, count: int) -> list:
    """Every record of the partition from the beginning, `count` expected; bounded in time."""
    consumer = make_consumer(broker)
    messages = []
    try:
        consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        deadline = time.monotonic() + TIMEOUT_S
        while len(messages) < count and time.monotonic() < deadline:
            for msg in consumer.consume(
                num_messages=min(count - len(messages), 10_000), timeout=0.5
            ):
                if msg.error():
                    assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                    continue
                messages.append(msg)
        # Nothing beyond: one more short poll must find only the end of the partition.
        for msg in consumer.consume(num_messages=10, timeout=0.3):
            at_end = msg.error() and msg.error().code() == KafkaError._PARTITION_EOF
            assert at_end, "records past the end"
    finally:
        consumer.close()
    return messages


def watermarks(broker, topic: str, partition: int) -> tuple[int, int]:
    consumer = make_consumer(broker)
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=TIMEOUT_S)
    finally:
        consumer.close()


def check_partition(
    broker,
    topic: str,
    partition: int,
    acked: Acked,
    sent_seqs: set[int],
    exact: bool,
    partitions: int = 1,
) -> list:
    """The partition reads back with contiguous offsets from 0 to its high watermark; every
    acknowledged record is at its acknowledged offset with its content. With `exact`, nothing
    else is there; otherwise the rest are records that were sent but whose acknowledgement was
    lost in the crash (written, never acknowledged)."""
    low, high = watermarks(broker, topic, partition)
    assert low == 0
    mine = {offset: value for (p, offset), value in acked.records.items() if p == partition}
    acked_end = max(mine, default=-1) + 1
    message = f"partition {partition}: high watermark {high} below acknowledged {acked_end}"
    assert high >= acked_end, message
    if exact:
        assert high == acked_end
    messages = read_partition(broker, topic, partition, high)
    assert [m.offset() for m in messages] == list(range(high))
    for msg in messages:
        seq = seq_of(msg.value())
        assert msg.value() == payload(seq, len(msg.value()))
        assert msg.key() == str(seq).encode()
        assert msg.headers() == [("seq", str(seq).encode())]
        assert seq % partitions == partition
        expected = mine.get(msg.offset())
        if expected is not None:
            got = (seq, msg.timestamp()[1])
            assert got == expected, f"offset {msg.offset()} holds another record"
        else:
            assert seq in sent_seqs, f"offset {msg.offset()} holds a record never sent"
    assert len({seq_of(m.value()) for m in messages}) == len(messages), "a record appears twice"
    return messages


def check_timestamps(broker, topic: str, acked: Acked, samples: int = 25) -> None:
    """offsets_for_times finds acknowledged records by their (unique) timestamps."""
    chosen = sorted(acked.records.items())[:: max(1, len(acked.records) // samples)]
    consumer = make_consumer(broker)
    try:
        # One query per call: librdkafka keeps only one timestamp per partition in a request.
        found = []
        for (partition, _), (_, ts) in chosen:
            [tp] = consumer.offsets_for_times(
                [TopicPartition(topic, partition, ts)], timeout=TIMEOUT_S
            )
            found.append((tp.partition, tp.offset))
    finally:
        consumer.close()
    assert found == [key for key, _ in chosen]


def check_seeks(broker, topic: str, acked: Acked, samples: int = 15) -> None:
    """Fetching from offsets spread over the log (and so over its segments) starts right there."""
    chosen = sorted(acked.records.items())[:: max(1, len(acked.records) // samples)]
    consumer = make_consumer(broker)
    try:
        for (partition, offset), (seq, _) in chosen:
            consumer.assign([TopicPartition(topic, partition, offset)])
            deadline = time.monotonic() + TIMEOUT_S
            first = None
            while first is None and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is not None and not msg.error():
                    first = msg
            assert first is not None, f"nothing fetched from {partition}/{offset}"
            assert (first.offset(), seq_of(first.value())) == (offset, seq)
            consumer.unassign()
    finally:
        consumer.close()


def segment_files(broker, topic: str, partition: int) -> list[str]:
    directory = broker.data_dir / f"{topic}-{partition}"
    return sorted(name for name in os.listdir(directory) if name.endswith(".log"))


# ------------------------------------------------------------------------------------- tests


def test_clean_restart_keeps_every_record_and_producing_continues(broker):
    topic = unique_topic("clean")
    partitions = 2
    create_topic(broker, topic, partitions)
    base_ts = int(time.time() * 1000) - 600_000
    acked = Acked()
    producer = make_producer(broker, **{"compression.type": "lz4"})
    produce(producer, topic, acked, range(0, 3000), base_ts, partitions)
    assert acked.end_offsets(partitions) == [1500, 1500]

    broker.restart()
    assert "stopped cleanly" in broker.log()

    sent = set(range(3000))
    for partition in range(partitions):
        check_partition(broker, topic, partition, acked, sent, exact=True, partitions=partitions)
    check_timestamps(broker, topic, acked)

    # The same producer reconnects and carries on at the old log end.
    produce(producer, topic, acked, range(3000, 3100), base_ts, partitions)
    assert acked.end_offsets(partitions) == [1550, 1550]
    sent |= set(range(3000, 3100))
    for partition in range(partitions):
        check_partition(broker, topic, partition, acked, sent, exact=True, partitions=partitions)
    assert_clean_log(broker)


def test_kill_mid_stream_keeps_every_acknowledged_record(broker):
    topic = unique_topic("kill")
    partitions = 2
    create_topic(broker, topic, partitions)
    base_ts = int(time.time() * 1000) - 600_000
    acked = Acked()
    producer = make_producer(broker)
    produce(producer, topic, acked, range(0, 1000), base_ts, partitions)

    broker.restart()  # a clean restart first, then crash the restarted broker mid-stream
    streamed = kill_mid_stream(broker, topic, acked, 1000, base_ts, partitions)
    broker.start()

    sent = set(range(1000 + streamed))
    ends = []
    for partition in range(partitions):
        ends.append(
            len(
                check_partition(
                    broker, topic, partition, acked, sent, exact=False, partitions=partitions
                )
            )
        )
    check_timestamps(broker, topic, acked)

    # Producing continues right after the recovered log end.
    after = Acked()
    produce(make_producer(broker), topic, after, range(10**6, 10**6 + 10), base_ts, partitions)
    assert sorted(after.records) == sorted(
        (p, ends[p] + i) for p in range(partitions) for i in range(5)
    )
    for (partition, offset), (seq, _) in after.records.items():
        acked.records[(partition, offset)] = (seq, base_ts + seq)
    sent |= set(range(10**6, 10**6 + 10))
    for partition in range(partitions):
        check_partition(broker, topic, partition, acked, sent, exact=False, partitions=partitions)
    assert_clean_log(broker)


def test_clean_restart_loads_many_segments(broker_factory):
    broker = broker_factory(**SMALL_SEGMENTS)
    topic = unique_topic("segments")
    base_ts = int(time.time() * 1000) - 600_000
    acked = Acked()
    producer = make_producer(broker, **SMALL_BATCHES)
    produce(producer, topic, acked, range(0, 4000), base_ts, 1, size=300)
    before = segment_files(broker, topic, 0)
    assert len(before) >= 10

    broker.restart()
    assert segment_files(broker, topic, 0) == before
    check_partition(broker, topic, 0, acked, set(range(4000)), exact=True)
    check_timestamps(broker, topic, acked)
    check_seeks(broker, topic, acked)

    produce(producer, topic, acked, range(4000, 4500), base_ts, 1, size=300)
    check_partition(broker, topic, 0, acked, set(range(4500)), exact=True)
    assert_clean_log(broker)


@pytest.mark.parametrize(
    "checkpoint_ms",
    [None, "5"],
    ids=["recover-all-segments", "recover-from-checkpointed-recovery-point"],
)
def test_kill_while_segments_roll(broker_factory, checkpoint_ms):
    # Rolls fsync the segment they close and advance the recovery point; with frequent
    # checkpoints, the restart re-validates only the segments from there on and trusts the
    # older ones (and their indexes) as they are. Checkpoints every 5 ms also overlap a
    # still-running write now and then (which once took the log dir offline).
    overrides = dict(SMALL_SEGMENTS)
    if checkpoint_ms:
        overrides["log_flush_offset_checkpoint_interval_ms"] = checkpoint_ms
    broker = broker_factory(**overrides)
    topic = unique_topic("rollkill")
    base_ts = int(time.time() * 1000) - 600_000
    acked = Acked()
    produce(
        make_producer(broker, **SMALL_BATCHES), topic, acked, range(0, 500), base_ts, 1, size=300
    )

    streamed = kill_mid_stream(broker, topic, acked, 500, base_ts, 1, size=300, min_acked=4000)
    assert len(segment_files(broker, topic, 0)) >= 10
    broker.start()

    sent = set(range(500 + streamed))
    end = len(check_partition(broker, topic, 0, acked, sent, exact=False))
    check_timestamps(broker, topic, acked)
    check_seeks(broker, topic, acked)

    # A second crash right after recovery, with nothing produced in between, changes nothing.
    broker.kill()
    broker.start()
    assert len(check_partition(broker, topic, 0, acked, sent, exact=False)) == end

    after = Acked()
    produce(
        make_producer(broker, **SMALL_BATCHES),
        topic,
        after,
        range(10**6, 10**6 + 300),
        base_ts,
        1,
        size=300,
    )
    assert sorted(after.records) == [(0, end + i) for i in range(300)]
    assert_clean_log(broker)


def test_clients_reconnect_across_a_clean_restart(broker):
    """A consumer parked in a long-poll fetch and a producer both survive a clean restart: the
    stop does not wait for the long poll, and both carry on with the restarted broker."""
    topic = unique_topic("reconnect")
    base_ts = int(time.time() * 1000) - 600_000
    acked = Acked()
    producer = make_producer(broker)
    produce(producer, topic, acked, range(0, 10), base_ts, 1)

    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "logway-compat-unused",  # required by the client; never joined
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 5000,
            "reconnect.backoff.max.ms": 500,
        }
    )
    received: list = []
    done = threading.Event()

    def consume_until_done() -> None:
        consumer.assign([TopicPartition(topic, 0, 10)])
        deadline = time.monotonic() + 3 * TIMEOUT_S
        while not done.is_set() and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                received.append((msg.offset(), seq_of(msg.value())))

    reader = threading.Thread(target=consume_until_done, daemon=True)
    reader.start()
    try:
        time.sleep(1.5)  # the consumer's fetch is now waiting at the log end
        started = time.monotonic()
        broker.stop()
        assert time.monotonic() - started < 5, "a waiting fetch held up the shutdown"
        broker.start()
        produce(producer, topic, acked, range(10, 20), base_ts, 1)
        deadline = time.monotonic() + TIMEOUT_S
        while len(received) < 10 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        done.set()
        reader.join(TIMEOUT_S)
        consumer.close()
    assert received == [(offset, offset) for offset in range(10, 20)]
    assert_clean_log(broker)
