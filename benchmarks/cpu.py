"""CPU time of processes and threads from /proc, to tell who was busy during a measurement."""

import os
import threading
import time
from statistics import median, quantiles

# Linux's CPU-time clocks of other processes and threads (clock_gettime on a clock id made from
# a pid or tid, as glibc's clock_getcpuclockid and pthread_getcpuclockid make them): read to the
# nanosecond. /proc's utime and stime are in ticks of 10 ms, which put an error of up to about
# 10 % on a tailed record's CPU (a few tenths of a second a run on each side).
_CPUCLOCK_SCHED = 2  # CPU time as the scheduler accounts it: user and system, all threads
_CPUCLOCK_PERTHREAD = 4


def _cpu_clock(clock_id: int) -> float:
    try:
        return time.clock_gettime(clock_id)
    except OSError:  # the process or thread has ended
        return 0.0


def process_cpu(pid: int | None = None) -> float:
    """User + system CPU seconds of a process (all its threads, ended ones included)."""
    if pid is None:
        return time.process_time()
    return _cpu_clock((~pid << 3) | _CPUCLOCK_SCHED)


def thread_cpu(name: str, pid: int | None = None) -> float:
    """CPU seconds of the threads of a process whose name starts with `name`: this process's
    (`pid` None) from their CPU clocks, another's from the scheduler's runtime in /proc (a
    thread's CPU clock is readable only from its own process; both are in nanoseconds)."""
    base = f"/proc/{pid or 'self'}/task"
    total = 0.0
    try:
        tids = os.listdir(base)
    except FileNotFoundError:
        return 0.0
    for tid in tids:
        try:
            with open(f"{base}/{tid}/comm") as f:
                comm = f.read().strip()
            if not comm.startswith(name):
                continue
            if pid is None:
                total += _cpu_clock((~int(tid) << 3) | _CPUCLOCK_PERTHREAD | _CPUCLOCK_SCHED)
            else:
                with open(f"{base}/{tid}/schedstat") as f:
                    total += int(f.read().split()[0]) / 1e9
        except (FileNotFoundError, ProcessLookupError):  # the thread ended meanwhile
            continue
    return total


class CpuMeter:
    """CPU seconds used between start() and stop() by the client process, and optionally by a
    broker process (by pid), by the client's own threads named `thread` (an in-process broker
    such as librdkafka's mock cluster, whose thread is 'rdk:mock'), or by the threads so named
    of the process `pid` (a mock cluster hosted by a process of its own)."""

    def __init__(self, broker_pid: int | None = None, broker_thread: str | None = None) -> None:
        self.broker_pid = broker_pid
        self.broker_thread = broker_thread

    def _broker(self) -> float:
        if self.broker_thread is not None:
            return thread_cpu(self.broker_thread, self.broker_pid)
        if self.broker_pid is not None:
            return process_cpu(self.broker_pid)
        return 0.0

    def start(self) -> "CpuMeter":
        self._client0 = process_cpu()
        self._broker0 = self._broker()
        return self

    def stop(self) -> tuple[float, float]:
        """(client CPU seconds, broker CPU seconds); for an in-process broker the client figure
        excludes the broker's threads."""
        broker = self._broker() - self._broker0
        client = process_cpu() - self._client0
        if self.broker_pid is None and self.broker_thread is not None:
            client -= broker
        return client, broker


def machine_idle(seconds: float = 1.0) -> float:
    """Share of all CPUs idle over `seconds` (from /proc/stat): how quiet the machine is."""

    def sample() -> tuple[int, int]:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
        return sum(fields), fields[3] + fields[4]  # total, idle + iowait

    total0, idle0 = sample()
    time.sleep(seconds)
    total1, idle1 = sample()
    return (idle1 - idle0) / max(total1 - total0, 1)


class CoreSpeedProbe:
    """How fast one CPU runs, over time: a thread pinned to `cpu` times a fixed Python loop in
    its own CPU time every `period_s`. On this kind of shared virtual machine the same loop
    takes up to 1.7 times longer for seconds at a time with nothing else running, so a broker
    saturating that CPU answers proportionally fewer requests then; the probe tells those
    seconds apart. About 1 % of the CPU."""

    _LOOP = 20_000

    def __init__(self, cpu: int, period_s: float = 0.1) -> None:
        self.cpu = cpu
        self.period_s = period_s
        self.samples: list[tuple[float, float]] = []  # (wall time, CPU seconds of one loop)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="core-speed-probe", daemon=True)

    def start(self) -> "CoreSpeedProbe":
        self._thread.start()
        return self

    def stop(self) -> list[tuple[float, float]]:
        self._stop.set()
        self._thread.join()
        return self.samples

    def _run(self) -> None:
        os.sched_setaffinity(0, {self.cpu})  # this thread only
        while not self._stop.wait(self.period_s):
            wall, cpu = time.time(), time.thread_time()
            total = 0
            for i in range(self._LOOP):
                total += i * i
            self.samples.append((wall, time.thread_time() - cpu))


def full_speed_windows(samples: list[tuple[float, float]], window_s: float = 0.5,
                       tolerance: float = 1.1) -> tuple[set[int], float]:
    """From CoreSpeedProbe samples: the windows (int(wall time / window_s)) in which every loop
    took at most `tolerance` times the fastest loops' time (their 5th percentile), as the speed
    changes within a window too; and the slowest window's median loop time over the fastest
    window's (1.0: a steady CPU)."""
    by_window: dict[int, list[float]] = {}
    for wall, cpu in samples:
        by_window.setdefault(int(wall / window_s), []).append(cpu)
    if not by_window:
        return set(), float("nan")
    times = [cpu for _, cpu in samples]
    fastest = quantiles(times, n=20)[0] if len(times) > 1 else times[0]
    medians = [median(window) for window in by_window.values()]
    full_speed = {w for w, window in by_window.items() if max(window) <= fastest * tolerance}
    return full_speed, max(medians) / min(medians)
