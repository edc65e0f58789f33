"""Fuzzing the request path in-process: whatever bytes arrive, the broker answers, stays silent
(acks=0), or refuses them with ProtocolError (which closes the connection). Any other exception is
a bug: on a real connection it would be logged as an internal error.

A Broker runs in this process on an event loop kept for the module, and frames go straight to its
Dispatcher, as broker.network.Connection hands them over: a writable memoryview of the frame
without its size prefix. Every answer is also decoded with the schema of the version asked for,
so a response the broker cannot encode correctly fails too. FrameReader, which cuts the socket
stream into frames, is fuzzed with random chunkings of valid and invalid streams.

Hypothesis runs derandomized with no example database, so CI sees the same examples every run.
"""

import asyncio
import dataclasses
import datetime
import inspect
import struct
import time
import types
import typing
import uuid

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.create_topics.v7.request import (
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
)
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.list_offsets.v7.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from kio.index import KioIndexError, load_request_schema, load_response_schema
from kio.static.primitive import Records

from broker.config import BrokerConfig
from broker.handlers import HANDLERS
from broker.server import Broker
from protocol import legacy, schemas
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode, KafkaError, ProtocolError
from protocol.framing import FrameReader, FrameTooLargeError
from protocol.primitives import encode_uvarint
from protocol.record_batch import BATCH_HEADER_SIZE
from protocol.records import Record, build_batch, iter_records
from storage.topic_partition import TopicPartition
from tests.in_process import CLIENT_SESSION

TOPIC = "fuzz"
_MAX_FUZZ_PARTITIONS = 4
_LONG_POLL_GRACE_S = 0.02
_CRC_AT = 17  # the CRC field of a v2 batch header

FUZZ = settings(
    max_examples=300,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)




def request_header(api_key: int, version: int, correlation_id: int, client_id: str) -> bytes:
    """Request header v1, or v2 (a trailing empty tagged-field set) for flexible versions.
    Produce v0-2 have no schema and are not flexible."""
    try:
        flexible = schemas.is_flexible(api_key, version)
    except schemas.UnknownMessageError:
        flexible = False
    raw = client_id.encode()
    header = struct.pack(">hhih", api_key, version, correlation_id, len(raw)) + raw
    return header + (b"\x00" if flexible else b"")


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


# ------------------------------------------------------------------------------- the broker


