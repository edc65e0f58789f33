"""DescribeClientQuotas, AlterClientQuotas and quota enforcement through the dispatcher of an
in-process standalone broker (no sockets). User quotas are exercised with built Sessions, since
only SASL and TLS give a connection a principal other than User:ANONYMOUS."""

import asyncio
import dataclasses
import datetime
import functools
import inspect

import pytest
from kio.schema.alter_client_quotas.v1.request import AlterClientQuotasRequest, EntityData, EntryData, OpData
from kio.schema.describe_client_quotas.v1.request import ComponentData, DescribeClientQuotasRequest
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from broker.handlers import HANDLERS
from broker.responses import ThrottledResponse
from broker.security.quotas import DEFAULT, QuotaEntity
from broker.session import KafkaPrincipal, Session
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.fetch import decode_fetch_response
from protocol.headers import parse_response_header, response_header_is_flexible
from protocol.records import Record, build_batch
from tests.in_process import CLIENT_ADDRESS, running_broker
from tests.kafka_wire import decode_response, encode_request

USER, CLIENT_ID = "user", "client-id"
EXACT, DEFAULT_MATCH, SPECIFIED = 0, 1, 2


def in_loop(test):
    @functools.wraps(test)
    def run(*args, **kwargs):
        return asyncio.run(test(*args, **kwargs))

    return run


def session_of(user: str = "ANONYMOUS") -> Session:
    return Session(CLIENT_ADDRESS, "PLAINTEXT", principal=KafkaPrincipal("User", user))


async def exchange(broker, api_key, version, request, *, client_id="test", user="ANONYMOUS"):
    """The response frame's chunks, as the connection would get them (a ThrottledResponse when
    the client is over a quota)."""
    frame = encode_request(api_key, version, request, client_id=client_id)
    chunks = broker._dispatcher.dispatch(memoryview(bytearray(frame))[4:], session_of(user))
    if inspect.isawaitable(chunks):
        chunks = await chunks
    return chunks


def joined(chunks) -> bytes:
    return b"".join(chunk.read() if hasattr(chunk, "read") else bytes(chunk) for chunk in chunks)


async def call(broker, api_key, version, request, **kwargs):
    return decode_response(api_key, version, joined(await exchange(broker, api_key, version, request, **kwargs)))


def entity(*parts: tuple[str, str | None]) -> tuple[EntityData, ...]:
    return tuple(EntityData(entity_type=t, entity_name=n) for t, n in parts)


def alter_request(*entries, validate_only=False) -> AlterClientQuotasRequest:
    """entries: (entity parts, {key: value or None to remove})."""
    return AlterClientQuotasRequest(
        entries=tuple(
            EntryData(
                entity=entity(*parts),
                ops=tuple(
                    OpData(key=k, value=0.0 if v is None else float(v), remove=v is None) for k, v in ops.items()
                ),
            )
            for parts, ops in entries
        ),
        validate_only=validate_only,
    )


async def alter(broker, *entries, version=1, validate_only=False):
    response = await call(broker, ApiKey.ALTER_CLIENT_QUOTAS, version, alter_request(*entries, validate_only=validate_only))
    return [(e.error_code, e.error_message) for e in response.entries]


async def describe(broker, *components, strict=False, version=1):
    """{((type, name), ...): {key: value}}, or the response's (error code, message)."""
    request = DescribeClientQuotasRequest(
        components=tuple(ComponentData(entity_type=t, match_type=m, match=n) for t, m, n in components),
        strict=strict,
    )
    response = await call(broker, ApiKey.DESCRIBE_CLIENT_QUOTAS, version, request)
    if response.error_code != ErrorCode.none:
        return response.error_code, response.error_message
    return {
        tuple((e.entity_type, e.entity_name) for e in entry.entity): {v.key: v.value for v in entry.values}
        for entry in response.entries
    }


# ------------------------------------------------------------------------------ Alter/Describe


