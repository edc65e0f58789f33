"""Heartbeats, as MirrorMaker 2's MirrorHeartbeatConnector emits them: for a pair of clusters X->Y,
a record Heartbeat(X, Y, now) every emit.heartbeats.interval.seconds into the compacted
single-partition topic `heartbeats` of Y. MirrorMaker 2's dedicated mode runs the emitter for
every ordered pair of its clusters; logway-mirror runs it for both directions of every enabled
flow. A flow A->B then copies A's `heartbeats` (always selected, policy.is_heartbeats_topic) to
`A.heartbeats` on B, where the newest record's timestamp, compared with the clock, bounds the
replication latency A->B (see docs/mirroring.md)."""

import logging
import threading
import time

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from replication.mirror.config import ClusterConfig
from replication.mirror.flow import create_topic_if_missing
from replication.mirror.policy import HEARTBEATS_TOPIC
from replication.mirror.records import Heartbeat, encode_heartbeat

log = logging.getLogger(__name__)


class HeartbeatEmitter:
    def __init__(
        self,
        pairs: list[tuple[ClusterConfig, ClusterConfig]],
        interval_s: float,
        replication_factor: int,
        stop: threading.Event,
    ) -> None:
        """`pairs`: (X, Y) for each Heartbeat(X, Y) written into Y."""
        self.pairs = pairs
        self.interval_s = interval_s
        self.replication_factor = replication_factor
        self.stop = stop

    def run(self) -> None:
        producers: dict[str, Producer] = {}
        try:
            while not self.stop.is_set():
                try:
                    self._emit(producers)
                except (KafkaException, TimeoutError) as exc:
                    log.warning("heartbeats: %s", str(exc) or repr(exc))
                self.stop.wait(self.interval_s)
        finally:
            for producer in producers.values():
                producer.flush(1)

    def _emit(self, producers: dict[str, Producer]) -> None:
        for source, target in self.pairs:
            producer = producers.get(target.alias)
            if producer is None:
                self._create_topic(target)
                producer = producers[target.alias] = Producer(
                    {**target.client, "enable.idempotence": True, "client.id": "logway-mirror-heartbeats"}
                )
            now_ms = int(time.time() * 1000)
            key, value = encode_heartbeat(Heartbeat(source.alias, target.alias, now_ms))
            producer.produce(HEARTBEATS_TOPIC, value=value, key=key, partition=0, timestamp=now_ms)
            producer.poll(0)

    def _create_topic(self, cluster: ClusterConfig) -> None:
        topic = NewTopic(HEARTBEATS_TOPIC, 1, self.replication_factor, config={"cleanup.policy": "compact"})
        create_topic_if_missing(AdminClient(cluster.client), topic)
