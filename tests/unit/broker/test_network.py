"""Connection over a socketpair, with a stand-in for the dispatcher."""

import asyncio
import logging
import os
import socket
import ssl
import struct

import pytest
import trustme

from broker import network
from broker.deferred import Deferred
from broker.network import (
    Connection,
    ConnectionQuotas,
    Listener,
    PendingSends,
    RequestMemoryPool,
    TlsConnection,
    client_ip,
)
from broker.responses import CloseAfterResponse
from broker.session import Session
from protocol.errors import ProtocolError
from protocol.primitives import INT32
from storage.records_file import DeferredWrites, RecordsFile
from tests.compat.test_storage_failure import tmpfs


def frame(payload: bytes) -> bytes:
    return INT32.pack(len(payload)) + payload


class Harness:
    def __init__(self, dispatch, tcp=False, **limits):
        """`tcp`: a loopback TCP connection (TCP_NODELAY on the broker's side, as the listener
        sets it) instead of a Unix socket pair."""
        self.loop = asyncio.get_running_loop()
        self.client, self.server = tcp_pair() if tcp else socket.socketpair()
        server = self.server
        server.setblocking(False)
        self.client.settimeout(5)
        self.closed = asyncio.Event()
        self.connection = Connection(
            self.loop, server, "test", dispatch, lambda c: self.closed.set(), max_request_bytes=1 << 20, **limits
        )

    async def receive(self, size: int) -> bytes:
        return await self.loop.run_in_executor(None, self._receive, size)

    def _receive(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = self.client.recv(size - len(data))
            if not chunk:
                break
            data += chunk
        return data


def tcp_pair() -> tuple[socket.socket, socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as listening:
        client = socket.create_connection(listening.getsockname())
        server, _ = listening.accept()
    server.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return client, server


def segments_sent(sock: socket.socket) -> int:
    """tcpi_segs_out of the socket's struct tcp_info (Linux 4.2 and later)."""
    return struct.unpack_from("I", sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256), 136)[0]


def counting_sendfile(monkeypatch) -> list[int]:
    """Bytes each os.sendfile call moved, in order."""
    moved: list[int] = []
    real_sendfile = os.sendfile
    monkeypatch.setattr(os, "sendfile", lambda *a: moved.append(real_sendfile(*a)) or moved[-1])
    return moved


def echo(frame_view):
    return [frame(b"re:" + bytes(frame_view))]


def test_pipelined_requests_are_answered_in_order_even_when_one_waits():
    async def scenario():
        async def slow(payload):
            await asyncio.sleep(0.05)
            return [frame(b"slow:" + payload)]

        def dispatch(view):
            payload = bytes(view)
            return slow(payload) if payload == b"2" else [frame(b"re:" + payload)]

        h = Harness(dispatch)
        h.client.sendall(b"".join(frame(str(i).encode()) for i in range(1, 5)))
        expected = frame(b"re:1") + frame(b"slow:2") + frame(b"re:3") + frame(b"re:4")
        assert await h.receive(len(expected)) == expected

    asyncio.run(scenario())


def test_each_request_is_dispatched_with_the_time_its_frame_was_read_whole():
    async def scenario():
        timing = Session("127.0.0.1:1", "PLAINTEXT")
        seen = []

        async def slow():
            await asyncio.sleep(0.05)
            return [frame(b"done")]

        def dispatch(view):
            seen.append((bytes(view), timing.received_at, h.loop.time()))
            return slow() if bytes(view) == b"1" else [frame(b"done")]

        h = Harness(dispatch, timing=timing)
        read_before = h.loop.time()
        h.client.sendall(frame(b"1") + frame(b"2"))
        await h.receive(2 * len(frame(b"done")))
        return read_before, seen

    read_before, seen = asyncio.run(scenario())
    (first, first_read, _), (second, second_read, second_dispatched) = seen
    # The second waited behind the first (its queue time) from when it was read.
    assert (first, second) == (b"1", b"2")
    assert read_before <= first_read <= second_read < second_dispatched


def test_a_response_is_timed_from_its_queueing_to_its_last_byte_sent(monkeypatch):
    class Timer:
        def __init__(self):
            self.sent_after = None

        def sent(self, seconds):
            self.sent_after = seconds

    async def scenario():
        timing = Session("127.0.0.1:1", "PLAINTEXT")
        timers = []

        def dispatch(view):
            timers.append(Timer())
            timing.send_timer = timers[-1]
            return [frame(b"x" * 4_000_000)]  # more than the socket takes at once

        h = Harness(dispatch, timing=timing)
        h.client.sendall(frame(b"1"))
        for _ in range(500):  # until the server has a request in hand (at most 5 s)
            if timers:
                break
            await asyncio.sleep(0.01)
        waiting = timers[0].sent_after  # the socket buffer is full: not all of it sent
        received = await h.receive(len(frame(b"x" * 4_000_000)))
        for _ in range(500):  # the last write's callback runs on the loop
            if timers[0].sent_after is not None:
                break
            await asyncio.sleep(0.01)
        return waiting, len(received), timers[0].sent_after, timing.send_timer

    waiting, received, sent_after, left = asyncio.run(scenario())
    assert waiting is None and received == 4_000_004
    assert sent_after is not None and sent_after >= 0
    assert left is None  # taken by the connection


def watch_writes(monkeypatch, seen: list, note=lambda buffers: "send") -> None:
    """Note each write of answers: a connection sends chunks with no flag through os.writev,
    which it looks up when made (so connections made after this call)."""
    real_writev = os.writev
    monkeypatch.setattr(os, "writev", lambda fd, buffers: seen.append(note(buffers)) or real_writev(fd, buffers))


def test_responses_of_one_read_leave_in_one_write(monkeypatch):
    calls = []
    watch_writes(monkeypatch, calls, note=len)

    async def scenario():
        h = Harness(echo)
        h.client.sendall(b"".join(frame(b"x") for _ in range(20)))
        await h.receive(20 * len(frame(b"re:x")))

    asyncio.run(scenario())
    assert 0 < len(calls) < 20
    assert sum(calls) == 20  # every answer, one chunk each


def test_answers_of_one_turn_of_the_loop_go_out_after_its_reads_are_served(monkeypatch):
    """Two clients' requests readable at once are both dispatched before either answer is sent."""
    events = []
    watch_writes(monkeypatch, events)

    def dispatch(view):
        events.append(f"serve {bytes(view).decode()}")
        return echo(view)

    async def scenario():
        sends = PendingSends(asyncio.get_running_loop())
        first, second = Harness(dispatch, sends=sends), Harness(dispatch, sends=sends)
        first.client.sendall(frame(b"a"))
        second.client.sendall(frame(b"b"))
        assert await first.receive(len(frame(b"re:a"))) == frame(b"re:a")
        assert await second.receive(len(frame(b"re:b"))) == frame(b"re:b")

    asyncio.run(scenario())
    assert events == ["serve a", "serve b", "send", "send"]


@pytest.mark.pure_python  # counts PendingSends.send's calls
def test_a_deferred_answer_woken_by_another_connections_request_leaves_in_that_requests_row(monkeypatch):
    """A long poll's answer (a Deferred) done on the turn after the request that woke it goes
    out in the same row of sends as that request's answer: no turn of its own in between."""
    events = []
    real_send = PendingSends.send
    monkeypatch.setattr(PendingSends, "send", lambda self: events.append("row") or real_send(self))
    watch_writes(monkeypatch, events)
    waiting = Deferred()

    def dispatch(view):
        events.append(f"serve {bytes(view).decode()}")
        if bytes(view) == b"wait":
            return waiting
        # As the replica manager wakes a watch: its callback runs on the next turn.
        asyncio.get_running_loop().call_soon(waiting.resolve, [frame(b"woken")])
        return echo(view)

    async def scenario():
        sends = PendingSends(asyncio.get_running_loop())
        waiter, waker = Harness(dispatch, sends=sends), Harness(dispatch, sends=sends)
        waiter.client.sendall(frame(b"wait"))
        while events != ["serve wait"]:
            await asyncio.sleep(0.001)
        waker.client.sendall(frame(b"wake"))
        assert await waker.receive(len(frame(b"re:wake"))) == frame(b"re:wake")
        assert await waiter.receive(len(frame(b"woken"))) == frame(b"woken")

    asyncio.run(scenario())
    assert events == ["serve wait", "serve wake", "row", "send", "send"]


def test_closing_a_connection_cancels_the_deferred_answer_it_waits_for():
    stopped = []
    waiting = Deferred(lambda: stopped.append(True))

    async def scenario():
        h = Harness(lambda view: waiting)
        h.client.sendall(frame(b"wait"))
        while not h.connection.busy:
            await asyncio.sleep(0.001)
        h.client.close()
        await asyncio.wait_for(h.closed.wait(), 5)

    asyncio.run(scenario())
    assert waiting.cancelled() and stopped == [True]


def test_a_row_of_pending_sends_is_sent_once_it_holds_its_most_connections():
    class Waiting:
        def __init__(self, name, sent):
            self.name, self.sent = name, sent

        def send_queued(self):
            self.sent.append(self.name)

    async def scenario():
        sent = []
        sends = PendingSends(asyncio.get_running_loop(), max_connections=2)
        sends.add(Waiting("a", sent))
        assert sent == []  # the turn goes on
        sends.add(Waiting("b", sent))
        assert sent == ["a", "b"]  # a full row goes at once
        sends.add(Waiting("c", sent))
        await asyncio.sleep(0)
        return sent

    assert asyncio.run(scenario()) == ["a", "b", "c"]  # the rest when the turn is over


def test_answers_served_before_the_client_closes_its_side_are_still_sent():
    class Held:
        """Never sends on its own: the connection's end of stream must."""

        def add(self, connection):
            pass

    async def scenario():
        h = Harness(echo, sends=Held())
        h.client.sendall(frame(b"last"))
        h.client.shutdown(socket.SHUT_WR)
        answer = await h.receive(len(frame(b"re:last")))
        await asyncio.wait_for(h.closed.wait(), 5)
        return answer

    assert asyncio.run(scenario()) == frame(b"re:last")


def test_file_regions_go_out_with_sendfile(tmp_path, monkeypatch):
    async def scenario():
        records = RecordsFile.open(str(tmp_path / "0.log"))
        records.append(b"HEAD" + bytes(range(256)) * 4096 + b"TAIL")
        region = records.region(4, 256 * 4096)
        sent_by_sendfile = counting_sendfile(monkeypatch)

        def dispatch(view):
            return [INT32.pack(len(region) + 2) + b"<<", region]

        h = Harness(dispatch)
        h.client.sendall(frame(b"fetch"))
        data = await h.receive(4 + 2 + len(region))
        assert data[4:6] == b"<<" and data[6:] == bytes(range(256)) * 4096
        assert sum(sent_by_sendfile) == len(region)

    asyncio.run(scenario())


@pytest.mark.parametrize("size, by_sendfile", [(200, 0), (20_000, 20_000)])
def test_an_answer_with_a_file_region_between_bytes_leaves_in_one_tcp_segment(tmp_path, monkeypatch, size, by_sendfile):
    # A Fetch answer: header bytes, the records' file region, the tagged fields after them.
    # Sent as they come they are three segments, each waking the client. A tailing consumer's
    # few records are read and sent with the bytes around them (no sendfile, no cork); a region
    # beyond what an answer copies (this one fits loopback's 64 KiB segments) goes by sendfile,
    # the socket corked around it.
    async def scenario():
        records = RecordsFile.open(str(tmp_path / "0.log"))
        records.append(b"R" * size)
        region = records.region(0, size)
        moved = counting_sendfile(monkeypatch)
        before = []

        def dispatch(view):
            before.append(segments_sent(h.server))
            return [INT32.pack(len(region) + 4) + b"<<", region, b">>"]

        h = Harness(dispatch, tcp=True)
        h.client.sendall(frame(b"fetch"))
        assert await h.receive(4 + 2 + size + 2) == INT32.pack(size + 4) + b"<<" + b"R" * size + b">>"
        assert sum(moved) == by_sendfile
        assert segments_sent(h.server) - before[0] == 1

    asyncio.run(scenario())


def test_a_corked_answer_larger_than_the_socket_buffer_arrives_whole_and_in_order(tmp_path):
    async def scenario():
        payload = bytes(range(256)) * 8192  # 2 MiB: many times the send buffer
        records = RecordsFile.open(str(tmp_path / "0.log"))
        records.append(payload)
        region = records.region(0, len(payload))

        def dispatch(view):
            return [INT32.pack(len(payload) + 4) + b"<<", region, b">>", frame(b"next")]

        h = Harness(dispatch, tcp=True)
        h.server.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)
        h.client.sendall(frame(b"fetch"))
        expected = INT32.pack(len(payload) + 4) + b"<<" + payload + b">>" + frame(b"next")
        assert await h.receive(len(expected)) == expected

    asyncio.run(scenario())


