"""The cluster harness: a real ZooKeeper and N broker processes, and the faults the cluster tests
inject (docs/cluster.md, "Harness and faults").

    cluster = Cluster.create(tmp_path, brokers=3, namespaces=True).start()
    cluster.broker(2).kill()                 # kill -9; .pause() / .resume() (SIGSTOP / SIGCONT),
    cluster.broker(2).start()                # .stop() (SIGTERM, clean), .restart(): same port, data
    cluster.expire_session(1)                # ZooKeeper drops broker 1's session
    cluster.cut(1, "zookeeper"); cluster.heal(1, "zookeeper")
    cluster.close()                          # kill everything, remove the namespaces

The processes and the loopback cluster come from broker/local_cluster.py; this module adds
what only tests need.

Two modes:
- loopback (`namespaces=False`): everything on 127.0.0.1, each broker on a free port, and
  the brokers of each cluster in their own ZooKeeper chroot (/logway-<random>), so clusters can
  share one ZooKeeper (the `zookeeper` fixture of tests/cluster/conftest.py, one per module).
  No network cuts.
- namespaces (`namespaces=True`, root only): each host (ZooKeeper, each broker, and any host a
  test adds) runs in its own network namespace, joined by a veth pair to a bridge of the test's
  own on 10.213.<n>.0/24; ZooKeeper listens on <its address>:2181 and every broker on <its
  address>:9092. The test process itself is on the bridge (10.213.<n>.1) and is never cut
  off. `<n>` is taken under a file lock, so parallel pytest-xdist workers get distinct subnets
  and interface names. `cut(a, b)` adds blackhole routes for each other's address in both
  namespaces (no packet filter needed): established connections between them then hang
  (every packet is dropped) and new ones fail at once (connect: EINVAL); `heal` removes the
  routes.

Session expiry. A broker's kazoo session id and password live inside the broker, but ZooKeeper
answers the first from outside: `cons` names the session of every connection, and /proc tells
which connections are the broker's. The password is no secret either: ZooKeeper derives it
from the session id (`ZooKeeperServer.generatePasswd`: java.util.Random seeded with the id
xor a constant, 16 bytes). So the harness reattaches to the session with a kazoo client of
its own and closes it: the classic way of expiring a session in ZooKeeper tests, and
immediate. `expire_session` checks in `dump` that the session is gone, so a ZooKeeper that
derived passwords differently would fail it loudly rather than silently. Pausing a process
(or, in namespace mode, cutting it off from ZooKeeper) for longer than its session timeout
expires the session too, the slow way; tests/cluster/test_harness.py proves all three.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from kazoo.client import KazooClient
from kio.schema.api_versions.v3.request import ApiVersionsRequest

from broker.local_cluster import (
    BrokerServer,
    LocalCluster,
    ManagedProcess,
    ZooKeeperServer,
    broker_settings,
    free_port,
)
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from tests.harness import TEST_BROKER_DEFAULTS, broker_python
from tests.kafka_wire import decode_response, encode_request, read_frame  # noqa: F401 (read_frame: for the tests)

# ZooKeeper grants session timeouts of 2 to 20 ticks: with 500 ms ticks, 1 s to 10 s, so fault
# tests can wait out a session without waiting long.
TICK_MS = 500
SESSION_TIMEOUT_MS = 6000
ZOOKEEPER_PORT = 2181  # namespace mode, where every host has an address of its own
BROKER_PORT = 9092
ZOOKEEPER = "zookeeper"

HostName = int | str  # a broker id, ZOOKEEPER, or the name of a host a test added

T = TypeVar("T")


def wait_until(condition: Callable[[], T], timeout: float, what: str, interval: float = 0.05) -> T:
    """Poll `condition` until it returns something truthy (returned), or fail after `timeout`
    seconds saying `what` did not happen."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what}: not within {timeout}s")
        time.sleep(interval)


# ------------------------------------------------------------------ a Kafka client, raw


def send_api_versions(sock: socket.socket) -> None:
    """An ApiVersions v3 request on `sock` (a broker's answer proves it serves requests)."""
    request = ApiVersionsRequest(client_software_name="harness", client_software_version="1")
    sock.sendall(encode_request(ApiKey.API_VERSIONS, 3, request))


