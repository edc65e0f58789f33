"""One command that measures logway against its peer and against the machine, in one run.

    python -m benchmarks.run [--quick] [--records N] [--size S] [--rounds R] [--parts a,b,...]
                             [--workloads a,b,...] [--profile DIR] [--perf DIR] [--json PATH]
                             [--charts DIR | --no-charts]

Parts (all by default):
  crc           CRC-32C on 1 MiB: the crc32c package vs crcmod's C extension ('crc-32c').
  machine       page-cache append (a pwrite of each produce-batch-sized chunk, no fsync): into a
                new file, again into recycled pages, and again into blocks reserved ahead as
                logway's active segment reserves them; the same chunks received from a sender
                process over loopback, CRC-32C checked and appended into reserved blocks on one
                thread (a produce path's ceiling while its client has the other core), and
                again with the append on a writer thread overlapping the next receive (does
                overlapping pay here?), with the CPU each process spent; os.sendfile of a
                page-cached file to a reader process over loopback. For the 1 MiB-batch
                produce (logway's, the mock's and that bare path's) the rate at which every
                core would be busy at the CPU a byte its two sides spent together, against the
                plain append: what the machine allows at that cost, beside the 0.8x issue 19
                asks.
  mock          the C peer: librdkafka's in-memory mock cluster (test.mock.num.brokers=1),
                under the same client workloads. It keeps only the last ~5 MiB (or 100k
                batches) of a partition, so the consume comparison reads that retained window
                repeatedly, on both brokers alike, and compares records/s.
  logway        a broker process (tests.harness.BrokerProcess, data in a temp dir) under the
                same workloads, plus 1 MiB records and protocol-level produce/fetch.
  kafka-python  the pure-Python client against both brokers (fewer records).
  zerocopy      strace on the broker during a consume: record bytes leave through sendfile.
  tls           what TLS costs (issue 15): a broker of its own with a PLAINTEXT and an SSL
                listener (server certificate only, from a CA trustme makes at run time; RSA
                2048; TLS 1.3 as OpenSSL and librdkafka agree it), and on each, in rounds
                alternating which listener goes first: confluent-kafka produce (acks=1) of N
                S-byte records and their consume (all of them, three times over, seeking back),
                and the same with the large records. Both listeners consume the same records
                (those produced over PLAINTEXT in the round), so they read the same log. SSL /
                PLAINTEXT ratios (median of per-round ratios) and the broker's CPU share and CPU
                seconds per GB on each: the SSL listener has no sendfile (it reads the log with
                pread and encrypts it, as Kafka's does), and where the client is the bottleneck
                (100 B records on two cores) the broker's CPU shows the cost that the rate does
                not. --workloads does not apply. About 15 s a round at the default volumes
                (under a minute for 3 rounds), so it is one of the default parts.
  metrics       what the metrics cost (issue 16): two brokers side by side, one serving
                metrics.listener and scraped every second as Prometheus would (a thread of this
                process reads /metrics), one without; on each, in rounds alternating which goes
                first, wire produce of 16 KiB batches (per-request cost), wire produce of ~1 MiB
                batches, confluent-kafka produce (acks=1) of N S-byte records and their consume.
                Ratios on / off (median of per-round ratios). About 20 s a round at the
                default volumes. --workloads does not apply.
  connections   a broker of its own holding --idle-connections idle connections (benchmarks.
                connections): its RSS per connection and peak, and a confluent-kafka produce
                and consume of N records with them open against the same without.
  many-clients  a broker of its own under --many-producers connections each sending one small
                Produce every 10 ms (acks=1, linger 0) and a tenth as many long-polling
                consumers, from four client processes (benchmarks/many_clients.py): broker CPU
                per request, produce latency percentiles, the share of answers over 100 ms;
                with two CPUs, the broker's loop on one of its own, its speed probed, and the
                same figures at full speed beside.
  scale         one broker at Kafka's defaults with --scale-partitions one-replica partitions:
                CreateTopics, clean restart and restart after kill -9 to a complete Metadata
                answer, RSS, open descriptors, allocated disk (benchmarks/scale.py).
  cluster-scale ZooKeeper and three brokers with --scale-partitions partitions at RF=3: creation,
                controller failover (kill -9), a broker's restart, a controlled shutdown, RSS
                and descriptors per broker (benchmarks/cluster_scale.py).

Workloads (all by default; --workloads picks some, e.g. `--parts mock,logway --workloads
wire-produce` runs only the 1 MiB-batch protocol-level produce, on both brokers):
  ck                confluent-kafka produce and consume of S-byte records (and of 1 MiB records
                    on logway), the logway-only consumes and the zerocopy part, which read them.
  wire-produce      protocol-level produce of ~1 MiB batches (benchmarks.wire).
  wire-produce-16k  the same with 16 KiB batches: per-request cost. Each round runs it in
                    five slices a side, alternating between the sides, each side's slices summed.
  wire-fetch        protocol-level fetch of 1 MiB records from logway.
  latency           confluent-kafka produce of --latency-records S-byte records one at a time
                    (linger.ms=0, each acknowledged before the next), acks=1 and acks=all: the
                    percentiles of their round trips (benchmarks.clients.ck_produce_latency).
  end-to-end        one S-byte record every millisecond for --e2e-records records (linger.ms=0,
                    acks=1, paced by the clock) while a confluent-kafka consumer tails the
                    partition with librdkafka's default long poll (fetch.wait.max.ms 500): the
                    percentiles of send to consume, and the broker's CPU, whose logway / mock
                    ratio issue 19 wants at most 2 (benchmarks.clients.ck_end_to_end); also
                    that CPU per request the clients sent (their librdkafka statistics). With
                    the mock part, also on a mock cluster hosted by a process of its own in a
                    session of its own, as logway runs (start_mock_process): the mock in this
                    process shares its clients' address space and scheduler group, and spends
                    a tenth to a fifth more CPU a tailed record than that one (RESULTS.md, "a
                    broker in its own session").

Charts: every run writes PNG charts of its figures (benchmarks/charts.py, matplotlib from the
bench extra) and the JSON they are drawn from (run.json) to --charts DIR, benchmarks/charts/
beside RESULTS.md by default: throughput per workload for logway and each peer, the ratios,
latency percentiles, TLS and the scale figures, each chart when the run has its data.
`python -m benchmarks.charts run.json DIR` draws them again from a kept JSON.

The machine is shared and noisy and client and broker compete for its two cores, so every
comparison is made in rounds: within a round the two sides of each ratio run back to back
(alternating which goes first), a ratio is computed per round, and the median over rounds is
reported. Each round starts with an untimed os.sync(), so appends are not measured while the
previous round's data is being written back. Before each of logway's produce runs, untimed,
as many page-cache pages as the run will append are recycled (machine.recycle_page_cache): on
this VM appends into pages the guest has not used lately cost several times more CPU, and which
pages a run got decided its speed (3-6x apart) more than the broker did. Every loop is bounded
by a count and a deadline.
"""

import argparse
import gc
import json
import math
import os
import platform
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks import clients, cluster_scale, connections, machine, many_clients, scale, wire
from benchmarks.clients import Measurement
from benchmarks.cpu import CpuMeter, machine_idle

ALL_PARTS = ("crc", "machine", "mock", "logway", "kafka-python", "zerocopy", "tls", "metrics", "connections",
             "many-clients", "scale", "cluster-scale")
