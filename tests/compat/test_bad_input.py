"""Bad input over real sockets against a broker process: every case gets a clear answer (the
Kafka error code, or a closed connection with its reason in the broker's log), and afterwards the
broker keeps serving and the records it acknowledged before read back unchanged.

Each test first produces and reads back records of its own topic (a known good state), sends the
bad input on a raw socket, asserts the outcome, then checks on a fresh connection that the
broker still answers and that its records, and the module's baseline records, are intact.
Requests are built with tests.kafka_wire or, where no schema exists (legacy message sets,
Produce v0-2, broken frames), by hand from the protocol guide.
"""

import datetime
import random
import socket
import struct
import time
import uuid
import zlib
from dataclasses import dataclass

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.create_topics.v7.request import (
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
)
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from broker.handlers import HANDLERS
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.primitives import encode_uvarint
from protocol.records import Record, build_batch, iter_records
from tests.harness import BrokerProcess
from tests.kafka_wire import decode_response, encode_request

pytestmark = pytest.mark.compat

MAX_REQUEST_BYTES = 1_048_576
SOCKET_TIMEOUT_S = 10
LOG_WAIT_S = 5


# ------------------------------------------------------------------------------ the client


def request_header(api_key: int, version: int, correlation_id: int, flexible: bool, client_id: str = "bad-input") -> bytes:
    """Request header v1, or v2 (one more byte: no tagged fields) when `flexible`."""
    raw = client_id.encode()
    header = struct.pack(">hhih", api_key, version, correlation_id, len(raw)) + raw
    return header + (b"\x00" if flexible else b"")


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


class WireClient:
    """One raw connection to the broker."""

    def __init__(self, broker: BrokerProcess) -> None:
        self.sock = socket.create_connection(("127.0.0.1", broker.port), timeout=SOCKET_TIMEOUT_S)
        host, port = self.sock.getsockname()[:2]
        self.address = f"{host}:{port}"  # as the broker names this connection in its log
        self._correlation_id = 0

    def __enter__(self) -> "WireClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def next_correlation_id(self) -> int:
        self._correlation_id += 1
        return self._correlation_id

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _recv_exactly(self, size: int) -> bytes | None:
        data = b""
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            if not chunk:
                return None
            data += chunk
        return data

    def recv_frame(self) -> bytes:
        """One whole response frame, size prefix included."""
        prefix = self._recv_exactly(4)
        assert prefix is not None, "the broker closed the connection instead of answering"
        body = self._recv_exactly(struct.unpack(">i", prefix)[0])
        assert body is not None, "the broker closed the connection inside a response"
        return prefix + body

    def request(self, api_key: int, version: int, entity):
        correlation_id = self.next_correlation_id()
        self.send(encode_request(api_key, version, entity, correlation_id=correlation_id))
        response = self.recv_frame()
        assert struct.unpack_from(">i", response, 4)[0] == correlation_id
        return decode_response(api_key, version, response)

    def assert_closed_by_broker(self) -> None:
        """The broker closes without sending anything (EOF, or a reset for unread input)."""
        try:
            data = self.sock.recv(65536)
        except ConnectionResetError:
            return
        except socket.timeout:
            pytest.fail(f"the broker kept the connection open for {SOCKET_TIMEOUT_S}s")
        assert data == b"", f"expected the connection closed, got {data[:64]!r}"


# ------------------------------------------------------------------------------ requests


def create_topic(client: WireClient, name: str, partitions: int = 1, configs: dict[str, str] | None = None) -> ErrorCode:
    response = client.request(
        ApiKey.CREATE_TOPICS,
        7,
        CreateTopicsRequest(
            topics=(
                CreatableTopic(
                    name=name,
                    num_partitions=partitions,
                    replication_factor=1,
                    assignments=(),
                    configs=tuple(CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()),
                ),
            ),
            timeout=datetime.timedelta(seconds=10),
            validate_only=False,
        ),
    )
    (result,) = response.topics
    return result.error_code