@pytest.mark.parametrize("version", [0, 1])
@in_loop
async def test_altered_quotas_are_described_and_removal_restores_the_default(tmp_path, version):
    async with running_broker(tmp_path) as broker:
        assert await alter(
            broker,
            (((CLIENT_ID, "app"),), {"producer_byte_rate": 1024}),
            (((CLIENT_ID, None),), {"producer_byte_rate": 100}),
            (((USER, "alice"), (CLIENT_ID, None)), {"request_percentage": 12.5, "consumer_byte_rate": 2048}),
            version=version,
        ) == [(ErrorCode.none, None)] * 3
        assert await describe(broker, version=version) == {
            ((CLIENT_ID, "app"),): {"producer_byte_rate": 1024.0},
            ((CLIENT_ID, None),): {"producer_byte_rate": 100.0},
            ((USER, "alice"), (CLIENT_ID, None)): {"request_percentage": 12.5, "consumer_byte_rate": 2048.0},
        }
        assert broker.client_quotas.produce.quota("ANONYMOUS", "app") == 1024

        assert await alter(broker, (((CLIENT_ID, "app"),), {"producer_byte_rate": None})) == [(ErrorCode.none, None)]
        assert ((CLIENT_ID, "app"),) not in await describe(broker)
        assert broker.client_quotas.produce.quota("ANONYMOUS", "app") == 100


@in_loop
async def test_describe_filters_as_kafka_does(tmp_path):
    async with running_broker(tmp_path) as broker:
        await alter(
            broker,
            (((USER, "alice"),), {"producer_byte_rate": 1}),
            (((USER, None),), {"producer_byte_rate": 2}),
            (((USER, "alice"), (CLIENT_ID, "app")), {"producer_byte_rate": 3}),
            (((CLIENT_ID, "app"),), {"producer_byte_rate": 4}),
        )
        alice, default_user = ((USER, "alice"),), ((USER, None),)
        alice_app, app = ((USER, "alice"), (CLIENT_ID, "app")), ((CLIENT_ID, "app"),)
        assert set(await describe(broker, (USER, EXACT, "alice"))) == {alice, alice_app}
        assert set(await describe(broker, (USER, EXACT, "alice"), strict=True)) == {alice}
        assert set(await describe(broker, (USER, DEFAULT_MATCH, None))) == {default_user}
        assert set(await describe(broker, (USER, SPECIFIED, None))) == {alice, default_user, alice_app}
        assert set(await describe(broker, (CLIENT_ID, SPECIFIED, None), strict=True)) == {app}
        assert set(await describe(broker, (USER, SPECIFIED, None), (CLIENT_ID, EXACT, "app"))) == {alice_app}
        assert set(await describe(broker, strict=True)) == set()
        assert await describe(broker, ("ip", SPECIFIED, None)) == {}


@pytest.mark.parametrize(
    "components, error",
    [
        ([("", SPECIFIED, None)], (ErrorCode.invalid_request, "Unexpected empty filter component entity type")),
        ([("group", SPECIFIED, None)], (ErrorCode.unsupported_version, "Custom entity type 'group' not supported")),
        ([(USER, SPECIFIED, None), (USER, DEFAULT_MATCH, None)], (ErrorCode.invalid_request, "Duplicate user filter component entity type")),
        ([(USER, 7, None)], (ErrorCode.invalid_request, "Unexpected match type: 7")),
        ([("ip", SPECIFIED, None), (USER, SPECIFIED, None)], (
            ErrorCode.invalid_request,
            "Invalid entity filter component combination, IP filter component should not be used with user or "
            "clientId filter component.",
        )),
    ],
)
@in_loop
async def test_describe_refuses_a_bad_filter(tmp_path, components, error):
    async with running_broker(tmp_path) as broker:
        assert await describe(broker, *components) == error


