"""A local cluster: one ZooKeeper and N brokers as processes on this machine.

    python -m broker.local_cluster --brokers 3 --data ./data-cluster

starts ZooKeeper on 127.0.0.1:2181 and brokers 1..N on 127.0.0.1:9092, 9093, ... (ids 1..N),
each with its own data directory under --data, prints the bootstrap string, and on Ctrl-C or
SIGTERM stops the brokers cleanly (SIGTERM, waiting for each) and then ZooKeeper. Started again
with the same --data, it comes back with the same ids, ports and data.

This module is the one place that knows how to run these processes: the test harness
(`tests/cluster/harness.py`) builds on `ZooKeeperServer`, `BrokerServer`, `broker_settings` and
`LocalCluster`, adding network namespaces and faults; docker-compose.yml describes the cluster
`LocalCluster.on_loopback` builds (tests/cluster/test_compose.py compares the two). ZooKeeper
is Debian's `zookeeper` package (a Java runtime plus /usr/share/java/zookeeper.jar);
`LOGWAY_ZOOKEEPER_CLASSPATH` and `JAVA` point elsewhere when needed.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = PACKAGE_ROOT / "config" / "server.properties"

ZOOKEEPER_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
ZOOKEEPER_TICK_MS = 2000  # ZooKeeper's own default
_ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
# The jar's manifest names its dependencies but no SLF4J binding; these two give it log4j 1.2,
# configured by the log4j.properties written next to zoo.cfg (one binding, console output).
_LOG_JARS = (Path("/usr/share/java/slf4j-log4j12.jar"), Path("/usr/share/java/log4j-1.2.jar"))
_JVM_OPTIONS = ("-Xms16m", "-Xmx192m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")

LISTENER = "PLAINTEXT"
_START_TIMEOUT_S = 30.0
_STOP_TIMEOUT_S = 30.0


class ZooKeeperUnavailable(RuntimeError):
    """No Java runtime or no ZooKeeper jar on this machine."""


def zookeeper_command() -> list[str]:
    """java and its class path for QuorumPeerMain, or ZooKeeperUnavailable saying what is missing."""
    java = os.environ.get("JAVA") or shutil.which("java")
    if not java:
        raise ZooKeeperUnavailable(
            "ZooKeeper needs a Java runtime: apt-get install default-jre-headless (.ci/setup test does)"
        )
    classpath = os.environ.get("LOGWAY_ZOOKEEPER_CLASSPATH")
    if not classpath:
        if not _ZOOKEEPER_JAR.exists():
            raise ZooKeeperUnavailable(f"no {_ZOOKEEPER_JAR}: apt-get install zookeeper (.ci/setup test does)")
        jars = [_ZOOKEEPER_JAR, *(jar for jar in _LOG_JARS if jar.exists())]
        classpath = ":".join(str(jar) for jar in jars)
    return [java, *_JVM_OPTIONS, "-cp", classpath]


def four_letter_word(host: str, port: int, word: str, timeout: float = 2.0) -> str:
    """Send a ZooKeeper four-letter command (ruok, srvr, cons, dump, ...) and read the answer."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(word.encode())
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def port_is_free(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


# Where free_port draws: below Linux's ephemeral range (32768+), so that a process restarted on
# the same port does not find it taken by some client connection's local port meanwhile.
_PORTS_START, _PORTS_STOP = 20000, 32768
_ports = range(_PORTS_START, _PORTS_STOP)
# Ports free_port gave out in this process: a cluster's ports are all chosen before any of its
# processes binds one, so a port still free may already be promised to another broker.
_handed_out: set[int] = set()


def draw_ports_from_slice(index: int, slices: int) -> None:
    """Make free_port draw from the `index`-th of `slices` equal parts of its range only: for
    processes that run side by side (pytest-xdist workers), each with its own part, so that
    two of them never choose the same port before either has bound it."""
    global _ports
    if not 0 <= index < slices:
        raise ValueError(f"slice {index} of {slices}")
    size = (_PORTS_STOP - _PORTS_START) // slices
    start = _PORTS_START + index * size
    _ports = range(start, start + size)


def free_port(host: str = "127.0.0.1") -> int:
    """A free port from this process's range (below the ephemeral ports), never one this
    process was given before."""
    for _ in range(200):
        port = random.choice(_ports)
        if port not in _handed_out and port_is_free(host, port):
            _handed_out.add(port)
            return port
    raise RuntimeError(f"no free port found on {host}")


def wait_for_port(host: str, port: int, timeout: float, alive: Callable[[], bool] = lambda: True) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and alive():
        try:
            socket.create_connection((host, port), timeout=0.5).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def broker_settings(
    broker_id: int,
    *,
    host: str,
    port: int,
    zookeeper_connect: str,
    log_dir: str | os.PathLike[str],
    brokers: int,
) -> dict[str, str]:
    """The overrides that make a broker a member of a cluster of `brokers` brokers: identity,
    ZooKeeper, its listener (also the inter-broker one), its data, and the replication of the
    internal topics. docker-compose.yml sets the same keys (tests/cluster/test_compose.py)."""
    return {
        "broker.id": str(broker_id),
        "zookeeper.connect": zookeeper_connect,
        "listeners": f"{LISTENER}://{host}:{port}",
        "advertised.listeners": f"{LISTENER}://{host}:{port}",
        "listener.security.protocol.map": f"{LISTENER}:PLAINTEXT",
        "inter.broker.listener.name": LISTENER,
        "log.dirs": str(log_dir),
        # config/server.properties is for one broker (1); a cluster wants Kafka's defaults,
        # capped by its size.
        "offsets.topic.replication.factor": str(min(3, brokers)),
        "transaction.state.log.replication.factor": str(min(3, brokers)),
        "transaction.state.log.min.isr": str(min(2, brokers)),
    }


def _die_with_starter() -> list[str]:
    """A command prefix that makes the server get SIGKILL when the process that started it dies
    (even by SIGKILL), so no broker or ZooKeeper outlives a crashed test run. Linux ties this
    to the starting thread, so from any thread but the main one it is left out."""
    setpriv = shutil.which("setpriv")  # util-linux: on every Debian
    if setpriv is None or threading.current_thread() is not threading.main_thread():
        return []
    return [setpriv, "--pdeathsig", "KILL", "--"]


class ManagedProcess:
    """One server process: started with its output appended to a log file, in its own session
    (a Ctrl-C in the terminal reaches only the manager, which stops servers in order).

    `prefix` goes before the command, e.g. ["ip", "netns", "exec", NAME]; like setpriv, it
    execs, so the pid is the server's own.
    """

    name = "process"

    def __init__(self, log_path: Path, prefix: Sequence[str] = ()) -> None:
        self.log_path = Path(log_path)
        self.prefix = list(prefix)
        self.process: subprocess.Popen | None = None
        self.paused = False

    def command(self) -> list[str]:
        raise NotImplementedError

    def cwd(self) -> Path | None:
        return None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.process.poll() if self.process else None

    def _launch(self) -> None:
        if self.running:
            raise RuntimeError(f"{self.name} is already running (pid {self.pid})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"=== {time.strftime('%Y-%m-%d %H:%M:%S')} starting {self.name}\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                [*_die_with_starter(), *self.prefix, *self.command()],
                cwd=self.cwd(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.paused = False

    def _failed_start(self, why: str) -> RuntimeError:
        self.kill()
        return RuntimeError(f"{self.name} {why}; the end of {self.log_path}:\n{self.log()[-4000:]}")

    def terminate(self) -> None:
        """SIGTERM without waiting (a paused process is resumed to receive it)."""
        if self.running:
            self.process.send_signal(signal.SIGTERM)
            if self.paused:
                self.resume()

    def stop(self, timeout: float = _STOP_TIMEOUT_S) -> int | None:
        """SIGTERM and wait: a clean shutdown (SIGKILL if it takes longer than `timeout`).
        Returns the exit code, None if it was never started."""
        if self.process is None:
            return None
        self.terminate()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
        return self.process.returncode

    def kill(self) -> None:
        """SIGKILL: no chance to flush, deregister or mark a clean shutdown."""
        if self.running:
            self.process.kill()
            self.process.wait()
        self.paused = False

    def pause(self) -> None:
        """SIGSTOP: the process stays, its sockets stay open, it answers nothing."""
        if not self.running:
            raise RuntimeError(f"{self.name} is not running")
        self.process.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        """SIGCONT after `pause`."""
        if self.running:
            self.process.send_signal(signal.SIGCONT)
        self.paused = False

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""


class ZooKeeperServer(ManagedProcess):
    """A standalone ZooKeeper with its own data dir, on `host:port`, ready once it answers
    `ruok`. Every four-letter word is enabled (the harness reads `cons` and `dump`). tick_ms
    bounds session timeouts: ZooKeeper grants 2 to 20 ticks."""

    name = "zookeeper"

    def __init__(
        self,
        data_dir: Path,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        tick_ms: int = ZOOKEEPER_TICK_MS,
        prefix: Sequence[str] = (),
        log_path: Path | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        super().__init__(log_path or self.data_dir.parent / "zookeeper.log", prefix)
        self.host = host
        self.port = port or free_port(host)
        self.tick_ms = tick_ms

    @property
    def connect_string(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def config_path(self) -> Path:
        return self.data_dir / "zoo.cfg"

    def command(self) -> list[str]:
        log4j = self.data_dir / "log4j.properties"
        return [*zookeeper_command(), f"-Dlog4j.configuration=file:{log4j}", ZOOKEEPER_MAIN, str(self.config_path)]

    def _write_config(self) -> None:
        snapshots = self.data_dir / "data"
        snapshots.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(
            "# written by broker/local_cluster.py\n"
            f"tickTime={self.tick_ms}\n"
            f"dataDir={snapshots}\n"
            f"clientPort={self.port}\n"
            f"clientPortAddress={self.host}\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=*\n"
        )
        (self.data_dir / "log4j.properties").write_text(
            "log4j.rootLogger=INFO, CONSOLE\n"
            "log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender\n"
            "log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout\n"
            "log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} %-5p [%t] %c{1}: %m%n\n"
        )

    def start(self, timeout: float = _START_TIMEOUT_S) -> ZooKeeperServer:
        zookeeper_command()  # fail with the reason before writing anything
        self._write_config()
        self._launch()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running:
                raise self._failed_start(f"exited with {self.process.returncode}")
            if self.ruok():
                return self
            time.sleep(0.1)
        raise self._failed_start(f"did not answer ruok within {timeout}s")

    def restart(self) -> ZooKeeperServer:
        self.stop()
        return self.start()

    def four_letter_word(self, word: str, timeout: float = 2.0) -> str:
        return four_letter_word(self.host, self.port, word, timeout)

    def ruok(self, timeout: float = 1.0) -> bool:
        try:
            return self.four_letter_word("ruok", timeout) == "imok"
        except OSError:
            return False


class BrokerServer(ManagedProcess):
    """`python -m broker --config CONFIG --override key=value ...`, ready once its listener
    accepts connections. `settings` are the overrides, given in order."""

    def __init__(
        self,
        broker_id: int,
        settings: Mapping[str, str],
        *,
        host: str,
        port: int,
        log_path: Path,
        config: Path | None = DEFAULT_CONFIG,
        prefix: Sequence[str] = (),
    ) -> None:
        super().__init__(log_path, prefix)
        self.broker_id = broker_id
        self.name = f"broker {broker_id}"
        self.settings = dict(settings)
        self.host = host
        self.port = port
        self.config = config

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def data_dirs(self) -> list[Path]:
        return [Path(d) for d in self.settings.get("log.dirs", "").split(",") if d]

    def command(self) -> list[str]:
        command = [sys.executable, "-m", "broker"]
        if self.config is not None:
            command += ["--config", str(self.config)]
        for key, value in self.settings.items():
            command += ["--override", f"{key}={value}"]
        return command

    def cwd(self) -> Path:
        return PACKAGE_ROOT  # where the `broker` package is importable, installed or not

    def start(self, timeout: float = _START_TIMEOUT_S) -> BrokerServer:
        self.launch()
        return self.wait_until_listening(timeout)

    def launch(self) -> BrokerServer:
        """Start the process without waiting (see `wait_until_listening`)."""
        for data_dir in self.data_dirs:
            data_dir.mkdir(parents=True, exist_ok=True)
        self._launch()
        return self

    def wait_until_listening(self, timeout: float = _START_TIMEOUT_S) -> BrokerServer:
        if wait_for_port(self.host, self.port, timeout, alive=lambda: self.running):
            return self
        if not self.running:
            raise self._failed_start(f"exited with {self.process.returncode}")
        raise self._failed_start(f"did not listen on {self.bootstrap} within {timeout}s")

    def restart(self) -> BrokerServer:
        """A clean stop, then a start on the same port and data."""
        self.stop()
        return self.start()


class LocalCluster:
    """A ZooKeeper and brokers, started and stopped together. With `own_zookeeper` false the
    ZooKeeper is someone else's (shared by several clusters, each in its own chroot): it must
    be running, and it is neither started nor stopped here."""

    def __init__(
        self, zookeeper: ZooKeeperServer, brokers: Sequence[BrokerServer], *, own_zookeeper: bool = True
    ) -> None:
        self.zookeeper = zookeeper
        self.brokers = {broker.broker_id: broker for broker in brokers}
        self.own_zookeeper = own_zookeeper

    @classmethod
    def on_loopback(
        cls,
        data_dir: Path,
        *,
        brokers: int = 3,
        host: str = "127.0.0.1",
        first_port: int = 9092,
        zookeeper_port: int = 2181,
        overrides: Mapping[str, str] | None = None,
        config: Path | None = DEFAULT_CONFIG,
        server: type[BrokerServer] = BrokerServer,
    ) -> LocalCluster:
        """Brokers 1..N on `host` at first_port, first_port + 1, ..., ZooKeeper at
        zookeeper_port; under `data_dir`: zookeeper/, broker-<id>/, and logs/. `server`: the
        brokers' process class (the benchmarks start theirs as the test suite does)."""
        data_dir = Path(data_dir).resolve()
        logs = data_dir / "logs"
        zookeeper = ZooKeeperServer(
            data_dir / "zookeeper", host=host, port=zookeeper_port, log_path=logs / "zookeeper.log"
        )
        servers = []
        for broker_id in range(1, brokers + 1):
            port = first_port + broker_id - 1
            settings = broker_settings(
                broker_id, host=host, port=port, zookeeper_connect=zookeeper.connect_string,
                log_dir=data_dir / f"broker-{broker_id}", brokers=brokers,
            )
            settings.update(overrides or {})
            servers.append(server(broker_id, settings, host=host, port=port,
                                  log_path=logs / f"broker-{broker_id}.log", config=config))
        return cls(zookeeper, servers)

    @property
    def bootstrap(self) -> str:
        return ",".join(broker.bootstrap for broker in self.brokers.values())

    def broker(self, broker_id: int) -> BrokerServer:
        try:
            return self.brokers[broker_id]
        except KeyError:
            raise KeyError(f"no broker {broker_id} (brokers: {sorted(self.brokers)})") from None

    def servers(self) -> list[ManagedProcess]:
        """Every process this cluster runs."""
        return [*([self.zookeeper] if self.own_zookeeper else []), *self.brokers.values()]

    def start(self) -> LocalCluster:
        """ZooKeeper, then the brokers; returns when all listen (all killed if one fails)."""
        try:
            if self.own_zookeeper:
                self.zookeeper.start()
            self.start_brokers()
        except BaseException:
            self.kill()
            raise
        return self

    def start_brokers(self) -> None:
        """Every broker at once, then wait until each listens."""
        for broker in self.brokers.values():
            broker.launch()
        for broker in self.brokers.values():
            broker.wait_until_listening()

    def stop(self) -> None:
        """Brokers first (SIGTERM to all, then waiting for each), then ZooKeeper."""
        for broker in self.brokers.values():
            broker.terminate()
        for broker in self.brokers.values():
            broker.stop()
        if self.own_zookeeper:
            self.zookeeper.stop()

    def kill(self) -> None:
        for server in self.servers():
            server.kill()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m broker.local_cluster",
        description="Run ZooKeeper and N logway brokers on this machine until Ctrl-C or SIGTERM.",
    )
    parser.add_argument("--brokers", type=int, default=3, help="how many brokers (ids 1..N; default 3)")
    parser.add_argument("--data", default="./data-cluster", help="data and logs (default ./data-cluster)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=9092, help="first broker's port; the next ones follow (default 9092)")
    parser.add_argument("--zookeeper-port", type=int, default=2181, help="ZooKeeper's client port (default 2181)")
    parser.add_argument("--config", default=str(DEFAULT_CONFIG), help="server.properties given to every broker")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker config key for every broker (repeatable)")
    args = parser.parse_args(argv)
    if args.brokers < 1:
        parser.error("--brokers must be at least 1")
    overrides = {}
    for item in args.override:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--override takes KEY=VALUE, not {item!r}")
        overrides[key.strip()] = value.strip()

    stop_requested = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop_requested.set())

    cluster = LocalCluster.on_loopback(
        Path(args.data), brokers=args.brokers, host=args.host, first_port=args.port,
        zookeeper_port=args.zookeeper_port, overrides=overrides, config=Path(args.config),
    )
    busy = [f"{server.host}:{server.port}" for server in cluster.servers() if not port_is_free(server.host, server.port)]
    if busy:
        print(f"local_cluster: port(s) already in use: {', '.join(busy)}", file=sys.stderr)
        return 1
    try:
        cluster.start()
    except (RuntimeError, ZooKeeperUnavailable) as exc:
        print(f"local_cluster: {exc}", file=sys.stderr)
        return 1
    print(f"ZooKeeper: {cluster.zookeeper.connect_string}")
    for broker in cluster.brokers.values():
        print(f"broker {broker.broker_id}: {broker.bootstrap}  data {broker.settings['log.dirs']}")
    print(f"logs: {cluster.zookeeper.log_path.parent}")
    print(f"bootstrap: {cluster.bootstrap}", flush=True)
    failed = False
    try:
        while not stop_requested.wait(0.5):
            for server in cluster.servers():
                if not server.running:
                    print(f"local_cluster: {server.name} exited with {server.returncode}; "
                          f"see {server.log_path}", file=sys.stderr)
                    failed = True
                    stop_requested.set()
                    break
    finally:
        print("stopping brokers, then ZooKeeper", flush=True)
        cluster.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
