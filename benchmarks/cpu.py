"""CPU time of processes and threads from /proc, to tell who was busy during a measurement."""

import os

_TICKS = os.sysconf("SC_CLK_TCK")


def _stat_cpu(path: str) -> float:
    try:
        with open(path) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime + stime


def process_cpu(pid: int | None = None) -> float:
    """User + system CPU seconds of a process (all its threads)."""
    return _stat_cpu(f"/proc/{pid or 'self'}/stat")


def thread_cpu(name: str, pid: int | None = None) -> float:
    """CPU seconds of the threads of a process whose name starts with `name`."""
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
        except (FileNotFoundError, ProcessLookupError):  # the thread ended meanwhile
            continue
        if comm.startswith(name):
            total += _stat_cpu(f"{base}/{tid}/stat")
    return total


class CpuMeter:
    """CPU seconds used between start() and stop() by the client process, and optionally by a
    broker process (by pid) or by the client's own threads named `thread` (an in-process broker
    such as librdkafka's mock cluster, whose thread is 'rdk:mock')."""

    def __init__(self, broker_pid: int | None = None, broker_thread: str | None = None) -> None:
        self.broker_pid = broker_pid
        self.broker_thread = broker_thread

    def _broker(self) -> float:
        if self.broker_pid is not None:
            return process_cpu(self.broker_pid)
        if self.broker_thread is not None:
            return thread_cpu(self.broker_thread)
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
    import time

    def sample() -> tuple[int, int]:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
        return sum(fields), fields[3] + fields[4]  # total, idle + iowait

    total0, idle0 = sample()
    time.sleep(seconds)
    total1, idle1 = sample()
    return (idle1 - idle0) / max(total1 - total0, 1)