def test_regions_past_an_answer_s_first_16_kib_go_out_with_sendfile(tmp_path, monkeypatch):
    # The copies an answer of many partitions holds are bounded: the third 7 KiB region does
    # not fit the budget left by the first two, and neither does the large one.
    async def scenario():
        records = RecordsFile.open(str(tmp_path / "0.log"))
        payload = bytes(range(256)) * 512
        records.append(payload)
        small = [records.region(i * 7168, 7168) for i in range(3)]
        large = records.region(0, len(payload))
        moved = counting_sendfile(monkeypatch)

        def dispatch(view):
            return [INT32.pack(3 * 7168 + len(payload)), *small, large]

        h = Harness(dispatch)
        h.client.sendall(frame(b"fetch"))
        received = await h.receive(4 + 3 * 7168 + len(payload))
        assert received[4:] == payload[: 3 * 7168] + payload
        assert sum(moved) == 7168 + len(payload)

    asyncio.run(scenario())


def test_a_small_region_cut_short_under_its_answer_closes_the_connection_unanswered(tmp_path, monkeypatch):
    # The file was truncated between the read and the answer: its bytes cannot all be read, and
    # the answer cannot be completed, as when sendfile finds the file shorter.
    async def scenario():
        records = RecordsFile.open(str(tmp_path / "0.log"))
        records.append(b"R" * 200)
        region = records.region(0, 200)

        def dispatch(view):
            os.truncate(records.path, 100)
            return [INT32.pack(len(region) + 2) + b"<<", region]

        h = Harness(dispatch)
        h.client.sendall(frame(b"fetch"))
        received = await h.receive(4 + 2 + 200)
        await asyncio.wait_for(h.closed.wait(), 5)
        return received

    assert len(asyncio.run(scenario())) < 4 + 2 + 200