def api_versions_error(host: str, port: int, timeout: float = 10.0) -> ErrorCode:
    """ApiVersions v3 on a new connection to host:port: the response's error code."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        send_api_versions(sock)
        return decode_response(ApiKey.API_VERSIONS, 3, read_frame(sock)).error_code


# ------------------------------------------------------------------ ZooKeeper from outside


@contextlib.contextmanager
def kazoo_client(hosts: str, start_timeout: float = 15.0, **options) -> Iterator[KazooClient]:
    """A started kazoo client (KazooClient `options`), stopped and closed on exit."""
    client = KazooClient(hosts=hosts, **options)
    client.start(timeout=start_timeout)
    try:
        yield client
    finally:
        client.stop()
        client.close()


@dataclass(frozen=True)
class ZooKeeperConnection:
    """One client connection, as ZooKeeper's `cons` lists it."""

    ip: str
    port: int
    session_id: int | None  # None until the client's session is set up
    session_timeout_ms: int | None


def connections(zookeeper: ZooKeeperServer) -> list[ZooKeeperConnection]:
    """The client connections of `zookeeper` (`cons`), ours for asking included."""
    result = []
    for line in zookeeper.four_letter_word("cons").splitlines():
        match = re.match(r"^\s*/\[?([0-9a-fA-F.:]+?)\]?:(\d+)\[\d+\]\((.*)\)\s*$", line)
        if not match:
            continue
        fields = dict(item.split("=", 1) for item in match.group(3).split(",") if "=" in item)
        result.append(ZooKeeperConnection(
            match.group(1),
            int(match.group(2)),
            int(fields["sid"], 16) if "sid" in fields else None,
            int(fields["to"]) if "to" in fields else None,
        ))
    return result


def live_sessions(zookeeper: ZooKeeperServer) -> set[int]:
    """Ids of the sessions ZooKeeper tracks (the SessionTracker part of `dump`)."""
    text = zookeeper.four_letter_word("dump").split("ephemeral nodes dump:")[0]
    return {int(sid, 16) for sid in re.findall(r"^\s+0x([0-9a-f]+)\s*$", text, re.M)}


def session_password(session_id: int) -> bytes:
    """The password ZooKeeper gives session `session_id`: 16 bytes of java.util.Random seeded
    with the id xor ZooKeeperServer's constant 0xB3415C00 (generatePasswd, ZooKeeper 3.x)."""
    multiplier, mask = 0x5DEECE66D, (1 << 48) - 1
    seed = (session_id ^ 0xB3415C00 ^ multiplier) & mask
    password = bytearray()
    while len(password) < 16:  # Random.nextBytes: one nextInt() per 4 bytes, low byte first
        seed = (seed * multiplier + 0xB) & mask
        value = seed >> 16
        for _ in range(min(4, 16 - len(password))):
            password.append(value & 0xFF)
            value >>= 8
    return bytes(password)


def expire_session(zookeeper: ZooKeeperServer, session_id: int, timeout: float = 10.0) -> None:
    """Make ZooKeeper end another client's session now, as when it expires: its ephemeral
    znodes go, its watchers fire, and its owner is told SESSION_EXPIRED when it next talks to
    ZooKeeper. Done by reattaching to the session and closing it."""
    impostor = KazooClient(
        hosts=zookeeper.connect_string,
        client_id=(session_id, session_password(session_id)),
        connection_retry={"max_tries": 3, "delay": 0.1},
    )
    try:
        impostor.start(timeout=timeout)
        reattached = impostor.client_id is not None and impostor.client_id[0] == session_id
    finally:
        impostor.stop()  # closes the session it holds: the reattached one, or a new one of its own
        impostor.close()
    if not reattached:
        raise RuntimeError(f"ZooKeeper refused to reattach to session {session_id:#x} (gone, or the password differs)")
    wait_until(lambda: session_id not in live_sessions(zookeeper), timeout, f"session {session_id:#x} to end")


def _proc_address(text: str) -> tuple[str, int]:
    """An IPv4 "0100007F:1F90" of /proc/net/tcp as ("127.0.0.1", 8080)."""
    address, port = text.split(":")
    return socket.inet_ntoa(int(address, 16).to_bytes(4, "little")), int(port, 16)