@pytest.mark.parametrize(
    "parts, ops, message",
    [
        ((), {"producer_byte_rate": 1}, "Invalid empty client quota entity"),
        (((USER, "a"), (USER, "b")), {"producer_byte_rate": 1}, "Invalid client quota entity, duplicate entity entry user"),
        ((("group", "g"),), {"producer_byte_rate": 1}, "Unhandled client quota entity type: group"),
        (((CLIENT_ID, ""),), {"producer_byte_rate": 1}, "Empty client-id not supported"),
        (((CLIENT_ID, "c"),), {"fetch_rate": 1}, "Invalid configuration key fetch_rate"),
        (((USER, "u"),), {"SCRAM-SHA-256": 1}, "Invalid configuration key SCRAM-SHA-256"),
        (((CLIENT_ID, "c"),), {"producer_byte_rate": 10.5}, "Configuration producer_byte_rate must be a LONG value"),
        (((CLIENT_ID, "c"),), {"consumer_byte_rate": 0}, "Quota consumer_byte_rate must be greater than 0"),
        (((CLIENT_ID, "c"),), {"request_percentage": -1}, "Quota request_percentage must be greater than 0"),
        ((("ip", "10.0.0.1"),), {"connection_creation_rate": 1}, "logway does not enforce IP quotas (connection_creation_rate)"),
    ],
)
@in_loop
async def test_alter_refuses_bad_entries_each_on_its_own(tmp_path, parts, ops, message):
    async with running_broker(tmp_path) as broker:
        good = (((CLIENT_ID, "fine"),), {"producer_byte_rate": 5})
        assert await alter(broker, (parts, ops), good) == [(ErrorCode.invalid_request, message), (ErrorCode.none, None)]
        assert set(broker.client_quotas.configs) == {QuotaEntity(None, "fine")}


@in_loop
async def test_validate_only_checks_and_changes_nothing(tmp_path):
    async with running_broker(tmp_path) as broker:
        ok = (((CLIENT_ID, "c"),), {"producer_byte_rate": 5})
        bad = (((CLIENT_ID, "c"),), {"producer_byte_rate": 0.5})
        assert await alter(broker, ok, bad, validate_only=True) == [
            (ErrorCode.none, None),
            (ErrorCode.invalid_request, "Configuration producer_byte_rate must be a LONG value"),
        ]
        assert await describe(broker) == {}
        assert not broker.client_quotas.enabled


@in_loop
async def test_quotas_survive_a_restart_in_the_log_dirs(tmp_path):
    async with running_broker(tmp_path) as broker:
        await alter(broker, (((USER, "a b*"), (CLIENT_ID, None)), {"consumer_byte_rate": 77}))
    assert (tmp_path / "logway-client-quotas.json").exists()
    async with running_broker(tmp_path) as broker:
        assert await describe(broker) == {((USER, "a b*"), (CLIENT_ID, None)): {"consumer_byte_rate": 77.0}}
        assert broker.client_quotas.fetch.quota("a b*", "any") == 77


# ------------------------------------------------------------------------------ enforcement


def produce_request(size: int, acks: int = 1) -> ProduceRequest:
    batch = build_batch([Record(0, 1_700_000_000_000, None, b"x" * size)])
    return ProduceRequest(
        transactional_id=None,
        acks=acks,
        timeout=datetime.timedelta(seconds=5),
        topic_data=(TopicProduceData(name="t", partition_data=(PartitionProduceData(index=0, records=batch),)),),
    )


