"""A real ZooKeeper server for tests (Debian's `zookeeper` package): standalone, on a free
loopback port, with its own data dir. Skips the test when ZooKeeper or Java is missing."""

import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.harness import free_port

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
_START_TIMEOUT_S = 30


class ZooKeeperProcess:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir)
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    @property
    def connect(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> "ZooKeeperProcess":
        if not ZOOKEEPER_JAR.exists() or shutil.which("java") is None:
            pytest.skip("ZooKeeper (Debian package zookeeper) or java is not installed")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = self.data_dir / "zoo.cfg"
        config.write_text(
            f"dataDir={self.data_dir}\nclientPort={self.port}\nclientPortAddress=127.0.0.1\n"
            "tickTime=500\nminSessionTimeout=1000\nmaxSessionTimeout=60000\n"
            "admin.enableServer=false\n4lw.commands.whitelist=ruok\n"
        )
        log = open(self.data_dir / "zookeeper.log", "ab")
        self.process = subprocess.Popen(
            ["java", "-Xmx256m", "-cp", f"{ZOOKEEPER_JAR}:/usr/share/java/*",
             "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(config)],
            stdout=log, stderr=subprocess.STDOUT,
        )
        log.close()
        self._wait_until_serving()
        return self

    def _wait_until_serving(self) -> None:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with {self.process.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                    sock.sendall(b"ruok")
                    if sock.recv(4) == b"imok":
                        return
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"ZooKeeper did not serve within {_START_TIMEOUT_S}s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