class InProcessBroker:
    """A Broker started on a private event loop, driven one dispatch at a time."""

    def __init__(self, data_dir) -> None:
        self.loop = asyncio.new_event_loop()
        config = BrokerConfig().with_overrides(
            {
                "log.dirs": str(data_dir),
                "listeners": "PLAINTEXT://127.0.0.1:0",
                "advertised.listeners": "PLAINTEXT://127.0.0.1:0",
                # Every partition preallocates its indexes: keep the topics fuzzing creates small.
                "log.index.size.max.bytes": "4096",
            }
        )
        self.broker = Broker(config)
        self._guard_partition_counts()
        self.loop.run_until_complete(self.broker.start())
        self.loop.run_until_complete(self.broker.topics.create(TOPIC, 2, {}))
        self.known = [Record(i, int(time.time() * 1000), b"k%d" % i, b"known value %d" % i) for i in range(3)]
        result = self.broker.replica_manager.append(
            TopicPartition(TOPIC, 0), memoryview(bytearray(build_batch(self.known)))
        )
        assert result.first_offset == 0

    def _guard_partition_counts(self) -> None:
        """A mutated CreateTopics or CreatePartitions can ask for 2**30 partitions, which the
        broker would set out to create (as ZooKeeper-mode Kafka would): cap what fuzzing may
        create, through the same refusal the broker gives a bad count."""
        topics = self.broker.topics
        check = topics.check_new_topic

        def capped(name, num_partitions, *args, **kwargs):
            partitions, replication = check(name, num_partitions, *args, **kwargs)
            if partitions > _MAX_FUZZ_PARTITIONS:
                raise KafkaError("fuzzing caps partition counts", ErrorCode.invalid_partitions)
            return partitions, replication

        topics.check_new_topic = capped
        check_count = topics.check_new_partition_count

        def capped_count(name, count, *args, **kwargs):
            if count > _MAX_FUZZ_PARTITIONS:
                raise KafkaError("fuzzing caps partition counts", ErrorCode.invalid_partitions)
            return check_count(name, count, *args, **kwargs)

        topics.check_new_partition_count = capped_count

    def dispatch(self, frame_body: bytes) -> list | None:
        """The response chunks for one frame (size prefix excluded), or None for no response.

        ProtocolError propagates; so does anything else (a bug)."""
        outcome = self.broker._dispatcher.dispatch(memoryview(bytearray(frame_body)), CLIENT_SESSION)
        if inspect.isawaitable(outcome):
            outcome = self._finish(outcome)
        return outcome

    def _finish(self, pending):
        """Await a handler that waits (long-poll fetch): give it a moment, then release it the
        way shutdown does, so a mutated max_wait of hours cannot stall the run."""
        future = asyncio.ensure_future(pending, loop=self.loop)
        self.loop.run_until_complete(asyncio.wait([future], timeout=_LONG_POLL_GRACE_S))
        if not future.done():
            self.broker.shutting_down = True
            try:
                self.broker.replica_manager.wake_all()
                self.loop.run_until_complete(asyncio.wait_for(future, 5))
            finally:
                self.broker.shutting_down = False
        return future.result()

    def assert_healthy(self) -> None:
        """The broker still serves: its first records read back and a new batch appends."""
        partition = self.broker.replica_manager.get_partition(TopicPartition(TOPIC, 0))
        region = self.broker.replica_manager.read(partition, 0, 1 << 20, True, False)
        records = list(iter_records(region.read()))
        assert [(r.key, r.value) for r in records[: len(self.known)]] == [
            (r.key, r.value) for r in self.known
        ]
        appended = self.broker.replica_manager.append(
            TopicPartition(TOPIC, 1), memoryview(bytearray(build_batch([Record(0, 0, None, b"ok")])))
        )
        assert appended.first_offset >= 0

    def close(self) -> None:
        try:
            self.loop.run_until_complete(self.broker.stop())
        finally:
            self.loop.close()


@pytest.fixture(scope="module")
def fuzz_broker(tmp_path_factory):
    broker = InProcessBroker(tmp_path_factory.mktemp("fuzz") / "data")
    yield broker
    broker.close()


# ------------------------------------------------------------------------- valid requests


def _newest_samples() -> dict[int, object]:
    """One well-formed request per API, as the newest version's kio entity."""
    now = int(time.time() * 1000)
    batch = build_batch([Record(0, now, b"key", b"value"), Record(1, now, None, b"v2")])
    return {
        ApiKey.PRODUCE: ProduceRequest(
            transactional_id=None,
            acks=1,
            timeout=datetime.timedelta(seconds=1),
            topic_data=(
                TopicProduceData(
                    name=TOPIC, partition_data=(PartitionProduceData(index=1, records=batch),)
                ),
            ),
        ),
        ApiKey.FETCH: FetchRequest(
            max_wait=datetime.timedelta(milliseconds=0),
            min_bytes=1,
            topics=(
                FetchTopic(
                    topic=TOPIC,
                    partitions=(FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=65536),),
                ),
            ),
            forgotten_topics_data=(),
        ),
        ApiKey.LIST_OFFSETS: ListOffsetsRequest(
            replica_id=-1,
            isolation_level=0,
            topics=(
                ListOffsetsTopic(
                    name=TOPIC, partitions=(ListOffsetsPartition(partition_index=0, timestamp=-1),)
                ),
            ),
        ),
        ApiKey.METADATA: MetadataRequest(
            topics=(MetadataRequestTopic(topic_id=None, name=TOPIC),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        ),
        ApiKey.API_VERSIONS: ApiVersionsRequest(
            client_software_name="fuzz", client_software_version="1.0"
        ),
        ApiKey.CREATE_TOPICS: CreateTopicsRequest(
            topics=(
                CreatableTopic(
                    name="fuzz-created",
                    num_partitions=1,
                    replication_factor=1,
                    assignments=(),
                    configs=(CreatableTopicConfig(name="retention.ms", value="60000"),),
                ),
            ),
            timeout=datetime.timedelta(seconds=1),
            validate_only=True,
        ),
    }