def process_sessions(zookeeper: ZooKeeperServer, pid: int) -> set[int]:
    """The ZooKeeper sessions of process `pid`: those of the connections `cons` lists whose
    client end is one of the process's sockets. /proc/<pid>/net/tcp is the table of the
    process's own network namespace; ZooKeeper listens on IPv4, so tcp6 never holds them."""
    try:
        inodes = set()
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[len("socket:["):-1])
        table = Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]
    except OSError:  # the process is gone
        return set()
    endpoints = set()
    for row in table:
        fields = row.split()
        local, remote, state, inode = fields[1], fields[2], fields[3], fields[9]
        if inode in inodes and state == "01" and _proc_address(remote) == (zookeeper.host, zookeeper.port):
            endpoints.add(_proc_address(local))  # state 01: ESTABLISHED
    return {c.session_id for c in connections(zookeeper) if c.session_id and (c.ip, c.port) in endpoints}


def expire_sessions_of(
    zookeeper: ZooKeeperServer, process: ManagedProcess, timeout: float = 10.0
) -> set[int]:
    """Expire every ZooKeeper session of `process` (waiting up to `timeout` for it to have
    one: a process between two connections has none); returns their ids."""
    sessions = wait_until(
        lambda: process.pid and process_sessions(zookeeper, process.pid),
        timeout,
        f"{process.name} to hold a ZooKeeper session",
    )
    for session_id in sessions:
        expire_session(zookeeper, session_id, timeout)
    return sessions


class ZooKeeperProbe(ManagedProcess):
    """A kazoo client in a process of its own (tests/cluster/zk_probe.py) with an ephemeral
    znode: run on a host, it shows what a broker's session there goes through. Its log holds
    one line per event: "state CONNECTED|SUSPENDED|LOST", "session 0x<id> <path>"."""

    def __init__(
        self, connect: str, ephemeral: str, log_path: Path, *, session_timeout_ms: int, prefix: list[str]
    ) -> None:
        super().__init__(log_path, prefix)
        self.name = f"zookeeper probe {ephemeral}"
        self.connect = connect
        self.ephemeral = ephemeral
        self.session_timeout_ms = session_timeout_ms
        self.session_id: int | None = None

    def command(self) -> list[str]:
        return [sys.executable, str(Path(__file__).with_name("zk_probe.py")), "--connect", self.connect,
                "--ephemeral", self.ephemeral, "--session-timeout-ms", str(self.session_timeout_ms)]

    def start(self, timeout: float = 30.0) -> ZooKeeperProbe:
        self._launch()
        self.session_id = int(self.wait_for(r"^session (0x[0-9a-f]+) ", timeout).group(1), 16)
        return self

    def events(self) -> list[str]:
        return [line for line in self.log().splitlines() if not line.startswith("===")]

    def wait_for(self, pattern: str, timeout: float, after: int = 0) -> re.Match[str]:
        """The first event from index `after` on matching `pattern`, waiting for it."""
        def found() -> re.Match[str] | None:
            if not self.running:
                raise RuntimeError(f"{self.name} exited with {self.returncode}:\n{self.log()[-3000:]}")
            return next(filter(None, (re.search(pattern, e) for e in self.events()[after:])), None)
        return wait_until(found, timeout, f"{self.name}: an event matching {pattern!r}")


# ------------------------------------------------------------------ network namespaces


@dataclass(frozen=True)
class Host:
    """Where a process runs: its address, and its network namespace (None: this machine's)."""

    address: str
    namespace: str | None = None

    @property
    def prefix(self) -> list[str]:
        """What goes before a command to run it on this host."""
        return ["ip", "netns", "exec", self.namespace] if self.namespace else []


LOOPBACK = "127.0.0.1"
_SUBNET = "10.213"
_LOCK_DIR = Path(tempfile.gettempdir()) / "logway-netns"


