"""Listening sockets and client connections.

Connections use non-blocking sockets driven by the event loop's add_reader/add_writer rather
than transports: the broker must interleave plain writes with os.sendfile of file regions, and
neither asyncio's transports nor uvloop's (which has no loop.sendfile) let it do so on their
socket. Owning the socket also lets a connection receive straight into its frame buffer and
gather all of a read's responses into one sendmsg.

TLS connections (TlsConnection) run the same framing, ordering and back-pressure over an
ssl.SSLObject fed through memory buffers; their file regions are read and encrypted, as sendfile
cannot encrypt.
"""

import errno
import ipaddress
import logging
import os
import re
import socket
import ssl
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Protocol

import asyncio

from protocol.errors import ProtocolError
from protocol.framing import FRAME_PREFIX, FrameReader

from broker.deferred import Deferred
from broker.session import Session
from broker.responses import Chunks, CloseAfterResponse, ThrottledResponse
from storage.records_file import DeferredWrites, FileRegion

log: Final = logging.getLogger(__name__)

Dispatch = Callable[[memoryview], "Chunks | None | Deferred[Chunks | None] | Awaitable[Chunks | None]"]

_MAX_IOV: Final = 64
_MAX_QUEUED_REQUESTS: Final = 100
_MAX_QUEUED_BYTES: Final = 64 * 1024 * 1024
_SENDFILE_CHUNK: Final = 4 * 1024 * 1024
# File region bytes an answer may carry as a copy instead (Connection._queue).
_COPIED_REGION_BYTES: Final = 16 * 1024
# The chunks sent with sendmsg or writev. A Final tuple: compiled code would otherwise look
# `memoryview` up in builtins and build the tuple at every check (several a response).
_BYTES_LIKE: Final = (bytes, memoryview)


def _copied(region: FileRegion, size: int) -> bytes | FileRegion:
    """A file region's bytes, read now; the region itself if they cannot all be read (a
    truncated file, a failing disk), so that sending it fails as any region's send fails."""
    try:
        data = os.pread(region.fd, size, region.position)
    except OSError:
        return region
    return data if len(data) == size else region


class RequestMemoryPool:
    """queued.max.request.bytes: bytes of requests read and not yet finished, over all
    connections.

    Non-strict, as Kafka's pool for requests: a frame is granted its announced size while
    anything is left, even more than is left, so a request larger than the pool is still
    served. Once the pool is used up, connections stop reading new frames (nothing is dropped:
    they stay in the socket) and resume, oldest waiter first, as requests finish. A frame
    already granted is read to its end, so pausing cannot deadlock on half-read frames.
    """

    def __init__(self, capacity: int) -> None:
        self.available = capacity
        self._waiting: dict["Connection", None] = {}  # insertion-ordered: first come, first woken

    @property
    def exhausted(self) -> bool:
        return self.available <= 0

    def try_take(self, nbytes: int) -> bool:
        if self.available <= 0:
            return False
        self.available -= nbytes
        return True

    def give_back(self, nbytes: int) -> None:
        self.available += nbytes
        if self.available > 0 and self._waiting:
            waiting = list(self._waiting)
            self._waiting.clear()
            for connection in waiting:
                connection.memory_available()

    def wait(self, connection: "Connection") -> None:
        self._waiting[connection] = None

    def is_waiting(self, connection: "Connection") -> bool:
        return connection in self._waiting

    def forget(self, connection: "Connection") -> None:
        self._waiting.pop(connection, None)


class QueuedSends(Protocol):
    """A connection with answers queued, as PendingSends sees it. (Protocols rather than the
    classes, so that the compiled module's run-time type checks let other objects stand in.)"""

    def send_queued(self) -> None: ...


class SendRows(Protocol):
    """Where a connection waits to send its answers: PendingSends."""

    def add(self, connection: QueuedSends) -> None: ...