ALL_WORKLOADS = ("ck", "wire-produce", "wire-produce-16k", "wire-fetch", "latency", "end-to-end")
MiB = 1024 * 1024
CHARTS_DIR = Path(__file__).resolve().parent / "charts"
# recycled beyond a run's record bytes: batch framing, index entries, other processes' allocations
_RECYCLE_SLACK = 64 * MiB
# the tls part reads each round's records this many times (seeking back): a consume long enough
# that the broker's CPU, counted in 10 ms ticks, is measured to a few per cent
_TLS_CONSUME_REPEATS = 3
# the 16 KiB wire produce runs this many slices a side in a round, alternating between the sides
_WIRE_16K_SLICES = 5


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small volumes, one round: well under a minute")
    parser.add_argument("--records", type=int, help="N records per client workload (default 1,000,000; quick 100,000)")
    parser.add_argument("--size", type=int, default=100, help="S, record value bytes (default 100)")
    parser.add_argument("--rounds", type=int, help="rounds of the compared workloads (default 3; quick 1)")
    parser.add_argument("--large-size", type=int, default=MiB, help="value bytes of the large records (default 1 MiB)")
    parser.add_argument("--large-records", type=int, help="how many large records (default 256; quick 32)")
    parser.add_argument("--wire-mb", type=int, help="MiB per protocol-level produce and page-cache append, twice that per fetch and sendfile run (default 512; quick 64)")
    parser.add_argument("--latency-records", type=int, help="records produced one at a time by the latency workload (default 2,000; quick 500)")
    parser.add_argument("--e2e-records", type=int, help="records of the end-to-end workload, one per ms (default 5,000; quick 1,000)")
    parser.add_argument("--kp-records", type=int, help="records for kafka-python (default 100,000; quick 20,000)")
    parser.add_argument("--idle-connections", type=int, help="idle connections of the connections part (default 10,000; quick 2,000)")
    parser.add_argument("--many-producers", type=int, help="producers of the many-clients part, with a tenth as many consumers (default 1,000; quick 200)")
    parser.add_argument("--scale-partitions", type=int, help="partitions of the scale and cluster-scale parts (default 10,000; quick 1,000)")
    parser.add_argument("--parts", default=",".join(ALL_PARTS), help=f"comma-separated subset of {','.join(ALL_PARTS)}")
    parser.add_argument("--workloads", default=",".join(ALL_WORKLOADS), help=f"comma-separated subset of {','.join(ALL_WORKLOADS)} (see above)")
    parser.add_argument("--deadline", type=float, help="seconds allowed per measurement (default 60; quick 20)")
    parser.add_argument("--profile", metavar="DIR", help="attach py-spy to the broker in round 1's logway runs (their figures are then perturbed); raw profiles go to DIR")
    parser.add_argument("--perf", metavar="DIR", help="attach perf record to the broker in the same phases as --profile")
    parser.add_argument("--json", metavar="PATH", help="also write every measurement and ratio as JSON")
    parser.add_argument("--charts", metavar="DIR", default=str(CHARTS_DIR), help="where the PNG charts and the run.json they are drawn from go (default benchmarks/charts)")
    parser.add_argument("--no-charts", dest="charts", action="store_const", const=None, help="write no charts")
    parser.add_argument("--dir", help="where to put broker data and scratch files (default: a new temp dir, removed after)")
    args = parser.parse_args(argv)
    quick = args.quick
    args.records = args.records or (100_000 if quick else 1_000_000)
    args.rounds = max(1, args.rounds or (1 if quick else 3))
    args.large_records = args.large_records or (32 if quick else 256)
    args.wire_mb = args.wire_mb or (64 if quick else 512)
    args.kp_records = args.kp_records or (20_000 if quick else 100_000)
    args.latency_records = args.latency_records or (500 if quick else 2_000)
    args.e2e_records = args.e2e_records or (1_000 if quick else 5_000)
    args.idle_connections = args.idle_connections or (2_000 if quick else 10_000)
    args.many_producers = args.many_producers or (200 if quick else 1_000)
    args.deadline = args.deadline or (20.0 if quick else 60.0)
    args.scale_partitions = args.scale_partitions or (1_000 if quick else 10_000)
    args.parts = [part.strip() for part in args.parts.split(",") if part.strip()]
    args.workloads = [workload.strip() for workload in args.workloads.split(",") if workload.strip()]
    for kind, chosen, known in (("parts", args.parts, ALL_PARTS), ("workloads", args.workloads, ALL_WORKLOADS)):
        unknown = set(chosen) - set(known)
        if unknown:
            parser.error(f"unknown {kind}: {', '.join(sorted(unknown))}")
    return args


# ------------------------------------------------------------------------------------ report


class Report:
    """Measurements by workload and side (several per side with rounds), values, notes."""

    def __init__(self) -> None:
        self.series: dict[str, dict[str, list[Measurement]]] = defaultdict(lambda: defaultdict(list))
        self.values: dict[str, float] = {}
        self.notes: list[str] = []
        self.profiles: list[str] = []
        self._header_printed = False

    def add(self, workload: str, side: str, m: Measurement) -> Measurement:
        self.series[workload][side].append(m)
        if not self._header_printed:
            print(f"{'measurement':<58} {'records':>10} {'MB':>7} {'s':>6} {'rec/s':>10} {'MB/s':>8} {'cli cpu':>7} {'brk cpu':>7}")
            self._header_printed = True
        cpu = lambda v: f"{100 * v / m.seconds:6.0f}%" if v is not None and m.seconds > 0 else "      -"
        flag = "  TIMED OUT" if m.timed_out else ""
        print(
            f"{m.label:<58} {m.records:>10,} {m.bytes / 1e6:>7.1f} {m.seconds:>6.2f} {m.records_per_s:>10,.0f} "
            f"{m.mb_per_s:>8.1f} {cpu(m.client_cpu)} {cpu(m.broker_cpu)}{flag}"
        )
        for note in m.notes:
            print(f"    note: {note}")
        sys.stdout.flush()
        return m

    def note(self, text: str) -> None:
        self.notes.append(text)
        print(f"  * {text}")
        sys.stdout.flush()


def section(title: str) -> None:
    print(f"\n== {title} ==")
    sys.stdout.flush()


def _throughput(label: str, t: machine.Throughput) -> Measurement:
    """The machine's measure; where a sender and a receiver share it, their CPU as the client's
    and the broker's."""
    return Measurement(label, 0, t.bytes, t.seconds, t.sender_cpu, t.receiver_cpu, t.timed_out)


def _wire_measurement(label: str, result: wire.WireResult, client_cpu: float, broker_cpu: float) -> Measurement:
    m = Measurement(label, result.records, result.bytes, result.seconds, client_cpu, broker_cpu, result.timed_out)
    if result.wire_bytes != result.bytes:
        m.notes.append(
            f"{result.requests} requests; {result.wire_bytes / 1e6:.1f} MB sent incl. records fetched again "
            f"({result.wire_bytes / result.seconds / 1e6:.1f} MB/s)"
        )
    return m


def _summed(label: str, parts: list[Measurement]) -> Measurement:
    """One measurement of runs made one after another: their records, bytes, seconds and CPU
    added up (a CPU figure missing from any of them is missing from the sum)."""
    client = [m.client_cpu for m in parts]
    broker = [m.broker_cpu for m in parts]
    return Measurement(
        label,
        sum(m.records for m in parts),
        sum(m.bytes for m in parts),
        sum(m.seconds for m in parts),
        None if None in client else sum(c for c in client if c is not None),
        None if None in broker else sum(b for b in broker if b is not None),
        any(m.timed_out for m in parts),
    )


def _settle() -> None:
    """Write back dirty pages, untimed, so that each round starts from the same page-cache state:
    otherwise the gigabytes earlier rounds appended are written back during later ones, and
    the appends measured then (logway's and the machine's alike) pay for it."""
    started = time.perf_counter()
    os.sync()
    print(f"(untimed: os.sync() wrote back dirty pages in {time.perf_counter() - started:.1f} s)")


def _windows(n: int, window: int) -> int:
    return max(1, min(200, math.ceil(n / max(window, 1))))


# ------------------------------------------------------------------------------------ targets


@dataclass
class Target:
    """A broker under test: logway (a process) or the mock cluster (threads in this process)."""

    name: str
    bootstrap: str
    meter: Callable[[], CpuMeter]
    create_topic: Callable[[str], None]
    pid: int | None = None
    security: dict | None = None  # librdkafka settings of the listener (the tls part's SSL side)

    @property
    def address(self) -> tuple[str, int]:
        host, _, port = self.bootstrap.rpartition(":")
        return host, int(port)


def start_mock() -> tuple[Target, object]:
    from confluent_kafka import Producer

    host = Producer({"bootstrap.servers": "", "test.mock.num.brokers": 1, "log_level": 3})
    broker = next(iter(host.list_topics(timeout=10).brokers.values()))
    bootstrap = f"{broker.host}:{broker.port}"
    # the mock creates a topic (4 partitions; partition 0 is used) when metadata asks for it
    create = lambda topic: host.list_topics(topic, timeout=10)
    return Target("mock", bootstrap, lambda: CpuMeter(broker_thread="rdk:mock"), create), host


# A process hosting a mock cluster (start_mock) until its stdin closes; it prints the broker's
# address first.
_MOCK_HOST = """
import sys
from benchmarks.run import start_mock
target, host = start_mock()
print(target.bootstrap, flush=True)
sys.stdin.read()
"""


def start_mock_process() -> tuple[Target, subprocess.Popen]:
    """The mock cluster hosted as logway is: in a process of its own, in a session of its own
    (tests.harness.BrokerProcess); its CPU is its rdk:mock thread's. For the end-to-end
    workload, where the scheduling of a few wake-ups a record is most of a broker's CPU."""
    from tests.harness import REPO

    host = subprocess.Popen(
        [sys.executable, "-c", _MOCK_HOST], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        start_new_session=True,
    )
    bootstrap = host.stdout.readline().strip()
    if not bootstrap:
        host.kill()
        raise RuntimeError("the mock cluster's host process did not start")

    def create(topic: str) -> None:  # the mock creates a topic when metadata asks for it
        from confluent_kafka import Producer

        Producer({"bootstrap.servers": bootstrap, "log_level": 3}).list_topics(topic, timeout=10)

    meter = lambda: CpuMeter(broker_pid=host.pid, broker_thread="rdk:mock")
    return Target("mock-process", bootstrap, meter, create), host


