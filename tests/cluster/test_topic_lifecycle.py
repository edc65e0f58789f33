"""The topic lifecycle against a model on three brokers and a real ZooKeeper (RF=3), smaller
than the standalone run (tests/topic_lifecycle.py says what is checked). Restarts go round the
brokers, one at a time, cleanly or with kill -9. One cluster serves every run of the machine:
each run starts with no topic, its last deleting what it made.
"""

import socket

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from protocol.api_keys import ApiKey
from tests.cluster.clients import SMALL_INDEXES, wait_formed
from tests.kafka_wire import call
from tests.topic_lifecycle import BROKER_SETTINGS, TopicLifecycle

pytestmark = pytest.mark.slow

_PROBLEMS = ("is offline", "Traceback")


class ThreeBrokers:
    replication_factor = 3

    def __init__(self, cluster) -> None:
        self.cluster = cluster
        self._sockets: dict[int, socket.socket] = {}
        self._next_restart = 1

    def connection(self, topic: str | None = None, partition: int = 0) -> socket.socket:
        """To the partition's leader, or to the controller (admin requests need it in ZooKeeper
        mode); to broker 1 while there is none."""
        metadata = self._metadata(topic)
        broker_id = metadata.controller_id
        if topic is not None:
            leaders = {p.partition_index: p.leader_id for p in metadata.topics[0].partitions}
            broker_id = leaders.get(partition, -1)
        return self._socket(broker_id if broker_id in self.cluster.brokers else 1)

    def _socket(self, broker_id: int) -> socket.socket:
        if broker_id not in self._sockets:
            broker = self.cluster.broker(broker_id)
            self._sockets[broker_id] = socket.create_connection((broker.host, broker.port), timeout=60)
        return self._sockets[broker_id]

    def _metadata(self, topic: str | None):
        request = MetadataRequest(
            topics=() if topic is None else (MetadataRequestTopic(topic_id=None, name=topic),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        return call(self._socket(1), ApiKey.METADATA, 12, request)

    def reconnect(self) -> None:
        for sock in self._sockets.values():
            sock.close()
        self._sockets.clear()

    def restart(self, crash: bool) -> None:
        self.reconnect()
        broker = self.cluster.broker(self._next_restart)
        self._next_restart = self._next_restart % 3 + 1
        if crash:
            broker.kill()
        else:
            broker.stop()
        broker.start()
        wait_formed(self.cluster)

    def problems(self) -> list[str]:
        return [
            f"broker {broker_id}: {line}"
            for broker_id, broker in self.cluster.brokers.items()
            for line in broker.log().splitlines()
            if any(p in line for p in _PROBLEMS)
        ]


class ClusterLifecycle(TopicLifecycle):
    def __init__(self, target: ThreeBrokers) -> None:
        super().__init__()
        self.target = target

    def teardown(self) -> None:
        for name in list(self.topics):
            self.delete_topic(name)
        self.every_acknowledged_record_is_readable()  # the names are unknown again
        self.target.reconnect()


def test_topic_lifecycle_on_three_brokers(cluster_factory):
    cluster = cluster_factory(overrides={**SMALL_INDEXES, **BROKER_SETTINGS})
    wait_formed(cluster)
    target = ThreeBrokers(cluster)
    run_state_machine_as_test(
        lambda: ClusterLifecycle(target),
        settings=settings(
            max_examples=6,
            stateful_step_count=20,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=False,
        ),
    )