def _encode_body(api_key: int, version: int, newest: object) -> bytes:
    if api_key == ApiKey.PRODUCE and version < 3:
        # No schema for Produce v0-2 (kio dropped them); they are v3 without transactional_id.
        v3 = schemas.encode(schemas.adapt(newest, schemas.request_type(api_key, 3)))
        assert v3[:2] == b"\xff\xff"  # a null transactional_id
        return v3[2:]
    return schemas.encode(schemas.adapt(newest, schemas.request_type(api_key, version)))


def _valid_requests() -> list[tuple[int, int, bytes]]:
    """(api key, version, request frame without size prefix) for every served version."""
    samples = _newest_samples()
    requests = []
    for api_key, handler in sorted(HANDLERS.items()):
        sample = samples.get(api_key)
        if sample is None:
            sample = _minimal(schemas.request_type(api_key, handler.max_version))
        for version in range(handler.min_version, handler.max_version + 1):
            header = request_header(api_key, version, correlation_id=version + 1000, client_id="fuzz")
            requests.append((api_key, version, header + _encode_body(api_key, version, sample)))
    return requests


_MINIMAL_VALUES = {
    "string": "fuzz-other",
    "bytes": b"\x01",
    "records": None,
    "bool": False,
    "uuid": uuid.UUID(int=1),
    "timedelta_i32": datetime.timedelta(milliseconds=100),
    "timedelta_i64": datetime.timedelta(milliseconds=100),
    "float64": 0.0,
}


def _minimal(entity_type: type) -> object:
    """A request for an API without a sample above: field defaults, one element in every
    array, so mutations reach the nested structures too."""
    hints = typing.get_type_hints(entity_type)
    values = {}
    for f in dataclasses.fields(entity_type):
        if f.default is not dataclasses.MISSING and "tag" in f.metadata:
            values[f.name] = f.default
            continue
        hint = hints[f.name]
        members = [m for m in typing.get_args(hint) if m is not type(None)] if typing.get_origin(hint) in (typing.Union, types.UnionType) else [hint]
        inner = members[0]
        kafka_type = f.metadata.get("kafka_type")
        if typing.get_origin(inner) is tuple:
            element = typing.get_args(inner)[0]
            if dataclasses.is_dataclass(element):
                values[f.name] = (_minimal(element),)
            else:
                values[f.name] = (_MINIMAL_VALUES.get(kafka_type, 1),)
        elif dataclasses.is_dataclass(inner):
            values[f.name] = _minimal(inner)
        elif f.default is not dataclasses.MISSING:
            values[f.name] = f.default
        else:
            values[f.name] = _MINIMAL_VALUES.get(kafka_type, 1)
    return entity_type(**values)


VALID_REQUESTS = _valid_requests()


# ------------------------------------------------------------------------------ checking


def _response_bytes(chunks: list) -> bytes:
    return b"".join(bytes(c) if isinstance(c, (bytes, bytearray, memoryview)) else c.read() for c in chunks)


def _check_response(request: bytes, chunks: list) -> None:
    """A response frame is whole, echoes the correlation id and decodes as the version asked."""
    api_key, version, correlation_id = struct.unpack_from(">hhi", request)
    data = _response_bytes(chunks)
    (size,) = struct.unpack_from(">i", data)
    assert size == len(data) - 4, "the size prefix does not match the response"
    assert struct.unpack_from(">i", data, 4)[0] == correlation_id
    handler = HANDLERS[api_key]
    if not handler.serves(version):
        assert api_key == ApiKey.API_VERSIONS
        assert data[8:10] == struct.pack(">h", ErrorCode.unsupported_version)
        return
    flexible = api_key != ApiKey.API_VERSIONS and schemas.is_flexible(api_key, version)
    body = memoryview(data)[(9 if flexible else 8) :]
    if api_key == ApiKey.PRODUCE and version < 3:
        return  # no schema to decode with; the v3+ layouts are checked
    schemas.decode(schemas.response_type(api_key, version), body)