def test_the_appends_of_one_read_wait_while_it_is_served_and_are_written_before_its_answers(tmp_path):
    async def scenario():
        writes = DeferredWrites(lambda path, exc: None)
        records = RecordsFile.open(str(tmp_path / "0.log"))
        on_disk_while_served = []

        def dispatch(view):
            records.append(bytes(view), writes)
            on_disk_while_served.append(os.path.getsize(records.path))
            return [frame(b"ok")]

        h = Harness(dispatch, appends=writes)
        h.client.sendall(frame(b"one;") + frame(b"two;") + frame(b"three;"))
        assert await h.receive(3 * len(frame(b"ok"))) == 3 * frame(b"ok")
        assert on_disk_while_served == [0, 0, 0]
        with open(records.path, "rb") as f:
            assert f.read() == b"one;two;three;"
        records.close()

    asyncio.run(scenario())


def test_a_connection_whose_appends_cannot_be_written_closes_without_answering(tmp_path):
    # Sent at once (a row of one): the answers would leave before a write that came after them.
    async def scenario(small):
        failed = []
        writes = DeferredWrites(lambda path, exc: failed.append(path))
        records = RecordsFile.open(str(small / "0.log"))

        def dispatch(view):
            records.append(b"x" * 700_000, writes)
            return [frame(b"ok")]

        h = Harness(dispatch, appends=writes, sends=PendingSends(asyncio.get_running_loop(), max_connections=1))
        h.client.sendall(frame(b"first") + frame(b"second"))  # 1.4 MB for a dir of 1 MiB
        await asyncio.wait_for(h.closed.wait(), 5)
        assert await h.receive(1) == b""
        assert failed == [records.path] and writes.failures == 1
        records.close()

    with tmpfs(tmp_path / "small", "1m") as small:
        asyncio.run(scenario(small))


