"""Many small clients (issue 19; the Swift design's "hundreds of thousands of producers" and its
N x M connections): a broker of its own under `producers` connections that each send one small
Produce every `interval_ms` (acks=1, one batch of `records_per_batch` records of `record_size`
bytes, linger 0: one request in flight, the next due `interval_ms` after the last was due, or at
once when it is late), plus `consumers` connections long-polling Fetch (max_wait 500 ms) on the
topic's partitions, spread over `processes` client processes (asyncio on uvloop, the protocol
spoken directly as in benchmarks.wire).

    python -m benchmarks.many_clients [--producers 1000] [--consumers 100] [--processes 4]
                                      [--seconds 20] [--partitions 12] [--no-pin] [--chart PNG]

Reported: produce requests offered (producers x 1000 / interval_ms a second) and answered, fetch
answers, the broker's CPU per request (its CPU seconds over the window / every answer, produce
and fetch), produce latency percentiles (from the request's send to its answer, so a client
process's own delays count too: its CPU share is printed beside), and the starvation check of
the issue: the share of produce answers slower than 100 ms and the p99.9. On a 2-core machine
the client processes and the broker share the cores, so the answered rate is bounded by both;
the per-request CPU and the latency tail are the figures to compare between runs.

With two CPUs or more the broker's event loop gets the first CPU to itself and the client
processes the others (--no-pin leaves placement to the kernel), and a CoreSpeedProbe times a fixed
loop on the broker's CPU every 50 ms. On this shared virtual machine that loop runs up to 1.9
times slower for seconds at a time, and the saturated broker's answers per second follow it, so
the whole run's latency tail is mostly the machine's slow seconds. Printed beside: the answers
per second and the latencies in the quarter-seconds at full speed (every loop in them within
15 % of the fastest loops), where only the broker sets the pace, and Pearson's r between each
quarter-second's answers and its loop time; --chart draws the three by quarter-second.
"""

import argparse
import asyncio
import multiprocessing
import os
import socket
import struct
import time
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from statistics import StatisticsError, correlation, median

from benchmarks.clients import percentiles
from benchmarks.cpu import CoreSpeedProbe, full_speed_windows, process_cpu
from benchmarks.wire import WireError, check_produce_response, fetch_request, make_batch, produce_request, walk_fetch_response

_FETCH_MAX_WAIT_MS = 500
_FETCH_PARTITION_BYTES = 256 * 1024
_CONNECT_TIMEOUT_S = 30
_STARVED_S = 0.100
_SPEED_WINDOW_S = 0.25
_FULL_SPEED_TOLERANCE = 1.15
_SIZE = struct.Struct(">i")


@dataclass
class ProcessResult:
    produce_latencies: bytes  # array("d") of seconds
    produce_answered_at: bytes  # array("d"), time.time() of each answer
    fetches: int
    fetch_records: int
    late_fetches: int  # answered more than 100 ms after their max_wait
    errors: int
    cpu_s: float


