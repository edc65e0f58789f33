"""The topic lifecycle against a model on a standalone broker process (tests/topic_lifecycle.py
says what is checked): create, delete and create again under the same name, produce,
CreatePartitions, DeleteRecords, retention, compaction, clean restarts and kill -9, the delayed
deletions waited past. Each run of the machine starts its own broker on a fresh data directory.
"""

import shutil
import socket
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.harness import BrokerProcess
from tests.topic_lifecycle import BROKER_SETTINGS, TopicLifecycle

pytestmark = pytest.mark.slow

_PROBLEMS = ("is offline", "Traceback")


class StandaloneBroker:
    replication_factor = 1

    def __init__(self) -> None:
        self._tmp = Path(tempfile.mkdtemp(prefix="logway-lifecycle-"))
        self.broker = BrokerProcess(self._tmp / "data", BROKER_SETTINGS).start()
        self._sock: socket.socket | None = None

    def connection(self, topic: str | None = None, partition: int = 0) -> socket.socket:
        if self._sock is None:
            self._sock = socket.create_connection(("127.0.0.1", self.broker.port), timeout=30)
        return self._sock

    def reconnect(self) -> None:
        """One broker leads everything: a connection serves until the broker goes."""

    def restart(self, crash: bool) -> None:
        self._disconnect()
        if crash:
            self.broker.kill()
        else:
            assert self.broker.stop() == 0
        self.broker.start()

    def problems(self) -> list[str]:
        return [line for line in self.broker.log().splitlines() if any(p in line for p in _PROBLEMS)]

    def close(self) -> None:
        self._disconnect()
        self.broker.kill()
        shutil.rmtree(self._tmp, ignore_errors=True)

    def _disconnect(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


class StandaloneLifecycle(TopicLifecycle):
    def __init__(self) -> None:
        super().__init__()
        self.target = StandaloneBroker()

    def teardown(self) -> None:
        self.target.close()


TestTopicLifecycleStandalone = StandaloneLifecycle.TestCase
TestTopicLifecycleStandalone.settings = settings(
    max_examples=12,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