def test_broken_framing_closes_the_connection():
    async def scenario():
        h = Harness(echo)
        h.client.sendall(INT32.pack(-1))
        await asyncio.wait_for(h.closed.wait(), 5)
        assert await h.receive(1) == b""

    asyncio.run(scenario())


def test_a_protocol_error_from_dispatch_closes_after_earlier_responses():
    async def scenario():
        def dispatch(view):
            if bytes(view) == b"bad":
                raise ProtocolError("unknown api key")
            return [frame(b"ok")]

        h = Harness(dispatch)
        h.client.sendall(frame(b"good") + frame(b"bad") + frame(b"never"))
        assert await h.receive(100) == frame(b"ok")
        assert h.closed.is_set()

    asyncio.run(scenario())


def test_a_last_answer_is_sent_before_the_connection_closes():
    # A failed SASL authentication: Kafka answers it, then closes.
    async def scenario():
        def dispatch(view):
            if bytes(view) == b"wrong password":
                raise CloseAfterResponse("authentication failed", [frame(b"failed")])
            return [frame(b"ok")]

        h = Harness(dispatch)
        h.client.sendall(frame(b"first") + frame(b"wrong password") + frame(b"never"))
        assert await h.receive(100) == frame(b"ok") + frame(b"failed")
        assert h.closed.is_set()

    asyncio.run(scenario())