@pytest.mark.parametrize("version", [3, 8, 9])
@in_loop
async def test_a_producer_over_its_quota_gets_the_throttle_time_and_a_muted_connection(tmp_path, version):
    async with running_broker(tmp_path) as broker:
        await broker.topics.create("t", 1, {})
        await alter(broker, (((CLIENT_ID, "slow"),), {"producer_byte_rate": 1000}))
        # 20 kB against 1000 B/s over the 10 s minimum span: 2 kB/s, throttled about 10 s.
        chunks = await exchange(broker, ApiKey.PRODUCE, version, produce_request(20_000), client_id="slow")
        response = decode_response(ApiKey.PRODUCE, version, joined(chunks))
        assert response.responses[0].partition_responses[0].error_code == ErrorCode.none
        throttle_ms = response.throttle_time.total_seconds() * 1000
        assert 9_000 < throttle_ms < 11_000
        assert isinstance(chunks, ThrottledResponse) and chunks.throttle_s == throttle_ms / 1000
        # Another client-id has no quota: not throttled.
        other = await call(broker, ApiKey.PRODUCE, version, produce_request(20_000), client_id="fast")
        assert other.throttle_time == datetime.timedelta(0)


@in_loop
async def test_an_acks_0_producer_over_its_quota_is_muted_without_an_answer(tmp_path):
    async with running_broker(tmp_path) as broker:
        await broker.topics.create("t", 1, {})
        await alter(broker, (((CLIENT_ID, "slow"),), {"producer_byte_rate": 1000}))
        chunks = await exchange(broker, ApiKey.PRODUCE, 9, produce_request(20_000, acks=0), client_id="slow")
        assert isinstance(chunks, ThrottledResponse) and list(chunks) == [] and chunks.throttle_s > 9


@in_loop
async def test_a_user_quota_throttles_that_users_clients_only(tmp_path):
    async with running_broker(tmp_path) as broker:
        await broker.topics.create("t", 1, {})
        await alter(broker, (((USER, "alice"),), {"producer_byte_rate": 1000}))
        alice = await call(broker, ApiKey.PRODUCE, 9, produce_request(20_000), user="alice", client_id="a")
        bob = await call(broker, ApiKey.PRODUCE, 9, produce_request(20_000), user="bob", client_id="a")
        assert alice.throttle_time > datetime.timedelta(seconds=9)
        assert bob.throttle_time == datetime.timedelta(0)


@in_loop
async def test_the_default_user_quota_applies_to_anonymous_clients(tmp_path):
    async with running_broker(tmp_path) as broker:
        await broker.topics.create("t", 1, {})
        await alter(broker, (((USER, None),), {"producer_byte_rate": 1000}))
        response = await call(broker, ApiKey.PRODUCE, 9, produce_request(20_000))
        assert response.throttle_time > datetime.timedelta(seconds=9)


METADATA_ALL = MetadataRequest(
    topics=None,
    allow_auto_topic_creation=False,
    include_topic_authorized_operations=False,
)


def fetch_request(max_bytes: int = 10 << 20, session_id: int = 0, session_epoch: int = -1) -> FetchRequest:
    return FetchRequest(
        max_wait=datetime.timedelta(0),
        min_bytes=1,
        max_bytes=max_bytes,
        isolation_level=0,
        session_id=session_id,
        session_epoch=session_epoch,
        topics=(FetchTopic(topic="t", partitions=(FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=10 << 20),)),),
        forgotten_topics_data=(),
        rack_id="",
    )


def fetch_response(chunks):
    data = memoryview(joined(chunks))[4:]
    _, body_start = parse_response_header(data, response_header_is_flexible(ApiKey.FETCH, True))
    return decode_fetch_response(12, data[body_start:])


async def three_batches_and_a_reader_quota(broker) -> None:
    """Topic t with three 5 kB batches, and client id "reader" held to 1000 B/s."""
    await broker.topics.create("t", 1, {})
    for _ in range(3):
        await call(broker, ApiKey.PRODUCE, 9, produce_request(5_000))
    await alter(broker, (((CLIENT_ID, "reader"),), {"consumer_byte_rate": 1000}))


