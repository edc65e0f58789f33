"""Zero-copy fetch, checked from outside: strace attached to the broker process while
confluent-kafka consumes a few MB must see sendfile calls moving at least the fetched record
bytes (record data never passes through the broker's Python code)."""

import shutil
import time

import pytest

from benchmarks.tracing import Strace, StraceUnavailable

confluent_kafka = pytest.importorskip("confluent_kafka")

pytestmark = [
    pytest.mark.compat,
    pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed"),
]

RECORDS = 256
RECORD_BYTES = 16 * 1024  # 4 MiB in all
TIMEOUT_S = 30


def produce(bootstrap: str, topic: str) -> None:
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "message.timeout.ms": TIMEOUT_S * 1000}
    )
    for i in range(RECORDS):
        producer.produce(topic, i.to_bytes(4, "big") * (RECORD_BYTES // 4), partition=0)
    assert producer.flush(TIMEOUT_S) == 0


def consume_all(bootstrap: str, topic: str) -> int:
    """Read offsets [0, RECORDS); return the value bytes received."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "logway-compat-unused",  # required by the client; never joined
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            "fetch.wait.max.ms": 50,
        }
    )
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
        received = 0
        next_offset = 0
        deadline = time.monotonic() + TIMEOUT_S
        while next_offset < RECORDS and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None:
                continue
            assert message.error() is None, message.error()
            assert message.offset() == next_offset
            assert message.value()[:4] == next_offset.to_bytes(4, "big")
            received += len(message.value())
            next_offset += 1
        assert next_offset == RECORDS, f"consumed {next_offset} of {RECORDS} records in {TIMEOUT_S}s"
        return received
    finally:
        consumer.close()


def test_fetched_records_leave_through_sendfile(broker, tmp_path):
    topic = "zero-copy"
    produce(broker.bootstrap, topic)
    trace = Strace(broker.process.pid, "sendfile,sendmsg,writev,pread64", tmp_path / "strace.txt")
    try:
        trace.start()
    except StraceUnavailable as exc:
        pytest.skip(f"cannot trace the broker: {exc}")
    try:
        fetched = consume_all(broker.bootstrap, topic)
    finally:
        totals = trace.stop()
    assert fetched == RECORDS * RECORD_BYTES
    assert totals.calls["sendfile"] > 0, totals
    assert totals.bytes["sendfile"] >= fetched, (
        f"sendfile moved {totals.bytes['sendfile']} bytes for {fetched} fetched: {totals}"
    )
    # responses' own bytes (headers, metadata) go through sendmsg or writev: far less than the records
    assert totals.bytes["sendmsg"] + totals.bytes["writev"] < fetched // 10, totals
