"""metrics.graphite.*: pushes to a plaintext listener in the test, which keeps the lines."""

import asyncio

from prometheus_client import CollectorRegistry, Counter

from broker.config import GraphiteSettings
from broker.metrics.graphite import GraphitePusher


class _Carbon:
    """A graphite plaintext port: one connection per push, lines until the push closes it."""

    def __init__(self) -> None:
        self.pushes: asyncio.Queue[list[str]] = asyncio.Queue()
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._receive, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def _receive(self, reader, writer) -> None:
        data = await reader.read()
        writer.close()
        await self.pushes.put(data.decode("ascii").splitlines())


def snapshot_of(events: int):
    """A snapshot function as BrokerMetrics gives: reads now, builds when called."""
    registry = CollectorRegistry()
    Counter("kafka_server_brokertopicmetrics_messagesin", "m", ["topic"], registry=registry).labels("orders").inc(events)
    return lambda: lambda: list(registry.collect())


def test_a_push_sends_every_sample_as_a_plaintext_line_under_the_prefix():
    async def main():
        carbon = _Carbon()
        port = await carbon.start()
        pusher = GraphitePusher(snapshot_of(7), GraphiteSettings("127.0.0.1", port, 60_000, "logway.broker3"))
        await pusher.push()
        lines = await asyncio.wait_for(carbon.pushes.get(), 10)
        carbon.server.close()
        return lines

    lines = asyncio.run(main())
    path, value, timestamp = next(l for l in lines if "messagesin_total" in l).split(" ")
    assert path == "logway.broker3.kafka_server_brokertopicmetrics_messagesin_total.topic.orders"
    assert float(value) == 7.0 and int(timestamp) > 0


def test_pushes_repeat_every_interval_and_survive_a_graphite_that_is_down():
    async def main():
        carbon = _Carbon()
        port = await carbon.start()
        pusher = GraphitePusher(snapshot_of(1), GraphiteSettings("127.0.0.1", port, 10, "p"))
        pusher.start()
        first = await asyncio.wait_for(carbon.pushes.get(), 10)
        carbon.server.close()
        await carbon.server.wait_closed()
        # Down: the pushes fail (logged) for a few intervals, and the pusher keeps going.
        await asyncio.sleep(0.05)
        carbon.server = await asyncio.start_server(carbon._receive, "127.0.0.1", port)
        again = await asyncio.wait_for(carbon.pushes.get(), 10)
        await pusher.stop()
        carbon.server.close()
        return first, again

    first, again = asyncio.run(main())
    assert any("p.kafka_server_brokertopicmetrics_messagesin_total" in l for l in first)
    assert any("p.kafka_server_brokertopicmetrics_messagesin_total" in l for l in again)