def namespaces_unavailable() -> str | None:
    """Why namespace mode cannot run here, or None when it can."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    if shutil.which("ip") is None:
        return "network namespaces need the ip command (apt-get install iproute2)"
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {result.stderr.strip()}")
    return result


def _keep_subnets_local() -> None:
    """Make the whole 10.213.0.0/16 unreachable from the root namespace but for the networks'
    own /24 routes. Without it, a client still trying the address of a namespace that is gone
    follows the default route, and this sandbox's egress proxy answers it in HTTP, which a
    Kafka client reads as a response size of "HTTP" (0x48545450)."""
    _ip("route", "replace", "unreachable", f"{_SUBNET}.0.0/16")


class Network:
    """Hosts in network namespaces on one bridge, subnet 10.213.<index>.0/24; the bridge has
    .1 (this process's way in), hosts get .2, .3, ... in the order they are added. Every name
    carries the index (namespaces logway-<index>-<host>, interfaces lw<index>-<host>), held
    under a lock file for the network's life, so concurrent networks never collide, and what a
    killed test run left behind under an index is removed by the next one that takes it."""

    def __init__(self, index: int, lock_fd: int) -> None:
        self.index = index
        self._lock_fd: int | None = lock_fd
        self.bridge = f"lw{index}-br"
        self.hosts: dict[str, Host] = {}
        self.cuts: set[frozenset[str]] = set()

    @classmethod
    def create(cls, index: int | None = None) -> Network:
        """A network on the first free index (or on `index`, which must be free)."""
        _LOCK_DIR.mkdir(exist_ok=True)
        _keep_subnets_local()
        for candidate in range(256) if index is None else (index,):
            fd = os.open(_LOCK_DIR / f"{candidate}.lock", os.O_CREAT | os.O_RDWR, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            network = cls(candidate, fd)
            network._remove_leftovers()
            if network._subnet_in_use():  # someone else's addresses: not ours to remove
                network._release()
                continue
            try:
                _ip("link", "add", network.bridge, "type", "bridge")
                _ip("addr", "add", f"{network.subnet}.1/24", "dev", network.bridge)
                _ip("link", "set", network.bridge, "up")
            except BaseException:
                network.destroy()
                raise
            return network
        raise RuntimeError(f"no free subnet {_SUBNET}.<n>.0/24 for network namespaces")

    @property
    def subnet(self) -> str:
        return f"{_SUBNET}.{self.index}"

    def _namespaces(self) -> list[str]:
        listing = _ip("netns", "list").stdout.split("\n")
        return [line.split()[0] for line in listing if line.startswith(f"logway-{self.index}-")]

    def _interfaces(self) -> list[str]:
        listing = _ip("-o", "link", "show").stdout.splitlines()
        names = [line.split(":")[1].strip().split("@")[0] for line in listing]
        return [name for name in names if name.startswith(f"lw{self.index}-")]

    def _remove_leftovers(self) -> None:
        for namespace in self._namespaces():
            _ip("netns", "del", namespace, check=False)
        for interface in self._interfaces():
            _ip("link", "del", interface, check=False)

    def _subnet_in_use(self) -> bool:
        return f" {self.subnet}." in _ip("-4", "-o", "addr", "show").stdout

    def add_host(self, name: str) -> Host:
        if name in self.hosts or name == "br":
            raise ValueError(f"host name {name!r} is taken")
        namespace, veth = f"logway-{self.index}-{name}", f"lw{self.index}-{name}"
        if len(veth) > 15:  # IFNAMSIZ - 1
            raise ValueError(f"host name {name!r} is too long for an interface name")
        host = Host(f"{self.subnet}.{len(self.hosts) + 2}", namespace)
        _ip("netns", "add", namespace)
        _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", namespace)
        _ip("link", "set", veth, "master", self.bridge, "up")
        _ip("-n", namespace, "addr", "add", f"{host.address}/24", "dev", "eth0")
        _ip("-n", namespace, "link", "set", "eth0", "up")
        _ip("-n", namespace, "link", "set", "lo", "up")
        self.hosts[name] = host
        return host

    def cut(self, a: str, b: str) -> None:
        """No packet between hosts a and b any more, either way."""
        if a == b:
            raise ValueError(f"host {a!r} cannot be cut off from itself")
        if frozenset((a, b)) in self.cuts:
            return
        host_a, host_b = self.hosts[a], self.hosts[b]
        _ip("-n", host_a.namespace, "route", "add", "blackhole", f"{host_b.address}/32")
        _ip("-n", host_b.namespace, "route", "add", "blackhole", f"{host_a.address}/32")
        self.cuts.add(frozenset((a, b)))

    def heal(self, a: str, b: str) -> None:
        if frozenset((a, b)) not in self.cuts:
            return
        host_a, host_b = self.hosts[a], self.hosts[b]
        _ip("-n", host_a.namespace, "route", "del", "blackhole", f"{host_b.address}/32")
        _ip("-n", host_b.namespace, "route", "del", "blackhole", f"{host_a.address}/32")
        self.cuts.discard(frozenset((a, b)))

    def destroy(self) -> None:
        """Remove the namespaces, veths and bridge (what runs in a namespace should be gone:
        a process keeps its namespace, and its veth, alive)."""
        if self._lock_fd is None:
            return
        self._remove_leftovers()
        self.hosts.clear()
        self.cuts.clear()
        self._release()

    def _release(self) -> None:
        os.close(self._lock_fd)
        self._lock_fd = None


class SuiteBrokerServer(BrokerServer):
    """A cluster's broker started as the suite starts its others (tests/harness.py): on the
    packages of LOGWAY_BROKER_PACKAGES when set, such as the compiled build in CI."""

    def command(self) -> list[str]:
        python, *arguments = super().command()
        assert python == sys.executable, python
        return [*broker_python(), *arguments]


# ------------------------------------------------------------------ the cluster


class Cluster(LocalCluster):
    """ZooKeeper and brokers 1..N for one test, in loopback or namespace mode (see the module
    docstring). Processes are driven through `broker(id)` and `zookeeper` (kill, pause, resume,
    stop, start, restart); this class adds hosts, ZooKeeper sessions and network cuts."""

    def __init__(
        self,
        zookeeper: ZooKeeperServer,
        brokers: list[BrokerServer],
        *,
        own_zookeeper: bool,
        chroot: str,
        root: Path,
        hosts: dict[str, Host],
        network: Network | None,
    ) -> None:
        super().__init__(zookeeper, brokers, own_zookeeper=own_zookeeper)
        self.chroot = chroot
        self.root = root
        self.hosts = hosts
        self.network = network
        self.probes: list[ZooKeeperProbe] = []

    @classmethod
    def create(
        cls,
        root: Path,
        *,
        brokers: int = 3,
        namespaces: bool = False,
        zookeeper: ZooKeeperServer | None = None,
        overrides: Mapping[str, str] | None = None,
        session_timeout_ms: int = SESSION_TIMEOUT_MS,
    ) -> Cluster:
        """A cluster whose data and logs go under `root`, not started. In loopback mode it may
        use a running `zookeeper` of someone else's; otherwise it runs its own."""
        if namespaces and zookeeper is not None:
            raise ValueError("in namespace mode a cluster runs its own ZooKeeper, on a host of its own")
        root = Path(root)
        network = Network.create() if namespaces else None
        try:
            names = [ZOOKEEPER, *(str(broker_id) for broker_id in range(1, brokers + 1))]
            if network is None:
                hosts = {name: Host(LOOPBACK) for name in names}
            else:
                hosts = {name: network.add_host(_short_name(name)) for name in names}
            if zookeeper is None:
                zookeeper = ZooKeeperServer(
                    root / "zookeeper", host=hosts[ZOOKEEPER].address,
                    port=ZOOKEEPER_PORT if network else None, tick_ms=TICK_MS,
                    prefix=hosts[ZOOKEEPER].prefix, log_path=root / "logs" / "zookeeper.log",
                )
                own_zookeeper = True
            else:
                own_zookeeper = False
            chroot = f"/logway-{uuid.uuid4().hex[:12]}"
            servers = []
            for broker_id in range(1, brokers + 1):
                host = hosts[str(broker_id)]
                port = BROKER_PORT if network else free_port()
                settings = broker_settings(
                    broker_id, host=host.address, port=port,
                    zookeeper_connect=zookeeper.connect_string + chroot,
                    log_dir=root / f"broker-{broker_id}", brokers=brokers,
                )
                settings["zookeeper.session.timeout.ms"] = str(session_timeout_ms)
                settings.update(TEST_BROKER_DEFAULTS)
                settings.update(overrides or {})
                servers.append(SuiteBrokerServer(broker_id, settings, host=host.address, port=port,
                                                 log_path=root / "logs" / f"broker-{broker_id}.log",
                                                 prefix=host.prefix))
        except BaseException:
            if network is not None:
                network.destroy()
            raise
        return cls(zookeeper, servers, own_zookeeper=own_zookeeper, chroot=chroot, root=root,
                   hosts=hosts, network=network)

    @property
    def zookeeper_connect(self) -> str:
        """What the brokers have as zookeeper.connect: ZooKeeper and this cluster's chroot."""
        return self.zookeeper.connect_string + self.chroot

    def start(self) -> Cluster:
        """ZooKeeper (if its own), the chroot, then every broker; returns when all listen."""
        try:
            if self.own_zookeeper:
                self.zookeeper.start()
            # Kafka creates a missing chroot itself; creating it first lets a test watch znodes
            # under it before any broker is up.
            with self.zookeeper_client(chroot="") as client:
                client.ensure_path(self.chroot)
            self.start_brokers()
        except BaseException:
            self.kill()
            raise
        return self

    def close(self) -> None:
        """Kill every process of the cluster, then remove its namespaces. Idempotent."""
        for probe in self.probes:
            probe.kill()
        self.kill()
        if self.network is not None:
            self.network.destroy()

    def zookeeper_client(self, chroot: str | None = None) -> contextlib.AbstractContextManager[KazooClient]:
        """A started kazoo client in this cluster's chroot (or `chroot`), stopped on exit."""
        return kazoo_client(self.zookeeper.connect_string + (self.chroot if chroot is None else chroot))

    # -------------------------------------------------------------- hosts

    def host(self, name: HostName) -> Host:
        try:
            return self.hosts[str(name)]
        except KeyError:
            raise KeyError(f"no host {name!r} (hosts: {', '.join(self.hosts)})") from None

    def add_host(self, name: str) -> Host:
        """One more host (namespace mode), e.g. for a client to run on and be cut off."""
        if self.network is None:
            raise RuntimeError("extra hosts need namespace mode (Cluster.create(namespaces=True))")
        if name in self.hosts:
            raise ValueError(f"host {name!r} exists")
        self.hosts[name] = self.network.add_host(_short_name(name))
        return self.hosts[name]

    def can_connect(self, source: HostName, target: HostName, port: int, timeout: float = 2.0) -> bool:
        """Whether a TCP connection from host `source` to `port` on host `target` succeeds."""
        check = "import socket, sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), float(sys.argv[3]))"
        command = [*self.host(source).prefix, sys.executable, "-c", check,
                   self.host(target).address, str(port), str(timeout)]
        return subprocess.run(command, capture_output=True, timeout=timeout + 30).returncode == 0

    # -------------------------------------------------------------- faults

    def cut(self, a: HostName, b: HostName) -> None:
        """Cut the network between hosts a and b (both ways); `heal` restores it."""
        self._network_for("cuts").cut(*self._short_names(a, b))

    def heal(self, a: HostName, b: HostName) -> None:
        self._network_for("heal").heal(*self._short_names(a, b))

    def heal_all(self) -> None:
        network = self._network_for("heal")
        for a, b in list(map(tuple, network.cuts)):
            network.heal(a, b)

    def heal_everything(self) -> None:
        """Every fault undone: cuts healed, paused brokers resumed, stopped or killed ones
        started again."""
        if self.network is not None:
            self.heal_all()
        for broker in self.brokers.values():
            if broker.paused:
                broker.resume()
            if not broker.running:
                broker.start()

    def expire_session(self, broker_id: int, timeout: float = 10.0) -> set[int]:
        """ZooKeeper ends broker `broker_id`'s session at once (see the module docstring);
        returns the session ids."""
        return expire_sessions_of(self.zookeeper, self.broker(broker_id), timeout)

    def start_probe(self, host: HostName, ephemeral: str, session_timeout_ms: int = 2000) -> ZooKeeperProbe:
        """A ZooKeeperProbe on `host`, in this cluster's chroot, holding `ephemeral`; killed by
        `close`."""
        probe = ZooKeeperProbe(
            self.zookeeper_connect, ephemeral, self.root / "logs" / f"probe-{len(self.probes)}.log",
            session_timeout_ms=session_timeout_ms, prefix=self.host(host).prefix,
        )
        self.probes.append(probe)
        return probe.start()

    def _network_for(self, what: str) -> Network:
        if self.network is None:
            raise RuntimeError(f"network {what} need namespace mode (Cluster.create(namespaces=True))")
        return self.network

    def _short_names(self, *names: HostName) -> list[str]:
        for name in names:
            self.host(name)  # KeyError naming the hosts there are
        return [_short_name(str(name)) for name in names]


def _short_name(name: str) -> str:
    """A host's name in interface and namespace names: zk, b<id>, or the name itself."""
    if name == ZOOKEEPER:
        return "zk"
    return f"b{name}" if name.isdigit() else name
