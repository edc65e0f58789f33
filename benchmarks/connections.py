"""Many idle connections on one broker (issue 14): the memory each costs, and whether a producer
and a consumer keep their rate while the broker holds them.

A broker process of its own (its RLIMIT_NOFILE raised to hold them) runs a confluent-kafka
produce and consume of the same records twice: alone, then with `count` idle connections open,
each of which first asked ApiVersions (so it had a receive buffer, which the broker gives back
once the connection is quiet) and then sent nothing. RSS is read from /proc before, once the
connections are open and settled, and sampled every 0.1 s during the second produce and consume
(peak). Opening is bounded by a deadline, every workload by its count and a deadline.
"""

import socket
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks import clients
from benchmarks.clients import Measurement
from benchmarks.cpu import CpuMeter

_SETTLE_S = 3.0  # longer than the broker's one second before a quiet connection's buffer goes


@dataclass
class IdleConnectionsResult:
    wanted: int
    opened: int
    open_seconds: float
    rss_before: int
    rss_idle: int
    rss_peak: int
    alone: list[Measurement] = field(default_factory=list)
    with_idle: list[Measurement] = field(default_factory=list)

    @property
    def bytes_per_connection(self) -> float:
        return (self.rss_idle - self.rss_before) / max(self.opened, 1)


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class _PeakRss:
    def __init__(self, pid: int) -> None:
        self.pid, self.peak = pid, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.1):
            self.peak = max(self.peak, rss_bytes(self.pid))

    def __enter__(self) -> "_PeakRss":
        self.peak = rss_bytes(self.pid)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def _api_versions_frame() -> bytes:
    from kio.schema.api_versions.v3.request import ApiVersionsRequest

    from protocol.api_keys import ApiKey
    from tests.kafka_wire import encode_request

    request = ApiVersionsRequest(client_software_name="idle", client_software_version="1")
    return encode_request(ApiKey.API_VERSIONS, 3, request)


def open_idle(address: tuple[str, int], count: int, stack: ExitStack, deadline: float) -> int:
    """Open up to `count` connections, each asking ApiVersions once, and read every answer."""
    from tests.kafka_wire import read_frame

    request = _api_versions_frame()
    opened: list[socket.socket] = []
    while len(opened) < count and time.perf_counter() < deadline:
        sock = stack.enter_context(socket.create_connection(address, timeout=10))
        sock.sendall(request)
        opened.append(sock)
    for sock in opened:
        read_frame(sock)
    return len(opened)


def _produce_and_consume(label: str, bootstrap: str, topic: str, records: int, size: int, pid: int,
                         deadline_s: float) -> list[Measurement]:
    produced = clients.ck_produce(f"{label}: ck produce {size} B acks=1", bootstrap, topic, records, size, "1",
                                  CpuMeter(broker_pid=pid), deadline_s)
    consumed = clients.ck_consume(f"{label}: ck consume {size} B", bootstrap, topic, 0, produced.records + 1, size,
                                  CpuMeter(broker_pid=pid), deadline_s)
    return [produced, consumed]


def _create_topics(bootstrap: str, topics: list[str], partitions: int = 1) -> None:
    """Its own function so the admin client is gone before the broker stops (it would retry
    connecting to it and log every failure)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    for future in admin.create_topics([NewTopic(t, partitions, 1) for t in topics], operation_timeout=30).values():
        future.result(30)


def idle_connections(scratch: Path, count: int, records: int, size: int, deadline_s: float) -> IdleConnectionsResult:
    from tests.harness import BrokerProcess

    broker = BrokerProcess(scratch / "connections-data", max_open_files=count + 2048)
    broker.start()
    try:
        pid = broker.process.pid
        topics = ["idle-alone", "idle-held"]
        _create_topics(broker.bootstrap, topics)
        alone = _produce_and_consume("alone", broker.bootstrap, topics[0], records, size, pid, deadline_s)
        time.sleep(_SETTLE_S)
        rss_before = rss_bytes(pid)
        with ExitStack() as idle:
            began = time.perf_counter()
            opened = open_idle(("127.0.0.1", broker.port), count, idle, began + deadline_s)
            open_seconds = time.perf_counter() - began
            time.sleep(_SETTLE_S)
            rss_idle = rss_bytes(pid)
            with _PeakRss(pid) as peak:
                held = _produce_and_consume(f"with {opened:,} idle", broker.bootstrap, topics[1], records, size, pid,
                                            deadline_s)
        return IdleConnectionsResult(count, opened, open_seconds, rss_before, rss_idle, peak.peak, alone, held)
    finally:
        broker.stop()
        if "Traceback" in broker.log():
            print("\nWARNING: the broker logged a traceback:\n" + broker.log()[-3000:])
