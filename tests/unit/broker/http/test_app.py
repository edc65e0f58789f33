"""broker.http.app: https listeners reuse the broker's ssl.* settings; bodies are bounded."""

import asyncio
import ssl

import trustme

from tests.unit.broker.http.conftest import http_broker


def test_an_https_listener_serves_with_the_brokers_ssl_keystore(tmp_path):
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    keystore = tmp_path / "server.pem"
    keystore.write_bytes(cert.private_key_pem.bytes() + b"".join(c.bytes() for c in cert.cert_chain_pems))
    client = ssl.create_default_context()
    ca.configure_trust(client)

    async def scenario():
        extra = {"http.listeners": "https://127.0.0.1:0", "ssl.keystore.type": "PEM",
                 "ssl.keystore.location": str(keystore)}
        async with http_broker(tmp_path / "data", extra) as (broker, session, base):
            url = base.replace("http://", "https://") + "/v3/clusters"
            async with session.get(url, ssl=client) as response:
                return response.status, (await response.json())["data"][0]["cluster_id"] == broker.cluster_id

    assert asyncio.run(scenario()) == (200, True)


def test_a_chunked_body_over_the_limit_is_413_too(tmp_path):
    # v2 produce reads its whole body; a streamed v3 produce is bounded per record (test_v3).
    async def scenario():
        async with http_broker(tmp_path, {"http.max.request.bytes": "1000"}) as (broker, session, base):
            await broker.topics.create("t", 1, {})

            async def chunks():
                yield b'{"records": ['
                for _ in range(10):
                    yield b'{"value": "' + b"x" * 200 + b'"},'
                yield b'{"value": null}]}'

            headers = {"Content-Type": "application/vnd.kafka.binary.v2+json"}
            async with session.post(f"{base}/topics/t", data=chunks(), headers=headers) as response:
                return response.status, (await response.json())["error_code"]

    assert asyncio.run(scenario()) == (413, 413)
