"""The broker client against a real in-process broker over a loopback socket."""

import asyncio
import contextlib
import datetime
import ssl

import pytest
import trustme
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.metadata.v12.request import MetadataRequest

from protocol import fetch
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.record_batch import iter_batches
from protocol.records import iter_records
from replication.broker_client import BrokerClient, BrokerConnectionError, BrokerRequestTimeoutError
from storage.topic_partition import TopicPartition
from tests.in_process import running_broker
from tests.unit.storage.conftest import batch

TOPIC = "replicated"
API_VERSIONS = ApiVersionsRequest(client_software_name="logway", client_software_version="1")
METADATA = MetadataRequest(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)


def fetch_request(offset: int, replica_id: int = -1, max_wait_ms: int = 0) -> FetchRequest:
    return FetchRequest(
        replica_id=replica_id,
        max_wait=datetime.timedelta(milliseconds=max_wait_ms),
        min_bytes=1,
        topics=(
            FetchTopic(
                topic=TOPIC,
                partitions=(FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20),),
            ),
        ),
        forgotten_topics_data=(),
    )


async def broker_with_records(tmp_path, *values: bytes, extra: dict | None = None):
    context = running_broker(tmp_path, extra)
    broker = await context.__aenter__()
    await broker.topics.create(TOPIC, 1, {})
    broker.replica_manager.append(TopicPartition(TOPIC, 0), memoryview(batch(*values)))
    return context, broker


def test_requests_of_flexible_and_legacy_header_versions_are_answered(tmp_path):
    async def main():
        async with running_broker(tmp_path) as broker:
            client = BrokerClient("127.0.0.1", broker.port, "test-client", 5, 5)
            versions = await client.send(ApiKey.API_VERSIONS, 3, API_VERSIONS)
            metadata = await client.send(ApiKey.METADATA, 12, METADATA)
            old_metadata = await client.send(ApiKey.METADATA, 1, METADATA)
            await client.close()
            port = broker.port
        assert versions.error_code == ErrorCode.none
        assert [b.port for b in metadata.brokers] == [port]
        assert [b.port for b in old_metadata.brokers] == [port]

    asyncio.run(main())


def test_fetch_records_are_slices_of_the_received_frame(tmp_path):
    async def main():
        context, broker = await broker_with_records(tmp_path, b"a", b"b", b"c")
        try:
            client = BrokerClient("127.0.0.1", broker.port, "test-client", 5, 5)
            response = await client.send(ApiKey.FETCH, 12, fetch_request(0))
            await client.close()
        finally:
            await context.__aexit__(None, None, None)
        (partition,) = response.topics[0].partitions
        assert partition.error_code == ErrorCode.none
        assert partition.high_watermark == 3
        assert isinstance(partition.records, memoryview)
        assert partition.records.obj is not None and len(partition.records.obj) > len(partition.records)
        data = partition.records
        values = [
            r.value for position, h in iter_batches(data) for r in iter_records(data[position : position + h.size])
        ]
        assert values == [b"a", b"b", b"c"]

    asyncio.run(main())


def test_a_hand_built_fetch_is_sent_as_v12_and_refused_as_any_other_request(tmp_path):
    async def main():
        context, broker = await broker_with_records(tmp_path, b"a", b"b")
        try:
            client = BrokerClient("127.0.0.1", broker.port, "test-client", 5, 5)
            wanted = fetch.FetchRequest(-1, 0, 1, 1 << 20, 0, [fetch.FetchTopic(TOPIC, [fetch.FetchPartition(0, 1, 1 << 20)])])
            response = await client.send(ApiKey.FETCH, 12, wanted)
            with pytest.raises(ValueError, match="Fetch v12"):
                await client.send(ApiKey.FETCH, 11, wanted)
            await client.close()
        finally:
            await context.__aexit__(None, None, None)
        (partition,) = response.topics[0].partitions
        assert (partition.error_code, partition.high_watermark) == (ErrorCode.none, 2)
        data = partition.records
        values = [
            r.value for position, h in iter_batches(data) for r in iter_records(data[position : position + h.size])
        ]
        assert values == [b"a", b"b"]  # a batch is read whole, from before the offset asked

    asyncio.run(main())