@dataclass
class ManyClientsResult:
    producers: int
    consumers: int
    processes: int
    interval_ms: float
    seconds: float
    produce_answers: int
    fetches: int
    fetch_records: int
    late_fetches: int
    errors: int
    broker_cpu_s: float
    client_cpu_s: float
    latencies_ms: dict[str, float]
    starved_share: float
    speed_spread: float = float("nan")  # the broker CPU's slowest quarter-second over its fastest
    full_speed_seconds: float = 0.0  # the quarter-seconds at full speed, in all
    full_speed_answers: int = 0  # produce answers received within them
    full_speed_latencies_ms: dict[str, float] | None = None
    # Pearson's r between each quarter-second's produce answers and its median loop time
    # (near -1: the broker's pace is the CPU's).
    speed_correlation: float = float("nan")
    timeline: list["Quarter"] = field(default_factory=list)

    @property
    def offered_per_s(self) -> float:
        return self.producers * 1000 / self.interval_ms

    @property
    def broker_us_per_request(self) -> float:
        return 1e6 * self.broker_cpu_s / max(1, self.produce_answers + self.fetches)

    def lines(self) -> list[str]:
        lat = {name: self.latencies_ms.get(name, float("nan")) for name in ("p50", "p99", "p99.9", "max")}
        return [
            f"{self.producers:,} producers (one {self.interval_ms:g} ms apart each: {self.offered_per_s:,.0f} "
            f"requests/s offered) and {self.consumers} long-polling consumers in {self.processes} client "
            f"processes, {self.seconds:.1f} s",
            f"produce answered: {self.produce_answers / self.seconds:,.0f}/s; fetch answers {self.fetches / self.seconds:,.0f}/s "
            f"({self.fetch_records:,} records read); errors {self.errors}",
            f"broker CPU: {self.broker_cpu_s / self.seconds:.0%} of a core, {self.broker_us_per_request:.1f} us per "
            f"request; client processes {self.client_cpu_s / self.seconds:.0%} of a core",
            f"produce latency ms: p50 {lat['p50']:.1f}, p99 {lat['p99']:.1f}, p99.9 {lat['p99.9']:.1f}, max "
            f"{lat['max']:.1f}; answers over 100 ms: {self.starved_share:.2%}; fetches answered over 100 ms "
            f"past their max_wait: {self.late_fetches}",
        ] + self._speed_lines()

    def _speed_lines(self) -> list[str]:
        if self.full_speed_latencies_ms is None:
            return []
        lines = [f"the broker's CPU: a fixed loop's slowest quarter-second took {self.speed_spread:.2f}x its fastest; "
                 f"{self.full_speed_seconds:.1f} s of {self.seconds:.1f} at full speed; answers per quarter-second "
                 f"against its loop time: r = {self.speed_correlation:.2f}"]
        if self.full_speed_latencies_ms:
            fast = self.full_speed_latencies_ms
            lines.append(
                f"at full speed: produce answered {self.full_speed_answers / self.full_speed_seconds:,.0f}/s; latency ms "
                f"(sent and answered at full speed) p50 {fast['p50']:.1f}, p99 {fast['p99']:.1f}, p99.9 {fast['p99.9']:.1f}, max {fast['max']:.1f}")
        return lines


async def _connect(address: tuple[str, int]) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.wait_for(asyncio.open_connection(*address), _CONNECT_TIMEOUT_S)
    writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return reader, writer


async def _answer(reader: asyncio.StreamReader) -> bytes:
    (size,) = _SIZE.unpack(await reader.readexactly(4))
    return await reader.readexactly(size)


class _Stats:
    def __init__(self) -> None:
        self.latencies = array("d")
        self.answered_at = array("d")
        self.fetches = self.fetch_records = self.late_fetches = self.errors = 0


async def _producer(address, topic: str, request: bytes, interval_s: float, start_at: float, stop_at: float, stats: _Stats) -> None:
    reader, writer = await _connect(address)
    loop = asyncio.get_running_loop()
    due = start_at
    try:
        while True:
            delay = due - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
            if time.time() >= stop_at:
                return
            sent = loop.time()
            writer.write(request)
            frame = await _answer(reader)
            stats.latencies.append(loop.time() - sent)
            stats.answered_at.append(time.time())
            try:
                check_produce_response(frame, topic)
            except WireError:
                stats.errors += 1
            due = max(due + interval_s, time.time())  # late: at once, no burst to catch up
    finally:
        writer.close()


async def _consumer(address, topic: str, partition: int, start_at: float, stop_at: float, stats: _Stats) -> None:
    reader, writer = await _connect(address)
    loop = asyncio.get_running_loop()
    offset = 0
    try:
        await asyncio.sleep(max(0.0, start_at - time.time()))
        while time.time() < stop_at:
            sent = loop.time()
            writer.write(fetch_request(topic, partition, offset, _FETCH_PARTITION_BYTES, _FETCH_MAX_WAIT_MS))
            frame = await _answer(reader)
            if loop.time() - sent > _FETCH_MAX_WAIT_MS / 1000 + _STARVED_S:
                stats.late_fetches += 1
            stats.fetches += 1
            try:
                next_offset, _, _ = walk_fetch_response(memoryview(frame), topic)
            except WireError:
                stats.errors += 1
                await asyncio.sleep(0.1)
                continue
            if next_offset is not None:
                stats.fetch_records += next_offset - offset
                offset = next_offset
    finally:
        writer.close()


