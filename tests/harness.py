"""Real broker processes for tests: started as `python -m broker` on a loopback port with their
own data directory, stopped with SIGTERM (clean) or SIGKILL (crash), restarted on the same port
and data so clients can reconnect to the same address.

With LOGWAY_BROKER_PACKAGES set to a directory holding logway's packages (an install's
site-packages, with the modules setup.py compiles), the brokers import them from there, not
from this worktree; so do the cluster tests' (tests/cluster/harness.py). .ci/run-tests runs the
suite's brokers on the compiled build this way, and benchmarks/RESULTS.md measured it so."""

import os
import resource
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

from broker.local_cluster import free_port  # below the ephemeral ports: a restart finds it free

REPO = Path(__file__).resolve().parent.parent
SERVER_PROPERTIES = REPO / "config" / "server.properties"
_START_TIMEOUT_S = 30
# Test brokers take 1 MiB index files unless a test asks for another size (Kafka's default is
# 10 MiB). It kept each broker's disk use low while index files were allocated whole; they are
# sparse since issue 14, and the setting stays so that what the tests exercise is unchanged.
TEST_BROKER_DEFAULTS = {"log.index.size.max.bytes": "1048576"}


def unique_topic(prefix: str) -> str:
    """A topic name no other test uses, so tests can share one broker."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def broker_python() -> list[str]:
    """How the tests start a broker's Python: this interpreter on the worktree's packages, or on
    those of LOGWAY_BROKER_PACKAGES when set (through `env`, which execs: the process is the
    broker's own, for signals)."""
    packages = os.environ.get("LOGWAY_BROKER_PACKAGES")
    if not packages:
        return [sys.executable]
    # -P: the worktree (the working directory) is not put first on the module path.
    return ["env", f"PYTHONPATH={packages}", sys.executable, "-P"]


class BrokerProcess:
    def __init__(
        self,
        data_dir: Path,
        overrides: dict[str, str] | None = None,
        max_open_files: int | None = None,
        log_level: str = "INFO",
        args: list[str] | None = None,
    ) -> None:
        """`max_open_files`: the broker's RLIMIT_NOFILE, for tests of running out of descriptors;
        `log_level`: the broker's --log-level, for tests that read its debug lines; `args`: more
        command line flags (--log-file ...)."""
        self.log_level = log_level
        self.args = list(args or [])
        self.data_dir = Path(data_dir)
        self.max_open_files = max_open_files
        self.port = free_port()
        self.overrides = {
            "log.dirs": str(self.data_dir),
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            **TEST_BROKER_DEFAULTS,
            **(overrides or {}),
        }
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}-broker.log"
        self.process: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> "BrokerProcess":
        command = [
            *broker_python(), "-m", "broker", "--config", str(SERVER_PROPERTIES), "--log-level", self.log_level,
            *self.args,
        ]
        for key, value in self.overrides.items():
            command += ["--override", f"{key}={value}"]
        log = open(self.log_path, "ab")
        # In its own session, as broker.local_cluster starts its servers: a Ctrl-C reaches only
        # the tests, which stop their brokers; and the scheduler gives the broker an autogroup
        # of its own, as a deployed broker has, instead of the clients' (sharing theirs, a
        # broker tailed a record a millisecond spent about a third more CPU a record:
        # benchmarks/RESULTS.md, "a broker in its own session").
        self.process = subprocess.Popen(
            command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, preexec_fn=self._limit_descriptors,
            start_new_session=True,
        )
        log.close()
        self._wait_until_listening()
        return self

    def _limit_descriptors(self) -> None:
        if self.max_open_files is not None:  # hard too: the broker raises its soft limit to the hard one
            resource.setrlimit(resource.RLIMIT_NOFILE, (self.max_open_files, self.max_open_files))

    def _wait_until_listening(self) -> None:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"broker exited with {self.process.returncode}:\n{self.log()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"broker did not listen within {_START_TIMEOUT_S}s:\n{self.log()}")

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM and wait: a clean shutdown. Returns the exit code."""
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else 0
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def kill(self) -> None:
        """SIGKILL: the broker gets no chance to flush or mark a clean shutdown."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def restart(self) -> "BrokerProcess":
        self.stop()
        return self.start()

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def __enter__(self) -> "BrokerProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.kill() if exc[0] else self.stop()


def run(command: list[str], timeout: float = 60, **kwargs) -> subprocess.CompletedProcess:
    """Run a client command (kcat, node) with a time bound, capturing its output."""
    return subprocess.run(command, capture_output=True, timeout=timeout, env={**os.environ}, **kwargs)