def test_pipelined_requests_get_their_own_answers(tmp_path):
    async def main():
        context, broker = await broker_with_records(tmp_path, b"a", b"b")
        try:
            client = BrokerClient("127.0.0.1", broker.port, "test-client", 5, 5)
            # The long poll at the log end holds the connection: the others queue behind it.
            responses = await asyncio.gather(
                client.send(ApiKey.FETCH, 12, fetch_request(2, max_wait_ms=200)),
                client.send(ApiKey.FETCH, 12, fetch_request(1)),
                client.send(ApiKey.METADATA, 12, METADATA),
                client.send(ApiKey.FETCH, 11, fetch_request(0)),
            )
            await client.close()
        finally:
            await context.__aexit__(None, None, None)
        at_end, from_one, metadata, from_zero = responses
        assert len(at_end.topics[0].partitions[0].records) == 0
        assert len(from_one.topics[0].partitions[0].records) > 0
        assert [t.name for t in metadata.topics] == [TOPIC]
        assert len(from_zero.topics[0].partitions[0].records) == len(from_one.topics[0].partitions[0].records)

    asyncio.run(main())


def test_refused_connection_raises_and_a_later_send_connects(tmp_path):
    async def main():
        async with running_broker(tmp_path) as broker:
            port = broker.port
            client = BrokerClient("127.0.0.1", port, "test-client", 5, 5)
            await client.send(ApiKey.API_VERSIONS, 3, API_VERSIONS)
        with pytest.raises(BrokerConnectionError):
            await client.send(ApiKey.API_VERSIONS, 3, API_VERSIONS)
        async with running_broker(tmp_path, {"listeners": f"PLAINTEXT://127.0.0.1:{port}"}):
            answer = await client.send(ApiKey.API_VERSIONS, 3, API_VERSIONS)
            await client.close()
        assert answer.error_code == ErrorCode.none

    asyncio.run(main())


