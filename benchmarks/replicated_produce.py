"""acks=all through followers (issue 19): each broker's CPU per record when a producer sends a
record a millisecond to a partition with three replicas.

    python -m benchmarks.replicated_produce [--records 5000] [--size 100]

ZooKeeper and three brokers run on loopback as the cluster tests run them (tests/cluster/harness:
the brokers on the packages of LOGWAY_BROKER_PACKAGES when set, such as a compiled build). One
topic of one partition with replication factor 3; a confluent-kafka producer with acks=all and
linger.ms 0 sends `records` records of `size` bytes, one a millisecond, after 200 to warm up.
The brokers' CPU (user and system, from /proc) over those records is divided by their count:
the leader appends and answers each Produce once both followers' fetches have moved the high
watermark past it, and answers those fetches; each follower fetches and appends. The ack latency
is from produce() to the delivery callback, which the producer hears of in its next poll (a
millisecond apart). Bounded by the record count and a deadline.
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from tests.cluster.clients import create_topic, wait_formed
from tests.cluster.harness import Cluster

_TOPIC = "replicated"
_WARM_UP = 200
_DEADLINE_S = 120


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def _leader_with_full_isr(admin: AdminClient) -> int:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        partition = admin.list_topics(_TOPIC, timeout=10).topics[_TOPIC].partitions.get(0)
        if partition is not None and partition.leader > 0 and len(partition.isrs) == 3:
            return partition.leader
        time.sleep(0.1)
    raise RuntimeError("the partition got no leader with a full ISR within 60 s")


def measure(records: int, size: int, directory: Path) -> dict:
    cluster = Cluster.create(directory, brokers=3)
    try:
        cluster.start()
        # Every broker knows the others and the controller: before that a CreateTopics can find no
        # controller (librdkafka then waits out its request timeout) or too few brokers.
        wait_formed(cluster)
        create_topic(cluster, _TOPIC, 1, 3)
        leader = _leader_with_full_isr(AdminClient({"bootstrap.servers": cluster.bootstrap}))
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0, "log_level": 0})
        value = b"x" * size
        for _ in range(_WARM_UP):
            producer.produce(_TOPIC, value)
            producer.poll(0.001)
        if producer.flush(30):
            raise RuntimeError("the warm-up records were not acknowledged within 30 s")

        pids = {broker_id: server.pid for broker_id, server in cluster.brokers.items()}
        cpu_before = {broker_id: _cpu_s(pid) for broker_id, pid in pids.items()}
        latencies: list[float] = []
        failures: list[str] = []

        def delivered(err, _msg, sent: float) -> None:
            if err is not None:
                failures.append(str(err))
            else:
                latencies.append(time.perf_counter() - sent)

        started = time.perf_counter()
        for n in range(records):
            sent = time.perf_counter()
            producer.produce(_TOPIC, value, on_delivery=lambda err, msg, sent=sent: delivered(err, msg, sent))
            producer.poll(0)
            if sent - started > _DEADLINE_S:
                raise RuntimeError(f"{n} records sent in {_DEADLINE_S} s")
            pause = started + (n + 1) / 1000 - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
        producer.flush(30)
        cpu_after = {broker_id: _cpu_s(pid) for broker_id, pid in pids.items()}
    finally:
        cluster.close()
    if failures or len(latencies) != records:
        raise RuntimeError(f"{len(latencies)} of {records} records acknowledged; failures: {failures[:3]}")
    latencies.sort()
    per_record_us = {b: 1e6 * (cpu_after[b] - cpu_before[b]) / records for b in pids}
    return {
        "leader_us": per_record_us[leader],
        "followers_us": sorted(us for b, us in per_record_us.items() if b != leader),
        "p50_ms": 1e3 * latencies[len(latencies) // 2],
        "p99_ms": 1e3 * latencies[int(len(latencies) * 0.99)],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=5000, help="records measured, one a millisecond (default 5000)")
    parser.add_argument("--size", type=int, default=100, help="value bytes (default 100)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="replicated-produce-") as directory:
        result = measure(args.records, args.size, Path(directory))
    followers = ", ".join(f"{us:.0f}" for us in result["followers_us"])
    print(
        f"{args.records} records of {args.size} B, acks=all, RF 3: broker CPU per record: leader {result['leader_us']:.0f} us, "
        f"followers {followers} us; ack latency p50 {result['p50_ms']:.2f} ms, p99 {result['p99_ms']:.2f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