def produce_request(topic: str, partition: int, records: bytes | None, acks: int = -1) -> ProduceRequest:
    return ProduceRequest(
        transactional_id=None,
        acks=acks,
        timeout=datetime.timedelta(seconds=10),
        topic_data=(
            TopicProduceData(
                name=topic, partition_data=(PartitionProduceData(index=partition, records=records),)
            ),
        ),
    )


def produce(client: WireClient, topic: str, partition: int, records: bytes | None, acks: int = -1, version: int = 9):
    """The partition's answer to a produce (acks 1 or -1 or invalid)."""
    response = client.request(ApiKey.PRODUCE, version, produce_request(topic, partition, records, acks))
    ((topic_response,),) = [response.responses]
    assert topic_response.name == topic
    (partition_response,) = topic_response.partition_responses
    assert partition_response.index == partition
    return partition_response


def produce_v2(client: WireClient, topic: str, partition: int, records: bytes) -> tuple[ErrorCode, int]:
    """Produce v2, by hand (no schema ships for it): (error code, base offset)."""
    name = topic.encode()
    body = (
        struct.pack(">hi", -1, 10_000)  # acks, timeout
        + struct.pack(">ih", 1, len(name)) + name
        + struct.pack(">iii", 1, partition, len(records)) + records
    )
    correlation_id = client.next_correlation_id()
    client.send(frame(request_header(ApiKey.PRODUCE, 2, correlation_id, flexible=False) + body))
    response = client.recv_frame()
    # size, correlation id; responses [name, [index, error, base offset, log append time]], throttle
    (got_correlation_id, topics) = struct.unpack_from(">ii", response, 4)
    assert (got_correlation_id, topics) == (correlation_id, 1)
    (name_length,) = struct.unpack_from(">h", response, 12)
    assert response[14 : 14 + name_length] == name
    count, index, error_code, base_offset, _append_time, _throttle = struct.unpack_from(
        ">iihqqi", response, 14 + name_length
    )
    assert (count, index) == (1, partition)
    return ErrorCode(error_code), base_offset


def fetch_request(topic: str, partition: int, offset: int, max_wait_ms: int = 0) -> FetchRequest:
    return FetchRequest(
        max_wait=datetime.timedelta(milliseconds=max_wait_ms),
        min_bytes=1,
        topics=(
            FetchTopic(
                topic=topic,
                partitions=(FetchPartition(partition=partition, fetch_offset=offset, partition_max_bytes=1 << 20),),
            ),
        ),
        forgotten_topics_data=(),
    )


def fetch(client: WireClient, topic: str, partition: int, offset: int):
    response = client.request(ApiKey.FETCH, 12, fetch_request(topic, partition, offset))
    assert response.error_code == ErrorCode.none
    ((partition_response,),) = [r.partitions for r in response.responses]
    return partition_response


