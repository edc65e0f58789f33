"""A minimal Kafka client speaking the wire protocol directly, to load the broker without a
client library in the way.

Two workloads:
- `raw_produce`: one prebuilt record batch (CRC included) sent again and again in Produce v3
  requests with a few in flight, as librdkafka pipelines them. The broker patches baseOffset in
  its own receive buffer, so the same bytes can be resent; the client does no per-record work.
- `raw_fetch`: Fetch v4 requests, one at a time as a consumer does, each response received
  with recv_into into a preallocated buffer (the same reader as the machine's sendfile sink in
  benchmarks.machine), walking only the batch headers to find the next offset.

Both are bounded by a deadline and a request count.
"""

import socket
import struct
import time
from dataclasses import dataclass

from protocol.records import Record, build_batch

_HEADER = struct.Struct(">hhih")  # api_key, api_version, correlation_id, client_id length
_CLIENT_ID = b"logway-bench"
_PRODUCE, _FETCH = 0, 1
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_RECV_CHUNK = 1024 * 1024


class WireError(RuntimeError):
    pass


def make_batch(record_size: int, batch_bytes: int) -> tuple[bytes, int]:
    """One v2 batch of records with `record_size`-byte values, about `batch_bytes` long.
    Returns (batch, record count)."""
    now = int(time.time() * 1000)
    value = b"x" * record_size
    per_record = record_size + 8  # value plus its varint framing, roughly
    count = max(1, batch_bytes // per_record)
    records = [Record(offset, now, None, value) for offset in range(count)]
    return build_batch(records), count


def _request(api_key: int, version: int, body: bytes) -> bytearray:
    header = _HEADER.pack(api_key, version, 0, len(_CLIENT_ID)) + _CLIENT_ID
    return bytearray(_I32.pack(len(header) + len(body)) + header + body)


def _string(value: str) -> bytes:
    data = value.encode()
    return _I16.pack(len(data)) + data


def produce_request(topic: str, partition: int, batch: bytes, acks: int = 1) -> bytearray:
    """A Produce v3 request of one batch to one partition (correlation id 0: `_Connection.send`
    numbers it)."""
    body = (
        _I16.pack(-1)  # transactional_id: null
        + _I16.pack(acks)
        + _I32.pack(30_000)
        + _I32.pack(1)
        + _string(topic)
        + _I32.pack(1)
        + _I32.pack(partition)
        + _I32.pack(len(batch))
        + batch
    )
    return _request(_PRODUCE, 3, body)


def fetch_request(topic: str, partition: int, offset: int, max_bytes: int, max_wait_ms: int = 0) -> bytearray:
    """A Fetch v4 request (read_uncommitted, min_bytes 1) of one partition from `offset`."""
    body = (
        _I32.pack(-1)  # replica_id
        + _I32.pack(max_wait_ms)
        + _I32.pack(1)  # min_bytes
        + _I32.pack(max_bytes)
        + bytes([0])  # isolation_level: read_uncommitted
        + _I32.pack(1)
        + _string(topic)
        + _I32.pack(1)
        + _I32.pack(partition)
        + _I64.pack(offset)
        + _I32.pack(max_bytes)
    )
    return _request(_FETCH, 4, body)


class _Connection:
    def __init__(self, address: tuple[str, int], buffer_bytes: int) -> None:
        self.sock = socket.create_connection(address, timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray(buffer_bytes)
        self.view = memoryview(self.buf)
        self.correlation_id = 0

    def send(self, request: bytearray) -> int:
        self.correlation_id += 1
        struct.pack_into(">i", request, 8, self.correlation_id)
        self.sock.sendall(request)
        return self.correlation_id

    def _recv_exactly(self, view: memoryview) -> None:
        got = 0
        while got < len(view):
            n = self.sock.recv_into(view[got : got + _RECV_CHUNK])
            if n == 0:
                raise WireError("broker closed the connection")
            got += n

    def receive(self) -> memoryview:
        """One response frame (correlation id first), in the connection's buffer."""
        self._recv_exactly(self.view[:4])
        (size,) = _I32.unpack_from(self.buf, 0)
        if size > len(self.buf):
            raise WireError(f"response of {size} bytes exceeds the {len(self.buf)}-byte buffer")
        self._recv_exactly(self.view[:size])
        return self.view[:size]

    def close(self) -> None:
        self.sock.close()


@dataclass
class WireResult:
    requests: int
    records: int
    bytes: int  # record bytes acknowledged or received in whole batches
    wire_bytes: int  # record bytes sent or received, partial trailing batches included
    seconds: float
    timed_out: bool


def raw_produce(
    address: tuple[str, int],
    topic: str,
    batch: bytes,
    records_per_batch: int,
    total_bytes: int,
    *,
    acks: int = 1,
    in_flight: int = 5,
    deadline_s: float = 60.0,
) -> WireResult:
    """Send `batch` in Produce v3 requests until `total_bytes` were acknowledged."""
    request = produce_request(topic, 0, batch, acks)
    wanted = max(1, total_bytes // len(batch))
    conn = _Connection(address, 1024 * 1024)
    try:
        sent = acked = 0
        start = time.perf_counter()
        deadline = start + deadline_s
        timed_out = False
        while acked < wanted:
            if time.perf_counter() > deadline:
                timed_out = True
                break
            if sent < wanted and sent - acked < in_flight:
                conn.send(request)
                sent += 1
                continue
            check_produce_response(conn.receive(), topic)
            acked += 1
        seconds = time.perf_counter() - start
        while acked < sent:  # drain what is still in flight, untimed
            check_produce_response(conn.receive(), topic)
            acked += 1
    finally:
        conn.close()
    done = min(acked, wanted)
    return WireResult(done, done * records_per_batch, done * len(batch), done * len(batch), seconds, timed_out)


def check_produce_response(frame: memoryview, topic: str) -> None:
    # correlation_id, [topic [partition error_code base_offset log_append_time]], throttle
    pos = 4 + 4  # correlation id, topic count
    (name_length,) = _I16.unpack_from(frame, pos)
    pos += 2 + name_length + 4 + 4  # name, partition count, partition index
    (error_code,) = _I16.unpack_from(frame, pos)
    if error_code:
        raise WireError(f"produce to {topic} failed with error code {error_code}")


def raw_fetch(
    address: tuple[str, int],
    topic: str,
    start_offset: int,
    end_offset: int,
    *,
    max_bytes: int = 16 * 1024 * 1024,
    min_total_bytes: int = 0,
    max_passes: int = 20,
    deadline_s: float = 60.0,
    max_requests: int = 100_000,
) -> WireResult:
    """Fetch [start_offset, end_offset) of partition 0 in Fetch v4 requests of `max_bytes`,
    reading the range again (up to `max_passes` times) until `min_total_bytes` were received."""
    conn = _Connection(address, max_bytes + 64 * 1024)
    offset = start_offset
    requests = records = whole = wire = 0
    try:
        start = time.perf_counter()
        deadline = start + deadline_s
        timed_out = False
        passes = 1
        while offset < end_offset:
            if time.perf_counter() > deadline or requests >= max_requests:
                timed_out = True
                break
            request = fetch_request(topic, 0, offset, max_bytes)  # max_wait 0: the data is there already
            conn.send(request)
            frame = conn.receive()
            requests += 1
            next_offset, batch_bytes, record_bytes = walk_fetch_response(frame, topic)
            if next_offset is None:
                raise WireError(f"fetch at offset {offset} of {topic} returned no whole batch")
            records += next_offset - offset
            whole += batch_bytes
            wire += record_bytes
            offset = next_offset
            if offset >= end_offset and whole < min_total_bytes and passes < max_passes:
                offset = start_offset
                passes += 1
        seconds = time.perf_counter() - start
    finally:
        conn.close()
    return WireResult(requests, records, whole, wire, seconds, timed_out)


def walk_fetch_response(frame: memoryview, topic: str) -> tuple[int | None, int, int]:
    """(offset after the last whole batch, bytes of whole batches, record bytes received)."""
    # correlation_id, throttle_time_ms, [topic [partition error hw lso aborted records]]
    pos = 4 + 4 + 4
    (name_length,) = _I16.unpack_from(frame, pos)
    pos += 2 + name_length + 4 + 4  # name, partition count, partition index
    (error_code,) = _I16.unpack_from(frame, pos)
    if error_code:
        raise WireError(f"fetch from {topic} failed with error code {error_code}")
    pos += 2 + 8 + 8
    (aborted,) = _I32.unpack_from(frame, pos)
    pos += 4 + max(aborted, 0) * 16
    (length,) = _I32.unpack_from(frame, pos)
    pos += 4
    end = pos + max(length, 0)
    next_offset = None
    whole = 0
    while pos + 27 <= end:
        (base_offset,) = _I64.unpack_from(frame, pos)
        (batch_length,) = _I32.unpack_from(frame, pos + 8)
        size = 12 + batch_length
        if pos + size > end:
            break  # a partial trailing batch: fetched again next time
        (last_delta,) = _I32.unpack_from(frame, pos + 23)
        next_offset = base_offset + last_delta + 1
        whole += size
        pos += size
    return next_offset, whole, max(length, 0)