@contextlib.asynccontextmanager
async def silent_broker():
    """A listener that takes connections and never answers: its port."""
    accepted: list[asyncio.StreamWriter] = []

    async def never_answer(_reader, writer):
        accepted.append(writer)

    server = await asyncio.start_server(never_answer, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        for writer in accepted:
            writer.close()


def test_a_silent_broker_times_out_and_every_request_in_flight_fails():
    async def main():
        async with silent_broker() as port:
            client = BrokerClient("127.0.0.1", port, "test-client", 5, 0.2)
            results = await asyncio.gather(
                client.send(ApiKey.API_VERSIONS, 3, API_VERSIONS),
                client.send(ApiKey.METADATA, 12, METADATA),
                return_exceptions=True,
            )
            await client.close()
        assert all(isinstance(r, BrokerRequestTimeoutError) for r in results), results

    asyncio.run(main())


def test_a_request_its_caller_stops_waiting_for_leaves_nothing_pending_and_the_connection_open():
    """Cancelling a send (a fetcher stopped, a shutdown) is not a timeout: the connection
    stays for the other requests, and the request's time running out later does nothing."""
    async def main():
        async with silent_broker() as port:
            client = BrokerClient("127.0.0.1", port, "test-client", 5, 0.2)
            request = asyncio.ensure_future(client.send(ApiKey.API_VERSIONS, 3, API_VERSIONS))
            await asyncio.sleep(0.05)
            request.cancel()
            with pytest.raises(asyncio.CancelledError):
                await request
            pending_after_cancel = dict(client._pending)
            await asyncio.sleep(0.3)  # past the request timeout
            open_after_timeout = client._transport is not None and not client._transport.is_closing()
            await client.close()
        assert pending_after_cancel == {}
        assert open_after_timeout

    asyncio.run(main())


def test_a_connection_closed_by_the_broker_fails_the_request_in_flight():
    async def main():
        async def hang_up(_reader, writer):
            await _reader.read(4)
            writer.close()

        server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = BrokerClient("127.0.0.1", port, "test-client", 5, 5)
        with pytest.raises(BrokerConnectionError):
            await client.send(ApiKey.API_VERSIONS, 3, API_VERSIONS)
        await client.close()
        server.close()

    asyncio.run(main())


class _ClosedUnderneath:
    """A transport as uvloop leaves it when the connection closed before its loss was reported:
    not closing, yet writing raises RuntimeError."""

    aborted = False

    def is_closing(self) -> bool:
        return False

    def write(self, _data: bytes) -> None:
        raise RuntimeError("unable to perform operation on <TCPTransport closed=True>; the handler is closed")

    def abort(self) -> None:
        self.aborted = True


def test_a_write_on_a_connection_closed_underneath_fails_as_a_connection_error_and_the_next_send_reconnects(tmp_path):
    async def main():
        async with running_broker(tmp_path) as broker:
            client = BrokerClient("127.0.0.1", broker.port, "test-client", 5, 5)
            await client.send(ApiKey.API_VERSIONS, 3, API_VERSIONS)
            client._transport.abort()
            client._transport = closed = _ClosedUnderneath()
            with pytest.raises(BrokerConnectionError):
                await client.send(ApiKey.API_VERSIONS, 3, API_VERSIONS)
            assert closed.aborted
            answer = await client.send(ApiKey.API_VERSIONS, 3, API_VERSIONS)
            await client.close()
        assert answer.error_code == ErrorCode.none

    asyncio.run(main())


SASL_LISTENER = {
    "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
    "advertised.listeners": "SASL_PLAINTEXT://127.0.0.1:0",
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
        'org.apache.kafka.common.security.plain.PlainLoginModule required user_broker="broker-secret";'
    ),
    "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": (
        "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    ),
}


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_a_sasl_login_authenticates_each_connection_before_its_first_request(tmp_path, mechanism):
    from broker.security import scram
    from broker.security.sasl_clients import client_factory
    from broker.security.sasl_config import InterBrokerSasl
    from broker.security.scram_store import Upsertion

    async def main():
        async with running_broker(tmp_path, SASL_LISTENER) as broker:
            salted = scram.salted_password(scram.SCRAM_SHA_512, "broker-secret", b"salt", 4096)
            await broker.scram_credentials.alter([Upsertion("broker", 2, 4096, b"salt", salted)], [])
            login = client_factory(InterBrokerSasl(mechanism, "broker", "broker-secret"))
            client = BrokerClient("127.0.0.1", broker.port, "test-client", 5, 5, sasl=login)
            metadata = await client.send(ApiKey.METADATA, 12, METADATA)
            await client.close()
            again = await client.send(ApiKey.METADATA, 12, METADATA)  # a new connection, authenticated again
            await client.close()
            return metadata, again

    metadata, again = asyncio.run(main())
    assert metadata.brokers and again.brokers


def test_a_refused_sasl_login_is_a_connection_error(tmp_path):
    from broker.security.sasl_clients import client_factory
    from broker.security.sasl_config import InterBrokerSasl

    async def main():
        async with running_broker(tmp_path, SASL_LISTENER) as broker:
            client = BrokerClient(
                "127.0.0.1", broker.port, "test-client", 5, 5,
                sasl=client_factory(InterBrokerSasl("PLAIN", "broker", "wrong")),
            )
            with pytest.raises(BrokerConnectionError, match="Invalid username or password"):
                await client.send(ApiKey.METADATA, 12, METADATA)
            await client.close()

    asyncio.run(main())


def tls_broker_settings(tmp_path, ca) -> dict:
    keystore = tmp_path / "broker.pem"
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(keystore))
    return {
        "listeners": "SSL://127.0.0.1:0",
        "advertised.listeners": "SSL://127.0.0.1:0",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(keystore),
    }


def test_fetch_over_tls_with_an_ssl_context(tmp_path):
    async def main():
        ca = trustme.CA()
        context, broker = await broker_with_records(
            tmp_path, b"a", b"b", b"c", extra=tls_broker_settings(tmp_path, ca)
        )
        try:
            client_context = ssl.create_default_context()
            ca.configure_trust(client_context)
            client = BrokerClient("127.0.0.1", broker.port, "test-client", 5, 5, ssl_context=client_context)
            response = await client.send(ApiKey.FETCH, 12, fetch_request(0))
            await client.close()
        finally:
            await context.__aexit__(None, None, None)
        data = response.topics[0].partitions[0].records
        values = [
            r.value for position, h in iter_batches(data) for r in iter_records(data[position : position + h.size])
        ]
        assert values == [b"a", b"b", b"c"]

    asyncio.run(main())


def test_an_untrusted_broker_certificate_is_a_connection_error(tmp_path):
    async def main():
        context, broker = await broker_with_records(tmp_path, b"a", extra=tls_broker_settings(tmp_path, trustme.CA()))
        try:
            client_context = ssl.create_default_context()
            trustme.CA().configure_trust(client_context)  # another CA
            client = BrokerClient("127.0.0.1", broker.port, "test-client", 5, 5, ssl_context=client_context)
            with pytest.raises(BrokerConnectionError, match="certificate verify failed"):
                await client.send(ApiKey.API_VERSIONS, 3, API_VERSIONS)
        finally:
            await context.__aexit__(None, None, None)

    asyncio.run(main())