def _client_process(address, topic: str, partitions: int, producer_ids: list[int], consumer_ids: list[int],
                    batch: bytes, interval_s: float, start_at: float, stop_at: float, cpus: set[int] | None,
                    results) -> None:
    import uvloop

    if cpus:
        os.sched_setaffinity(0, cpus)

    async def main() -> _Stats:
        stats = _Stats()
        # Producers start spread over the first interval, as independent clients would.
        tasks = [_producer(address, topic, bytes(produce_request(topic, i % partitions, batch)), interval_s,
                           start_at + interval_s * (i % 97) / 97, stop_at, stats) for i in producer_ids]
        tasks += [_consumer(address, topic, i % partitions, start_at, stop_at, stats) for i in consumer_ids]
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        stats.errors += sum(isinstance(outcome, Exception) for outcome in outcomes)
        return stats

    cpu0 = process_cpu()
    stats = uvloop.run(main())
    results.put(ProcessResult(stats.latencies.tobytes(), stats.answered_at.tobytes(), stats.fetches, stats.fetch_records, stats.late_fetches,
                              stats.errors, process_cpu() - cpu0))


def many_clients(scratch: Path, producers: int = 1000, consumers: int = 100, processes: int = 4,
                 seconds: float = 20.0, partitions: int = 12, interval_ms: float = 10.0, record_size: int = 100,
                 records_per_batch: int = 1, pin: bool = True) -> ManyClientsResult:
    from benchmarks.connections import _create_topics
    from tests.harness import BrokerProcess

    broker = BrokerProcess(scratch / "many-clients-data", max_open_files=producers + consumers + 2048)
    broker.start()
    cpus = sorted(os.sched_getaffinity(0))
    pin = pin and len(cpus) >= 2
    client_cpus, probe = None, None
    try:
        if pin:
            # The loop's thread, which does the broker's work (threads it starts later inherit it).
            os.sched_setaffinity(broker.process.pid, {cpus[0]})
            client_cpus, probe = set(cpus[1:]), CoreSpeedProbe(cpus[0], period_s=0.05)
        topic = "many-clients"
        _create_topics(broker.bootstrap, [topic], partitions)
        batch, _ = make_batch(record_size, records_per_batch * (record_size + 8))
        # Every client connects first; the window starts once they all could have.
        start_at = time.time() + 3 + (producers + consumers) / 500
        stop_at = start_at + seconds
        context = multiprocessing.get_context("fork")
        results = context.Queue()
        workers = [
            context.Process(target=_client_process, args=(
                ("127.0.0.1", broker.port), topic, partitions, list(range(producers))[n::processes],
                list(range(consumers))[n::processes], batch, interval_ms / 1000, start_at, stop_at, client_cpus,
                results))
            for n in range(processes)
        ]
        for worker in workers:
            worker.start()
        time.sleep(max(0.0, start_at - time.time()))
        broker_cpu0 = process_cpu(broker.process.pid)
        if probe is not None:
            probe.start()
        time.sleep(max(0.0, stop_at - time.time()))
        broker_cpu = process_cpu(broker.process.pid) - broker_cpu0
        speed = probe.stop() if probe is not None else None
        gathered = [results.get(timeout=seconds + 120) for _ in workers]
        for worker in workers:
            worker.join(30)
    finally:
        broker.stop()
        if "Traceback" in broker.log():
            print("\nWARNING: the broker logged a traceback:\n" + broker.log()[-3000:])
    latencies, answered_at = array("d"), array("d")
    for result in gathered:
        latencies.frombytes(result.produce_latencies)
        answered_at.frombytes(result.produce_answered_at)
    starved = sum(1 for latency in latencies if latency > _STARVED_S)
    latencies_ms = percentiles([1000 * latency for latency in latencies]) if latencies else {}
    result = ManyClientsResult(
        producers, consumers, processes, interval_ms, seconds, len(latencies),
        sum(r.fetches for r in gathered), sum(r.fetch_records for r in gathered),
        sum(r.late_fetches for r in gathered), sum(r.errors for r in gathered), broker_cpu,
        sum(r.cpu_s for r in gathered), latencies_ms, starved / max(1, len(latencies)),
    )
    if speed is not None:
        fast_windows, result.speed_spread = full_speed_windows(speed, _SPEED_WINDOW_S, _FULL_SPEED_TOLERANCE)
        in_fast = [(latency, at) for latency, at in zip(latencies, answered_at) if int(at / _SPEED_WINDOW_S) in fast_windows]
        # Latencies of the requests also sent at full speed: their whole wait was at that pace.
        fast = [1000 * latency for latency, at in in_fast if int((at - latency) / _SPEED_WINDOW_S) in fast_windows]
        result.full_speed_seconds = len(fast_windows) * _SPEED_WINDOW_S
        result.full_speed_answers = len(in_fast)
        result.full_speed_latencies_ms = percentiles(fast) if fast else {}
        result.timeline = speed_timeline(latencies, answered_at, speed, start_at, stop_at)
        result.speed_correlation = answers_against_speed(result.timeline)
    return result


