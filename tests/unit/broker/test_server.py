"""The broker's listeners and connection limits, in-process, over loopback sockets; the open
files limit it raises at start."""

import asyncio
import datetime
import resource
import subprocess
import sys

from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from broker.config import BrokerConfig
from broker.server import Broker, _log_manager_settings
from protocol.api_keys import ApiKey
from protocol.record_batch import iter_batches
from protocol.records import Record, build_batch, iter_records
from tests.in_process import broker_config, running_broker
from tests.kafka_wire import decode_response, encode_request

API_VERSIONS = encode_request(
    ApiKey.API_VERSIONS, 3, ApiVersionsRequest(client_software_name="t", client_software_version="1")
)


def with_broker(tmp_path, scenario, **settings):
    async def main():
        async with running_broker(tmp_path, settings) as broker:
            await scenario(broker)

    asyncio.run(main())


async def api_versions(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> int:
    writer.write(API_VERSIONS)
    size = await asyncio.wait_for(reader.readexactly(4), 5)
    body = await asyncio.wait_for(reader.readexactly(int.from_bytes(size, "big")), 5)
    return decode_response(ApiKey.API_VERSIONS, 3, size + body).error_code


async def closed_by_broker(reader: asyncio.StreamReader, within: float = 5) -> bool:
    return await asyncio.wait_for(reader.read(1), within) == b""


def test_every_listener_is_bound(tmp_path):
    async def scenario(broker):
        ports = [listener.port for listener in broker._listeners]
        assert len(set(ports)) == 2
        for port in ports:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            assert await api_versions(reader, writer) == 0
            writer.close()
        assert broker.bound_port("OTHER") == ports[1]

    with_broker(
        tmp_path,
        scenario,
        **{
            "listeners": "PLAINTEXT://127.0.0.1:0,OTHER://127.0.0.1:0",
            "advertised.listeners": "PLAINTEXT://127.0.0.1:0,OTHER://127.0.0.1:0",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT",
        },
    )


def test_connections_over_the_per_ip_limit_are_closed_at_once(tmp_path):
    async def scenario(broker):
        held = [await asyncio.open_connection("127.0.0.1", broker.port) for _ in range(2)]
        reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
        assert await closed_by_broker(reader)
        writer.close()
        for held_reader, held_writer in held:
            assert await api_versions(held_reader, held_writer) == 0
        held[0][1].close()
        await asyncio.sleep(0.1)  # the broker sees the close and gives the slot back
        reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
        assert await api_versions(reader, writer) == 0
        writer.close()

    with_broker(tmp_path, scenario, **{"max.connections.per.ip": "2"})


def test_connections_over_max_connections_are_closed_at_once(tmp_path):
    async def scenario(broker):
        held = await asyncio.open_connection("127.0.0.1", broker.port)
        reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
        assert await closed_by_broker(reader)
        assert await api_versions(*held) == 0

    with_broker(tmp_path, scenario, **{"max.connections": "1"})


def test_idle_connections_are_closed_and_active_ones_kept(tmp_path):
    async def scenario(broker):
        idle_reader, _ = await asyncio.open_connection("127.0.0.1", broker.port)
        active = await asyncio.open_connection("127.0.0.1", broker.port)
        loop = asyncio.get_running_loop()
        started = loop.time()
        for _ in range(12):  # 600 ms of requests every 50 ms
            assert await api_versions(*active) == 0
            await asyncio.sleep(0.05)
        assert await closed_by_broker(idle_reader, within=1)
        assert loop.time() - started >= 0.3
        assert await api_versions(*active) == 0

    with_broker(tmp_path, scenario, **{"connections.max.idle.ms": "300"})


def test_quiet_connections_give_their_receive_buffers_up(tmp_path):
    async def scenario(broker):
        reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
        assert await api_versions(reader, writer) == 0
        (connection,) = broker._connections
        assert len(connection._frames._buf) > 0
        await asyncio.sleep(2.5)
        assert len(connection._frames._buf) == 0
        assert await api_versions(reader, writer) == 0
        writer.close()

    with_broker(tmp_path, scenario)


def test_metadata_gives_the_endpoints_of_the_listener_asked(tmp_path):
    async def scenario(broker):
        request = MetadataRequest(topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False)
        for name in ("PLAINTEXT", "OTHER"):
            port = broker.bound_port(name)
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(encode_request(ApiKey.METADATA, 12, request))
            size = await asyncio.wait_for(reader.readexactly(4), 5)
            reply = size + await reader.readexactly(int.from_bytes(size, "big"))
            (node,) = decode_response(ApiKey.METADATA, 12, reply).brokers
            assert (node.host, node.port) == ("127.0.0.1", port)
            writer.close()

    with_broker(
        tmp_path,
        scenario,
        **{
            "listeners": "PLAINTEXT://127.0.0.1:0,OTHER://127.0.0.1:0",
            "advertised.listeners": "PLAINTEXT://127.0.0.1:0,OTHER://127.0.0.1:0",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT",
        },
    )


_RAISE_LIMIT_SCRIPT = """
import logging, resource
logging.basicConfig(level=logging.INFO, format="%(message)s")
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
from broker.server import raise_open_files_limit
from storage import descriptor_pool
raise_open_files_limit()
print(resource.getrlimit(resource.RLIMIT_NOFILE), descriptor_pool.capacity())
"""


def test_produce_requests_of_one_read_are_written_together_and_read_back_in_that_read(tmp_path, pwritev_calls):
    # Three Produce requests and a Fetch in one write: the appends wait until the read is
    # served and leave in one pwritev; the Fetch, served after them, reads all three.
    ms = datetime.timedelta(milliseconds=1)

    def produce(value: bytes) -> bytes:
        records = build_batch([Record(0, 1_000, None, value)])
        partition = PartitionProduceData(index=0, records=records)
        request = ProduceRequest(
            transactional_id=None, acks=1, timeout=5_000 * ms, topic_data=(TopicProduceData(name="t", partition_data=(partition,)),)
        )
        return encode_request(ApiKey.PRODUCE, 9, request)

    fetch = FetchRequest(
        replica_id=-1,
        max_wait=0 * ms,
        min_bytes=1,
        topics=(FetchTopic(topic="t", partitions=(FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20),)),),
        forgotten_topics_data=(),
    )

    async def scenario(broker):
        await broker.topics.create("t", 1, {})
        reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
        writer.write(b"".join(produce(b"v%d" % n) for n in range(3)) + encode_request(ApiKey.FETCH, 12, fetch))
        answers = []
        for api_key, version in [(ApiKey.PRODUCE, 9)] * 3 + [(ApiKey.FETCH, 12)]:
            size = await asyncio.wait_for(reader.readexactly(4), 5)
            answers.append(decode_response(api_key, version, size + await reader.readexactly(int.from_bytes(size, "big"))))
        writer.close()

        *produced, fetched = answers
        assert [p.responses[0].partition_responses[0].base_offset for p in produced] == [0, 1, 2]
        (partition,) = fetched.responses[0].partitions
        data = bytes(partition.records)
        values = [r.value for position, header in iter_batches(data) for r in iter_records(data[position : position + header.size])]
        assert values == [b"v0", b"v1", b"v2"]
        assert pwritev_calls == [3]

    with_broker(tmp_path, scenario)


