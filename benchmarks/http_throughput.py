"""Records/s over the HTTP API against the Kafka protocol, in one run (issue 17).

    python -m benchmarks.http_throughput [--records 200000] [--batch 500] [--size 100] [--concurrency 4]

One standalone logway broker with http.listeners; the same number of `size`-byte records is
written to a fresh one-partition topic four ways, one after another, acks=all:
- kafka: confluent-kafka's Producer (librdkafka, linger.ms=5), flushed;
- v3 batched: POST /v3/clusters/{id}/topics/{t}/records, `batch` BINARY records per request;
- v3 chunked: the same records in `concurrency` chunked requests (the proxy's streamed mode),
  written `batch` records per chunk while their results are read;
- v2: POST /topics/{t} (binary), `batch` records per request;
- v3 one record per request (a tenth of the records: it is the slow case).
The HTTP writers are aiohttp clients with `concurrency` requests in flight. Each figure is
records / wall-clock seconds from the first send to the last answer. Bounded by the record count
and a deadline per way.
"""

import argparse
import asyncio
import base64
import json
import tempfile
import time
from pathlib import Path

import aiohttp
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.harness import BrokerProcess, free_port

_DEADLINE_S = 300


def _kafka(bootstrap: str, topic: str, records: int, value: bytes) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    started = time.monotonic()
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.01)
        if time.monotonic() - started > _DEADLINE_S:
            raise TimeoutError("kafka producer over the deadline")
    assert producer.flush(_DEADLINE_S) == 0
    return records / (time.monotonic() - started)


async def _http(url: str, bodies: list[tuple[bytes, str]], concurrency: int) -> None:
    queue = list(reversed(bodies))
    deadline = time.monotonic() + _DEADLINE_S

    async def worker(session: aiohttp.ClientSession) -> None:
        while queue and time.monotonic() < deadline:
            body, content_type = queue.pop()
            async with session.post(url, data=body, headers={"Content-Type": content_type}) as response:
                text = await response.text()
                # Every record's result must be a success (v3 with several records: one line per record).
                compact = text.replace(" ", "")
                if response.status != 200 or '"error_code":4' in compact or '"error_code":5' in compact:
                    raise RuntimeError(f"{response.status}: {text[:200]}")

    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    if queue:
        raise TimeoutError("HTTP writers over the deadline")


async def _chunked(url: str, chunk: bytes, chunks: int, batch: int, concurrency: int) -> None:
    async def stream(session: aiohttp.ClientSession) -> None:
        async def body():
            for _ in range(chunks):
                yield chunk

        async with session.post(url, data=body(), headers={"Content-Type": "application/json"}) as response:
            answered = 0
            async for line in response.content:
                if response.status != 200 or b'"error_code":200' not in line:
                    raise RuntimeError(f"{response.status}: {line[:200]!r}")
                answered += 1
        if answered != chunks * batch:
            raise RuntimeError(f"{answered} results for {chunks * batch} records")

    async with aiohttp.ClientSession() as session:
        await asyncio.wait_for(asyncio.gather(*(stream(session) for _ in range(concurrency))), _DEADLINE_S)


def _timed(url: str, bodies, records: int, concurrency: int) -> float:
    started = time.monotonic()
    asyncio.run(_http(url, bodies, concurrency))
    return records / (time.monotonic() - started)


def measure(records: int, batch: int, size: int, concurrency: int, directory: Path) -> dict[str, float]:
    http_port = free_port()
    broker = BrokerProcess(directory / "data", {"http.listeners": f"http://127.0.0.1:{http_port}"}).start()
    try:
        base = f"http://127.0.0.1:{http_port}"
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        topics = ["kafka", "v3", "v3chunked", "v2", "v3single"]
        for future in admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
            future.result(30)
        value = b"x" * size
        encoded = base64.b64encode(value).decode()
        v3_record = json.dumps({"value": {"type": "BINARY", "data": encoded}})
        v3_body = "\n".join([v3_record] * batch).encode()
        v2_body = json.dumps({"records": [{"value": encoded}] * batch}).encode()
        cluster = asyncio.run(_cluster_id(base))
        results = {"kafka": _kafka(broker.bootstrap, "kafka", records, value)}
        requests = records // batch
        results["v3 batched"] = _timed(f"{base}/v3/clusters/{cluster}/topics/v3/records",
                                        [(v3_body, "application/json")] * requests, requests * batch, concurrency)
        chunks = requests // concurrency
        started = time.monotonic()
        asyncio.run(_chunked(f"{base}/v3/clusters/{cluster}/topics/v3chunked/records", v3_body + b"\n", chunks, batch,
                             concurrency))
        results["v3 chunked"] = chunks * concurrency * batch / (time.monotonic() - started)
        results["v2"] = _timed(f"{base}/topics/v2", [(v2_body, "application/vnd.kafka.binary.v2+json")] * requests,
                               requests * batch, concurrency)
        single = records // 10
        results["v3 one record per request"] = _timed(
            f"{base}/v3/clusters/{cluster}/topics/v3single/records", [(v3_record.encode(), "application/json")] * single,
            single, concurrency)
        return results
    finally:
        broker.stop()


async def _cluster_id(base: str) -> str:
    async with aiohttp.ClientSession() as session, session.get(f"{base}/v3/clusters") as response:
        return (await response.json())["data"][0]["cluster_id"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        results = measure(args.records, args.batch, args.size, args.concurrency, Path(directory))
    kafka = results["kafka"]
    for name, rate in results.items():
        print(f"{name:28s} {rate:12,.0f} records/s  {rate / kafka:6.2f}x kafka")


if __name__ == "__main__":
    main()