@dataclass
class Quarter:
    """One whole quarter-second of the window: when (seconds from its start), the median time
    of the probe's loops in it, and the produce answers received in it."""

    at_s: float
    loop_ms: float
    answers: int
    p50_ms: float
    max_ms: float


def speed_timeline(latencies: array, answered_at: array, speed: list[tuple[float, float]], start_at: float,
                   stop_at: float) -> list[Quarter]:
    """The quarter-seconds of the window that the probe measured, in order."""
    answers: dict[int, list[float]] = {}
    for latency, at in zip(latencies, answered_at):
        answers.setdefault(int(at / _SPEED_WINDOW_S), []).append(1000 * latency)
    loops: dict[int, list[float]] = {}
    for wall, seconds in speed:
        loops.setdefault(int(wall / _SPEED_WINDOW_S), []).append(seconds)
    first, last = int(start_at / _SPEED_WINDOW_S) + 1, int(stop_at / _SPEED_WINDOW_S) - 1
    timeline = []
    for window in range(first, last):
        if window not in loops:
            continue
        got = answers.get(window, [])
        timeline.append(Quarter(
            (window - first) * _SPEED_WINDOW_S, 1000 * median(loops[window]), len(got),
            median(got) if got else float("nan"), max(got, default=float("nan"))))
    return timeline


def answers_against_speed(timeline: list[Quarter]) -> float:
    """Pearson's r between the quarter-seconds' produce answers and their loop times."""
    try:
        return correlation([q.answers for q in timeline], [q.loop_ms for q in timeline])
    except StatisticsError:  # too few quarter-seconds, or a constant series
        return float("nan")


def draw_timeline(result: ManyClientsResult, path: Path) -> None:
    """The probe's loop time, the produce answers a second and their latencies, by
    quarter-second (matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    timeline = result.timeline
    at = [q.at_s for q in timeline]
    figure, (loop_axes, answers_axes, latency_axes) = plt.subplots(3, 1, figsize=(9, 7), sharex=True)
    loop_axes.plot(at, [q.loop_ms for q in timeline], color="tab:red")
    loop_axes.set_ylabel("fixed loop on the\nbroker's CPU, ms")
    loop_axes.set_title(f"many-clients: the broker's pace and its CPU's speed (r = {result.speed_correlation:.2f})")
    answers_axes.plot(at, [q.answers / _SPEED_WINDOW_S for q in timeline], color="tab:blue")
    answers_axes.set_ylabel("produce answers/s")
    latency_axes.plot(at, [q.p50_ms for q in timeline], label="p50")
    latency_axes.plot(at, [q.max_ms for q in timeline], label="max")
    latency_axes.axhline(1000 * _STARVED_S, color="grey", linestyle=":")
    latency_axes.set_ylabel("produce latency, ms")
    latency_axes.set_xlabel("seconds into the window (quarter-seconds)")
    latency_axes.legend(loc="upper right")
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    plt.close(figure)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.many_clients", description=__doc__.split("\n\n")[0])
    parser.add_argument("--producers", type=int, default=1000)
    parser.add_argument("--consumers", type=int, default=100)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--interval-ms", type=float, default=10.0)
    parser.add_argument("--no-pin", action="store_true",
                        help="leave the broker and the client processes where the kernel puts them")
    parser.add_argument("--chart", type=Path, default=None,
                        help="draw the broker CPU's speed, the answers and their latencies by quarter-second here")
    parser.add_argument("--dir", default=None, help="scratch directory (default: a new temp dir, removed after)")
    args = parser.parse_args(argv)
    import shutil
    import tempfile

    scratch = Path(args.dir or tempfile.mkdtemp(prefix="logway-many-clients-"))
    try:
        result = many_clients(scratch, args.producers, args.consumers, args.processes, args.seconds, args.partitions,
                              args.interval_ms, pin=not args.no_pin)
    finally:
        if not args.dir:
            shutil.rmtree(scratch, ignore_errors=True)
    print(f"load average {os.getloadavg()[0]:.1f}")
    print("\n".join(result.lines()))
    if args.chart and result.timeline:
        draw_timeline(result, args.chart)


if __name__ == "__main__":
    main()