class PendingSends:
    """The connections whose answers wait to be sent, sent one after the other once the loop
    has served the reads of its turn (Kafka's network thread likewise writes the responses that
    came in during a turn in its next poll).

    Why not at once: on one machine a send to a client that sleeps in its poll wakes that client
    on another CPU, and the wakeup is paid by the sender. Answering each request as it is
    served woke the clients once per answer; a row of sends wakes each client once per row
    (benchmarks.many_clients: the wakeups were 12 % of the broker's CPU, 1.6 % after).

    A row holds `max_connections` connections at most, so that no answer waits for more than
    that many other requests to be served before it goes.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, max_connections: int = 64) -> None:
        self._loop = loop
        self._max_connections = max_connections
        self._connections: list[QueuedSends] = []
        self._scheduled = False
        # Bound once: compiled code makes a new bound method at every `self._send_scheduled`.
        self._send_scheduled_callback: Callable[[], None] = self._send_scheduled

    def add(self, connection: QueuedSends) -> None:
        connections = self._connections
        connections.append(connection)
        if len(connections) >= self._max_connections:
            self.send()
        elif not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._send_scheduled_callback)

    def _send_scheduled(self) -> None:
        self._scheduled = False
        self.send()

    def send(self) -> None:
        connections, self._connections = self._connections, []
        for connection in connections:
            connection.send_queued()


class Connection:
    """One client connection: request frames in, response frames out in request order.

    Requests are served one at a time in arrival order, as Kafka serves a connection: a request
    whose handler waits (a long-poll fetch) holds back those pipelined behind it, so responses
    leave in request order with no reordering. Responses queue as chunks: bytes, and file
    regions of fetched records (objects with `fd`, `position` and a length). Everything one read
    produced is sent together, once the loop's turn has served its reads (`sends`, a
    PendingSends shared by a broker's connections): runs of bytes with one sendmsg, regions with
    os.sendfile (but for an answer's first 16 KiB of regions, read and sent as bytes: `_queue`).
    When the socket is full the rest waits for it to become writable.

    Back-pressure: reading stops while `max_queued_requests` frames wait to be served or
    `max_queued_bytes` of responses wait to be sent, or while the next frame gets no memory
    from `pool` (queued.max.request.bytes), and resumes once they drain.

    Throttling: a ThrottledResponse mutes the connection (`mute_for`): no request is read or
    served until the throttle time has passed; what was already received waits, as in Kafka,
    whose muted channel holds its requests in the socket.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        address: str,
        dispatch: Dispatch,
        on_close: Callable[["Connection"], None],
        max_request_bytes: int,
        max_queued_requests: int = _MAX_QUEUED_REQUESTS,
        max_queued_bytes: int = _MAX_QUEUED_BYTES,
        pool: RequestMemoryPool | None = None,
        timing: Session | None = None,
        sends: SendRows | None = None,
        appends: DeferredWrites | None = None,
    ) -> None:
        """`sends`: where the connection waits to send its answers (its own when None).

        `appends`: where the appends of the requests of one read wait to be written together
        (storage.records_file.DeferredWrites, the log manager's; None: each is written as it is
        made): started before a read's requests are served, finished before any of their
        answers can leave. If a write fails, the connection closes without answering, as what
        it would acknowledge may be lost.

        `timing`: an object whose `received_at` is set, before each request is dispatched, to
        the loop time its frame was read whole (the request metrics' queue time), and whose
        `send_timer`, when the dispatcher left one, is taken as its response is queued and told
        (`sent(seconds)`) once the response's last byte went out (the send time)."""
        self._loop = loop
        # Bound once: compiled code looks a method of the loop up at every call, several a request.
        self._loop_time: Callable[[], float] = loop.time
        self._sock = sock
        self._sendmsg: Callable[..., int] = sock.sendmsg
        # Chunks with no flag to send go through writev: on a socket the same system call as a
        # sendmsg without flags, without the socket module's argument parsing and its call
        # through an argument tuple (about 1,100 instructions less a send; two sends a tailed
        # record). Looked up here, not at import, so that a test can watch it.
        self._writev: Callable[[int, list[Any]], int] = os.writev
        self._fd = sock.fileno()
        self._recv_into: Callable[[memoryview], int] = sock.recv_into  # TLS decrypts instead
        self.address = address
        self._dispatch = dispatch
        self._on_close = on_close
        self._frames = FrameReader(max_request_bytes)
        # Request frames waiting to be served, each with when it was read whole (loop time). A
        # list, not a deque: compiled code calls a list's methods natively, a deque's by name,
        # and at most max_queued_requests wait.
        self._requests: list[tuple[memoryview, float]] = []
        self._timing = timing
        # Responses being sent that wait for their send time: (bytes queued up to their end,
        # when queued, timer), a list as `_requests` is; bytes ever queued.
        self._sending: list[tuple[int, float, Any]] = []
        self._queued_total = 0
        self._in_progress: asyncio.Future | Deferred[Chunks | None] | None = None
        # Bound once: compiled code makes a new bound method at every `self._on_response_ready`.
        self._on_response_ready_callback: Callable[[Any], None] = self._on_response_ready
        self._out: deque[Any] = deque()
        self._out_bytes = 0
        # MSG_MORE and TCP_CORK (_flush) are TCP's (the unit tests' socket pairs are Unix sockets).
        self._tcp = sock.family in (socket.AF_INET, socket.AF_INET6)
        self._corked = False
        self._region_sent = 0
        self._max_queued_requests = max_queued_requests
        self._max_queued_bytes = max_queued_bytes
        self._pool = pool
        self._sends = sends if sends is not None else PendingSends(loop)
        self._appends = appends
        self._send_pending = False  # in _sends
        self._granted = 0  # pool bytes taken for the frame being received (its announced size)
        self._held = 0  # pool bytes of frames received and not yet finished
        self._serving_bytes = 0  # the size of the frame whose handler is waiting
        self._reading = False
        self._writing = False
        self._draining = False
        self._muted: asyncio.TimerHandle | None = None
        self.closed = False
        self.last_active = loop.time()
        self._apply_back_pressure()

    # ------------------------------------------------------------------------------ reading

    def _on_readable(self) -> None:
        try:
            space = self._frames.writable()
            if self._pool is not None:
                space = space[: self._pooled_read_size()]
            received = self._recv_into(space)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self.close(f"receive failed: {exc}")
            return
        except ProtocolError as exc:
            self._reject(exc)
            return
        if received == 0:
            if self._send_pending:  # answers served before the client's end still go
                self._flush()
            self.close(None)
            return
        now = self.last_active = self._loop_time()
        try:
            frames = self._frames.received(received)
        except ProtocolError as exc:
            self._reject(exc)
            return
        if frames:
            requests = self._requests
            for frame in frames:
                requests.append((frame, now))
            if self._pool is not None:
                # Reads stop at frame ends: the one frame completed is the one granted.
                self._held += self._granted
                self._granted = 0
        self._serve()

    def _pooled_read_size(self) -> int:
        """With a pool, reads stop at frame ends, as Kafka's do: a size prefix, then the body
        once granted, so no byte of a frame is read before the pool has room for it."""
        if self._granted:
            return FRAME_PREFIX + self._granted - self._frames.buffered
        # Not granted: reading goes on only while the size prefix is incomplete.
        return FRAME_PREFIX - self._frames.buffered

    def _memory_for_next_frame(self) -> bool:
        """Whether reading may go on: the frame in progress has memory from the pool (taken
        now if need be), or its size is not known yet and the pool is not used up."""
        if self._pool is None or self._granted:
            return True
        try:
            size = self._frames.next_frame_size
        except ProtocolError:
            return True  # the next read raises it and closes the connection
        if size is not None and self._pool.try_take(size):
            self._granted = size
            return True
        if size is None and not self._pool.exhausted:
            return True
        self._pool.wait(self)
        return False

    def memory_available(self) -> None:
        """The pool has memory again: try for the next frame's."""
        self._apply_back_pressure()

    def _finished(self, size: int) -> None:
        if self._pool is not None:
            self._held -= size
            self._pool.give_back(size)

    def _reject(self, exc: ProtocolError) -> None:
        if isinstance(exc, CloseAfterResponse):
            log.info("closing connection from %s after its answer: %s", self.address, exc)
            self._queue(exc.response)
        else:
            log.warning("closing connection from %s: %s", self.address, exc)
        self._flush()
        self.close(str(exc))

    def _serve(self) -> None:
        """Serve queued requests in order until one has to wait; then queue their answers to
        be sent, their appends written first."""
        appends = self._appends
        if appends is None or len(self._requests) < 2:  # one request's appends are one per file
            rejected = self._serve_requests()
        else:
            failures = appends.failures
            appends.start()
            try:
                rejected = self._serve_requests()
            finally:
                appends.finish()
            if appends.failures != failures:
                self.close("an append of its requests could not be written")
                return
        if rejected is not None:
            self._reject(rejected)
            return
        if self.closed:
            return
        if not self._requests and self._in_progress is None:
            self._frames.release()
        if self._out and not self._send_pending and not self._writing:
            self._send_pending = True
            self._sends.add(self)
        self._apply_back_pressure()

    def _serve_requests(self) -> ProtocolError | None:
        """Dispatch queued requests in order until one has to wait; the first request that
        breaks the protocol stops them, and is returned to be rejected once their appends are
        written (its rejection sends what was answered before it)."""
        requests, timing, dispatch = self._requests, self._timing, self._dispatch
        while requests and self._in_progress is None and self._muted is None and not self.closed:
            frame, received_at = requests.pop(0)
            if timing is not None:
                timing.received_at = received_at
            try:
                outcome = dispatch(frame)
            except ProtocolError as exc:
                return exc
            except Exception:
                log.exception("request from %s failed; closing the connection", self.address)
                self.close("internal error")
                return None
            if type(outcome) is list:  # the usual answer: no throttling to look at
                self._queue(outcome)
                if self._pool is not None:
                    self._finished(len(frame))
            elif isinstance(outcome, list):
                self._queue(outcome)
                self._maybe_mute(outcome)
                self._finished(len(frame))
            elif outcome is None:
                self._finished(len(frame))
            elif type(outcome) is Deferred:  # a long-poll Fetch or acks=all Produce: done in the turn that settles it
                self._serving_bytes = len(frame)
                self._in_progress = outcome
                outcome.when_done(self._on_response_ready_callback)
            else:
                self._serving_bytes = len(frame)
                task = self._in_progress = asyncio.ensure_future(outcome)
                task.add_done_callback(self._on_response_ready_callback)
        return None

    def _on_response_ready(self, future: asyncio.Future | Deferred[Chunks | None]) -> None:
        self._in_progress = None
        if self.closed or future.cancelled():
            return
        self._finished(self._serving_bytes)
        exc = future.exception()
        if exc is not None:
            log.error("request from %s failed; closing the connection", self.address, exc_info=exc)
            self.close("internal error")
            return
        response = future.result()
        if response is not None:
            self._queue(response)
            self._maybe_mute(response)
        self._serve()

    # ------------------------------------------------------------------------------ throttling

    def _maybe_mute(self, outcome: "Chunks") -> None:
        if isinstance(outcome, ThrottledResponse) and outcome.throttle_s > 0:
            self.mute_for(outcome.throttle_s)

    def mute_for(self, seconds: float) -> None:
        """Read and serve no request for `seconds` (a longer mute already running is kept)."""
        if self.closed or self._draining:
            return
        until = self._loop_time() + seconds
        if self._muted is not None:
            if self._muted.when() >= until:
                return
            self._muted.cancel()
        self._muted = self._loop.call_at(until, self._unmute)
        self._pause_reading()

    def _unmute(self) -> None:
        self._muted = None
        self._serve()  # serves what waited, then reads again unless back-pressure holds it

    def idle_since(self) -> float | None:
        """When the connection last read or wrote a byte, or None while it is not the client
        that holds it up: a request is being served, or reading waits for request memory."""
        if self._requests or self._in_progress is not None or self._muted is not None:
            return None
        if self._pool is not None and self._pool.is_waiting(self):
            return None
        return self.last_active

    def trim(self) -> None:
        """Give up the receive buffer while nothing is being received or served (quiet)."""
        if not self._requests and self._in_progress is None:
            self._frames.trim()

    @property
    def busy(self) -> bool:
        """Whether requests are waiting or in progress, or responses are unsent."""
        return bool(self._requests or self._in_progress or self._out)

    def _apply_back_pressure(self) -> None:
        if self.closed:  # a send that failed closed it: it must take no pool memory now
            return
        if (
            self._reading and self._pool is None and self._muted is None
            and len(self._requests) < self._max_queued_requests and self._out_bytes < self._max_queued_bytes
        ):
            return  # reading, and nothing holds it back: the usual case, decided without calls
        overloaded = (
            self._muted is not None
            or len(self._requests) >= self._max_queued_requests
            or self._out_bytes >= self._max_queued_bytes
            or not self._memory_for_next_frame()
        )
        if overloaded:
            self._pause_reading()
        else:
            self._resume_reading()

    def _pause_reading(self) -> None:
        if self._reading:
            self._loop.remove_reader(self._fd)
            self._reading = False

    def stop_reading(self) -> None:
        """Take no further requests (shutdown): those already received are still served and
        answered, so `busy` ends even while the client keeps sending (a consumer's fetches)."""
        self._draining = True
        self._pause_reading()
        if self._muted is not None:  # what was received is still served: unmute now
            self._muted.cancel()
            self._unmute()

    def _resume_reading(self) -> None:
        if not self._reading and not self.closed and not self._draining:
            self._loop.add_reader(self._fd, self._on_readable)
            self._reading = True

    # ------------------------------------------------------------------------------ writing

    def _queue(self, chunks: Chunks) -> None:
        """Queue an answer's chunks. File regions up to _COPIED_REGION_BYTES in all are read
        and queued as bytes: a tailing consumer's few records then leave with the rest of the
        answer in one sendmsg, where a sendfile takes a corked socket and three more system
        calls and costs more than the copy below tens of KiB (benchmarks/RESULTS.md, "small
        file regions sent as bytes"). Larger reads keep sendfile; the budget bounds the copies an
        answer of many partitions holds."""
        append = self._out.append  # looked up once an answer, not once a chunk
        queued = 0
        copied = 0
        for chunk in chunks:
            size = len(chunk)
            if size:
                if copied + size <= _COPIED_REGION_BYTES and isinstance(chunk, FileRegion):
                    chunk = _copied(chunk, size)
                    copied += size
                append(chunk)
                queued += size
        self._out_bytes += queued
        self._queued_total += queued
        timing = self._timing
        if timing is not None and timing.send_timer is not None:
            self._sending.append((self._queued_total, self._loop_time(), timing.send_timer))
            timing.send_timer = None

    def _note_sent(self) -> None:
        """Tell the responses whose last byte has gone how long their sending took."""
        sent_total = self._queued_total - self._out_bytes
        now = self._loop_time()
        while self._sending and self._sending[0][0] <= sent_total:
            _end, queued_at, timer = self._sending.pop(0)
            timer.sent(max(now - queued_at, 0.0))

    def _flush(self) -> None:
        """Send as much as the socket takes; wait for writability if anything is left.

        An answer that holds file regions leaves as few TCP segments as its size allows: the
        bytes before a region are sent with MSG_MORE, and from a region with chunks after it
        (a Fetch answer's tagged fields, the next partition) the socket is corked until the
        flush ends. Sent as they came, its header, records and trailer were three segments on
        loopback, each waking the client and each paid for by this loop (benchmarks/RESULTS.md,
        "a Fetch answer in one segment")."""
        try:
            while self._out:
                head = self._out[0]
                sent = self._send_bytes() if isinstance(head, _BYTES_LIKE) else self._send_region(head)
                if sent is None:
                    self._want_writable(True)
                    return
        except OSError as exc:
            self.close(f"send failed: {exc}")
            return
        finally:
            if self._corked:
                self._uncork()
            if self._sending:
                self._note_sent()
        self._want_writable(False)

    def _uncork(self) -> None:
        """Push what the cork held (also when the socket is full: nothing waits for a later
        turn corked)."""
        self._corked = False
        if not self.closed:
            try:
                self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)
            except OSError as exc:
                self.close(f"send failed: {exc}")

    def _send_bytes(self) -> int | None:
        out = self._out
        buffers: list[bytes | memoryview] = []
        size = 0
        flags = 0
        for chunk in out:
            if not isinstance(chunk, _BYTES_LIKE):
                if self._tcp:
                    flags = socket.MSG_MORE  # a region follows: its first segment carries these bytes
                break
            if len(buffers) == _MAX_IOV:
                break
            buffers.append(chunk)
            size += len(chunk)
        try:
            sent = self._sendmsg(buffers, (), flags) if flags else self._writev(self._fd, buffers)
        except (BlockingIOError, InterruptedError):
            return None
        self._out_bytes -= sent
        self.last_active = self._loop_time()
        if sent == size and len(buffers) == len(out):  # everything queued went, as nearly always
            out.clear()
            return sent
        remaining = sent
        while remaining:
            head = self._out[0]
            if remaining >= len(head):
                remaining -= len(head)
                self._out.popleft()
            else:
                self._out[0] = memoryview(head)[remaining:]
                remaining = 0
        return sent

    def _send_region(self, region: FileRegion) -> int | None:
        left = len(region) - self._region_sent
        if self._tcp and not self._corked and len(self._out) > 1:
            # Chunks follow the region: hold them all until the flush ends (_uncork).
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
            self._corked = True
        try:
            sent = os.sendfile(
                self._fd, region.fd, region.position + self._region_sent, min(left, _SENDFILE_CHUNK)
            )
        except (BlockingIOError, InterruptedError):
            return None
        except OSError as exc:
            if exc.errno not in (errno.EINVAL, errno.ENOSYS):
                raise
            copied = self._copy_region(region, left)
            if copied is None:
                return None
            sent = copied
        if sent == 0:
            # The file is shorter than the region (truncated meanwhile): the response frame can
            # no longer be completed, so the stream is broken.
            raise OSError(errno.EIO, "records file shrank under a fetch response")
        self._region_sent += sent
        self._out_bytes -= sent
        self.last_active = self._loop_time()
        if self._region_sent == len(region):
            self._out.popleft()
            self._region_sent = 0
        return sent

    def _copy_region(self, region: FileRegion, left: int) -> int | None:
        """Fallback for files sendfile cannot read (some filesystems): read, then send."""
        data = os.pread(region.fd, min(left, _SENDFILE_CHUNK), region.position + self._region_sent)
        if not data:
            return 0
        try:
            return self._sock.send(data)
        except (BlockingIOError, InterruptedError):
            return None

    def send_queued(self) -> None:
        """PendingSends' turn: send what was queued."""
        self._send_pending = False
        if not self.closed:
            self._flush()
            self._apply_back_pressure()

    def _want_writable(self, wanted: bool) -> None:
        if wanted and not self._writing and not self.closed:
            self._loop.add_writer(self._fd, self._on_writable)
            self._writing = True
        elif not wanted and self._writing:
            self._loop.remove_writer(self._fd)
            self._writing = False

    def _on_writable(self) -> None:
        self._flush()
        self._apply_back_pressure()

    # ------------------------------------------------------------------------------ closing

    def close(self, reason: str | None) -> None:
        if self.closed:
            return
        self.closed = True
        if reason:
            log.debug("connection from %s closed: %s", self.address, reason)
        self._pause_reading()
        self._want_writable(False)
        if self._muted is not None:
            self._muted.cancel()
            self._muted = None
        if self._in_progress is not None:
            self._in_progress.cancel()  # a Deferred then calls no one back: nothing is in progress
            self._in_progress = None
        self._out.clear()
        self._requests.clear()
        self._sending.clear()
        if self._pool is not None:
            self._pool.forget(self)
            self._pool.give_back(self._held + self._granted)
        self._sock.close()
        self._on_close(self)