def read_all(client: WireClient, topic: str, partition: int = 0) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record of the partition."""
    records: list[tuple[int, bytes | None, bytes | None]] = []
    offset = 0
    for _ in range(100):
        partition_response = fetch(client, topic, partition, offset)
        assert partition_response.error_code == ErrorCode.none, partition_response
        data = partition_response.records or b""
        batches = []
        position = 0
        while position + 12 <= len(data):
            size = 12 + struct.unpack_from(">i", data, position + 8)[0]
            if position + size > len(data):
                break
            batches.append(data[position : position + size])
            position += size
        if not batches:
            return records
        for batch in batches:
            records.extend((r.offset, r.key, r.value) for r in iter_records(batch))
        offset = records[-1][0] + 1
        if offset >= partition_response.high_watermark:
            return records
    raise AssertionError("the partition did not end within 100 fetches")


def batch_of(*values: bytes, key: bytes | None = b"k") -> bytes:
    now = int(time.time() * 1000)
    return build_batch([Record(i, now, key, value) for i, value in enumerate(values)])


def metadata(client: WireClient, names: list[str] | None, version: int = 12, auto_create: bool = False):
    topics = None if names is None else tuple(MetadataRequestTopic(topic_id=None, name=n) for n in names)
    return client.request(
        ApiKey.METADATA,
        version,
        MetadataRequest(
            topics=topics, allow_auto_topic_creation=auto_create, include_topic_authorized_operations=False
        ),
    )


# ------------------------------------------------------------------------------ the broker


@dataclass
class GoodState:
    """A topic with acknowledged records, as read back before the bad input."""

    topic: str
    records: list[tuple[int, bytes | None, bytes | None]]


def seed(broker: BrokerProcess, prefix: str, partitions: int = 1, configs: dict[str, str] | None = None) -> GoodState:
    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
    with WireClient(broker) as client:
        assert create_topic(client, topic, partitions, configs) == ErrorCode.none
        first = produce(client, topic, 0, batch_of(b"first", b"second"))
        second = produce(client, topic, 0, batch_of(b"third", key=None))
        assert (first.error_code, first.base_offset) == (ErrorCode.none, 0)
        assert (second.error_code, second.base_offset) == (ErrorCode.none, 2)
        records = read_all(client, topic)
    assert records == [(0, b"k", b"first"), (1, b"k", b"second"), (2, None, b"third")]
    return GoodState(topic, records)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    process = BrokerProcess(
        tmp_path_factory.mktemp("bad-input") / "data",
        {"socket.request.max.bytes": str(MAX_REQUEST_BYTES)},
    ).start()
    yield process
    process.kill()


@pytest.fixture(scope="module")
def baseline(server) -> GoodState:
    """Records acknowledged before any test of the module: each test checks them again."""
    return seed(server, "baseline")


@pytest.fixture(autouse=True)
def broker_keeps_serving(server, baseline):
    """After each test: the process is up, a fresh connection is served, the baseline records
    read back unchanged, new records append after them, and the log holds no traceback."""
    log_start = len(server.log())
    yield
    assert server.process.poll() is None, f"the broker exited:\n{server.log()[log_start:]}"
    assert_serving(server, baseline)
    new_log = server.log()[log_start:]
    assert "Traceback" not in new_log, new_log


def assert_serving(server: BrokerProcess, *states: GoodState) -> None:
    with WireClient(server) as client:
        versions = client.request(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(client_software_name="t", client_software_version="1"))
        assert versions.error_code == ErrorCode.none
        for state in states:
            assert read_all(client, state.topic)[: len(state.records)] == state.records


def wait_for_close_reason(server: BrokerProcess, client: WireClient, *fragments: str) -> str:
    """The broker's log line about closing `client`'s connection; it must name the reason."""
    marker = f"closing connection from {client.address}: "
    deadline = time.monotonic() + LOG_WAIT_S
    while True:
        for line in server.log().splitlines():
            if marker in line:
                reason = line.split(marker, 1)[1]
                for fragment in fragments:
                    assert fragment in reason, f"{fragment!r} not in the logged reason {reason!r}"
                return reason
        if time.monotonic() > deadline:
            pytest.fail(f"no reason logged for {client.address}:\n{server.log()[-3000:]}")
        time.sleep(0.05)


def assert_rejected(server: BrokerProcess, payload: bytes, *reason_fragments: str) -> str:
    """Send `payload` on a fresh connection: it is closed and the reason logged."""
    with WireClient(server) as client:
        client.send(payload)
        client.assert_closed_by_broker()
        return wait_for_close_reason(server, client, *reason_fragments)


# ------------------------------------------------------------------ 1-3: broken framing


def _garbage_frame() -> bytes:
    """Seeded random bytes behind a small, valid size prefix, whose api key the broker does not
    serve (a seed is picked so the outcome is certain)."""
    for seed_value in range(1000):
        body = random.Random(seed_value).randbytes(64)
        if struct.unpack_from(">h", body)[0] not in HANDLERS:
            return frame(body)
    raise AssertionError("unreachable")


RANDOM_INPUTS = {
    # An HTTP request's first four bytes read as a size of 1.2 GB.
    "http": (b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n", "larger than socket.request.max.bytes"),
    # So do a TLS ClientHello's (0x16030100...).
    "tls": (bytes.fromhex("16030100a5010000a10303") + random.Random(1).randbytes(160), "larger than socket.request.max.bytes"),
    "negative-size": (b"\xff\xff\xff\xfe" + random.Random(2).randbytes(60), "negative frame size"),
    "random-frame": (_garbage_frame(), "unknown api key"),
}


@pytest.mark.parametrize("name", sorted(RANDOM_INPUTS))
def test_random_bytes_close_the_connection_with_a_reason(server, name):
    state = seed(server, f"random-{name}")
    payload, reason = RANDOM_INPUTS[name]
    assert_rejected(server, payload, reason)
    assert_serving(server, state)


def test_oversized_length_prefix_closes_before_the_body_is_read(server):
    state = seed(server, "oversized")
    ten_megabytes = 10 * 1024 * 1024
    with WireClient(server) as client:
        # Only the prefix is sent: the broker must close without waiting for any of the body.
        client.send(struct.pack(">i", ten_megabytes))
        client.assert_closed_by_broker()
        wait_for_close_reason(
            server,
            client,
            f"frame of {ten_megabytes} bytes is larger than socket.request.max.bytes ({MAX_REQUEST_BYTES})",
        )
    assert_serving(server, state)


def test_a_request_just_under_the_limit_is_still_read(server):
    """The limit is the frame size, not less: a produce of nearly 1 MiB is served."""
    state = seed(server, "near-limit", configs={"max.message.bytes": str(MAX_REQUEST_BYTES)})
    with WireClient(server) as client:
        value = b"v" * (MAX_REQUEST_BYTES - 400)
        request = encode_request(ApiKey.PRODUCE, 9, produce_request(state.topic, 0, batch_of(value)), correlation_id=5)
        assert len(request) - 4 <= MAX_REQUEST_BYTES
        client.send(request)
        response = decode_response(ApiKey.PRODUCE, 9, client.recv_frame())
        (partition,) = response.responses[0].partition_responses
        assert (partition.error_code, partition.base_offset) == (ErrorCode.none, 3)
        assert read_all(client, state.topic)[3] == (3, b"k", value)


@pytest.mark.parametrize(
    "truncated",
    [b"\x00\x00", struct.pack(">i", 100) + b"\x00\x03\x00\x0c", struct.pack(">i", 100)],
    ids=["inside-prefix", "inside-body", "after-prefix"],
)
def test_truncated_frame_then_close(server, truncated):
    state = seed(server, "truncated")
    with WireClient(server) as client:
        client.send(truncated)
        client.sock.shutdown(socket.SHUT_WR)
        # The broker sees the end of the stream and closes its side: nothing to answer.
        client.assert_closed_by_broker()
    assert_serving(server, state)
    # broker_keeps_serving also checks the log holds no traceback.


# ---------------------------------------------------------- 4-5: unknown api, unsupported version


def test_unknown_api_key(server):
    state = seed(server, "unknown-api")
    request = frame(request_header(999, 0, 1, flexible=False) + b"\x00" * 8)
    assert_rejected(server, request, "unknown api key 999")
    assert_serving(server, state)


def test_unsupported_version_of_a_known_api(server):
    state = seed(server, "unsupported")
    request = frame(request_header(ApiKey.METADATA, 99, 1, flexible=False) + b"\xff\xff\xff\xff")
    assert_rejected(server, request, "METADATA v99 is not supported", "v0-v12")
    assert_serving(server, state)


def test_api_versions_beyond_ours_is_answered_in_the_v0_layout(server):
    state = seed(server, "api-versions")
    with WireClient(server) as client:
        # A v99 client would send header v2 and a body we cannot know: both must be ignored.
        client.send(frame(request_header(ApiKey.API_VERSIONS, 99, 4242, flexible=True) + b"\x05\x01\x02\x03"))
        response = client.recv_frame()
        size, correlation_id, error_code, count = struct.unpack_from(">iihi", response)
        assert (size, correlation_id) == (len(response) - 4, 4242)
        assert error_code == ErrorCode.unsupported_version == 35
        assert count == 1
        assert struct.unpack_from(">hhh", response, 14) == (ApiKey.API_VERSIONS, 0, 3)
        assert len(response) == 20  # v0 layout: nothing after the one entry
        # The connection stays open: the client retries with a version we serve.
        retry = client.request(
            ApiKey.API_VERSIONS, 3, ApiVersionsRequest(client_software_name="t", client_software_version="1")
        )
        assert retry.error_code == ErrorCode.none
        assert any(v.api_key == ApiKey.API_VERSIONS and v.max_version == 3 for v in retry.api_keys)
    assert_serving(server, state)


# ------------------------------------------------------------------ 6-8: bad record sets


def test_batch_with_a_bad_crc_is_corrupt_message(server):
    state = seed(server, "bad-crc")
    batch = bytearray(batch_of(b"will be damaged"))
    batch[-3] ^= 0x40  # inside the last record's value, covered by the CRC
    with WireClient(server) as client:
        answer = produce(client, state.topic, 0, bytes(batch))
        assert answer.error_code == ErrorCode.corrupt_message == 2
        assert answer.base_offset == -1
        assert read_all(client, state.topic) == state.records
    assert_serving(server, state)


def test_batch_over_max_message_bytes_is_message_too_large(server):
    state = seed(server, "too-large", configs={"max.message.bytes": "1024"})
    with WireClient(server) as client:
        answer = produce(client, state.topic, 0, batch_of(b"x" * 2000))
        assert answer.error_code == ErrorCode.message_too_large == 10
        # One just under the limit still goes in.
        fits = produce(client, state.topic, 0, batch_of(b"y" * 900))
        assert (fits.error_code, fits.base_offset) == (ErrorCode.none, 3)
        assert read_all(client, state.topic) == state.records + [(3, b"k", b"y" * 900)]
    assert_serving(server, state)


def legacy_message_set(magic: int, key: bytes | None, value: bytes | None, timestamp: int = 0) -> bytes:
    """One message of a v0 or v1 message set, from the protocol guide:
    offset INT64, message_size INT32, then the message: crc INT32 (CRC-32 of what follows it),
    magic INT8, attributes INT8, [v1: timestamp INT64], key BYTES, value BYTES."""

    def kafka_bytes(data: bytes | None) -> bytes:
        return struct.pack(">i", -1) if data is None else struct.pack(">i", len(data)) + data

    after_crc = struct.pack(">bb", magic, 0)
    if magic == 1:
        after_crc += struct.pack(">q", timestamp)
    after_crc += kafka_bytes(key) + kafka_bytes(value)
    message = struct.pack(">I", zlib.crc32(after_crc)) + after_crc
    return struct.pack(">qi", 0, len(message)) + message


@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_message_formats_are_unsupported(server, magic):
    state = seed(server, f"magic-v{magic}")
    message_set = legacy_message_set(magic, b"key", b"legacy value", int(time.time() * 1000))
    message_set += legacy_message_set(magic, None, b"second")
    with WireClient(server) as client:
        # Produce v2, as pre-0.11 clients sent them, and v9.
        error_code, base_offset = produce_v2(client, state.topic, 0, message_set)
        assert (error_code, base_offset) == (ErrorCode.unsupported_for_message_format, -1)
        assert error_code == 43
        answer = produce(client, state.topic, 0, message_set)
        assert answer.error_code == ErrorCode.unsupported_for_message_format
        assert read_all(client, state.topic) == state.records
    assert_serving(server, state)


def test_produce_v2_with_a_v2_batch_is_accepted(server):
    """Produce v0-2 are advertised: they carry v2 batches too (Kafka 0.11-era clients)."""
    state = seed(server, "produce-v2")
    with WireClient(server) as client:
        assert produce_v2(client, state.topic, 0, batch_of(b"via v2")) == (ErrorCode.none, 3)
        assert read_all(client, state.topic) == state.records + [(3, b"k", b"via v2")]
    assert_serving(server, state)


# ------------------------------------------------------------ 9-12: refused well-formed requests

INVALID_NAMES = ["", "a b", "x" * 250, "..", ".", "bad/name"]


@pytest.mark.parametrize("name", INVALID_NAMES, ids=["empty", "space", "250-chars", "dotdot", "dot", "slash"])
def test_invalid_topic_names(server, name):
    state = seed(server, "names")
    with WireClient(server) as client:
        assert create_topic(client, name) == ErrorCode.invalid_topic_exception == 17
        (described,) = metadata(client, [name], auto_create=True).topics
        assert described.error_code == ErrorCode.invalid_topic_exception
        (described_v1,) = metadata(client, [name], version=1).topics
        assert described_v1.error_code == ErrorCode.invalid_topic_exception
        assert produce(client, name, 0, batch_of(b"nope")).error_code == ErrorCode.invalid_topic_exception
        assert name not in {t.name for t in metadata(client, None).topics}
    assert_serving(server, state)


def test_missing_topic_or_partition(server):
    state = seed(server, "missing", partitions=2)
    missing_topic = f"never-created-{uuid.uuid4().hex[:8]}"
    with WireClient(server) as client:
        assert produce(client, missing_topic, 0, batch_of(b"x")).error_code == ErrorCode.unknown_topic_or_partition == 3
        for partition in (2, 99, -1):
            assert produce(client, state.topic, partition, batch_of(b"x")).error_code == ErrorCode.unknown_topic_or_partition
        # Produce never creates topics.
        assert missing_topic not in {t.name for t in metadata(client, None).topics}
        assert read_all(client, state.topic) == state.records
    assert_serving(server, state)


@pytest.mark.parametrize("acks", [2, -2, 32767])
def test_invalid_required_acks(server, acks):
    state = seed(server, "acks")
    with WireClient(server) as client:
        answer = produce(client, state.topic, 0, batch_of(b"not appended"), acks=acks)
        assert answer.error_code == ErrorCode.invalid_required_acks == 21
        assert read_all(client, state.topic) == state.records
    assert_serving(server, state)


@pytest.mark.parametrize("offset", [4, 1000, -1, -(2**63)])
def test_fetch_out_of_range(server, offset):
    state = seed(server, "out-of-range")
    with WireClient(server) as client:
        answer = fetch(client, state.topic, 0, offset)
        assert answer.error_code == ErrorCode.offset_out_of_range == 1
        assert not answer.records
        # The log end offset itself is in range: an empty answer.
        at_end = fetch(client, state.topic, 0, 3)
        assert (at_end.error_code, at_end.high_watermark) == (ErrorCode.none, 3)
    assert_serving(server, state)


def test_fetch_of_no_partition_does_not_wait(server):
    """A fetch naming no partition is answered at once, whatever its max_wait (as Kafka)."""
    state = seed(server, "fetch-nothing")
    with WireClient(server) as client:
        request = FetchRequest(
            max_wait=datetime.timedelta(minutes=10), min_bytes=1, topics=(), forgotten_topics_data=()
        )
        started = time.monotonic()
        response = client.request(ApiKey.FETCH, 12, request)
        assert time.monotonic() - started < 5
        assert (response.error_code, response.responses) == (ErrorCode.none, ())
    assert_serving(server, state)


# ------------------------------------------------------------------ 13: garbled request bodies


def _metadata_v12(body: bytes) -> bytes:
    return frame(request_header(ApiKey.METADATA, 12, 1, flexible=True) + body)


GARBLED = {
    # Three topics announced, none sent.
    "body-cut-short": (_metadata_v12(encode_uvarint(4)), "malformed MetadataRequest"),
    # A valid Metadata v12 body missing its last bytes.
    "last-bytes-missing": (
        encode_request(
            ApiKey.METADATA,
            12,
            MetadataRequest(
                topics=(MetadataRequestTopic(topic_id=None, name="some-topic"),),
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            ),
        )[:-3],
        None,  # the size prefix now overstates the frame: see the test
    ),
    "huge-legacy-array": (
        frame(request_header(ApiKey.METADATA, 4, 1, flexible=False) + struct.pack(">i", 2**31 - 1) + b"\x00" * 8),
        "malformed MetadataRequest",
    ),
    # 2**32 - 1 topics: a compact length kio's reader would have tried to allocate for.
    "huge-compact-array": (_metadata_v12(encode_uvarint(2**32) + b"\x00" * 16), "array of 4294967295 elements"),
    "huge-create-topics-array": (
        frame(request_header(ApiKey.CREATE_TOPICS, 7, 1, flexible=True) + encode_uvarint(2**33) + b"\x00" * 32),
        "array of",
    ),
    "huge-produce-array": (
        frame(request_header(ApiKey.PRODUCE, 9, 1, flexible=True) + b"\x00" + struct.pack(">hi", 1, 1000) + encode_uvarint(2**31)),
        "array of",
    ),
    # A null array where the schema allows none (kio reads it as None).
    "null-fetch-topics": (
        frame(
            request_header(ApiKey.FETCH, 4, 1, flexible=False)
            + struct.pack(">iiiib", -1, 500, 1, 1 << 20, 0)  # replica, max wait, min bytes, max bytes, isolation
            + struct.pack(">i", -1)  # topics: null
        ),
        "null where an array is required",
    ),
    # Metadata v10-11 may not name topics by id only.
    "metadata-v11-null-name": (
        frame(request_header(ApiKey.METADATA, 11, 1, flexible=True) + encode_uvarint(2) + uuid.uuid4().bytes + b"\x00\x00" + b"\x00\x00\x00"),
        "requires topic names",
    ),
}


@pytest.mark.parametrize("name", sorted(GARBLED))
def test_garbled_body_of_a_known_api(server, name):
    state = seed(server, "garbled")
    payload, reason = GARBLED[name]
    if reason is None:
        # The frame is whole but its body ends early: re-frame the shortened payload.
        payload = frame(payload[4:])
        reason = "malformed MetadataRequest"
    assert_rejected(server, payload, reason)
    assert_serving(server, state)


# ------------------------------------------------------------------------------ 14: acks=0


def test_acks_0_gets_no_response_but_the_data_lands(server):
    state = seed(server, "acks0")
    with WireClient(server) as client:
        silent = encode_request(ApiKey.PRODUCE, 9, produce_request(state.topic, 0, batch_of(b"fire", b"forget"), acks=0), correlation_id=77)
        # A refused acks=0 produce is silent too.
        refused = encode_request(ApiKey.PRODUCE, 9, produce_request(state.topic, 0, b"\x00" * 70, acks=0), correlation_id=78)
        probe = encode_request(
            ApiKey.API_VERSIONS, 3, ApiVersionsRequest(client_software_name="t", client_software_version="1"), correlation_id=79
        )
        client.send(silent + refused + probe)
        # The first answer on the connection is the probe's: nothing came for the produces.
        response = client.recv_frame()
        assert struct.unpack_from(">i", response, 4)[0] == 79
        assert decode_response(ApiKey.API_VERSIONS, 3, response).error_code == ErrorCode.none
        assert read_all(client, state.topic) == state.records + [(3, b"k", b"fire"), (4, b"k", b"forget")]
    assert_serving(server, state)


def test_many_bad_connections_leave_the_broker_fine(server):
    """A burst of every kind of broken input, then the usual checks (bounded: 60 connections)."""
    state = seed(server, "burst")
    payloads = [p for p, _ in RANDOM_INPUTS.values()] + [p for p, r in GARBLED.values() if r is not None]
    payloads.append(struct.pack(">i", 10 * 1024 * 1024))
    clients = []
    try:
        for round_ in range(60 // len(payloads) + 1):
            for payload in payloads:
                if len(clients) == 60:
                    break
                client = WireClient(server)
                clients.append(client)
                client.send(payload)
        for client in clients:
            client.assert_closed_by_broker()
    finally:
        for client in clients:
            client.close()
    assert_serving(server, state)
