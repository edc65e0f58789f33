"""An in-process broker with its HTTP API, and an aiohttp client for it (tests/in_process.py)."""

import contextlib

import aiohttp

from tests.in_process import running_broker


@contextlib.asynccontextmanager
async def http_broker(tmp_path, extra: dict | None = None):
    """(broker, session, base URL) of a broker serving the HTTP API on a free port."""
    settings = {"http.listeners": "http://127.0.0.1:0", "group.initial.rebalance.delay.ms": "0", **(extra or {})}
    async with running_broker(tmp_path, settings) as broker:
        async with aiohttp.ClientSession() as session:
            yield broker, session, f"http://127.0.0.1:{broker.http_api.ports[0]}"