_TLS_READ: Final = 256 * 1024  # bytes of TLS records taken from the socket at once
_TLS_CHUNK: Final = 64 * 1024  # plaintext encrypted at once: bytes gathered, or read from a file region
_TLS_HIGH_WATER: Final = 256 * 1024  # encrypted bytes kept waiting for the socket before encrypting more


class TlsConnection(Connection):
    """A connection over TLS: the server side of an ssl.SSLObject whose records go through
    memory buffers, so reading and writing stay Connection's (frames, order, back-pressure,
    request memory) and only the bytes on the socket differ.

    The handshake comes first; nothing is read as a request before it completes. It fails (the
    reason logged, the connection closed) on a TLS error or when `on_handshake(ssl_object)`
    returns a reason (the principal could not be mapped), and it must complete within
    `handshake_timeout` seconds of the accept, so a client that stalls it does not hold a
    descriptor for long.

    Responses are encrypted as the socket takes them: runs of bytes gathered up to _TLS_CHUNK,
    file regions read with os.pread _TLS_CHUNK at a time (never a whole large region), with at
    most _TLS_HIGH_WATER encrypted bytes waiting for the socket. Bytes a read decrypted beyond
    what the frame buffer took stay in the SSLObject and are read without waiting for the
    socket.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        address: str,
        dispatch: Dispatch,
        on_close: Callable[["Connection"], None],
        max_request_bytes: int,
        *,
        context: ssl.SSLContext,
        on_handshake: Callable[[ssl.SSLObject], str | None],
        handshake_timeout: float,
        max_queued_requests: int = _MAX_QUEUED_REQUESTS,
        max_queued_bytes: int = _MAX_QUEUED_BYTES,
        pool: RequestMemoryPool | None = None,
        timing: Session | None = None,
        sends: SendRows | None = None,
        appends: DeferredWrites | None = None,
    ) -> None:
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self._raw_out = bytearray()
        self._handshake_started = False
        self._handshaken = False
        self._on_handshake = on_handshake
        self._socket_drained = False  # the last read found the socket empty
        self._peer_closed = False
        self._buffered_read: asyncio.Handle | None = None
        self._handshake_timer = loop.call_later(handshake_timeout, self._handshake_expired)
        self._handshake_timeout = handshake_timeout
        # Each limit named: mypyc passed **limits on as the next positional argument.
        super().__init__(
            loop, sock, address, dispatch, on_close, max_request_bytes, max_queued_requests, max_queued_bytes,
            pool, timing, sends, appends,
        )
        self._recv_into = self._decrypt_into

    # ------------------------------------------------------------------------- handshake

    def _handshake(self) -> None:
        try:
            data = self._sock.recv(_TLS_READ)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._handshake_failed(str(exc))
            return
        if not data:
            if self._handshake_started:
                self._handshake_failed("the client closed the connection")
            else:  # a port probe, or a client that gave up before sending anything
                self.close("closed by the client before the TLS handshake")
            return
        self._handshake_started = True
        self._incoming.write(data)
        try:
            self._tls.do_handshake()
        except ssl.SSLWantReadError:
            self._flush()
            return
        except ssl.SSLError as exc:
            self._raw_out += self._outgoing.read()  # the alert telling the client why
            self._handshake_failed(_tls_reason(exc))
            return
        self._handshaken = True
        self._handshake_timer.cancel()
        refused = self._on_handshake(self._tls)
        if refused is not None:
            self._handshake_failed(refused)
            return
        self.last_active = self._loop_time()
        self._flush()
        self._read_buffered_soon()  # the first request may have come with the handshake's end

    def _handshake_failed(self, reason: str) -> None:
        log.info("TLS handshake with %s failed: %s", self.address, reason)
        self.close(f"TLS handshake failed: {reason}")

    def _handshake_expired(self) -> None:
        if not self._handshaken and not self.closed:
            self._handshake_failed(f"not completed within {self._handshake_timeout:g} s")

    # ------------------------------------------------------------------------------ reading

    def _on_readable(self) -> None:
        self._buffered_read = None
        if self.closed:  # a buffered read scheduled before the connection closed
            return
        if not self._handshaken:
            self._handshake()
            return
        super()._on_readable()
        if not self.closed and self._outgoing.pending:  # the read made TLS answer (a key update)
            self._flush()
        if not self._socket_drained:
            self._read_buffered_soon()

    def _decrypt_into(self, space: memoryview) -> int:
        """recv_into for Connection: plaintext into `space`; 0 at the end of the stream;
        BlockingIOError when a whole record has not arrived yet."""
        self._socket_drained = False
        while True:
            try:
                # read(n, buffer) returns a count, which typeshed types as bytes (mypyc checks it)
                tls: Any = self._tls
                return tls.read(len(space), space)
            except ssl.SSLWantReadError:
                if self._peer_closed:
                    return 0
            except ssl.SSLZeroReturnError:  # close_notify
                return 0
            try:
                data = self._sock.recv(_TLS_READ)
            except (BlockingIOError, InterruptedError):
                self._socket_drained = True
                raise
            if data:
                self._incoming.write(data)
            else:
                self._peer_closed = True

    def _read_buffered_soon(self) -> None:
        """Go on reading what the TLS buffers hold: the socket will not say it is readable."""
        if (
            self._buffered_read is None
            and self._reading
            and not self.closed
            and (self._tls.pending() or self._incoming.pending)
        ):
            self._buffered_read = self._loop.call_soon(self._on_readable)

    def _resume_reading(self) -> None:
        was_reading = self._reading
        super()._resume_reading()
        if self._reading and not was_reading and self._handshaken:
            self._read_buffered_soon()

    # ------------------------------------------------------------------------------ writing

    @property
    def busy(self) -> bool:
        return super().busy or bool(self._raw_out)

    def _flush(self) -> None:
        """Encrypt queued responses and send; wait for writability if anything is left."""
        try:
            while True:
                self._raw_out += self._outgoing.read()
                if self._out and len(self._raw_out) < _TLS_HIGH_WATER:
                    self._encrypt_next()
                    continue
                if not self._raw_out:
                    break
                sent = self._sock.send(self._raw_out)
                del self._raw_out[:sent]
                self.last_active = self._loop_time()
        except (BlockingIOError, InterruptedError):
            self._want_writable(True)
            return
        except (OSError, ValueError) as exc:  # ValueError: a region's file closed under it
            self.close(f"send failed: {exc}")
            return
        finally:
            # Sent: encrypted, and every encrypted byte handed to the socket.
            if self._sending and not self._raw_out:
                self._note_sent()
        self._want_writable(False)

    def _encrypt_next(self) -> None:
        """Hand the TLS layer the next _TLS_CHUNK bytes of plaintext at most."""
        head = self._out[0]
        if isinstance(head, _BYTES_LIKE):
            pieces: list[bytes | memoryview] = []
            size = 0
            while self._out and size < _TLS_CHUNK and isinstance(self._out[0], _BYTES_LIKE):
                chunk = memoryview(self._out.popleft())
                if size + len(chunk) > _TLS_CHUNK:
                    self._out.appendleft(chunk[_TLS_CHUNK - size :])
                    chunk = chunk[: _TLS_CHUNK - size]
                pieces.append(chunk)
                size += len(chunk)
            self._tls.write(b"".join(pieces) if len(pieces) > 1 else pieces[0])
            self._out_bytes -= size
            return
        left = len(head) - self._region_sent
        data = os.pread(head.fd, min(left, _TLS_CHUNK), head.position + self._region_sent)
        if not data:
            raise OSError(errno.EIO, "records file shrank under a fetch response")
        self._tls.write(data)
        self._region_sent += len(data)
        self._out_bytes -= len(data)
        if self._region_sent == len(head):
            self._out.popleft()
            self._region_sent = 0

    # ------------------------------------------------------------------------------ closing

    def close(self, reason: str | None) -> None:
        if self.closed:
            return
        self._handshake_timer.cancel()
        if self._buffered_read is not None:
            self._buffered_read.cancel()
        if self._handshaken:
            try:
                self._tls.unwrap()  # writes close_notify
            except ssl.SSLError:
                pass  # it waits for the client's close_notify, which is not awaited
        self._raw_out += self._outgoing.read()
        if self._raw_out:
            try:
                self._sock.send(self._raw_out)  # best effort: the alert or close_notify
            except OSError:
                pass
        self._raw_out.clear()
        super().close(reason)


def _tls_reason(exc: ssl.SSLError) -> str:
    """OpenSSL's words for a failed handshake: "[SSL: TLSV1_ALERT_UNKNOWN_CA] tlsv1 alert
    unknown ca" (the client did not trust the broker), or why a client certificate failed."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"client certificate verify failed: {exc.verify_message}"
    text = exc.args[1] if len(exc.args) > 1 and isinstance(exc.args[1], str) else str(exc)
    return re.sub(r"\s*\(_ssl\.c:\d+\)$", "", text)


