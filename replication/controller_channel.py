"""The controller's connections to the brokers (Kafka's ControllerChannelManager).

One sender per live broker, over the broker's inter-broker listener, through
replication.broker_client: requests to one broker leave in the order they were queued, each
retried (after `retry_backoff_s`) until it is answered or the broker is removed (it died, or this
broker stopped being controller). `send` returns a future of the response; it resolves to None
when the broker was removed before answering.

Thread-safety: owned by the event loop.
"""

import asyncio
import logging
import ssl
from typing import Any

from replication.broker_client import BrokerClient, BrokerClientError, SaslClientFactory

log = logging.getLogger(__name__)

_CLOSE_WAIT_S = 5


class _Sender:
    def __init__(self, broker_id: int, client: BrokerClient, retry_backoff_s: float) -> None:
        self.broker_id = broker_id
        self.client = client
        self.retry_backoff_s = retry_backoff_s
        self.queue: asyncio.Queue[tuple[int, int, Any, asyncio.Future] | None] = asyncio.Queue()
        self.closed = False
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while not self.closed:
            item = await self.queue.get()
            if item is None:  # close()
                return
            api_key, version, request, answer = item
            # The flag, not only cancellation, ends the loops: Python 3.11's wait_for can lose
            # a cancellation that lands as the response fails.
            while not answer.done() and not self.closed:
                try:
                    response = await self.client.send(api_key, version, request)
                except BrokerClientError as exc:
                    log.info("controller request %d v%d to broker %d failed (%s); retrying",
                             api_key, version, self.broker_id, exc)
                    await asyncio.sleep(self.retry_backoff_s)
                else:
                    if not answer.done():
                        answer.set_result(response)

    async def close(self) -> None:
        self.closed = True
        self.task.cancel()
        while not self.queue.empty():
            item = self.queue.get_nowait()
            if item is not None and not item[3].done():
                item[3].set_result(None)
        self.queue.put_nowait(None)  # ends the loop should the cancellation be lost
        await asyncio.wait({self.task}, timeout=_CLOSE_WAIT_S)
        await self.client.close()


class ControllerChannel:
    def __init__(
        self,
        client_id: str,
        request_timeout_s: float,
        retry_backoff_s: float = 0.1,
        ssl_context: ssl.SSLContext | None = None,
        sasl: SaslClientFactory | None = None,
    ) -> None:
        self._client_id = client_id
        self._ssl_context = ssl_context
        self._sasl = sasl
        self._request_timeout_s = request_timeout_s
        self._retry_backoff_s = retry_backoff_s
        self._senders: dict[int, _Sender] = {}
        self._in_flight: dict[int, set[asyncio.Future]] = {}

    def add_broker(self, broker_id: int, host: str, port: int) -> None:
        if broker_id in self._senders:
            return
        client = BrokerClient(
            host, port, self._client_id,
            connect_timeout_s=self._request_timeout_s, request_timeout_s=self._request_timeout_s,
            ssl_context=self._ssl_context, sasl=self._sasl,
        )
        self._senders[broker_id] = _Sender(broker_id, client, self._retry_backoff_s)

    async def remove_broker(self, broker_id: int) -> None:
        sender = self._senders.pop(broker_id, None)
        for answer in self._in_flight.pop(broker_id, set()):
            if not answer.done():
                answer.set_result(None)
        if sender is not None:
            await sender.close()

    def has_broker(self, broker_id: int) -> bool:
        return broker_id in self._senders

    def send(self, broker_id: int, api_key: int, version: int, request: Any) -> asyncio.Future:
        answer = asyncio.get_running_loop().create_future()
        sender = self._senders.get(broker_id)
        if sender is None:
            answer.set_result(None)
            return answer
        in_flight = self._in_flight.setdefault(broker_id, set())
        in_flight.add(answer)
        answer.add_done_callback(in_flight.discard)
        sender.queue.put_nowait((api_key, version, request, answer))
        return answer

    async def close(self) -> None:
        for broker_id in list(self._senders):
            await self.remove_broker(broker_id)