def _logway_broker(scratch: Path, data: str, large: int):
    """A logway broker process (not started) with its data in scratch/data, its PLAINTEXT
    listener on `broker.port`, taking records of `large` bytes."""
    from tests.harness import BrokerProcess

    max_message = max(8 * MiB, 2 * large + MiB)
    return BrokerProcess(scratch / data, {"message.max.bytes": str(max_message)})


def _topic_creator(bootstrap: str) -> Callable[[str], None]:
    """Creates one-partition topics through a PLAINTEXT listener."""
    from confluent_kafka.admin import AdminClient, NewTopic

    def create(topic: str) -> None:
        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
        for future in admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=30).values():
            future.result(30)

    return create


def start_logway(scratch: Path, large: int):
    broker = _logway_broker(scratch, "logway-data", large).start()
    pid = broker.process.pid
    return Target("logway", broker.bootstrap, lambda: CpuMeter(broker_pid=pid), _topic_creator(broker.bootstrap), pid), broker


def start_tls(scratch: Path, large: int):
    """One logway broker with a PLAINTEXT and an SSL listener (server certificate only, from a
    CA trustme makes now, PEM files in scratch/tls-certs): a target for each, and the broker."""
    import trustme

    from tests.harness import free_port

    certs = scratch / "tls-certs"
    certs.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA(key_type=trustme.KeyType.RSA)  # RSA 2048, as keystores made with keytool or openssl usually are
    ca_pem, server_pem = certs / "ca.pem", certs / "server.pem"
    ca.cert_pem.write_to_path(str(ca_pem))
    ca.issue_cert("localhost", "127.0.0.1", key_type=trustme.KeyType.RSA).private_key_and_cert_chain_pem.write_to_path(
        str(server_pem))
    broker = _logway_broker(scratch, "tls-data", large)
    ssl_port = free_port()
    listeners = f"PLAINTEXT://127.0.0.1:{broker.port},SSL://127.0.0.1:{ssl_port}"
    broker.overrides.update({
        "listeners": listeners,
        "advertised.listeners": listeners,
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL",
        "inter.broker.listener.name": "PLAINTEXT",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(server_pem),
    })
    broker.start()
    pid = broker.process.pid
    meter = lambda: CpuMeter(broker_pid=pid)
    create = _topic_creator(broker.bootstrap)
    plain = Target("PLAINTEXT", broker.bootstrap, meter, create, pid)
    secure = Target("SSL", f"127.0.0.1:{ssl_port}", meter, create, pid,
                    security={"security.protocol": "SSL", "ssl.ca.location": str(ca_pem)})
    return plain, secure, broker


def start_metrics_pair(scratch: Path, large: int):
    """Two logway brokers: one serving its metrics on a free port (the target "on", and the
    /metrics URL), one without ("off"); the targets, the URL and the brokers."""
    from tests.harness import free_port

    on = _logway_broker(scratch, "metrics-on-data", large)
    url = f"http://127.0.0.1:{free_port()}"
    on.overrides["metrics.listener"] = url
    off = _logway_broker(scratch, "metrics-off-data", large)
    targets = []
    for name, broker in (("on", on), ("off", off)):
        broker.start()
        pid = broker.process.pid
        targets.append(Target(name, broker.bootstrap, lambda pid=pid: CpuMeter(broker_pid=pid),
                              _topic_creator(broker.bootstrap), pid))
    return targets, f"{url}/metrics", (on, off)


class _Scraper:
    """Reads a /metrics URL every `interval_s` in a thread, as a Prometheus server would, until
    stopped: how many scrapes, their bytes and the slowest."""

    def __init__(self, url: str, interval_s: float) -> None:
        import threading

        self.url, self.interval_s = url, interval_s
        self.scrapes = self.bytes = 0
        self.slowest_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="metrics-scraper", daemon=True)

    def start(self) -> "_Scraper":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        import urllib.request

        while not self._stop.wait(self.interval_s):
            started = time.perf_counter()
            with urllib.request.urlopen(self.url, timeout=10) as answer:
                self.bytes += len(answer.read())
            self.scrapes += 1
            self.slowest_s = max(self.slowest_s, time.perf_counter() - started)


def _tls_session(address: tuple[str, int], ca_file: str) -> str:
    """The TLS version and cipher the broker agrees with Python's ssl client (OpenSSL's
    defaults, as librdkafka's)."""
    import socket
    import ssl

    context = ssl.create_default_context(cafile=ca_file)
    with socket.create_connection(address, timeout=10) as sock, context.wrap_socket(sock, server_hostname=address[0]) as tls:
        name, _, bits = tls.cipher()
        return f"{tls.version()} {name} ({bits}-bit)"


def _walk_log(partition_dir: Path):
    """(base offset, last offset, records, bytes) of each batch in a partition's .log files,
    from the batch headers alone (bounded: at most 10 million batches)."""
    walked = 0
    for path in sorted(partition_dir.glob("*.log")):
        with open(path, "rb") as f:
            position, end = 0, os.fstat(f.fileno()).st_size
            while position + 61 <= end and walked < 10_000_000:
                header = os.pread(f.fileno(), 61, position)
                base, length = struct.unpack_from(">qi", header, 0)
                (last_delta,) = struct.unpack_from(">i", header, 23)
                (count,) = struct.unpack_from(">i", header, 57)
                yield base, base + last_delta, count, 12 + length
                position += 12 + length
                walked += 1


def _log_batches(partition_dir: Path) -> tuple[int, int, int]:
    """(batches, records, bytes) of a partition's log."""
    batches = records = size = 0
    for _, _, count, length in _walk_log(partition_dir):
        batches += 1
        records += count
        size += length
    return batches, records, size


def _log_range_bytes(partition_dir: Path, start: int, end: int) -> int:
    """Bytes of the batches holding offsets in [start, end)."""
    return sum(length for base, last, _, length in _walk_log(partition_dir) if last >= start and base < end)


def _batch_start_at_or_after(partition_dir: Path, offset: int) -> int:
    """The base offset of the first batch at or after `offset` in a partition's log."""
    for base, _, _, _ in _walk_log(partition_dir):
        if base >= offset:
            return base
    return offset


# -------------------------------------------------------------------------------------- runs


