"""Brokers that move without copying (issue 18, the Swift design's property): the same moves of a
tiered topic and of a plain one, side by side in one run, on ZooKeeper and four brokers over
loopback sharing one directory store.

    python -m benchmarks.tiered_moves [--mib 256] [--partitions 4] [--throttle-mib 50]

Each topic gets `--mib` MiB of history (confluent-kafka, 1 KiB records, acks=all) on brokers 1-3;
the tiered one keeps only its last segment or so locally (local.retention.bytes=1), the rest in
the store. Then, for each topic:

- a new broker takes over: AlterPartitionReassignments moves every partition's replica on
  broker 3 to broker 4, which held nothing; timed until the reassignment is done (every
  partition's replicas are the new set and its ISR holds them all), with the bytes broker 4
  then holds for the topic;
- a wiped broker rejoins: broker 2 is killed, its log dirs removed, and started again; timed
  until every partition's ISR holds it again, with the bytes it then holds for the topic.

Loopback moves a few hundred MiB in well under a second, which hides what copying history costs
between machines; so the moves are throttled as an operator throttles them on a real network:
`--throttle-mib` MiB/s (leader and follower replication throttles on every broker, both topics'
replicas throttled; 0 for none). A throttle applies to replicas out of the ISR only, as in Kafka.

The reassignments run one topic after the other (see run()); the wiped broker catches up on
both topics at once, each timed on its own. Every wait is bounded.
"""

import argparse
import json
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

_DEADLINE_S = 600.0
_POLL_S = 0.25
_SEGMENT_BYTES = 8 * 1024 * 1024
_RECORD_BYTES = 1024


@dataclass
class TieredMovesResult:
    mib: int
    partitions: int
    throttle_mib: int = 0
    seconds: dict[str, dict[str, float]] = field(default_factory=dict)  # step -> topic kind -> s
    held_bytes: dict[str, dict[str, int]] = field(default_factory=dict)  # step -> kind -> bytes

    def lines(self) -> list[str]:
        throttle = f"replication throttled to {self.throttle_mib} MiB/s" if self.throttle_mib else "no throttle"
        out = [f"{self.mib} MiB of history per topic, {self.partitions} partitions, RF 3, {throttle}"]
        for step, kinds in self.seconds.items():
            held = self.held_bytes.get(step, {})
            parts = [f"{kind}: {kinds[kind]:.1f} s, {held.get(kind, 0) / 2**20:.1f} MiB held" for kind in kinds]
            ratio = kinds["plain"] / kinds["tiered"] if kinds.get("tiered") else float("nan")
            out.append(f"{step}: " + "; ".join(parts) + f" (plain / tiered time {ratio:.1f}x)")
        return out


def _held(data_dirs: list[Path], topic: str) -> int:
    return sum(path.stat().st_size for d in data_dirs for path in d.glob(f"{topic}-*/*.log"))


def _partition_states(zk, topic: str, partitions: int) -> list[dict]:
    return [json.loads(zk.get(f"/brokers/topics/{topic}/partitions/{p}/state")[0]) for p in range(partitions)]


def _wait(condition, what: str) -> float:
    started = time.perf_counter()
    while not condition():
        if time.perf_counter() - started > _DEADLINE_S:
            raise TimeoutError(f"{what}: not within {_DEADLINE_S:.0f} s")
        time.sleep(_POLL_S)
    return time.perf_counter() - started