def _outcome(fuzz_broker: InProcessBroker, request: bytes) -> str:
    """Dispatch one frame; the only acceptable outcomes come back as a word."""
    try:
        chunks = fuzz_broker.dispatch(request)
    except ProtocolError:
        return "rejected"
    if chunks is None:
        return "silent"
    _check_response(request, chunks)
    return "answered"


def test_every_valid_request_is_answered(fuzz_broker):
    """The unmutated samples are the baseline the mutations start from: all must be served."""
    for api_key, version, request in VALID_REQUESTS:
        assert _outcome(fuzz_broker, request) == "answered", (ApiKey(api_key).name, version)
    fuzz_broker.assert_healthy()


def test_arbitrary_bytes(fuzz_broker):
    @FUZZ
    @given(st.binary(max_size=512))
    def run(data):
        _outcome(fuzz_broker, data)

    run()
    fuzz_broker.assert_healthy()


def test_arbitrary_bodies_behind_valid_headers(fuzz_broker):
    """A correct header for every served (API, version) followed by random bytes."""
    headers = sorted({(k, v) for k, v, _ in VALID_REQUESTS})

    @FUZZ
    @given(st.sampled_from(headers), st.binary(max_size=256))
    def run(key_version, body):
        api_key, version = key_version
        _outcome(fuzz_broker, request_header(api_key, version, 7, "fuzz") + body)

    run()
    fuzz_broker.assert_healthy()