def test_start_raises_the_soft_open_files_limit_to_the_hard_one_and_logs_both():
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    done = subprocess.run([sys.executable, "-c", _RAISE_LIMIT_SCRIPT], capture_output=True, text=True, check=True)

    assert done.stdout.split("\n")[0] == f"({hard}, {hard}) {max(64, hard // 2)}"
    assert f"soft {hard} (was 256), hard {hard}" in done.stderr


def test_the_log_checkpoint_intervals_reach_the_log_manager():
    settings = _log_manager_settings(
        BrokerConfig().with_overrides(
            {
                "log.flush.offset.checkpoint.interval.ms": "1000",
                "log.flush.start.offset.checkpoint.interval.ms": "2000",
            }
        )
    )
    assert (settings.checkpoint_interval_ms, settings.start_offset_checkpoint_interval_ms) == (1000, 2000)


def test_the_health_endpoint_says_starting_until_the_log_dirs_are_loaded_and_ready_until_the_stop(tmp_path):
    async def health(port: int) -> int:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /health HTTP/1.1\r\n\r\n")
        status = int((await reader.read()).split(b" ")[1])
        writer.close()
        return status

    async def main():
        broker = Broker(broker_config(tmp_path, {"metrics.listener": "http://127.0.0.1:0"}))
        statuses = []
        startup = broker.log_manager.startup

        async def startup_seen_from_outside():
            # While the logs load, the endpoint already answers, and says the broker is not ready.
            statuses.append(await health(broker.metrics.port))
            await startup()

        broker.log_manager.startup = startup_seen_from_outside
        await broker.start()
        statuses.append(await health(broker.metrics.port))
        await broker.stop()
        return statuses

    assert asyncio.run(main()) == [503, 200]


# Run in a fresh interpreter, since this test process has imported everything already.
_OPTIONAL_IMPORTS_SCRIPT = """
import asyncio, sys, tempfile
from tests.in_process import running_broker

async def main(extra):
    with tempfile.TemporaryDirectory() as path:
        async with running_broker(path, extra):
            pass

asyncio.run(main(eval(sys.argv[1])))
print(" ".join(sorted(name for name in ("aiohttp", "cryptography", "fsspec") if name in sys.modules)))
"""


def _optional_imports_of_a_broker(settings: dict) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", _OPTIONAL_IMPORTS_SCRIPT, repr(settings)], capture_output=True, text=True, check=True
    )
    return done.stdout.split()


def test_a_broker_without_http_tls_or_tiered_storage_does_not_load_their_libraries():
    # Each is a tenth or more of the start-up's CPU, paid by every broker and test that starts one.
    assert _optional_imports_of_a_broker({}) == []


def test_a_broker_with_http_listeners_loads_aiohttp():
    assert _optional_imports_of_a_broker({"http.listeners": "http://127.0.0.1:0"}) == ["aiohttp"]