@in_loop
async def test_a_consumer_over_its_quota_gets_an_empty_throttled_fetch(tmp_path):
    async with running_broker(tmp_path) as broker:
        await three_batches_and_a_reader_quota(broker)
        # The quota caps a fetch at 10 windows' worth (10 kB): one of the three 5 kB batches.
        first = fetch_response(await exchange(broker, ApiKey.FETCH, 12, fetch_request(), client_id="reader"))
        assert 5_000 < len(first.topics[0].partitions[0].records) < 6_000 and first.throttle_time_ms == 0
        # Another 5 kB takes it over its quota: answered with no partitions instead.
        chunks = await exchange(broker, ApiKey.FETCH, 12, fetch_request(), client_id="reader")
        second = fetch_response(chunks)
        assert second.topics == [] and second.throttle_time_ms > 0
        assert isinstance(chunks, ThrottledResponse)
        # A consumer without a quota reads everything at once.
        other = fetch_response(await exchange(broker, ApiKey.FETCH, 12, fetch_request(), client_id="other"))
        assert len(other.topics[0].partitions[0].records) > 15_000 and other.throttle_time_ms == 0


@in_loop
async def test_a_throttled_fetch_closes_its_fetch_session(tmp_path):
    # The session would remember having answered what the throttled answer dropped.
    async with running_broker(tmp_path) as broker:
        await three_batches_and_a_reader_quota(broker)
        first = fetch_response(await exchange(broker, ApiKey.FETCH, 12, fetch_request(session_epoch=0), client_id="reader"))
        assert first.session_id in broker.fetch_sessions.sessions
        throttled = fetch_response(await exchange(
            broker, ApiKey.FETCH, 12, fetch_request(session_id=first.session_id, session_epoch=1), client_id="reader"
        ))
        assert (throttled.throttle_time_ms > 0, throttled.session_id, throttled.topics) == (True, 0, [])
        assert not broker.fetch_sessions.sessions


@in_loop
async def test_request_time_over_request_percentage_is_throttled_at_most_one_window(tmp_path):
    async with running_broker(tmp_path) as broker:
        # 0.0001 % of the loop over the 10 s span is 10 microseconds of handler time: a few
        # Metadata requests use that up, whatever the machine.
        await alter(broker, (((CLIENT_ID, "busy"),), {"request_percentage": 0.0001}))
        throttles = []
        for _ in range(50):
            response = await call(broker, ApiKey.METADATA, 12, METADATA_ALL, client_id="busy")
            throttles.append(response.throttle_time.total_seconds() * 1000)
        assert max(throttles) > 0
        assert max(throttles) <= 1000  # quota.window.size.seconds
        idle = await call(broker, ApiKey.METADATA, 12, METADATA_ALL, client_id="idle")
        assert idle.throttle_time == datetime.timedelta(0)


@in_loop
async def test_quota_entities_are_named_as_kafka_names_them(tmp_path):
    async with running_broker(tmp_path) as broker:
        await alter(broker, (((USER, None), (CLIENT_ID, "x")), {"producer_byte_rate": 9}))
        assert broker.client_quotas.configs == {QuotaEntity(DEFAULT, "x"): {"producer_byte_rate": 9.0}}


@in_loop
async def test_a_failed_request_still_pays_its_request_time(tmp_path, monkeypatch):
    def fail(context, request):
        raise RuntimeError("bug in the handler")

    async with running_broker(tmp_path) as broker:
        await alter(broker, (((CLIENT_ID, "busy"),), {"request_percentage": 0.0001}))
        monkeypatch.setitem(HANDLERS, ApiKey.METADATA, dataclasses.replace(HANDLERS[ApiKey.METADATA], handle=fail))
        throttles = []
        for _ in range(50):
            chunks = await exchange(broker, ApiKey.METADATA, 12, METADATA_ALL, client_id="busy")
            response = decode_response(ApiKey.METADATA, 12, joined(chunks))
            throttles.append(response.throttle_time.total_seconds() * 1000)
        assert 0 < max(throttles) <= 1000
        assert isinstance(chunks, ThrottledResponse)