def _produce(bootstrap: str, topic: str, mib: int, partitions: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20,
                         "batch.size": 1_000_000, "log_level": 3})
    value = b"v" * _RECORD_BYTES
    for n in range(mib * 1024 * 1024 // _RECORD_BYTES):
        while True:
            try:
                producer.produce(topic, value, partition=n % partitions)
                break
            except BufferError:
                producer.poll(0.1)
    if producer.flush(_DEADLINE_S):
        raise TimeoutError(f"producing to {topic}: not all acknowledged")


def _timed_together(conditions: dict[str, Callable[[], bool]], what: str) -> dict[str, float]:
    """Seconds until each condition first held, polled together from now."""
    started = time.perf_counter()
    done: dict[str, float] = {}
    while len(done) < len(conditions):
        for kind, condition in conditions.items():
            if kind not in done and condition():
                done[kind] = time.perf_counter() - started
        if time.perf_counter() - started > _DEADLINE_S:
            raise TimeoutError(f"{what}: {sorted(set(conditions) - set(done))} not within {_DEADLINE_S:.0f} s")
        time.sleep(_POLL_S)
    return done


def _throttle(admin, topics, mib_per_s: int) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    def entries(keys, value: str):
        return [ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET) for key in keys]

    rate = str(mib_per_s * 1024 * 1024)
    calls = [[ConfigResource(ResourceType.BROKER, str(b), incremental_configs=entries(
        ("leader.replication.throttled.rate", "follower.replication.throttled.rate"), rate))] for b in (1, 2, 3, 4)]
    calls.append([ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries(
        ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas"), "*")) for topic in topics])
    for resources in calls:  # librdkafka takes one BROKER resource per call
        for future in admin.incremental_alter_configs(resources).values():
            future.result(60)


def run(scratch: Path, mib: int = 256, partitions: int = 4, throttle_mib: int = 50) -> TieredMovesResult:
    import datetime

    from confluent_kafka.admin import AdminClient, NewTopic
    from kazoo.client import KazooClient
    from kio.schema.alter_partition_reassignments.v0.request import (
        AlterPartitionReassignmentsRequest,
        ReassignablePartition,
        ReassignableTopic,
    )

    from broker.local_cluster import LocalCluster, free_port
    from protocol.api_keys import ApiKey
    from tests.cluster.clients import send_request

    store = scratch / "store"
    store.mkdir(parents=True)
    cluster = LocalCluster.on_loopback(
        scratch / "cluster", brokers=4, first_port=free_port(), zookeeper_port=free_port(),
        overrides={
            "remote.log.storage.system.enable": "true",
            "rsm.config.url": f"file://{store}",
            "remote.log.manager.task.interval.ms": "1000",
            "log.retention.check.interval.ms": "1000",
            "log.segment.delete.delay.ms": "0",
            "rlmm.config.remote.log.metadata.topic.num.partitions": "3",
        },
    )
    result = TieredMovesResult(mib, partitions, throttle_mib)
    topics = {"plain": "moves-plain", "tiered": "moves-tiered"}
    zk = None
    try:
        cluster.start()
        zk = KazooClient(hosts=cluster.zookeeper.connect_string)
        zk.start(30)
        _wait(lambda: len(zk.get_children("/brokers/ids")) == 4, "every broker registered")
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 3})
        assignment = [[1 + (p + i) % 3 for i in range(3)] for p in range(partitions)]  # brokers 1-3 only
        common = {"segment.bytes": str(_SEGMENT_BYTES), "retention.ms": "-1", "min.insync.replicas": "2"}
        futures = admin.create_topics([
            NewTopic(topics["plain"], num_partitions=partitions, replica_assignment=assignment, config=common),
            NewTopic(topics["tiered"], num_partitions=partitions, replica_assignment=assignment,
                     config={**common, "remote.storage.enable": "true", "local.retention.bytes": "1"}),
        ])
        for future in futures.values():
            future.result(60)
        for topic in topics.values():
            _produce(cluster.bootstrap, topic, mib, partitions)
        brokers123 = [cluster.broker(b).data_dirs for b in (1, 2, 3)]
        # The tiered topic's history is in the store and gone from the brokers' disks but for
        # about a segment per partition (the active one).
        _wait(lambda: all(_held(dirs, topics["tiered"]) <= 2 * partitions * _SEGMENT_BYTES for dirs in brokers123),
              "the tiered topic's history copied to the store and deleted locally")
        if throttle_mib:
            _throttle(admin, topics.values(), throttle_mib)

        def settled(topic: str, replicas_of: Callable[[int], list[int]]) -> Callable[[], bool]:
            # The ISR is exactly the wanted replicas: a reassignment has added the new one and
            # removed the old one, a wiped broker has caught up.
            def check() -> bool:
                states = _partition_states(zk, topic, partitions)
                return all(sorted(s["isr"]) == sorted(replicas_of(p)) for p, s in enumerate(states))
            return check

        # A new broker takes over: broker 3's replicas go to broker 4.
        moved = {p: [4 if b == 3 else b for b in replicas] for p, replicas in enumerate(assignment)}
        controller = int(json.loads(zk.get("/controller")[0])["brokerid"])
        # One topic after the other: the controller learns of the new replica's catching up from
        # the batched ISR change notifications (as Kafka's, a 5 s quiet period), which would end
        # both moves together if they overlapped.
        step = "a new broker takes over broker 3's replicas"
        result.seconds[step] = {}
        for kind, topic in topics.items():
            send_request(cluster.broker(controller).bootstrap, ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0,
                         AlterPartitionReassignmentsRequest(timeout=datetime.timedelta(seconds=60), topics=(
                             ReassignableTopic(name=topic, partitions=tuple(
                                 ReassignablePartition(partition_index=p, replicas=tuple(moved[p]))
                                 for p in range(partitions))),)))
            result.seconds[step][kind] = _wait(settled(topic, lambda p: moved[p]), f"{step} ({kind})")
        result.held_bytes[step] = {kind: _held(cluster.broker(4).data_dirs, topic) for kind, topic in topics.items()}

        # A wiped broker rejoins.
        wiped = cluster.broker(2)
        wiped.kill()
        for data_dir in wiped.data_dirs:
            shutil.rmtree(data_dir, ignore_errors=True)
        _wait(lambda: all(2 not in s["isr"] for t in topics.values() for s in _partition_states(zk, t, partitions)),
              "broker 2 out of every ISR")
        wiped.start()
        step = "a wiped broker rejoins"
        result.seconds[step] = _timed_together(
            {kind: settled(topic, lambda p: moved[p]) for kind, topic in topics.items()}, step)
        result.held_bytes[step] = {kind: _held(wiped.data_dirs, topic) for kind, topic in topics.items()}
        del admin
    finally:
        if zk is not None:
            zk.stop()
        cluster.stop()
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tiered_moves", description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=256, help="MiB of history per topic (default 256)")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--throttle-mib", type=int, default=50, help="replication throttle, MiB/s (default 50; 0: none)")
    parser.add_argument("--dir", default=None, help="scratch directory (default: a new temp dir, removed after)")
    args = parser.parse_args(argv)
    scratch = Path(args.dir or tempfile.mkdtemp(prefix="logway-tiered-moves-"))
    try:
        result = run(scratch, args.mib, args.partitions, args.throttle_mib)
    finally:
        if not args.dir:
            shutil.rmtree(scratch, ignore_errors=True)
    print("\n".join(result.lines()))


if __name__ == "__main__":
    main()
