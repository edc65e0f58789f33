"""metrics.listener: a small HTTP/1.1 server on the broker's event loop.

GET /metrics answers the metrics in Prometheus' text format (OpenMetrics when the scraper's
Accept header asks for it); GET /health (or /ready) answers 200 "ready" once the broker is ready
and 503 "starting" before. Each connection gets one answer and is closed (Connection: close).

Why on the loop (asyncio.start_server) and not prometheus_client's start_http_server thread or
aiohttp: the collectors read loop-owned state (partitions, logs, groups), which other threads
may not read; two GET routes need no framework, and the request line is all that is read. The
state is read on the loop (`snapshot`); building the families and the text from it runs on a
thread, so that a large scrape does not hold the loop.
"""

import asyncio
import logging
from collections.abc import Callable

from prometheus_client.core import Metric
from prometheus_client.exposition import choose_encoder

from broker.metrics.collectors import Built

log = logging.getLogger(__name__)

_MAX_HEAD_BYTES = 16 * 1024  # request line and headers
_READ_TIMEOUT_S = 10.0


class MetricsEndpoint:
    def __init__(self, snapshot: Callable[[], Callable[[], list[Metric]]], ready: Callable[[], bool]) -> None:
        """`snapshot()`, on the loop, reads the metrics; what it returns builds them, anywhere."""
        self._snapshot = snapshot
        self._ready = ready
        self._server: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> None:
        try:
            self._server = await asyncio.start_server(self._serve, host or None, port, limit=_MAX_HEAD_BYTES)
        except OSError as exc:
            raise OSError(exc.errno, f"metrics.listener http://{host}:{port}: {exc.strerror or exc}") from exc

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _READ_TIMEOUT_S)
            status, content_type, body = await self._answer(head.decode("latin-1"))
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError, ConnectionError):
            writer.close()
            return
        except Exception:  # a collector's bug: the scrape fails, the broker goes on
            log.exception("reading the metrics failed")
            status, content_type, body = "500 Internal Server Error", "text/plain; charset=utf-8", b"error\n"
        writer.write(
            f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n".encode("latin-1")
            + body
        )
        try:
            await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def _answer(self, head: str) -> tuple[str, str, bytes]:
        request_line, _, header_text = head.partition("\r\n")
        parts = request_line.split(" ")
        if len(parts) != 3:
            return "400 Bad Request", "text/plain; charset=utf-8", b"bad request\n"
        method, target, _version = parts
        if method != "GET":
            return "405 Method Not Allowed", "text/plain; charset=utf-8", b"GET only\n"
        path = target.split("?", 1)[0]
        if path == "/metrics":
            headers = _headers(header_text)
            encoder, content_type = choose_encoder(headers.get("accept", ""))
            built = Built(self._snapshot())
            return "200 OK", content_type, await asyncio.to_thread(encoder, built)
        if path in ("/health", "/ready"):
            if self._ready():
                return "200 OK", "text/plain; charset=utf-8", b"ready\n"
            return "503 Service Unavailable", "text/plain; charset=utf-8", b"starting\n"
        return "404 Not Found", "text/plain; charset=utf-8", b"not found: GET /metrics or /health\n"


def _headers(text: str) -> dict[str, str]:
    headers = {}
    for line in text.split("\r\n"):
        name, colon, value = line.partition(":")
        if colon:
            headers[name.strip().lower()] = value.strip()
    return headers