def test_reading_pauses_while_too_many_requests_wait():
    async def scenario():
        gate = asyncio.Event()
        served = []

        async def wait_for_gate(payload):
            await gate.wait()
            return [frame(payload)]

        def dispatch(view):
            served.append(bytes(view))
            return wait_for_gate(bytes(view))

        h = Harness(dispatch, max_queued_requests=2)
        h.client.sendall(b"".join(frame(b"%d" % i) for i in range(6)))
        await asyncio.sleep(0.1)
        assert served == [b"0"] and not h.connection._reading
        gate.set()
        expected = b"".join(frame(b"%d" % i) for i in range(6))
        assert await h.receive(len(expected)) == expected

    asyncio.run(scenario())


def test_an_unexpected_dispatch_failure_closes_only_that_connection():
    async def scenario():
        def dispatch(view):
            raise RuntimeError("bug")

        h = Harness(dispatch)
        h.client.sendall(frame(b"x"))
        await asyncio.wait_for(h.closed.wait(), 5)

    asyncio.run(scenario())


def test_reading_pauses_while_the_request_memory_pool_is_used_up_and_nothing_is_lost():
    async def scenario():
        gate = asyncio.Event()
        served = []

        async def wait_for_gate(payload):
            await gate.wait()
            return [frame(b"re:" + payload)]

        def dispatch(view):
            served.append(bytes(view))
            return wait_for_gate(bytes(view))

        pool = RequestMemoryPool(100)
        first = Harness(dispatch, pool=pool)
        big = [b"a" * 150, b"b" * 30]  # larger than the pool: still granted, the pool goes below 0
        first.client.sendall(b"".join(frame(p) for p in big))
        await asyncio.sleep(0.1)
        second = Harness(dispatch, pool=pool)
        second.client.sendall(frame(b"c" * 10))
        await asyncio.sleep(0.1)
        assert served == [big[0]] and pool.available == -50
        assert not first.connection._reading and not second.connection._reading
        gate.set()
        assert await first.receive(2 * 4 + 6 + 180) == frame(b"re:" + big[0]) + frame(b"re:" + big[1])
        assert await second.receive(4 + 13) == frame(b"re:" + b"c" * 10)
        assert pool.available == 100
        first.client.close()
        await asyncio.wait_for(first.closed.wait(), 5)
        assert pool.available == 100

    asyncio.run(scenario())


def test_a_closed_connection_gives_its_pool_memory_back():
    async def scenario():
        never = asyncio.Event()

        async def hang():
            await never.wait()

        pool = RequestMemoryPool(1000)
        h = Harness(lambda view: hang(), pool=pool)
        h.client.sendall(frame(b"x" * 300) + INT32.pack(500) + b"partial")
        await asyncio.sleep(0.1)
        assert pool.available == 1000 - 300 - 500
        h.client.close()
        await asyncio.wait_for(h.closed.wait(), 5)
        assert pool.available == 1000

    asyncio.run(scenario())