class Listener:
    """A listening socket that hands each accepted connection to `on_accept`.

    Out of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM), accept fails while the
    listening socket stays readable, so retrying at once would spin the loop: the listener
    stops accepting for `retry_delay` seconds instead (as asyncio's servers do), with one log
    line per pause, and the connections it has go on being served. New clients wait in the
    backlog meanwhile.
    """

    def __init__(
        self,
        host: str,
        port: int,
        on_accept: Callable[[socket.socket, str, int], None],
        backlog: int = 1024,
        retry_delay: float = 1.0,
        send_buffer: int = -1,
        receive_buffer: int = -1,
    ) -> None:
        """`on_accept(sock, client ip, client port)`. `send_buffer`, `receive_buffer`: SO_SNDBUF
        and SO_RCVBUF of accepted sockets, -1 for the OS's (socket.send/receive.buffer.bytes)."""
        self._loop = asyncio.get_running_loop()
        if host in ("", "0.0.0.0", "::") and socket.has_dualstack_ipv6():
            self._sock = socket.create_server(
                ("", port), family=socket.AF_INET6, dualstack_ipv6=True, backlog=backlog
            )
        else:
            self._sock = socket.create_server((host, port), backlog=backlog)
        if receive_buffer != -1:
            # On the listening socket, so accepted ones have it from their SYN on: the TCP window
            # scale is chosen then.
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        self._send_buffer = send_buffer
        self._sock.setblocking(False)
        self._on_accept = on_accept
        self._retry_delay = retry_delay
        self._retry: asyncio.TimerHandle | None = None
        self._accepting = False
        self._start_accepting()

    @property
    def port(self) -> int:
        return self._sock.getsockname()[1]

    def _start_accepting(self) -> None:
        self._retry = None
        self._loop.add_reader(self._sock.fileno(), self._accept)
        self._accepting = True

    def _accept(self) -> None:
        for _ in range(100):  # bounded, so a connection storm cannot starve other work
            try:
                conn, address = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in _GONE_BEFORE_ACCEPTED:
                    continue
                self._back_off(exc)
                return
            try:
                conn.setblocking(False)
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if self._send_buffer != -1:
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self._send_buffer)
            except OSError:  # reset by the client already
                conn.close()
                continue
            self._on_accept(conn, client_ip(address[0]), address[1])

    def _back_off(self, exc: OSError) -> None:
        log.warning(
            "accept failed on port %d: %s; not accepting connections for %.1f s",
            self.port, exc, self._retry_delay,
        )
        self._loop.remove_reader(self._sock.fileno())
        self._accepting = False
        self._retry = self._loop.call_later(self._retry_delay, self._start_accepting)

    def close(self) -> None:
        if self._retry is not None:
            self._retry.cancel()
        if self._accepting:
            self._loop.remove_reader(self._sock.fileno())
        self._sock.close()


