"""Mirroring latency (issue 17): the share of records readable on the target cluster within 1 s and
5 s of being written to the source (the Logbroker design measured 88% and 99%).

    python -m benchmarks.mirror_latency [--rate 2000] [--seconds 30] [--partitions 4] [--size 100]

Two standalone logway brokers (clusters A and B) and a logway-mirror process (A->B) run on this
machine. A producer writes `rate` records a second for `seconds` to a topic on A, each value
starting with the wall-clock time of its produce() call; a read_committed consumer of
`A.<topic>` on B takes now minus that time for every record it receives. So each figure is the
whole path a user sees: producer batching, the source append, the mirror's read, its transaction
commit, and the target consumer's fetch. Bounded by the record count and a deadline; records not
received by the deadline count as later than 5 s.
"""

import argparse
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.harness import REPO, BrokerProcess

_STAMP = struct.Struct(">d")
_DRAIN_S = 30  # after the producer is done, how long the consumer may still wait


def measure(rate: int, seconds: int, partitions: int, size: int, directory: Path) -> dict:
    a = BrokerProcess(directory / "a").start()
    b = BrokerProcess(directory / "b").start()
    mirror = None
    try:
        admin = AdminClient({"bootstrap.servers": a.bootstrap})
        admin.create_topics([NewTopic("latency", partitions, 1)])["latency"].result(30)
        config = directory / "mirror.properties"
        config.write_text(
            f"clusters = A, B\nA.bootstrap.servers = {a.bootstrap}\nB.bootstrap.servers = {b.bootstrap}\n"
            "A->B.enabled = true\nreplication.factor = 1\n"
        )
        with open(directory / "mirror.log", "ab") as log:
            mirror = subprocess.Popen(
                [sys.executable, "-m", "replication.mirror.cli", str(config)], cwd=REPO, stdout=log, stderr=subprocess.STDOUT
            )
        _wait_for_topic(b.bootstrap, "A.latency", partitions)

        total = rate * seconds
        latencies: list[float] = []
        consumer_ready = threading.Event()
        consumer = threading.Thread(target=_consume, args=(b.bootstrap, partitions, total, seconds + _DRAIN_S, latencies, consumer_ready))
        consumer.start()
        consumer_ready.wait(30)
        producer = Producer({"bootstrap.servers": a.bootstrap, "linger.ms": 5, "acks": "all"})
        padding = b"x" * max(0, size - _STAMP.size)
        started = time.monotonic()
        for number in range(total):
            due = started + number / rate
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            producer.produce("latency", _STAMP.pack(time.time()) + padding, partition=number % partitions)
            producer.poll(0)
        producer.flush(30)
        written_s = time.monotonic() - started
        consumer.join(seconds + _DRAIN_S + 30)
    finally:
        if mirror is not None:
            mirror.terminate()
            mirror.wait(30)
        a.kill()
        b.kill()
    latencies.sort()
    received = len(latencies)
    return {
        "records": total,
        "written_per_s": total / written_s,
        "received": received,
        "within_1s": sum(1 for x in latencies if x <= 1.0) / total,
        "within_5s": sum(1 for x in latencies if x <= 5.0) / total,
        "p50_ms": statistics.median(latencies) * 1000 if latencies else None,
        "p99_ms": latencies[int(received * 0.99) - 1] * 1000 if received >= 100 else None,
        "max_ms": latencies[-1] * 1000 if latencies else None,
    }


def _wait_for_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        metadata = admin.list_topics(timeout=10).topics.get(topic)
        if metadata is not None and len(metadata.partitions) == partitions:
            return
        time.sleep(0.2)
    raise RuntimeError(f"the mirror did not create {topic}")


def _consume(bootstrap, partitions, total, deadline_s, latencies, ready) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "mirror-latency",
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 50,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition("A.latency", p, 0) for p in range(partitions)])
    ready.set()
    deadline = time.monotonic() + deadline_s
    while len(latencies) < total and time.monotonic() < deadline:
        for message in consumer.consume(1000, 0.1):
            if message.error() is None:
                latencies.append(time.time() - _STAMP.unpack_from(message.value())[0])
    consumer.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=2000, help="records a second (default 2000)")
    parser.add_argument("--seconds", type=int, default=30, help="how long the producer writes (default 30)")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--size", type=int, default=100, help="value bytes (default 100)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="mirror-latency-") as directory:
        result = measure(args.rate, args.seconds, args.partitions, args.size, Path(directory))
    print(f"{result['records']} records at {args.rate}/s (achieved {result['written_per_s']:.0f}/s) over {args.partitions} partitions, {args.size} B; received {result['received']}")
    print(f"readable on the target within 1 s: {result['within_1s']:.1%}, within 5 s: {result['within_5s']:.1%}")
    print(f"latency p50 {result['p50_ms']:.0f} ms, p99 {result['p99_ms']:.0f} ms, max {result['max_ms']:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