class Bench:
    def __init__(self, args: argparse.Namespace, report: Report, scratch: Path) -> None:
        self.args = args
        self.report = report
        self.scratch = scratch
        self.targets: list[Target] = []
        self.logway: Target | None = None
        self.mock_process: Target | None = None  # the end-to-end workload's third broker
        self.large_range: tuple[int, int] | None = None
        self.profile_dir = Path(args.profile) if args.profile else None
        self.perf_dir = Path(args.perf) if args.perf else None

    def wants(self, workload: str) -> bool:
        return workload in self.args.workloads

    def recycle_pages(self, t: Target, volume: int) -> None:
        """Untimed, before `t` appends `volume` bytes: recycle that many page-cache pages if `t`
        writes files (a logway process; the mock keeps records in memory), so the run does not land in
        pages the hypervisor must back first (machine.recycle_page_cache)."""
        if t.pid is not None:  # a broker process
            machine.recycle_page_cache(str(self.scratch / "recycle.bench"), volume + _RECYCLE_SLACK)

    def profiled(self, name: str, enabled: bool, work: Callable[[], Measurement]) -> Measurement:
        if (self.profile_dir is None and self.perf_dir is None) or not enabled or self.logway is None:
            return work()
        from benchmarks.tracing import Perf, PySpy

        spy = PySpy(self.logway.pid, self.profile_dir / f"{name}.txt").start() if self.profile_dir else None
        perf = Perf(self.logway.pid, self.perf_dir / f"{name}.data").start() if self.perf_dir else None
        try:
            return work()
        finally:
            if spy is not None:
                self.report.profiles.append(spy.stop().summary(title=f"py-spy profile of the broker: {name}"))
            if perf is not None:
                self.report.profiles.append(perf.stop(title=f"perf profile of the broker: {name}"))

    # ------------------------------------------------------------------------ one-off parts

    def crc(self) -> None:
        section("CRC-32C on 1 MiB")
        result = machine.crc_speeds()
        self.report.values["crc32c_gb_s"] = result.crc32c_gb_s
        print(f"crc32c package:            {result.crc32c_gb_s:8.2f} GB/s")
        if result.crcmod_gb_s is None:
            self.report.note("crcmod is not installed (pip install -e '.[bench]')")
            return
        kind = "C extension" if result.crcmod_is_c else "PURE PYTHON fallback"
        print(f"crcmod 'crc-32c' ({kind}): {result.crcmod_gb_s:8.3f} GB/s   same CRC: {result.agree}")
        print(f"crc32c / crcmod: {result.ratio:.0f}x")
        self.report.values["crcmod_gb_s"] = result.crcmod_gb_s
        self.report.values["crc32c_over_crcmod"] = result.ratio

    def setup_large(self) -> None:
        """1 MiB records on logway with confluent-kafka, once: produce, then consume them all."""
        a, lw = self.args, self.logway
        large = a.large_size
        lw.create_topic("l-large")
        self.recycle_pages(lw, a.large_records * a.large_size)
        self.report.add("ck_produce_large", "logway", clients.ck_produce(
            f"logway: ck produce {large // 1024} KiB acks=1", lw.bootstrap, "l-large", a.large_records, large, "1",
            lw.meter(), a.deadline))
        low, high = clients.watermarks(lw.bootstrap, "l-large")
        self.large_range = (low, high)
        self.report.add("ck_consume_large", "logway", clients.ck_consume(
            f"logway: ck consume {large // 1024} KiB, all {high - low}", lw.bootstrap, "l-large", low, high, large,
            lw.meter(), a.deadline))

    # ----------------------------------------------------------------------------- rounds

    def tail_windows(self, suffix: str, targets: list[Target]) -> dict[str, tuple[int, int]]:
        """Per target, the offsets [start, end) to read repeatedly from topic <t>-<suffix>: the
        tail the mock retains (~5 MiB), ending at the log end on every broker (so no broker
        prefetches past it), starting on a batch boundary in logway's log."""
        marks = {t.name: clients.watermarks(t.bootstrap, f"{t.name[0]}{suffix}") for t in targets}
        window = min(high - low for low, high in marks.values())
        if "mock" not in marks:
            window = min(window, 47_000)
        ranges = {}
        for t in targets:
            low, high = marks[t.name]
            start = max(low, high - window)
            if t.name == "logway":
                start = _batch_start_at_or_after(self.scratch / "logway-data" / f"l{suffix}-0", start)
            ranges[t.name] = (start, high)
        return ranges

    def round(self, number: int) -> None:
        a = self.args
        order = self.targets if number % 2 else list(reversed(self.targets))
        section(f"round {number} of {a.rounds}: {' then '.join(t.name for t in order)}")
        _settle()
        if order and self.wants("ck"):
            self.client_round(number, order)
        if order and self.wants("wire-produce"):
            self.wire_produce_round(number, order)
        if order and self.wants("wire-produce-16k"):
            self.wire_produce_16k_round(number, order)
        if order and self.wants("latency"):
            self.latency_round(number, order)
        if order and self.wants("end-to-end"):
            self.end_to_end_round(number, order)
        if "machine" in a.parts:
            self.machine_round(number)
        if self.wants("wire-fetch") and self.logway is not None and self.large_range is not None:
            self.wire_fetch_round(number == 1)

    def client_round(self, number: int, order: list[Target]) -> None:
        a, report = self.args, self.report
        n, s = a.records, a.size
        first = number == 1
        for acks, key in (("1", "ck_produce_a1"), ("all", "ck_produce_all")):
            for t in order:
                topic = f"{t.name[0]}-a{acks}-r{number}"
                t.create_topic(topic)
                self.recycle_pages(t, n * (s + 10))
                work = lambda t=t, topic=topic, acks=acks: clients.ck_produce(
                    f"{t.name}: ck produce {s} B acks={acks}", t.bootstrap, topic, n, s, acks, t.meter(), a.deadline)
                m = self.profiled(f"ck-produce-{s}B", first and acks == "1" and t.name == "logway", work)
                report.add(key, t.name, m)
        if first and self.logway is not None:
            batches, records, size = _log_batches(self.scratch / "logway-data" / "l-a1-r1-0")
            if batches:
                report.values["produce_batch_bytes"] = size / batches
                report.note(
                    f"librdkafka's batches as stored by logway: {batches}, avg {size / batches / 1024:.0f} KiB and "
                    f"{records / batches:.0f} records (linger.ms={clients.LINGER_MS}, batch.size={clients.BATCH_BYTES})")
        # consume: the tail the mock retains, read repeatedly, on both sides
        ranges = self.tail_windows(f"-a1-r{number}", order)
        if first and "mock" in ranges:
            low, high = ranges["mock"]
            report.values["mock_retained_records"] = high - low
            report.note(
                f"the mock keeps offsets [{low:,}, {high:,}) of {high:,} ({high - low:,} records, ~5 MiB): the consume "
                f"comparison reads the same tail of the log (from a batch boundary) repeatedly on both brokers, "
                f"seeking back each time, and compares records/s")
        for t in order:
            low, high = ranges[t.name]
            repeats = _windows(n, high - low)
            work = lambda t=t, low=low, high=high, repeats=repeats: clients.ck_consume(
                f"{t.name}: ck consume {s} B, {high - low:,} x {repeats}", t.bootstrap, f"{t.name[0]}-a1-r{number}",
                low, high, s, t.meter(), a.deadline, repeats)
            report.add("ck_consume_window", t.name, self.profiled(f"ck-consume-{s}B-windows", first and t.name == "logway", work))

    def wire_produce_round(self, number: int, order: list[Target]) -> None:
        """Protocol-level produce of ~1 MiB batches, no client library."""
        a, report = self.args, self.report
        s = a.size
        batch, per_batch = wire.make_batch(s, clients.BATCH_BYTES)
        for t in order:
            topic = f"{t.name[0]}-wire-r{number}"
            t.create_topic(topic)
            self.recycle_pages(t, a.wire_mb * MiB)

            def work(t=t, topic=topic) -> Measurement:
                meter = t.meter().start()
                result = wire.raw_produce(t.address, topic, batch, per_batch, a.wire_mb * MiB, deadline_s=a.deadline)
                return _wire_measurement(f"{t.name}: wire produce {len(batch) // 1024} KiB batches of {s} B", result, *meter.stop())

            report.add("wire_produce", t.name, self.profiled("wire-produce-1MiB-batches", number == 1 and t.name == "logway", work))

    def wire_produce_16k_round(self, number: int, order: list[Target]) -> None:
        """The same with 16 KiB batches: per-request cost rather than bytes.

        A side's run lasts a fraction of a second, shorter than the spells in which this
        machine runs the same loop up to twice as slow (benchmarks/cpu.py): one run a side put
        a spell in one side's run and not the other's. So a round runs _WIRE_16K_SLICES slices
        a side, alternating between the sides, and sums each side's."""
        a, report = self.args, self.report
        s = a.size
        small, per_small = wire.make_batch(s, 16 * 1024)
        slices: dict[str, list[Measurement]] = {t.name: [] for t in order}
        topics = {t.name: f"{t.name[0]}-wire16-r{number}" for t in order}
        for t in order:
            t.create_topic(topics[t.name])
        for index in range(_WIRE_16K_SLICES):
            for t in order:
                self.recycle_pages(t, a.wire_mb * MiB // 4)

                def work(t=t) -> Measurement:
                    meter = t.meter().start()
                    result = wire.raw_produce(
                        t.address, topics[t.name], small, per_small, a.wire_mb * MiB // 4, deadline_s=a.deadline
                    )
                    return _wire_measurement(t.name, result, *meter.stop())

                profiled = number == 1 and index == 0 and t.name == "logway"
                slices[t.name].append(self.profiled("wire-produce-16KiB-batches", profiled, work))
        for t in order:
            m = _summed(f"{t.name}: wire produce 16 KiB batches of {s} B", slices[t.name])
            requests = m.records / per_small
            cpu = f"; broker CPU a request {m.broker_cpu / requests * 1e6:.1f} us" if m.broker_cpu and requests else ""
            m.notes.append(
                f"{m.records_per_s / per_small:,.0f} produce requests/s{cpu}; by slice: "
                + ", ".join(f"{one.records_per_s / per_small:,.0f}" for one in slices[t.name])
            )
            report.add("wire_produce_16k", t.name, m)

    def latency_round(self, number: int, order: list[Target]) -> None:
        """Records produced one at a time: the round trip of a produce request, client included."""
        a, report = self.args, self.report
        for acks in ("1", "all"):
            for t in order:
                topic = f"{t.name[0]}-latency-a{acks}-r{number}"
                t.create_topic(topic)
                report.add(f"latency_produce_a{acks}", t.name, clients.ck_produce_latency(
                    f"{t.name}: ck produce {a.size} B one at a time, acks={acks}", t.bootstrap, topic,
                    a.latency_records, a.size, acks, t.meter(), a.deadline))

    def end_to_end_round(self, number: int, order: list[Target]) -> None:
        """A record a millisecond, consumed as it comes: latency, and what the broker spends; on
        the mock hosted by a process of its own too, after the mock in this process."""
        a, report = self.args, self.report
        if self.mock_process is not None:
            at = next(i for i, t in enumerate(order) if t.name == "mock") + 1
            order = [*order[:at], self.mock_process, *order[at:]]
        for t in order:
            topic = f"{t.name[0]}-e2e-r{number}"
            t.create_topic(topic)
            report.add("end_to_end", t.name, clients.ck_end_to_end(
                f"{t.name}: ck {a.size} B a millisecond, tailed", t.bootstrap, topic, a.e2e_records, a.size,
                t.meter(), a.deadline))

    def machine_round(self, number: int) -> None:
        """The machine next to logway's own runs."""
        a, report = self.args, self.report
        total = a.wire_mb * MiB
        path_a, path_b = self.scratch / f"append-{number}-a.bench", self.scratch / f"append-{number}-b.bench"
        append = machine.append_file(str(path_a), clients.BATCH_BYTES, total, a.deadline)
        report.add("append_new", "machine", _throughput("machine: page-cache append, 1 MiB pwrite, new file", append))
        os.unlink(path_a)
        append = machine.append_file(str(path_b), clients.BATCH_BYTES, total, a.deadline)
        report.add("append", "machine", _throughput("machine: the same right after deleting that file", append))
        os.unlink(path_b)
        path_c = self.scratch / f"append-{number}-c.bench"
        append = machine.append_file(str(path_c), clients.BATCH_BYTES, total, a.deadline, reserve_ahead=True)
        report.add("append_reserved", "machine", _throughput(
            "machine: the same again, blocks reserved ahead (as logway's active segment)", append))
        os.unlink(path_c)
        path_d = self.scratch / f"append-{number}-d.bench"
        # One thread, and the write overlapping the next receive on a thread of its own, which
        # goes first alternating between rounds.
        for writer_thread in (False, True) if number % 2 else (True, False):
            machine.recycle_page_cache(str(self.scratch / "recycle.bench"), total + _RECYCLE_SLACK)
            received = machine.receive_append_loopback(
                str(path_d), clients.BATCH_BYTES, total, a.deadline, writer_thread=writer_thread)
            if writer_thread:
                report.add("receive_append_overlapped", "machine", _throughput(
                    "machine: the same, appended by a writer thread while the next chunk is received", received))
            else:
                report.add("receive_append", "machine", _throughput(
                    "machine: the same chunks received from a sender process over loopback, CRC-32C, appended into reserved blocks", received))
            os.unlink(path_d)
        sendfile = machine.sendfile_loopback(str(self.scratch), min(total, 256 * MiB), 2 * total, deadline_s=a.deadline)
        report.add("sendfile", "machine", _throughput("machine: os.sendfile over loopback, cached file", sendfile))

    def wire_fetch_round(self, first: bool) -> None:
        a, report = self.args, self.report
        low, high = self.large_range
        lw = self.logway

        def fetch_large() -> Measurement:
            meter = lw.meter().start()
            result = wire.raw_fetch(
                lw.address, "l-large", low, high, min_total_bytes=2 * a.wire_mb * MiB, deadline_s=a.deadline)
            return _wire_measurement(f"logway: wire fetch {a.large_size // 1024} KiB records, 16 MiB", result, *meter.stop())

        report.add("wire_fetch_large", "logway", self.profiled("wire-fetch-1MiB-records", first, fetch_large))

    # ------------------------------------------------------------------------ logway only

    def logway_extras(self) -> None:
        a, report, lw = self.args, self.report, self.logway
        s = a.size
        section("logway only")
        low, high = clients.watermarks(lw.bootstrap, "l-a1-r1")
        report.add("ck_consume_all", "logway", self.profiled("ck-consume-100B-all", True, lambda: clients.ck_consume(
            f"logway: ck consume {s} B, all {high - low:,} once", lw.bootstrap, "l-a1-r1", low, high, s, lw.meter(),
            a.deadline)))
        meter = lw.meter().start()
        result = wire.raw_fetch(lw.address, "l-a1-r1", low, high, min_total_bytes=2 * a.wire_mb * MiB, deadline_s=a.deadline)
        report.add("wire_fetch_small", "logway", _wire_measurement(
            f"logway: wire fetch {s} B records (big batches), 16 MiB", result, *meter.stop()))

    def tls(self) -> None:
        """PLAINTEXT against SSL on one broker: confluent-kafka produce (acks=1) and consume of
        S-byte and of large records over each listener, in rounds alternating which goes first."""
        a, report = self.args, self.report
        section("tls: one logway broker, a PLAINTEXT and an SSL listener")
        plain, secure, broker = start_tls(self.scratch, a.large_size)
        try:
            session = _tls_session(secure.address, secure.security["ssl.ca.location"])
            print(f"logway broker pid {plain.pid}: PLAINTEXT at {plain.bootstrap}, SSL at {secure.bootstrap} "
                  f"(trustme CA, RSA 2048 server key, no client certificate; with Python's ssl client: {session}), "
                  f"data in {broker.data_dir}")
            report.notes.append(f"tls part: SSL listener with Python's ssl client: {session}")
            workloads = (("small", a.size, a.records), ("large", a.large_size, a.large_records))
            for number in range(1, a.rounds + 1):
                order = [plain, secure] if number % 2 else [secure, plain]
                section(f"tls round {number} of {a.rounds}: {' then '.join(t.name for t in order)}")
                _settle()
                for key, size, count in workloads:
                    shown = f"{size} B" if size < 1024 else f"{size // 1024} KiB"
                    for t in order:
                        topic = f"tls-{key}-{t.name.lower()}-r{number}"
                        t.create_topic(topic)
                        self.recycle_pages(t, count * (size + 80))
                        report.add(f"tls_produce_{key}", t.name, clients.ck_produce(
                            f"{t.name}: ck produce {shown} acks=1", t.bootstrap, topic, count, size, "1", t.meter(),
                            a.deadline, t.security))
                    # both listeners read the same records (those produced over PLAINTEXT), so
                    # the log they read is the same byte for byte
                    topic = f"tls-{key}-plaintext-r{number}"
                    low, high = clients.watermarks(plain.bootstrap, topic)
                    for t in order:
                        report.add(f"tls_consume_{key}", t.name, clients.ck_consume(
                            f"{t.name}: ck consume {shown}, all {high - low:,} x {_TLS_CONSUME_REPEATS}", t.bootstrap,
                            topic, low, high, size, t.meter(), a.deadline, _TLS_CONSUME_REPEATS, security=t.security))
        finally:
            broker.stop()
            if "Traceback" in broker.log():
                print("\nWARNING: the tls part's broker logged a traceback:\n" + broker.log()[-3000:])
        self.tls_summary()

    def tls_summary(self) -> None:
        """Medians per workload and listener, with the broker's CPU: its share of a core and its
        CPU seconds per GB of record values, and SSL's over PLAINTEXT's per round."""
        report = self.report
        section("tls: medians over rounds; broker CPU")
        print(f"{'workload':<22} {'listener':<10} {'rec/s':>10} {'MB/s':>8} {'brk cpu':>7} {'brk cpu s/GB':>12}")
        for direction in ("produce", "consume"):
            for key in ("small", "large"):
                workload = f"tls_{direction}_{key}"
                sides = report.series.get(workload, {})
                per_gb: dict[str, list[float]] = {}
                for side in ("PLAINTEXT", "SSL"):
                    ms = sides.get(side, [])
                    if not ms:
                        continue
                    share = statistics.median(m.broker_cpu / m.seconds for m in ms if m.seconds > 0)
                    per_gb[side] = [m.broker_cpu / (m.bytes / 1e9) if m.bytes else math.nan for m in ms]
                    cpu_per_gb = statistics.median([v for v in per_gb[side] if not math.isnan(v)] or [math.nan])
                    print(f"{workload:<22} {side:<10} {statistics.median(m.records_per_s for m in ms):>10,.0f} "
                          f"{statistics.median(m.mb_per_s for m in ms):>8.1f} {100 * share:>6.0f}% {cpu_per_gb:>12.2f}")
                    report.values[f"{workload}_{side}_broker_cpu_share"] = share
                    report.values[f"{workload}_{side}_broker_cpu_s_per_gb"] = cpu_per_gb
                if len(per_gb) == 2:
                    rounds = [s / p for s, p in zip(per_gb["SSL"], per_gb["PLAINTEXT"]) if p > 0]
                    if rounds:
                        ratio = statistics.median(rounds)
                        report.values[f"{workload}_broker_cpu_per_byte_ssl_over_plaintext"] = ratio
                        print(f"{'':<22} broker CPU per byte, SSL / PLAINTEXT: {ratio:.2f}x"
                              + (f"  rounds {', '.join(f'{r:.2f}' for r in rounds)}" if len(rounds) > 1 else ""))

    def metrics_cost(self) -> None:
        """Two brokers, metrics served and scraped every second on one: wire produce of 16 KiB
        and of ~1 MiB batches, confluent-kafka produce and consume, in rounds alternating which
        broker goes first."""
        a, report = self.args, self.report
        section("metrics: two logway brokers, one serving metrics.listener scraped every second")
        targets, url, brokers = start_metrics_pair(self.scratch, a.large_size)
        scraper = _Scraper(url, 1.0).start()
        try:
            print(f"metrics on: broker pid {targets[0].pid} at {targets[0].bootstrap}, scraped at {url}; "
                  f"metrics off: broker pid {targets[1].pid} at {targets[1].bootstrap}")
            small, per_small = wire.make_batch(a.size, 16 * 1024)
            batch, per_batch = wire.make_batch(a.size, clients.BATCH_BYTES)
            for number in range(1, a.rounds + 1):
                order = targets if number % 2 else list(reversed(targets))
                section(f"metrics round {number} of {a.rounds}: {' then '.join(t.name for t in order)}")
                _settle()
                for key, frame, per_frame, volume in (("wire_produce_16k", small, per_small, a.wire_mb * MiB // 4),
                                                       ("wire_produce", batch, per_batch, a.wire_mb * MiB)):
                    for t in order:
                        topic = f"metrics-{key}-{t.name}-r{number}"
                        t.create_topic(topic)
                        self.recycle_pages(t, volume)
                        meter = t.meter().start()
                        result = wire.raw_produce(t.address, topic, frame, per_frame, volume, deadline_s=a.deadline)
                        report.add(f"metrics_{key}", t.name, _wire_measurement(
                            f"metrics {t.name}: wire produce {len(frame) // 1024} KiB batches of {a.size} B", result,
                            *meter.stop()))
                for t in order:
                    topic = f"metrics-ck-{t.name}-r{number}"
                    t.create_topic(topic)
                    self.recycle_pages(t, a.records * (a.size + 80))
                    report.add("metrics_ck_produce", t.name, clients.ck_produce(
                        f"metrics {t.name}: ck produce {a.size} B acks=1", t.bootstrap, topic, a.records, a.size, "1",
                        t.meter(), a.deadline))
                for t in order:
                    topic = f"metrics-ck-{t.name}-r{number}"
                    low, high = clients.watermarks(t.bootstrap, topic)
                    report.add("metrics_ck_consume", t.name, clients.ck_consume(
                        f"metrics {t.name}: ck consume {a.size} B, all {high - low:,}", t.bootstrap, topic, low, high,
                        a.size, t.meter(), a.deadline))
        finally:
            scraper.stop()
            for broker in brokers:
                broker.stop()
                if "Traceback" in broker.log():
                    print("\nWARNING: a metrics part broker logged a traceback:\n" + broker.log()[-3000:])
        report.note(f"metrics part: {scraper.scrapes} scrapes of {scraper.bytes / max(scraper.scrapes, 1) / 1024:.0f} KiB "
                    f"each, the slowest {scraper.slowest_s * 1000:.0f} ms")

    def idle_connections(self) -> None:
        a, report = self.args, self.report
        section(f"logway: {a.idle_connections:,} idle connections (a broker of its own)")
        result = connections.idle_connections(self.scratch, a.idle_connections, a.records, a.size, a.deadline)
        for side, ms in (("alone", result.alone), ("with idle", result.with_idle)):
            report.add("idle_produce", side, ms[0])
            report.add("idle_consume", side, ms[1])
        MB = 1024 * 1024
        report.values.update(
            idle_connections=result.opened, idle_rss_before_mib=result.rss_before / MB,
            idle_rss_mib=result.rss_idle / MB, idle_rss_peak_mib=result.rss_peak / MB,
            idle_bytes_per_connection=result.bytes_per_connection,
        )
        report.note(
            f"{result.opened:,} of {result.wanted:,} idle connections opened in {result.open_seconds:.1f} s; broker RSS "
            f"{result.rss_before / MB:.0f} MiB before, {result.rss_idle / MB:.0f} MiB with them "
            f"({result.bytes_per_connection / 1024:.1f} KiB each), peak {result.rss_peak / MB:.0f} MiB while producing "
            f"and consuming (goal: at most 1024 MiB)")

    def many_clients(self) -> None:
        a, report = self.args, self.report
        producers, consumers = a.many_producers, max(1, a.many_producers // 10)
        section(f"logway: {producers:,} small producers and {consumers} long-polling consumers (a broker of its own)")
        result = many_clients.many_clients(self.scratch, producers, consumers, seconds=10.0 if a.quick else 20.0)
        report.values.update(
            many_produce_answered_per_s=result.produce_answers / result.seconds,
            many_offered_per_s=result.offered_per_s, many_broker_us_per_request=result.broker_us_per_request,
            many_p99_ms=result.latencies_ms.get("p99", float("nan")),
            many_p999_ms=result.latencies_ms.get("p99.9", float("nan")),
            many_starved_share=result.starved_share,
            many_speed_spread=result.speed_spread, many_speed_correlation=result.speed_correlation,
            many_full_speed_p999_ms=(result.full_speed_latencies_ms or {}).get("p99.9", float("nan")),
        )
        for line in result.lines():
            print(line)
            report.note(f"many-clients part: {line}")

    def kafka_python(self) -> None:
        a, report = self.args, self.report
        s, kn = a.size, a.kp_records
        section(f"kafka-python (api_version={clients.KP_API_VERSION})")
        for t in self.targets:
            topic = f"{t.name[0]}-kp"
            t.create_topic(topic)
            self.recycle_pages(t, kn * (s + 10))
            report.add("kp_produce", t.name, clients.kp_produce(
                f"{t.name}: kafka-python produce {s} B acks=1", t.bootstrap, topic, kn, s, 1, t.meter(), a.deadline))
        ranges = self.tail_windows("-kp", self.targets)
        for t in self.targets:
            low, high = ranges[t.name]
            repeats = _windows(kn, high - low)
            report.add("kp_consume", t.name, clients.kp_consume(
                f"{t.name}: kafka-python consume {s} B, {high - low:,} x {repeats}", t.bootstrap, f"{t.name[0]}-kp", low,
                high, s, t.meter(), a.deadline, repeats))

    def zerocopy(self) -> None:
        from benchmarks.tracing import Strace, StraceUnavailable

        a, report, lw = self.args, self.report, self.logway
        section("zero-copy check: strace -f -p <broker> during confluent-kafka consumes")
        syscalls = "sendfile,sendmsg,sendto,write,writev,pread64,read,recvfrom"
        low, high = self.large_range
        runs = [("l-large", low, min(high, low + max(1, 64 * MiB // a.large_size)), a.large_size)]
        low, high = clients.watermarks(lw.bootstrap, "l-a1-r1")
        runs.append(("l-a1-r1", low, high, a.size))
        for number, (topic, start, end, record_size) in enumerate(runs):
            trace = Strace(lw.pid, syscalls, self.scratch / f"strace-{topic}.txt")
            try:
                trace.start()
            except StraceUnavailable as exc:
                report.note(f"zero-copy check skipped: {exc}")
                return
            try:
                m = clients.ck_consume(
                    f"logway: ck consume {topic} under strace", lw.bootstrap, topic, start, end, record_size, lw.meter(),
                    a.deadline, warm_up=False)
            finally:
                totals = trace.stop()
            report.add(f"zerocopy_consume_{number}", "logway", m)
            log_bytes = _log_range_bytes(self.scratch / "logway-data" / f"{topic}-0", start, end)
            print(f"strace -f -e trace={syscalls} on the broker while consuming offsets [{start:,}, {end:,}) of {topic}: "
                  f"{m.bytes:,} value bytes in {log_bytes:,} bytes of log, no warm-up read")
            for name in ("sendfile", "sendmsg", "sendto", "write", "writev", "pread64", "read", "recvfrom"):
                if totals.calls[name]:
                    print("  " + totals.line(name))
            other = sum(totals.bytes[name] for name in ("sendmsg", "sendto", "write", "writev"))
            reads = totals.bytes["pread64"] + totals.bytes["read"]
            ok = totals.bytes["sendfile"] >= log_bytes and other < log_bytes // 100
            report.values.update({
                f"zerocopy_{topic}_sendfile_calls": totals.calls["sendfile"],
                f"zerocopy_{topic}_sendfile_bytes": totals.bytes["sendfile"],
                f"zerocopy_{topic}_log_bytes": log_bytes,
                f"zerocopy_{topic}_other_send_bytes": other,
                f"zerocopy_{topic}_file_read_bytes": reads,
            })
            print(f"  sendfile moved {totals.bytes['sendfile'] / max(log_bytes, 1):.2f}x the log bytes consumed (any excess: "
                  f"records the client fetched ahead of the consumed range); other sends {other:,} bytes; file "
                  f"reads {reads:,} bytes (batch headers) -> {'ZERO-COPY OK' if ok else 'NOT ZERO-COPY'}")


# ------------------------------------------------------------------------------------ ratios

RATIOS = [
    # label, numerator (workload, side), denominator (workload, side), by, target
    ("produce 100 B acks=1, confluent-kafka: logway / mock", ("ck_produce_a1", "logway"), ("ck_produce_a1", "mock"), "records", 1.0),
    ("produce 100 B acks=all, confluent-kafka: logway / mock", ("ck_produce_all", "logway"), ("ck_produce_all", "mock"), "records", 1.0),
    ("consume 100 B (same window), confluent-kafka: logway / mock", ("ck_consume_window", "logway"), ("ck_consume_window", "mock"), "records", 1.0),
    ("produce 1 MiB batches, wire: logway / mock", ("wire_produce", "logway"), ("wire_produce", "mock"), "records", None),
    ("produce 16 KiB batches (requests/s), wire: logway / mock", ("wire_produce_16k", "logway"), ("wire_produce_16k", "mock"), "records", None),
    ("fetch 1 MiB records, wire: logway / raw sendfile", ("wire_fetch_large", "logway"), ("sendfile", "machine"), "mb", 0.6),
    ("produce 1 MiB batches, wire: logway / raw append (recycled pages)", ("wire_produce", "logway"), ("append", "machine"), "mb", None),
    ("produce 1 MiB batches, wire: logway / raw append into reserved blocks (recycled pages)", ("wire_produce", "logway"), ("append_reserved", "machine"), "mb", None),
    ("produce 1 MiB batches, wire: mock / raw append (recycled pages)", ("wire_produce", "mock"), ("append", "machine"), "mb", None),
    ("machine: received over loopback, CRC-32C, appended / raw append into reserved blocks (recycled pages)", ("receive_append", "machine"), ("append_reserved", "machine"), "mb", None),
    ("produce 1 MiB batches, wire: logway / received over loopback, CRC-32C, appended", ("wire_produce", "logway"), ("receive_append", "machine"), "mb", None),
    # Whether overlapping the write with the next receive pays here (issue 19's writer threads).
    ("machine: received, CRC-32C, appended by a writer thread / the same on one thread", ("receive_append_overlapped", "machine"), ("receive_append", "machine"), "mb", None),
    # What the goal of 0.8x the append asks of the machine: the rate at which every core would be
    # busy, at the CPU a byte that client and broker (or sender and receiver) together spent.
    ("produce 1 MiB batches, wire: every core busy at logway's CPU a byte (client + broker) / raw append (recycled pages)", ("wire_produce", "logway"), ("append", "machine"), ("mb_all_cores", "mb"), None),
    ("produce 1 MiB batches, wire: every core busy at the mock's CPU a byte (client + broker) / raw append (recycled pages)", ("wire_produce", "mock"), ("append", "machine"), ("mb_all_cores", "mb"), None),
    ("machine: every core busy at the CPU a byte of received over loopback, CRC-32C, appended (sender + receiver) / raw append (recycled pages)", ("receive_append", "machine"), ("append", "machine"), ("mb_all_cores", "mb"), None),
    ("machine: every core busy at the CPU a byte of received, CRC-32C, appended by a writer thread (sender + receiver) / raw append (recycled pages)", ("receive_append_overlapped", "machine"), ("append", "machine"), ("mb_all_cores", "mb"), None),
    ("produce 100 B acks=1, confluent-kafka: logway / raw append", ("ck_produce_a1", "logway"), ("append", "machine"), "mb", None),
    ("produce 100 B, kafka-python: logway / mock", ("kp_produce", "logway"), ("kp_produce", "mock"), "records", None),
    ("broker CPU, a record a ms tailed (lower is better): logway / mock", ("end_to_end", "logway"), ("end_to_end", "mock"), "broker_cpu", None),
    ("broker CPU a request, a record a ms tailed (lower is better): logway / mock", ("end_to_end", "logway"), ("end_to_end", "mock"), "broker_cpu_per_request", None),
    ("broker CPU a request, a record a ms tailed (lower is better): logway / mock in a process of its own", ("end_to_end", "logway"), ("end_to_end", "mock-process"), "broker_cpu_per_request", None),
    ("broker CPU a request, a record a ms tailed (lower is better): mock in this process / in a process of its own", ("end_to_end", "mock"), ("end_to_end", "mock-process"), "broker_cpu_per_request", None),
    ("consume 100 B (same window), kafka-python: logway / mock", ("kp_consume", "logway"), ("kp_consume", "mock"), "records", None),
    ("produce 100 B acks=1, confluent-kafka: SSL / PLAINTEXT (tls)", ("tls_produce_small", "SSL"), ("tls_produce_small", "PLAINTEXT"), "records", None),
    ("consume 100 B (same records), confluent-kafka: SSL / PLAINTEXT (tls)", ("tls_consume_small", "SSL"), ("tls_consume_small", "PLAINTEXT"), "records", None),
    ("produce 1 MiB acks=1, confluent-kafka: SSL / PLAINTEXT (tls)", ("tls_produce_large", "SSL"), ("tls_produce_large", "PLAINTEXT"), "mb", None),
    ("consume 1 MiB (same records), confluent-kafka: SSL / PLAINTEXT (tls)", ("tls_consume_large", "SSL"), ("tls_consume_large", "PLAINTEXT"), "mb", None),
    ("produce 16 KiB batches (requests/s), wire: metrics on / off", ("metrics_wire_produce_16k", "on"), ("metrics_wire_produce_16k", "off"), "records", None),
    ("produce 1 MiB batches, wire: metrics on / off", ("metrics_wire_produce", "on"), ("metrics_wire_produce", "off"), "mb", None),
    ("produce 100 B acks=1, confluent-kafka: metrics on / off", ("metrics_ck_produce", "on"), ("metrics_ck_produce", "off"), "records", None),
    ("consume 100 B, confluent-kafka: metrics on / off", ("metrics_ck_consume", "on"), ("metrics_ck_consume", "off"), "records", None),
]
# once-only logway runs against the machine: compared with the median of the machine's rounds
SINGLE_RATIOS = [
    ("fetch 100 B records in big batches, wire: logway / raw sendfile", ("wire_fetch_small", "logway"), ("sendfile", "machine"), "mb"),
    ("consume 1 MiB records, confluent-kafka: logway / raw sendfile", ("ck_consume_large", "logway"), ("sendfile", "machine"), "mb"),
    ("produce 1 MiB records, confluent-kafka: logway / raw append", ("ck_produce_large", "logway"), ("append", "machine"), "mb"),
    ("produce 100 B, confluent-kafka: with idle connections / without", ("idle_produce", "with idle"), ("idle_produce", "alone"), "records"),
    ("consume 100 B, confluent-kafka: with idle connections / without", ("idle_consume", "with idle"), ("idle_consume", "alone"), "records"),
]


def _value(m: Measurement, by: str) -> float:
    if by == "mb_all_cores":
        if m.client_cpu is None or m.broker_cpu is None or m.client_cpu + m.broker_cpu <= 0:
            return math.nan  # not measured: no ratio for the round
        return (os.cpu_count() or 1) * m.bytes / (m.client_cpu + m.broker_cpu) / 1e6
    if by == "broker_cpu":
        return m.broker_cpu or 0.0
    if by == "broker_cpu_per_request":
        return m.broker_cpu_per_request or 0.0
    return m.records_per_s if by == "records" else m.mb_per_s


def compute_ratios(report: Report) -> list[dict]:
    rows = []
    for label, (wa, sa), (wb, sb), by, target in RATIOS:
        xs, ys = report.series[wa][sa], report.series[wb][sb]
        by_x, by_y = by if isinstance(by, tuple) else (by, by)
        per_round = [_value(x, by_x) / _value(y, by_y) for x, y in zip(xs, ys) if _value(y, by_y) > 0]
        per_round = [ratio for ratio in per_round if not math.isnan(ratio)]
        if per_round:
            rows.append({"label": label, "value": statistics.median(per_round), "rounds": per_round, "target": target})
    for label, (wa, sa), (wb, sb), by in SINGLE_RATIOS:
        xs, ys = report.series[wa][sa], report.series[wb][sb]
        if xs and ys:
            denominator = statistics.median(_value(y, by) for y in ys)
            if denominator > 0:
                rows.append({"label": label, "value": _value(xs[0], by) / denominator, "rounds": [], "target": None})
    if "crc32c_over_crcmod" in report.values:
        rows.append({"label": "CRC-32C on 1 MiB: crc32c package / crcmod (C extension)",
                     "value": report.values["crc32c_over_crcmod"], "rounds": [], "target": None})
    return rows


def print_summary(report: Report) -> None:
    section("medians over rounds")
    for workload, sides in report.series.items():
        for side, ms in sides.items():
            if len(ms) > 1:
                print(f"{workload + ' / ' + side:<40} {statistics.median(m.records_per_s for m in ms):>12,.0f} rec/s "
                      f"{statistics.median(m.mb_per_s for m in ms):>9.1f} MB/s   ({len(ms)} rounds)")


def run_scale(report: Report, scratch: Path, partitions: int) -> None:
    section(f"scale: one broker, {partitions:,} one-replica partitions, Kafka's defaults")
    result = scale.run(scratch, partitions)
    v = result.values
    rows = [
        (f"CreateTopics of {result.partitions:,} partitions ({scale.TOPICS} topics, one request)", result.create_s, "s", 30),
        ("  ... until Metadata names every leader", result.create_to_metadata_s, "s", None),
        ("clean stop (SIGTERM until exit)", result.clean_stop_s, "s", None),
        ("clean restart until a complete Metadata answer", result.clean_restart_s, "s", 10),
        ("restart after kill -9 until a complete Metadata answer", result.crash_restart_s, "s", 20),
    ]
    for phase in ("created", "clean_restart", "crash_restart"):
        rows += [
            (f"{phase}: RSS (peak)", f"{v[f'{phase}_rss_mib']:.0f} ({v[f'{phase}_peak_rss_mib']:.0f})", "MiB", 1024),
            (f"{phase}: open descriptors", v[f"{phase}_descriptors"], "", None),
            (f"{phase}: data allocated / apparent", f"{v[f'{phase}_allocated_mib']:.0f} / {v[f'{phase}_apparent_mib']:.0f}", "MiB", None),
        ]
    for label, value, unit, target in rows:
        shown = f"{value:.2f}" if isinstance(value, float) else str(value)
        goal = f"target <= {target} {unit}" if target is not None else ""
        print(f"{label:<62} {shown:>14} {unit:<4} {goal}")
    report.values.update({f"scale_{k}": x for k, x in v.items()})
    for name in ("create_s", "create_to_metadata_s", "clean_stop_s", "clean_restart_s", "crash_restart_s"):
        report.values[f"scale_{name}"] = getattr(result, name)


def run_cluster_scale(report: Report, scratch: Path, partitions: int) -> None:
    section(f"cluster-scale: ZooKeeper and {cluster_scale.BROKERS} brokers, {partitions:,} partitions, RF={cluster_scale.REPLICATION}")
    result = cluster_scale.run(scratch, partitions)
    labels = {
        "create_request_s": f"CreateTopics of {result.partitions:,} partitions ({cluster_scale.TOPICS} topics, one request)",
        "create_leaders_s": "  ... until Metadata names every leader",
        "create_full_isr_s": "  ... until every ISR is full",
        "failover_new_controller_s": "kill -9 of the controller until /controller names another",
        "failover_leaders_s": "  ... until Metadata names a live leader for every partition",
        "restart_listening_s": "restart of the killed broker until it listens",
        "restart_full_isr_s": "  ... until every ISR is full again",
        "shutdown_leaders_s": "SIGTERM to another broker until Metadata shows its leaders moved",
        "shutdown_exit_s": "  ... until it exited (polled with Metadata: +- 1 s)",
    }
    for key, label in labels.items():
        print(f"{label:<66} {result.phases[key]:>10.2f} s")
    for step, brokers in result.stats.items():
        for broker_id, values in sorted(brokers.items()):
            if "cpu_percent" in values:
                print(f"{step}: broker {broker_id} CPU, % of a core{'':<35} {values['cpu_percent']:>10.1f}")
            else:
                print(f"{step}: broker {broker_id} RSS (peak) MiB, descriptors{'':<21} "
                      f"{values['rss_mib']:>5.0f} ({values['peak_rss_mib']:.0f}) {values['descriptors']:>7}")
            report.values.update({f"cluster_scale_{step}_{broker_id}_{k}": x for k, x in values.items()})
    for note in result.notes:
        report.note(note)
        print(note)
    report.values.update({f"cluster_scale_{k}": x for k, x in result.phases.items()})


# -------------------------------------------------------------------------------------- main


def _loadavg() -> str:
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def interpreter() -> str:
    """The Python that runs the benchmark and the brokers it starts: its version and the binary
    behind the virtualenv. Builds of one version differ: Debian's python3.11, which the README's
    machine runs, is built with profile-guided and link-time optimisation, pyenv's by default
    without, and the broker's CPU a request differs with them (RESULTS.md, "the interpreter's
    build")."""
    return f"python {platform.python_version()} ({os.path.realpath(sys.executable)})"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    base = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="logway-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    for directory in (args.profile, args.perf):
        if directory:
            Path(directory).mkdir(parents=True, exist_ok=True)
    report = Report()
    started = time.perf_counter()
    started_at = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    command = f"python -m benchmarks.run {' '.join(sys.argv[1:] if argv is None else argv)}".rstrip()
    print(f"logway benchmarks  {started_at}  {interpreter()}  "
          f"{os.cpu_count()} cpus  {platform.machine()}  kernel {platform.release()}")
    print(f"command: {command}")
    print(f"N={args.records:,} records of S={args.size} B, {args.rounds} round(s); large: {args.large_records} x "
          f"{args.large_size:,} B; wire/machine volume {args.wire_mb} MiB; kafka-python {args.kp_records:,} records; "
          f"parts {','.join(args.parts)}")
    print(f"confluent-kafka producers: linger.ms={clients.LINGER_MS}, batch.size={clients.BATCH_BYTES}, "
          f"batch.num.messages=1000000, compression none, all to partition 0; consumers: assign+seek (no group), "
          f"max.partition.fetch.bytes={clients.PARTITION_FETCH_BYTES}, fetch.wait.max.ms={clients.FETCH_WAIT_MS}, "
          f"fetch.queue.backoff.ms={clients.FETCH_QUEUE_BACKOFF_MS}, "
          f"consume() batches of {clients.CONSUME_BATCH}. wire = this package's own protocol client (benchmarks/wire.py). "
          f"cpu% = CPU time / wall time (100% = one core); the mock's broker cpu is its rdk:mock thread")
    idle = machine_idle()
    print(f"machine idle before the run: {100 * idle:.0f}% of {os.cpu_count()} cpus; load average {_loadavg()}")
    if idle < 0.9:
        report.note("WARNING: other work is using this machine's CPUs: figures are low and noisy")
    bench = Bench(args, report, base)
    mock_host = broker = mock_process = None
    try:
        if "crc" in args.parts:
            bench.crc()
        wants_logway = "logway" in args.parts or "zerocopy" in args.parts
        if "mock" in args.parts:
            target, mock_host = start_mock()
            bench.targets.append(target)
            print(f"\nmock cluster broker at {target.bootstrap} (the host client's metadata)")
            if bench.wants("end-to-end"):
                bench.mock_process, mock_process = start_mock_process()
                print(f"mock cluster broker hosted by process {mock_process.pid} at {bench.mock_process.bootstrap}")
        if wants_logway:
            bench.logway, broker = start_logway(base, args.large_size)
            bench.targets.append(bench.logway)
            print(f"logway broker pid {bench.logway.pid} at {bench.logway.bootstrap}, data in {broker.data_dir}")
            section("logway: 1 MiB records")
            _settle()
            if bench.wants("ck") or bench.wants("wire-fetch"):
                bench.setup_large()
        if bench.targets or "machine" in args.parts:
            for number in range(1, args.rounds + 1):
                bench.round(number)
        if bench.logway is not None and bench.wants("ck"):
            bench.logway_extras()
        if "kafka-python" in args.parts and bench.targets:
            bench.kafka_python()
        if "zerocopy" in args.parts and bench.logway is not None and bench.wants("ck"):
            bench.zerocopy()
        if "tls" in args.parts:
            bench.tls()
        if "metrics" in args.parts:
            bench.metrics_cost()
        if "connections" in args.parts:
            bench.idle_connections()
        if "many-clients" in args.parts:
            bench.many_clients()
        if "scale" in args.parts:
            run_scale(report, base, args.scale_partitions)
        if "cluster-scale" in args.parts:
            run_cluster_scale(report, base, args.scale_partitions)
    finally:
        if broker is not None:
            broker.stop()
            if "Traceback" in broker.log():
                print("\nWARNING: the broker logged a traceback:\n" + broker.log()[-3000:])
        del mock_host
        gc.collect()
        if mock_process is not None:
            mock_process.communicate("", timeout=30)
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)
    print_summary(report)
    section("ratios (median of per-round ratios; the same run)")
    rows = compute_ratios(report)
    for row in rows:
        target = row["target"]
        verdict = "" if target is None else ("ok" if row["value"] >= target else "SHORT")
        spread = f"  rounds {', '.join(f'{v:.2f}' for v in row['rounds'])}" if len(row["rounds"]) > 1 else ""
        goal = f">= {target:.2f}" if target is not None else "info"
        print(f"{row['label']:<68} {row['value']:7.3f}x  {goal:<8} {verdict:<5}{spread}")
    for text in report.profiles:
        print()
        print(text)
    print(f"\ntotal {time.perf_counter() - started:.0f} s; load average {_loadavg()}")
    data = {
        "run": {"date": started_at, "command": command, "records": args.records, "size": args.size,
                "rounds": args.rounds, "quick": args.quick, "scale_partitions": args.scale_partitions},
        "series": {w: {s: [{**asdict(m), "records_per_s": m.records_per_s, "mb_per_s": m.mb_per_s} for m in ms]
                       for s, ms in sides.items()} for w, sides in report.series.items()},
        "values": report.values,
        "ratios": rows,
        "notes": report.notes,
        "profiles": report.profiles,
    }
    if args.json:
        Path(args.json).write_text(json.dumps(data, indent=2))
    if args.charts:
        _write_charts(data, Path(args.charts))
    return 0


def _write_charts(data: dict, directory: Path) -> None:
    try:
        from benchmarks import charts
    except ImportError as exc:  # matplotlib: the bench extra
        print(f"\nno charts: {exc} (pip install -e '.[bench]')")
        return
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "run.json").write_text(json.dumps(data, indent=2))
    written = charts.write_charts(data, directory)
    print(f"\ncharts: {', '.join(str(path) for path in written)} (data: {directory / 'run.json'})")


if __name__ == "__main__":
    sys.exit(main())
