"""Looking inside a running broker process without touching its code: py-spy (sampling
profiler) and strace (system calls), both attached by pid and detached when done.

Used by benchmarks.run (--profile, the zerocopy part) and tests/compat/test_sendfile.py.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

# ------------------------------------------------------------------------------------ strace

_SYSCALL = re.compile(r"^(?:\[pid\s+\d+\]\s+|\d+\s+)?(?:<\.\.\. (\w+) resumed>|(\w+)\()")
_RESULT = re.compile(r"=\s+(-?\d+)(?:\s+\w+.*)?$")


@dataclass
class SyscallTotals:
    calls: Counter = field(default_factory=Counter)
    bytes: Counter = field(default_factory=Counter)  # sum of positive return values
    errors: Counter = field(default_factory=Counter)

    def line(self, name: str) -> str:
        return f"{name:<9} calls {self.calls[name]:>8}  bytes {self.bytes[name]:>13,}  errors {self.errors[name]}"


def parse_strace(text: str) -> SyscallTotals:
    """Calls, bytes moved (positive return values) and failed calls per system call, from
    `strace -f -o FILE` output (unfinished/resumed pairs counted once, at the resume)."""
    totals = SyscallTotals()
    for line in text.splitlines():
        if "<unfinished ...>" in line or line.startswith("+++") or line.startswith("---"):
            continue
        match = _SYSCALL.match(line)
        if not match:
            continue
        name = match.group(1) or match.group(2)
        result = _RESULT.search(line)
        if result is None:
            continue
        value = int(result.group(1))
        totals.calls[name] += 1
        if value > 0:
            totals.bytes[name] += value
        elif value < 0:
            totals.errors[name] += 1
    return totals


class StraceUnavailable(RuntimeError):
    pass


class Strace:
    """`strace -f -p PID -e trace=SYSCALLS -o FILE` around a block of work.

    -p with -f attaches every thread of the process. Waits until strace reports the process
    attached before returning from start(); stop() detaches (SIGINT) and parses the trace.
    Raises StraceUnavailable when strace is missing or may not attach (ptrace forbidden)."""

    def __init__(self, pid: int, syscalls: str, output: Path) -> None:
        self.pid = pid
        self.syscalls = syscalls
        self.output = Path(output)
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 10.0) -> "Strace":
        strace = shutil.which("strace")
        if strace is None:
            raise StraceUnavailable("strace is not installed")
        self.process = subprocess.Popen(
            [strace, "-f", "-p", str(self.pid), "-e", f"trace={self.syscalls}", "-o", str(self.output)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        os.set_blocking(self.process.stderr.fileno(), False)
        seen = ""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            seen += (self.process.stderr.read() or b"").decode(errors="replace")
            if "attached" in seen:
                time.sleep(0.2)  # let -f reach every thread
                return self
            if self.process.poll() is not None:
                seen += (self.process.stderr.read() or b"").decode(errors="replace")
                raise StraceUnavailable(f"strace exited: {seen.strip()}")
            time.sleep(0.02)
        self.process.kill()
        self.process.wait()
        raise StraceUnavailable(f"strace did not attach within {timeout}s: {seen.strip()}")

    def stop(self) -> SyscallTotals:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return parse_strace(self.output.read_text(errors="replace"))


# ------------------------------------------------------------------------------------ py-spy


def py_spy_path() -> str | None:
    here = Path(sys.executable).parent / "py-spy"
    return str(here) if here.exists() else shutil.which("py-spy")


class PySpy:
    """`py-spy record --format raw` of a process by pid, from start() to stop().

    Idle threads are left out (no --idle): a thread counts while running or runnable, so on an
    oversubscribed machine time spent waiting for a CPU inside a frame counts too (perf, below,
    gives CPU time). The broker is paused for each sample (no --nonblocking): without that,
    stacks read from a running process come out torn."""

    def __init__(self, pid: int, output: Path, rate: int = 200) -> None:
        self.pid = pid
        self.output = Path(output)
        self.rate = rate
        self.process: subprocess.Popen | None = None

    def start(self) -> "PySpy":
        executable = py_spy_path()
        if executable is None:
            raise RuntimeError("py-spy is not installed (pip install py-spy)")
        self.process = subprocess.Popen(
            [executable, "record", "--pid", str(self.pid), "--rate", str(self.rate), "--format", "raw",
             "--output", str(self.output)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(0.5)  # attaching takes a moment
        return self

    def stop(self) -> "Profile":
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        try:
            return Profile.parse(self.output.read_text(errors="replace"))
        except FileNotFoundError:
            return Profile(Counter(), Counter(), 0)


_FRAME = re.compile(r"^(.*) \((.*?)(?::\d+)?\)$")
# the frames every sample of the main thread (or a worker thread) passes through
_ENTRY_FRAMES = {
    "<module>", "_run_module_as_main", "_run_code", "main", "run", "Runner.run",
    "Thread._bootstrap", "Thread._bootstrap_inner", "Thread.run",
}


def _short(frame: str) -> str:
    """'func (path/to/module.py:12)' -> 'func (module.py)'; line numbers dropped so a function's
    samples add up."""
    match = _FRAME.match(frame.strip())
    if not match:
        return frame.strip()
    function, path = match.groups()
    parts = Path(path).parts
    short = "/".join(parts[-2:]) if len(parts) >= 2 else path
    return f"{function} ({short})"


@dataclass
class Profile:
    """Samples of the event loop thread (the one running the broker's asyncio loop); samples
    of other threads (the thread pool's workers, mostly parked) are only counted."""

    self_samples: Counter
    inclusive_samples: Counter
    total: int
    other_threads: Counter = field(default_factory=Counter)

    @classmethod
    def parse(cls, text: str) -> "Profile":
        own: Counter = Counter()
        inclusive: Counter = Counter()
        others: Counter = Counter()
        total = 0
        for line in text.splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack or not count.isdigit():
                continue
            samples = int(count)
            frames = [_short(frame) for frame in stack.split(";") if frame]
            if not frames:
                continue
            if not any(frame.startswith(("Runner.run ", "run (uvloop")) for frame in frames):
                others[frames[-1]] += samples
                continue
            total += samples
            own[frames[-1]] += samples
            for frame in set(frames):
                inclusive[frame] += samples
        return cls(own, inclusive, total, others)

    def summary(self, top: int = 12, title: str = "") -> str:
        if not self.total:
            return f"{title}: no samples"
        lines = [f"{title}: py-spy, {self.total} samples of the broker's event loop thread while running or runnable"]
        if self.other_threads:
            leaf, _ = self.other_threads.most_common(1)[0]
            lines.append(f"  (other threads: {sum(self.other_threads.values())} samples, mostly in {leaf})")
        lines.append("  self time (leaf Python frame, including the C code and system calls it made):")
        for frame, samples in self.self_samples.most_common(top):
            note = "  <- uvloop's event loop in C (polling, dispatch)" if frame.startswith("Runner.run ") else ""
            lines.append(f"    {100 * samples / self.total:5.1f}%  {frame}{note}")
        lines.append("  inclusive (frame anywhere on the stack; entry frames left out):")
        shown = 0
        for frame, samples in self.inclusive_samples.most_common():
            if frame.split(" ")[0] in _ENTRY_FRAMES or samples / self.total >= 0.95:
                continue
            lines.append(f"    {100 * samples / self.total:5.1f}%  {frame}")
            shown += 1
            if shown == top:
                break
        return "\n".join(lines)


# -------------------------------------------------------------------------------------- perf


class Perf:
    """`perf record -F 999 -p PID` (no call graphs) from start() to stop(), summarised as the
    top symbols by self time, kernel ([k]) and user ([.]) alike: where py-spy sees only the
    Python frame that made a system call, perf shows what the kernel did inside it."""

    def __init__(self, pid: int, output: Path) -> None:
        self.pid = pid
        self.output = Path(output)
        self.process: subprocess.Popen | None = None

    def start(self) -> "Perf":
        perf = shutil.which("perf")
        if perf is None:
            raise RuntimeError("perf is not installed")
        self.process = subprocess.Popen(
            [perf, "record", "-F", "999", "-p", str(self.pid), "-o", str(self.output)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        time.sleep(0.5)
        return self

    def stop(self, top: int = 15, title: str = "") -> str:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        try:
            report = subprocess.run(
                ["perf", "report", "-i", str(self.output), "--no-children", "--sort", "dso,symbol", "--stdio",
                 "--percent-limit", "0.5"],
                capture_output=True, text=True, timeout=120,
            ).stdout
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{title}: perf report failed: {exc}"
        samples = re.search(r"# Samples: (\S+)", report)
        lines = [f"{title}: perf, {samples.group(1) if samples else '?'} samples of the broker process (all threads)"]
        try:
            by_dso = subprocess.run(
                ["perf", "report", "-i", str(self.output), "--no-children", "--sort", "dso", "--stdio"],
                capture_output=True, text=True, timeout=120,
            ).stdout
            shares = []
            for line in by_dso.splitlines():
                fields = line.split()
                if len(fields) >= 2 and fields[0].endswith("%") and not line.startswith("#"):
                    shares.append(f"{fields[0]} {Path(fields[1]).name}")
            lines.append("  by object: " + ", ".join(shares[:6]))
        except (OSError, subprocess.TimeoutExpired):
            pass
        lines.append("  top symbols (self):")
        rows = [line for line in report.splitlines() if line.strip() and not line.startswith("#") and "%" in line]
        for line in rows[:top]:
            fields = line.split()  # percent, dso, [k] or [.], symbol, then empty columns as "-"
            if len(fields) < 4:
                continue
            while fields and fields[-1] == "-":
                fields.pop()
            lines.append(f"    {fields[0]:>7}  {fields[2]} {' '.join(fields[3:])}  ({Path(fields[1]).name})")
        return "\n".join(lines)
