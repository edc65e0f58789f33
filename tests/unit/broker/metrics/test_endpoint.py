"""metrics.listener's HTTP server, on the test's event loop, read by a plain HTTP client."""

import asyncio

import pytest
from prometheus_client import CollectorRegistry, Counter

from broker.metrics.endpoint import MetricsEndpoint


async def get(port: int, path: str, method: str = "GET", accept: str = "") -> tuple[int, str, str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    headers = f"Accept: {accept}\r\n" if accept else ""
    writer.write(f"{method} {path} HTTP/1.1\r\nHost: test\r\n{headers}\r\n".encode())
    answer = (await reader.read()).decode()  # the server closes the connection after its answer
    writer.close()
    head, _, body = answer.partition("\r\n\r\n")
    status = int(head.split(" ")[1])
    content_type = next(l.split(":", 1)[1].strip() for l in head.split("\r\n") if l.lower().startswith("content-type"))
    return status, content_type, body


def serve(scenario, ready):
    registry = CollectorRegistry()
    Counter("logway_test_events", "events", registry=registry).inc(3)

    async def main():
        endpoint = MetricsEndpoint(lambda: lambda: list(registry.collect()), ready)
        await endpoint.start("127.0.0.1", 0)
        try:
            return await scenario(endpoint.port)
        finally:
            await endpoint.stop()

    return asyncio.run(main())


def test_metrics_are_served_in_prometheus_text_format_and_openmetrics_on_request():
    async def scenario(port):
        return await get(port, "/metrics"), await get(port, "/metrics", accept="application/openmetrics-text")

    (status, content_type, body), (_, openmetrics_type, openmetrics) = serve(scenario, lambda: True)
    assert status == 200 and content_type.startswith("text/plain; version=0.0.4")
    assert "logway_test_events_total 3.0" in body
    assert openmetrics_type.startswith("application/openmetrics-text") and openmetrics.endswith("# EOF\n")


def test_health_answers_503_until_the_broker_is_ready():
    state = {"ready": False}

    async def scenario(port):
        before = await get(port, "/health")
        state["ready"] = True
        return before, await get(port, "/health"), await get(port, "/ready")

    before, after, ready = serve(scenario, lambda: state["ready"])
    assert (before[0], before[2]) == (503, "starting\n")
    assert (after[0], after[2]) == (200, "ready\n")
    assert ready[0] == 200


def test_other_paths_and_methods_are_refused():
    async def scenario(port):
        return (await get(port, "/nope"))[0], (await get(port, "/metrics", method="POST"))[0]

    assert serve(scenario, lambda: True) == (404, 405)


def test_a_port_in_use_fails_the_start_naming_metrics_listener():
    async def main():
        taken = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = taken.sockets[0].getsockname()[1]
        try:
            await MetricsEndpoint(lambda: list, lambda: True).start("127.0.0.1", port)
        finally:
            taken.close()

    with pytest.raises(OSError, match=r"metrics.listener http://127.0.0.1:\d+: "):
        asyncio.run(main())
