"""The `cluster-scale` part: ZooKeeper and three brokers on loopback, many partitions at RF=3.

Measured, with Kafka's defaults (index files of 10 MiB, sparse; 18 s ZooKeeper sessions):

- creation: one CreateTopics request for all the partitions (100 topics), until a Metadata
  answer names a leader for every partition, and until every ISR is full (all three replicas);
- controller failover: kill -9 of the controller; until ZooKeeper's /controller names another
  broker (the dead broker's session has to expire first: about zookeeper.session.timeout.ms, as
  in Kafka), and until Metadata names a live leader for every partition;
- a broker's restart: the killed broker is started again; until it listens, and until every ISR
  is full again (it caught up and the leaders took it back);
- a controlled shutdown: SIGTERM to a broker that leads partitions and is not the controller;
  until a Metadata answer from the other two names none of its leaderships, and until it exits;
- RSS and open descriptors of each broker after creation and after the restart;
- each broker's CPU while the cluster is idle after creation (full ISRs, no client traffic),
  over 10 s from 10 s after the ISRs were full (the tail of the creation's work is over by then):
  what keeping the replicas in sync costs when nothing is written (the followers' fetches of
  every partition every replica.fetch.wait.max.ms).

Metadata is read from the brokers that are alive at that step (librdkafka picks one). Every
wait is bounded by a deadline; data and logs live in the run's scratch directory. The brokers
run on the packages of LOGWAY_BROKER_PACKAGES when set (such as a compiled build), as the other
parts' brokers do; before 2026-12-06 this part always ran them in pure Python.
"""

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

TOPICS = 100
BROKERS = 3
REPLICATION = 3
_DEADLINE_S = 600.0
_POLL_S = 0.5
_IDLE_S = 10.0


@dataclass
class ClusterScaleResult:
    partitions: int
    phases: dict[str, float] = field(default_factory=dict)  # seconds
    stats: dict[str, dict[int, dict[str, float]]] = field(default_factory=dict)  # step -> broker -> values
    notes: list[str] = field(default_factory=list)


def _process_stats(pid: int) -> dict[str, float]:
    status = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            status[key] = value.strip()
    return {
        "rss_mib": int(status["VmRSS"].split()[0]) / 1024,
        "peak_rss_mib": int(status["VmHWM"].split()[0]) / 1024,
        "descriptors": len(os.listdir(f"/proc/{pid}/fd")),
    }


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _idle_cpu_percent(pids: dict[int, int], seconds: float) -> dict[int, dict[str, float]]:
    """Each process's CPU over `seconds` of doing nothing else, in percent of one core."""
    before = {b: _cpu_seconds(pid) for b, pid in pids.items()}
    time.sleep(seconds)
    return {b: {"cpu_percent": 100 * (_cpu_seconds(pid) - before[b]) / seconds} for b, pid in pids.items()}


