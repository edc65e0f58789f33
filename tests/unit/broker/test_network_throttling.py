"""Connection muting after a ThrottledResponse (client quotas), over a socketpair with a
stand-in for the dispatcher."""

import asyncio
import socket

from broker.network import Connection
from broker.responses import ThrottledResponse
from protocol.primitives import INT32


def frame(payload: bytes) -> bytes:
    return INT32.pack(len(payload)) + payload


async def receive(sock: socket.socket, size: int) -> bytes:
    def read() -> bytes:
        data = b""
        while len(data) < size:
            chunk = sock.recv(size - len(data))
            if not chunk:
                break
            data += chunk
        return data

    return await asyncio.get_running_loop().run_in_executor(None, read)


def connection_with(dispatch) -> tuple[Connection, socket.socket]:
    client, server = socket.socketpair()
    server.setblocking(False)
    client.settimeout(5)
    connection = Connection(
        asyncio.get_running_loop(), server, "test", dispatch, lambda c: None, max_request_bytes=1 << 20
    )
    return connection, client


def test_a_throttled_answer_goes_at_once_and_holds_back_the_next_request():
    async def scenario():
        served = []

        def dispatch(view):
            served.append(bytes(view))
            answer = [frame(b"re:" + bytes(view))]
            # An hour: the mute can only end through stop_reading below.
            return ThrottledResponse(answer, 3600) if bytes(view) == b"1" else answer

        connection, client = connection_with(dispatch)
        client.sendall(frame(b"1") + frame(b"2"))
        assert await receive(client, len(frame(b"re:1"))) == frame(b"re:1")
        for _ in range(20):
            await asyncio.sleep(0)
        assert served == [b"1"]
        assert connection.idle_since() is None  # muted by the broker, not idle by the client
        # Shutting down serves what was received: the mute is lifted.
        connection.stop_reading()
        assert await receive(client, len(frame(b"re:2"))) == frame(b"re:2")
        assert served == [b"1", b"2"]
        connection.close(None)

    asyncio.run(scenario())


def test_reading_resumes_when_the_throttle_time_is_over():
    async def scenario():
        def dispatch(view):
            answer = [frame(b"re:" + bytes(view))]
            return ThrottledResponse(answer, 0.01) if bytes(view) == b"1" else answer

        connection, client = connection_with(dispatch)
        client.sendall(frame(b"1"))
        assert await receive(client, len(frame(b"re:1"))) == frame(b"re:1")
        client.sendall(frame(b"2"))
        assert await receive(client, len(frame(b"re:2"))) == frame(b"re:2")
        connection.close(None)

    asyncio.run(scenario())


def test_an_acks_0_produce_can_mute_without_an_answer():
    async def scenario():
        served = []

        def dispatch(view):
            served.append(bytes(view))
            return ThrottledResponse([], 3600) if bytes(view) == b"silent" else [frame(b"re:" + bytes(view))]

        connection, client = connection_with(dispatch)
        client.sendall(frame(b"silent") + frame(b"2"))
        for _ in range(50):
            await asyncio.sleep(0)
        assert served == [b"silent"]
        connection.close(None)

    asyncio.run(scenario())