def test_per_ip_limits_and_their_overrides():
    quotas = ConnectionQuotas(100, 2, {"10.0.0.9": 0, "10.0.0.5": 3})
    assert quotas.admit("PLAINTEXT", "10.0.0.1") is None
    assert quotas.admit("PLAINTEXT", "10.0.0.1") is None
    assert "max.connections.per.ip" in quotas.admit("PLAINTEXT", "10.0.0.1")
    assert quotas.admit("PLAINTEXT", "10.0.0.9") is not None
    assert [quotas.admit("PLAINTEXT", "10.0.0.5") for _ in range(4)][-1] is not None
    quotas.release("10.0.0.1")
    assert quotas.admit("PLAINTEXT", "10.0.0.1") is None


def test_max_connections_spares_the_inter_broker_listener():
    quotas = ConnectionQuotas(2, 100, {}, protected_listener="REPLICATION")
    assert quotas.admit("CLIENT", "10.0.0.1") is None
    assert quotas.admit("CLIENT", "10.0.0.2") is None
    assert "max.connections" in quotas.admit("CLIENT", "10.0.0.3")
    assert quotas.admit("REPLICATION", "10.0.0.4") is None
    quotas.release("10.0.0.4")
    quotas.release("10.0.0.1")
    assert quotas.admit("CLIENT", "10.0.0.3") is None


def test_ipv4_clients_of_a_dual_stack_listener_count_as_ipv4():
    assert client_ip("::ffff:127.0.0.1") == "127.0.0.1"
    assert client_ip("::1") == "::1"
    assert client_ip("fe80::1%eth0") == "fe80::1"


def test_accepted_sockets_get_the_configured_buffer_sizes():
    async def scenario():
        accepted = asyncio.get_running_loop().create_future()
        listener = Listener(
            "127.0.0.1", 0, lambda sock, ip, port: accepted.set_result(sock),
            send_buffer=40960, receive_buffer=61440,
        )
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", listener.port)
            sock = await asyncio.wait_for(accepted, 5)
            with socket.socket() as reference:  # what the OS makes of the same request
                reference.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 40960)
                reference.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 61440)
                for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
                    assert sock.getsockopt(socket.SOL_SOCKET, option) == reference.getsockopt(socket.SOL_SOCKET, option)
            sock.close()
            writer.close()
        finally:
            listener.close()

    asyncio.run(scenario())


def test_a_connection_is_idle_only_while_it_serves_nothing():
    async def scenario():
        gate = asyncio.Event()

        async def wait_for_gate():
            await gate.wait()
            return [frame(b"done")]

        h = Harness(lambda view: wait_for_gate())
        assert h.connection.idle_since() == h.connection.last_active
        h.client.sendall(frame(b"x"))
        await asyncio.sleep(0.05)
        assert h.connection.idle_since() is None
        gate.set()
        await h.receive(len(frame(b"done")))
        await asyncio.sleep(0.01)
        assert h.connection.idle_since() is not None

    asyncio.run(scenario())


def test_a_closed_connection_never_waits_for_pool_memory():
    async def scenario():
        pool = RequestMemoryPool(0)  # used up: an open connection waits for it
        h = Harness(echo, pool=pool)
        assert pool.is_waiting(h.connection)
        h.connection.close("test")
        # what a send failing inside _serve or _on_writable is followed by
        h.connection._apply_back_pressure()
        assert not pool.is_waiting(h.connection)

    asyncio.run(scenario())


# ------------------------------------------------------------------------------ TLS


@pytest.fixture(scope="module")
def tls_contexts():
    """(server context, client context trusting the server's CA)."""
    ca = trustme.CA()
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("localhost").configure_cert(server)
    client = ssl.create_default_context()
    ca.configure_trust(client)
    return server, client


class TlsHarness(Harness):
    """A TlsConnection over a socketpair; the client side is a blocking TLS socket used from a
    worker thread (`call`)."""

    def __init__(self, dispatch, server_context, client_context, handshake_timeout=30.0, **limits):
        self.loop = asyncio.get_running_loop()
        raw_client, server = socket.socketpair()
        server.setblocking(False)
        raw_client.settimeout(5)
        self.closed = asyncio.Event()
        self.handshakes = []
        self.connection = TlsConnection(
            self.loop, server, "test", dispatch, lambda c: self.closed.set(), max_request_bytes=1 << 20,
            context=server_context, on_handshake=self._on_handshake, handshake_timeout=handshake_timeout,
            **limits,
        )
        self.client = client_context.wrap_socket(raw_client, server_hostname="localhost", do_handshake_on_connect=False)

    def _on_handshake(self, tls_object):
        self.handshakes.append(tls_object.version())
        return None

    async def call(self, function, *args):
        return await self.loop.run_in_executor(None, function, *args)


