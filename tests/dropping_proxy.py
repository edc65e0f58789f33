"""A TCP proxy in front of a broker that loses the first answer to every produced batch.

Requests go through unchanged. When the broker answers a Produce request holding a batch it has
not answered before (a batch is known by topic, partition, producer id, epoch and base
sequence), the proxy swallows that answer and closes the client's connection, as a network
failing after the broker appended would. The client must send the batch again, on a new
connection, and the answer to that retry goes through. Every batch is thus appended (or found a
duplicate) at least twice over; an idempotent producer still writes each record exactly once.

The broker must advertise the proxy's address (advertised.listeners), or clients would go
around it after their first Metadata request:

    proxy = ResponseDroppingProxy()
    broker = broker_factory(advertised_listeners=f"PLAINTEXT://{proxy.address}")
    proxy.start(broker.port)

Threads: one accepting, two per proxied connection; all are daemons, bounded by their sockets,
which `close` shuts.
"""

import socket
import threading
from collections.abc import Callable

from protocol import schemas
from protocol.api_keys import ApiKey
from protocol.headers import parse_request_header, peek_request
from protocol.primitives import INT32
from protocol.produce import parse_produce_request
from protocol.record_batch import BATCH_HEADER_SIZE, BatchHeader

from tests.cuttable_proxy import shut

_HOST = "127.0.0.1"
_CHUNK = 1 << 16


class ResponseDroppingProxy:
    def __init__(self) -> None:
        self._listener = socket.create_server((_HOST, 0))
        self.port = self._listener.getsockname()[1]
        self._upstream_port: int | None = None
        self._answered: set[tuple] = set()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self.dropped = 0
        # Called (on a proxy thread) with the number of answers dropped so far, after the
        # broker's answer was swallowed and before the client's connection is closed.
        self.on_drop: Callable[[int], None] = lambda dropped: None

    @property
    def address(self) -> str:
        return f"{_HOST}:{self.port}"

    def start(self, upstream_port: int) -> "ResponseDroppingProxy":
        self._upstream_port = upstream_port
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def close(self) -> None:
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                shut(sock)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection((_HOST, self._upstream_port))
            except OSError:  # the broker is down (restarting): the client will reconnect
                shut(client)
                continue
            with self._lock:
                self._sockets += [client, upstream]
            pending: dict[int, list[tuple]] = {}  # correlation id -> batches of a Produce
            pumps = ((self._requests, client, upstream), (self._responses, upstream, client))
            for pump, source, destination in pumps:
                args = (source, destination, pending)
                threading.Thread(target=pump, args=args, daemon=True).start()

    def _requests(self, client: socket.socket, upstream: socket.socket, pending: dict) -> None:
        for frame in _frames(client):
            api_key, version, _ = peek_request(frame[4:])
            if api_key == ApiKey.PRODUCE:
                flexible = schemas.is_flexible(api_key, version)
                header, body_start = parse_request_header(frame[4:], flexible)
                produce = parse_produce_request(version, frame[4 + body_start :])
                if produce.acks != 0:
                    pending[header.correlation_id] = _batch_keys(produce)
            try:
                upstream.sendall(frame)
            except OSError:
                break
        shut(upstream)

    def _responses(self, upstream: socket.socket, client: socket.socket, pending: dict) -> None:
        for frame in _frames(upstream):
            (correlation_id,) = INT32.unpack_from(frame, 4)
            batches = pending.pop(correlation_id, ())
            with self._lock:
                first_answer = any(key not in self._answered for key in batches)
                self._answered.update(batches)
                if first_answer:
                    self.dropped += 1
                    dropped = self.dropped
            if first_answer:
                self.on_drop(dropped)
                break
            try:
                client.sendall(frame)
            except OSError:
                break
        shut(client)
        shut(upstream)


def _frames(sock: socket.socket):
    """Whole frames (size prefix included) as they arrive, until the socket closes."""
    buffer = bytearray()
    while True:
        try:
            chunk = sock.recv(_CHUNK)
        except OSError:
            return
        if not chunk:
            return
        buffer += chunk
        while len(buffer) >= 4:
            size = INT32.unpack_from(buffer)[0] + 4
            if len(buffer) < size:
                break
            yield memoryview(bytes(buffer[:size]))
            del buffer[:size]


def _batch_keys(produce) -> list[tuple]:
    keys = []
    for topic in produce.topics:
        for partition in topic.partitions:
            if partition.records is not None and len(partition.records) >= BATCH_HEADER_SIZE:
                batch = BatchHeader.from_buffer(partition.records)
                key = (batch.producer_id, batch.producer_epoch, batch.base_sequence)
                keys.append((topic.name, partition.index, *key))
    return keys