def _metadata_state(bootstrap: str, topics: list[str], per_topic: int, live: set[int]) -> tuple[bool, bool]:
    """(every partition has a live leader, every ISR is full) in one Metadata answer."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    try:
        metadata = admin.list_topics(timeout=10)
    except KafkaException:
        return False, False
    leaders = full = True
    for name in topics:
        topic = metadata.topics.get(name)
        if topic is None or topic.error is not None or len(topic.partitions) != per_topic:
            return False, False
        for p in topic.partitions.values():
            if p.error is not None or p.leader not in live:
                leaders = False
            if len(p.isrs) != REPLICATION:
                full = False
    return leaders, full


def _wait(what: str, condition, started: float, deadline_s: float = _DEADLINE_S) -> float:
    """Seconds from `started` until `condition()` holds, polled; TimeoutError after the deadline."""
    while time.perf_counter() - started < deadline_s:
        if condition():
            return time.perf_counter() - started
        time.sleep(_POLL_S)
    raise TimeoutError(f"{what}: not within {deadline_s:.0f} s")


def _controller(zk) -> int | None:
    import json

    try:
        data, _ = zk.get("/controller")
    except Exception:  # noqa: BLE001 (no controller right now, or a connection hiccup: poll again)
        return None
    return int(json.loads(data)["brokerid"])


def run(scratch: Path, partitions: int) -> ClusterScaleResult:
    from confluent_kafka.admin import AdminClient, NewTopic
    from kazoo.client import KazooClient

    from broker.local_cluster import LocalCluster, free_port
    from tests.cluster.harness import SuiteBrokerServer

    per_topic = max(1, partitions // TOPICS)
    topics = [f"cscale-{n:03d}" for n in range(min(TOPICS, partitions))]
    result = ClusterScaleResult(partitions=per_topic * len(topics))
    cluster = LocalCluster.on_loopback(
        scratch / "cluster-scale", brokers=BROKERS, first_port=free_port(), zookeeper_port=free_port(),
        # Kafka's default index size (the test brokers use a smaller one); the files are sparse.
        overrides={"log.index.size.max.bytes": "10485760"},
        server=SuiteBrokerServer,  # on LOGWAY_BROKER_PACKAGES when set, such as a compiled build
    )
    zk = None
    try:
        cluster.start()
        zk = KazooClient(hosts=cluster.zookeeper.connect_string)
        zk.start(30)
        all_ids = set(cluster.brokers)
        every = cluster.bootstrap

        def stats(step: str) -> None:
            result.stats[step] = {b: _process_stats(s.pid) for b, s in cluster.brokers.items() if s.running}

        _wait("every broker registered", lambda: len(zk.get_children("/brokers/ids")) == BROKERS, time.perf_counter(), 60)
        # librdkafka gives up on an unanswered request after socket.timeout.ms (60 s by default;
        # 300 s at most): the code before this part's branch took longer than 60 s.
        admin = AdminClient({"bootstrap.servers": every, "log_level": 0, "socket.timeout.ms": 300_000})
        started = time.perf_counter()
        futures = admin.create_topics(
            [NewTopic(t, per_topic, REPLICATION) for t in topics], operation_timeout=_DEADLINE_S, request_timeout=_DEADLINE_S
        )
        for future in futures.values():
            future.result(_DEADLINE_S)
        result.phases["create_request_s"] = time.perf_counter() - started
        result.phases["create_leaders_s"] = _wait(
            "leaders after creation", lambda: _metadata_state(every, topics, per_topic, all_ids)[0], started)
        result.phases["create_full_isr_s"] = _wait(
            "full ISRs after creation", lambda: _metadata_state(every, topics, per_topic, all_ids)[1], started)
        stats("created")
        time.sleep(_IDLE_S)
        result.stats["idle"] = _idle_cpu_percent({b: s.pid for b, s in cluster.brokers.items()}, _IDLE_S)

        old = _controller(zk)
        if old is None:
            raise RuntimeError("no controller in ZooKeeper")
        survivors = all_ids - {old}
        surviving_bootstrap = ",".join(cluster.broker(b).bootstrap for b in sorted(survivors))
        cluster.broker(old).kill()
        started = time.perf_counter()
        result.phases["failover_new_controller_s"] = _wait(
            "a new controller", lambda: _controller(zk) in survivors, started)
        result.phases["failover_leaders_s"] = _wait(
            "live leaders after failover",
            lambda: _metadata_state(surviving_bootstrap, topics, per_topic, survivors)[0], started)
        result.notes.append(f"controller was broker {old}; broker {_controller(zk)} took over")

        restarted = cluster.broker(old)
        started = time.perf_counter()
        restarted.launch()
        restarted.wait_until_listening(_DEADLINE_S)
        result.phases["restart_listening_s"] = time.perf_counter() - started
        result.phases["restart_full_isr_s"] = _wait(
            "full ISRs after the restart", lambda: _metadata_state(every, topics, per_topic, all_ids)[1], started)
        stats("restarted")

        # A clean stop (SIGTERM) of a broker that leads partitions and is not the controller:
        # controlled shutdown moves its leaderships before it exits.
        stopping_id = min(survivors - {_controller(zk)})
        stopping = cluster.broker(stopping_id)
        rest = all_ids - {stopping_id}
        rest_bootstrap = ",".join(cluster.broker(b).bootstrap for b in sorted(rest))
        exited: dict[str, float] = {}

        def moved() -> bool:
            if "s" not in exited and not stopping.running:
                exited["s"] = time.perf_counter() - started
            return _metadata_state(rest_bootstrap, topics, per_topic, rest)[0]

        started = time.perf_counter()
        stopping.terminate()
        result.phases["shutdown_leaders_s"] = _wait("leaders moved off the stopping broker", moved, started)
        stopping.process.wait(_DEADLINE_S)
        result.phases["shutdown_exit_s"] = exited.get("s", time.perf_counter() - started)
        zk.stop()
        zk.close()
        zk = None
        cluster.stop()
        for broker_id, server in cluster.brokers.items():
            if "Traceback" in server.log():
                result.notes.append(f"broker {broker_id} logged a traceback: see {server.log_path}")
    finally:
        if zk is not None:
            zk.stop()
            zk.close()
        cluster.kill()
    return result