def test_tls_requests_and_file_regions_are_served_encrypted_in_bounded_reads(tmp_path, monkeypatch, tls_contexts):
    async def scenario():
        records = RecordsFile.open(str(tmp_path / "0.log"))
        payload = bytes(range(256)) * (3 * 4096 + 7)  # several TLS chunks and a partial one
        records.append(b"HEAD" + payload)
        region = records.region(4, len(payload))
        monkeypatch.setattr(os, "sendfile", lambda *a: pytest.fail("sendfile cannot encrypt"))
        reads = []
        real_pread = os.pread
        monkeypatch.setattr(os, "pread", lambda fd, n, at: reads.append(n) or real_pread(fd, n, at))

        def dispatch(view):
            if bytes(view) == b"fetch":
                return [INT32.pack(len(region) + 2) + b"<<", region]
            return [frame(b"re:" + bytes(view))]

        h = TlsHarness(dispatch, *tls_contexts)
        await h.call(h.client.do_handshake)
        await h.call(h.client.sendall, frame(b"one") + frame(b"fetch") + frame(b"two"))
        data = await h.receive(4 + 6 + 4 + 2 + len(region) + 4 + 6)
        assert data == frame(b"re:one") + INT32.pack(len(region) + 2) + b"<<" + payload + frame(b"re:two")
        assert sum(reads) == len(region) and max(reads) <= network._TLS_CHUNK
        assert h.handshakes == ["TLSv1.3"]

    asyncio.run(scenario())


def test_tls_requests_held_in_the_tls_buffers_are_read_without_new_socket_data(tls_contexts):
    """With a request memory pool, reads stop at frame ends: frames decrypted from one record
    beyond the first wait in the SSLObject, and must still be served."""

    async def scenario():
        h = TlsHarness(lambda view: [frame(b"re:" + bytes(view))], *tls_contexts, pool=RequestMemoryPool(1 << 20))
        await h.call(h.client.do_handshake)
        requests = [bytes([65 + i]) * (i + 1) for i in range(20)]
        await h.call(h.client.sendall, b"".join(frame(r) for r in requests))  # one TLS record
        expected = b"".join(frame(b"re:" + r) for r in requests)
        assert await h.receive(len(expected)) == expected

    asyncio.run(scenario())


def test_a_failed_tls_handshake_is_logged_with_its_reason_and_closes(tls_contexts, caplog):
    async def scenario():
        untrusting = ssl.create_default_context()  # does not trust the test CA
        h = TlsHarness(echo, tls_contexts[0], untrusting)
        with pytest.raises(ssl.SSLCertVerificationError):
            await h.call(h.client.do_handshake)
        await asyncio.wait_for(h.closed.wait(), 5)

    with caplog.at_level(logging.INFO, logger="broker.network"):
        asyncio.run(scenario())
    assert any("TLS handshake with test failed: " in r.getMessage() and "unknown ca" in r.getMessage()
               for r in caplog.records)


def test_a_tls_handshake_that_never_completes_is_closed_at_its_bound(tls_contexts, caplog):
    async def scenario():
        h = TlsHarness(echo, *tls_contexts, handshake_timeout=0.05)
        h.client.setblocking(True)
        await asyncio.wait_for(h.closed.wait(), 5)  # the client never starts its handshake
        assert h.connection.closed and h.handshakes == []

    with caplog.at_level(logging.INFO, logger="broker.network"):
        asyncio.run(scenario())
    assert any("not completed within 0.05 s" in r.getMessage() for r in caplog.records)


def test_a_refused_principal_closes_after_the_handshake(tls_contexts):
    async def scenario():
        h = TlsHarness(echo, *tls_contexts)
        h._on_handshake = lambda tls_object: "No rules apply to CN=x"
        h.connection._on_handshake = h._on_handshake
        await h.call(h.client.do_handshake)
        await asyncio.wait_for(h.closed.wait(), 5)

    asyncio.run(scenario())
