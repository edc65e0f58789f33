"""The broker's metrics: what it counts, a Prometheus registry of its own, and where they go.

`BrokerMetrics` holds the counts the request path bumps (broker/metrics/stats.py) and a
CollectorRegistry (not prometheus_client's global one: several brokers may share a process, in
the tests) whose collector (broker/metrics/collectors.py) reads them and the broker's state,
beside prometheus_client's process, platform and garbage collector ones.
All of it belongs to the event loop, so the state is read only there (`snapshot`), and the
families are built from what was read on a thread:

- `metrics.listener` (http://host:port): an HTTP server on the loop (broker/metrics/endpoint.py)
  answers GET /metrics with the metrics and GET /health with 200 once the broker is ready
  (log dirs loaded; in cluster mode, registered in ZooKeeper), 503 before.
- `metrics.graphite.host` (port, interval, prefix): every interval the state is read on the
  loop and the lines are built and sent to graphite from a thread (broker/metrics/graphite.py).

Counting goes on whether or not either is configured: it is a few integer additions per request.
"""

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.core import Metric

from broker.metrics.collectors import BrokerCollector, families
from broker.metrics.endpoint import MetricsEndpoint
from broker.metrics.graphite import GraphitePusher
from broker.metrics.stats import BrokerTopicStats, Histogram, LoopIdle, RequestStats, ZkSessionStats
from replication.controller import KAFKA_STATE_OF_EVENT, kafka_state_of_event
from replication.zk import SessionEvent

if TYPE_CHECKING:
    from broker.server import Broker

log = logging.getLogger(__name__)

_IDLE_SAMPLE_S = 1.0


class BrokerMetrics:
    def __init__(self, broker: "Broker") -> None:
        self._broker = broker
        self.topics = BrokerTopicStats()
        self.requests = RequestStats()
        self.flush_times = Histogram()
        self.zk_latency = Histogram()
        self.zk_session = ZkSessionStats()
        # Kafka's ControllerEventManager EventQueueTimeMs, and ControllerStats' timer of each
        # ControllerState (by its name) events are processed in, every one there from the start
        # as Kafka registers them (cluster mode).
        self.controller_queue_times = Histogram()
        self.controller_event_times = {state: Histogram() for state in sorted(set(KAFKA_STATE_OF_EVENT.values()))}
        self.loop_idle = LoopIdle()
        self.connections_accepted: dict[str, int] = {}
        self.registry = CollectorRegistry(auto_describe=False)
        self._collector = BrokerCollector(broker, self)
        self.registry.register(self._collector)
        # The process (CPU, memory, open descriptors against their limit) and the interpreter:
        # they read nothing of the loop's.
        self._process_collectors = (
            ProcessCollector(registry=self.registry),
            PlatformCollector(registry=self.registry),
            GCCollector(registry=self.registry),
        )
        broker.log_manager.on_flush = lambda seconds: self.flush_times.observe(seconds * 1000)
        if broker.cluster is not None:
            broker.cluster.zk.on_request_latency = lambda seconds: self.zk_latency.observe(seconds * 1000)
            broker.cluster.zk.add_session_listener(self._on_zk_session)
            broker.cluster.controller.on_event = self._on_controller_event
        self._endpoint: MetricsEndpoint | None = None
        self._graphite: GraphitePusher | None = None
        self._idle_sampler: asyncio.TimerHandle | None = None

    async def start(self) -> None:
        """Serve metrics.listener and start pushing to graphite, as configured (before the logs
        load, so that /health answers 503 meanwhile)."""
        config = self._broker.config
        self._sample_idle()
        listener = config.metrics_listener
        if listener is not None:
            host, port = listener
            self._endpoint = MetricsEndpoint(self.snapshot, lambda: self._broker.ready)
            await self._endpoint.start(host, port)
            log.info("metrics served on http://%s:%d/metrics", host or "0.0.0.0", self._endpoint.port)
        graphite = config.metrics_graphite
        if graphite is not None:
            if graphite.prefix is None:
                graphite = dataclasses.replace(graphite, prefix=f"logway.broker{self._broker.broker_id}")
            self._graphite = GraphitePusher(self.snapshot, graphite)
            self._graphite.start()

    def snapshot(self) -> Callable[[], list[Metric]]:
        """On the loop: the broker's state read into rows. Returns what builds every family from
        them, to be called on any thread (building and formatting are most of a scrape's time)."""
        parts = self._collector.snapshot()
        return lambda: [
            *families(parts), *(family for c in self._process_collectors for family in c.collect())
        ]

    @property
    def port(self) -> int | None:
        """The port metrics are served on (the bound one when metrics.listener asks for 0)."""
        return None if self._endpoint is None else self._endpoint.port

    async def stop(self) -> None:
        if self._idle_sampler is not None:
            self._idle_sampler.cancel()
        if self._graphite is not None:
            await self._graphite.stop()
        if self._endpoint is not None:
            await self._endpoint.stop()

    def connection_accepted(self, listener: str) -> None:
        self.connections_accepted[listener] = self.connections_accepted.get(listener, 0) + 1

    def _sample_idle(self) -> None:
        self.loop_idle.sample()
        self._idle_sampler = asyncio.get_running_loop().call_later(_IDLE_SAMPLE_S, self._sample_idle)

    def _on_controller_event(self, name: str, queued_s: float, processed_s: float) -> None:
        self.controller_queue_times.observe(queued_s * 1000)
        state = kafka_state_of_event(name)
        if state is not None:
            self.controller_event_times[state].observe(processed_s * 1000)

    def _on_zk_session(self, event: SessionEvent) -> None:
        session = self.zk_session
        if event is SessionEvent.CONNECTED:
            session.state = "CONNECTED"
            session.sync_connects += 1
        elif event is SessionEvent.SUSPENDED:
            session.state = "CONNECTING"
            session.disconnects += 1
        else:
            session.state = "EXPIRED"
            session.expires += 1
