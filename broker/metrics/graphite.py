"""metrics.graphite.*: the registry pushed to graphite's plaintext port, as the design
documents' brokers report (prometheus_client's GraphiteBridge formats and sends the lines).

The bridge's own pushing thread would read the registry from that thread, while the collectors
read loop-owned state. So the state is read on the loop every interval (`snapshot`), and the
bridge's push (building the families from what was read, formatting, connect, send, close) runs
on a thread. A push that fails is logged and the next interval tries again; pushes never overlap.
Lines look like `<prefix>.kafka_server_brokertopicmetrics_messagesin_total.topic.orders 42.0
<unix time>`: labels become path elements, sorted by name.
"""

import asyncio
import logging
from collections.abc import Callable

from prometheus_client.bridge.graphite import GraphiteBridge
from prometheus_client.core import Metric

from broker.config import GraphiteSettings
from broker.metrics.collectors import Built

log = logging.getLogger(__name__)


class GraphitePusher:
    def __init__(self, snapshot: Callable[[], Callable[[], list[Metric]]], settings: GraphiteSettings) -> None:
        """`snapshot()`, on the loop, reads the metrics; what it returns builds them, anywhere."""
        self._snapshot = snapshot
        self._settings = settings
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def push(self) -> None:
        """Read the metrics (here, on the loop) and send them (on a thread)."""
        settings = self._settings
        bridge = GraphiteBridge(
            (settings.host, settings.port),
            registry=Built(self._snapshot()),
            timeout_seconds=settings.interval_ms / 1000,
        )
        await asyncio.to_thread(bridge.push, settings.prefix)

    async def _run(self) -> None:
        interval_s = self._settings.interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.push()
            except OSError as exc:
                log.warning(
                    "pushing metrics to graphite at %s:%d failed: %s", self._settings.host, self._settings.port, exc
                )