# A connection the client reset before accept() reached it: the next one may be fine.
_GONE_BEFORE_ACCEPTED: Final = (errno.ECONNABORTED, errno.EPROTO, errno.EPERM)


def client_ip(host: str) -> str:
    """The client's address as limits count it: an IPv4 client of a dual-stack listener
    (::ffff:a.b.c.d) is a.b.c.d, as it would be on an IPv4 listener."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


class ConnectionQuotas:
    """max.connections, max.connections.per.ip and its overrides: which new connections to refuse.

    A connection over either limit is closed as soon as it is accepted. For the per-IP limit
    Kafka does the same; over max.connections Kafka leaves new connections in the backlog
    until one closes, and logway closes them too, which gives the client an answer at once
    (it retries with its backoff). Connections on `protected_listener` (the inter-broker
    listener) are counted but not refused by max.connections, as in Kafka, so replication goes
    on when clients use the limit up (Kafka also closes a client connection to make room for
    them; logway does not).
    """

    def __init__(
        self,
        max_connections: int,
        max_per_ip: int,
        per_ip_overrides: Mapping[str, int],
        protected_listener: str | None = None,
    ) -> None:
        self._max = max_connections
        self._max_per_ip = max_per_ip
        self._overrides = dict(per_ip_overrides)
        self._protected = protected_listener
        self._total = 0
        self._per_ip: dict[str, int] = {}

    def reconfigure(self, max_connections: int, max_per_ip: int, per_ip_overrides: Mapping[str, int]) -> None:
        """New limits (dynamic broker configs), for the connections accepted from now on; those
        open stay, as in Kafka."""
        self._max = max_connections
        self._max_per_ip = max_per_ip
        self._overrides = dict(per_ip_overrides)

    def admit(self, listener: str, ip: str) -> str | None:
        """Count a new connection from `ip` on `listener`; or, when it must be refused, say why."""
        limit = self._overrides.get(ip, self._max_per_ip)
        held = self._per_ip.get(ip, 0)
        if held >= limit:
            return f"{ip} already has the maximum of {limit} connections (max.connections.per.ip)"
        if self._total >= self._max and listener != self._protected:
            return f"the broker already has the maximum of {self._max} connections (max.connections)"
        self._per_ip[ip] = held + 1
        self._total += 1
        return None

    def release(self, ip: str) -> None:
        held = self._per_ip[ip] - 1
        if held:
            self._per_ip[ip] = held
        else:
            del self._per_ip[ip]
        self._total -= 1