_POSITION = st.integers(min_value=0, max_value=1 << 16)
_MUTATION = st.one_of(
    st.tuples(st.just("flip"), _POSITION, st.integers(0, 7)),
    st.tuples(st.just("truncate"), _POSITION),
    st.tuples(st.just("insert"), _POSITION, st.binary(min_size=1, max_size=8)),
    st.tuples(st.just("delete"), _POSITION, st.integers(1, 8)),
    st.tuples(
        st.just("overwrite"),
        _POSITION,
        # The values that break length and count fields: null, huge, negative, zero.
        st.sampled_from([b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff", b"\x80\x00\x00\x00", b"\x00\x00", b"\xff", b"\x00"]),
    ),
)


def mutate(data: bytes, mutations: list[tuple], keep: int = 0) -> bytes:
    """Apply each mutation at a position taken modulo the length; the first `keep` bytes stay."""
    out = bytearray(data)
    for mutation in mutations:
        kind, position = mutation[0], mutation[1]
        span = len(out) - keep
        if span <= 0:
            break
        at = keep + position % span
        if kind == "flip":
            out[at] ^= 1 << mutation[2]
        elif kind == "truncate":
            del out[at:]
        elif kind == "insert":
            out[at:at] = mutation[2]
        elif kind == "delete":
            del out[at : at + mutation[2]]
        else:
            out[at : at + len(mutation[2])] = mutation[2]
    return bytes(out)


def test_mutated_valid_requests(fuzz_broker):
    """Every served (API, version), well-formed, then bit flips, truncation, inserted or deleted
    bytes and poisoned length fields, anywhere including the header."""

    @FUZZ
    @given(st.sampled_from(VALID_REQUESTS), st.lists(_MUTATION, min_size=1, max_size=4))
    def run(sample, mutations):
        _api_key, _version, request = sample
        _outcome(fuzz_broker, mutate(request, mutations))

    run()
    fuzz_broker.assert_healthy()


def test_mutated_request_bodies(fuzz_broker):
    """As above with the fixed header (api key, version, correlation id) intact, so every
    mutation reaches the body parser of the API."""

    @FUZZ
    @given(st.sampled_from(VALID_REQUESTS), st.lists(_MUTATION, min_size=1, max_size=3))
    def run(sample, mutations):
        _api_key, _version, request = sample
        _outcome(fuzz_broker, mutate(request, mutations, keep=8))

    run()
    fuzz_broker.assert_healthy()


# --------------------------------------------------------------- the schema walk before kio


def _every_schema() -> list[type]:
    found = []
    for api_key in range(100):
        for version in range(20):
            for load in (load_request_schema, load_response_schema):
                try:
                    found.append(load(api_key, version))
                except KioIndexError:
                    pass
    found += [t for pair in legacy.MESSAGES.values() for t in pair]
    return found


EVERY_SCHEMA = _every_schema()
st.register_type_strategy(Records, st.binary(max_size=64).map(Records))


@settings(FUZZ, max_examples=120)
@given(st.sampled_from(EVERY_SCHEMA).flatmap(lambda t: st.tuples(st.just(t), st.from_type(t))))
def test_well_formed_messages_of_every_schema_decode(schema_and_entity):
    """decode walks a message before kio reads it (protocol.schemas): the walk must never refuse
    a well-formed message, of any API and version, flexible or not."""
    schema, entity = schema_and_entity
    try:
        encoded = schemas.encode(entity)
    except (TypeError, ValueError, OverflowError):
        return  # a value the writer refuses (hypothesis strays past some field's range)
    decoded = schemas.decode(schema, memoryview(encoded))
    assert schemas.encode(decoded) == encoded


def test_huge_compact_lengths_anywhere_are_refused_not_fatal():
    """A compact length of 2**31 or more made kio's reader abort the process. Put one at every
    byte of every served flexible request: decoding answers or raises ProtocolError."""
    huge = [encode_uvarint(2**32), encode_uvarint(2**31 + 1), encode_uvarint(3 * 2**31)]
    checked = 0
    for api_key, version, request in VALID_REQUESTS:
        if api_key == ApiKey.PRODUCE or not schemas.is_flexible(api_key, version):
            continue  # Produce is parsed by hand; non-flexible lengths are int32
        schema = schemas.request_type(api_key, version)
        body = request[len(request_header(api_key, version, 0, "fuzz")) :]
        for position in range(len(body)):
            for value in huge:
                for mutated in (body[:position] + value + body[position:], body[:position] + value + body[position + len(value) :]):
                    try:
                        schemas.decode(schema, memoryview(mutated))
                    except ProtocolError:
                        pass
                    checked += 1
    assert checked > 1000


# ------------------------------------------------------------------------------- produce


def _produce_request(version: int, acks: int, partition: int, records: bytes) -> bytes:
    newest = ProduceRequest(
        transactional_id=None,
        acks=acks,
        timeout=datetime.timedelta(seconds=1),
        topic_data=(
            TopicProduceData(
                name=TOPIC, partition_data=(PartitionProduceData(index=partition, records=records),)
            ),
        ),
    )
    header = request_header(ApiKey.PRODUCE, version, 99, "fuzz")
    return header + _encode_body(ApiKey.PRODUCE, version, newest)


def _record_sets():
    """Random bytes, and valid batches mutated with or without a recomputed CRC (the latter get
    past the CRC check to the checks behind it)."""
    records = st.lists(
        st.builds(
            lambda k, v: (k, v),
            st.none() | st.binary(max_size=16),
            st.none() | st.binary(max_size=64),
        ),
        min_size=1,
        max_size=5,
    )

    def mutated_batch(items, mutations, fix_crc):
        now = int(time.time() * 1000)
        batch = build_batch([Record(i, now, k, v) for i, (k, v) in enumerate(items)])
        out = bytearray(mutate(batch, mutations))
        if fix_crc and len(out) >= BATCH_HEADER_SIZE:
            # Over whatever bytes follow the CRC, even where the mutated size field disagrees.
            struct.pack_into(">I", out, _CRC_AT, crc32c.crc32c(bytes(out[_CRC_AT + 4 :])))
        return bytes(out)

    return st.one_of(
        st.binary(max_size=200),
        st.builds(
            mutated_batch, records, st.lists(_MUTATION, min_size=0, max_size=3), st.booleans()
        ),
    )


def test_produce_random_record_sets(fuzz_broker):
    versions = range(HANDLERS[ApiKey.PRODUCE].min_version, HANDLERS[ApiKey.PRODUCE].max_version + 1)

    @FUZZ
    @given(st.sampled_from(list(versions)), st.sampled_from([-1, 0, 1]), st.integers(0, 2), _record_sets())
    def run(version, acks, partition, records):
        outcome = _outcome(fuzz_broker, _produce_request(version, acks, partition, records))
        # The request itself is well-formed: only the record set is random.
        assert outcome == ("silent" if acks == 0 else "answered")

    run()
    fuzz_broker.assert_healthy()


# ------------------------------------------------------------------------------- framing


def _feed(reader: FrameReader, stream: bytes, cuts: list[int]) -> list[bytes]:
    """Deliver `stream` in chunks ending at `cuts`, as recv_into would; returns the frames.

    Frames handed out are copied only at the end, before release(): the reader promises their
    bytes stay put meanwhile, however many more chunks arrive."""
    views: list[memoryview] = []
    position = 0
    for end in sorted(set(cuts)) + [len(stream)]:
        while position < end:
            window = reader.writable()
            assert len(window) > 0
            take = min(len(window), end - position)
            window[:take] = stream[position : position + take]
            position += take
            views.extend(reader.received(take))
    frames = [bytes(v) for v in views]
    reader.release()
    return frames


_PAYLOADS = st.lists(st.binary(max_size=600), max_size=12)


@FUZZ
@given(_PAYLOADS, st.lists(st.integers(0, 8000), max_size=20), st.sampled_from([16, 256, 4096]))
def test_frame_reader_recovers_every_frame_whatever_the_chunking(payloads, cuts, buffer_bytes):
    stream = b"".join(frame(p) for p in payloads)
    reader = FrameReader(max_frame_bytes=1000, buffer_bytes=buffer_bytes, max_retained_bytes=2048)
    assert _feed(reader, stream, [c % (len(stream) + 1) for c in cuts]) == payloads
    assert reader.buffered == 0


@FUZZ
@given(
    _PAYLOADS,
    st.one_of(st.integers(-(2**31), -1), st.integers(1001, 2**31 - 1)),
    st.binary(max_size=64),
    st.lists(st.integers(0, 8000), max_size=20),
)
def test_frame_reader_refuses_a_bad_size_before_its_body(payloads, bad_size, tail, cuts):
    """Frames before a negative or oversized prefix come out intact (those completed by the same
    chunk as the bad prefix may be dropped with the connection: nothing was answered for them);
    the prefix raises as soon as its four bytes are in, whatever follows."""
    good = b"".join(frame(p) for p in payloads)
    stream = good + struct.pack(">i", bad_size) + tail
    reader = FrameReader(max_frame_bytes=1000, buffer_bytes=64)
    delivered: list[bytes] = []
    position = 0
    boundaries = sorted({c % (len(stream) + 1) for c in cuts} | {len(stream)})
    with pytest.raises(ProtocolError) as raised:
        for end in boundaries:
            while position < end:
                window = reader.writable()
                take = min(len(window), end - position)
                window[:take] = stream[position : position + take]
                position += take
                delivered.extend(bytes(v) for v in reader.received(take))
    assert delivered == payloads[: len(delivered)]
    # It raised once the prefix was whole, before more than the chunk that completed it.
    assert position >= len(good) + 4
    if bad_size > 0:
        assert isinstance(raised.value, FrameTooLargeError)


@FUZZ
@given(st.binary(max_size=2000), st.lists(st.integers(0, 2000), max_size=20))
def test_frame_reader_on_random_streams(stream, cuts):
    """Arbitrary bytes: frames or ProtocolError, nothing else, and never more than was sent."""
    reader = FrameReader(max_frame_bytes=1500, buffer_bytes=128)
    try:
        frames = _feed(reader, stream, [c % (len(stream) + 1) for c in cuts])
    except ProtocolError:
        return
    assert sum(len(f) + 4 for f in frames) + reader.buffered == len(stream)
