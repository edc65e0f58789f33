"""Kafka framing: every request and response is an INT32 size followed by that many bytes."""

from typing import Final

from protocol.errors import ProtocolError
from protocol.primitives import INT32

FRAME_PREFIX: Final = 4
# The first buffer and the least free room for a read. Small, since every connection that sent
# a request holds one until it goes quiet; a large frame grows it (and a grown one is kept, up to
# max_retained_bytes, so steady large produces reuse it).
_MIN_READ: Final = 16 * 1024
# The most room a busy connection's reads grow to (see FrameReader.received): enough for a
# dozen pipelined 16 KiB requests in one recv.
_MAX_READ: Final = 256 * 1024
_unpack_size: Final = INT32.unpack_from


class FrameTooLargeError(ProtocolError):
    """A size prefix beyond socket.request.max.bytes: the stream cannot be trusted any more."""


class FrameReader:
    """Splits a byte stream into frames, receiving straight into its own buffer.

    Use: `recv_into(reader.writable())`, then `reader.received(n)` returns the frames completed by
    those bytes as memoryviews into the buffer (size prefix stripped), so nothing is copied
    between the socket and the request parser.

    Invariant: bytes of a frame that was handed out are never overwritten until `release()`
    declares every frame handed out so far finished with. Until then new bytes only go after
    them, into a new buffer once the current one is full. That keeps a frame valid while the
    requests before it are still being served (pipelining), and lets the produce path patch a
    batch in place.

    Bytes of the next frame that a read brought along stay where they are while the buffer has
    room for that frame behind them; only then, once no frame is alive, are they moved to the
    front (one memmove). Moving them on every read, out and back, copied a third as many bytes
    again as a client pipelining 1 MiB requests sent (benchmarks/RESULTS.md).

    A size prefix above `max_frame_bytes` or below zero raises as soon as its four bytes are in,
    before any of the body is read.

    The room offered to a read adapts, as Netty's AdaptiveRecvByteBufAllocator does: a read that
    fills it doubles it (up to 256 KiB), so a client pipelining requests has several taken in by
    one recv, where a fixed 16 KiB room took one request or less per readable event; a trim (the
    connection gone quiet) starts it again at 16 KiB.

    Not thread-safe: one reader per connection, used from the event loop.
    """

    def __init__(
        self,
        max_frame_bytes: int,
        buffer_bytes: int = _MIN_READ,
        max_retained_bytes: int = 8 * 1024 * 1024,
    ) -> None:
        self._max_frame_bytes = max_frame_bytes
        self._buffer_bytes = buffer_bytes
        self._max_retained_bytes = max_retained_bytes
        # No buffer until bytes arrive: an idle connection costs none.
        self._buf = bytearray()
        self._view = memoryview(self._buf)
        self._start = 0  # first byte not yet part of a handed-out frame
        self._end = 0  # end of received bytes
        self._frames_alive = False
        self._read_room = _MIN_READ
        self._offered = 0  # the size of the last writable() view

    @property
    def buffered(self) -> int:
        """Bytes received that do not yet form a whole frame."""
        return self._end - self._start

    @property
    def next_frame_size(self) -> int | None:
        """The size its prefix announces of the frame being received; None before its prefix."""
        if self.buffered < FRAME_PREFIX:
            return None
        return self._checked_size(self._start)

    def writable(self) -> memoryview:
        """Free space to receive into: at least a large read, more for a large frame in progress.

        The buffer grows with what arrives (to twice what is buffered), never straight to the
        size a prefix announces: announcing 100 MB and sending a few must not cost 100 MB.
        Doubling keeps the copies of a large frame under twice its size."""
        pending = self._end - self._start  # on every read: the frame in progress's size, inline
        in_progress = FRAME_PREFIX + self._checked_size(self._start) if pending >= FRAME_PREFIX else FRAME_PREFIX
        wanted = max(min(in_progress, 2 * pending), pending + self._read_room)
        if self._start + wanted > len(self._buf):
            if self._frames_alive or wanted > len(self._buf):
                self._move_to_new_buffer(wanted)
            else:
                self._compact()
        self._offered = len(self._buf) - self._end
        return self._view[self._end :]

    def received(self, nbytes: int) -> list[memoryview]:
        if nbytes >= self._offered and self._read_room < _MAX_READ:
            self._read_room *= 2  # the read filled its room: more was likely waiting
        end = self._end = self._end + nbytes
        start = self._start
        buf, view, max_frame_bytes = self._buf, self._view, self._max_frame_bytes
        frames = []
        size: int  # typed, so that compiled code keeps it a C integer (struct gives Any)
        while end - start >= FRAME_PREFIX:
            (size,) = _unpack_size(buf, start)
            if not 0 <= size <= max_frame_bytes:
                self._start = start
                self._checked_size(start)  # raises, saying why
            frame_end = start + FRAME_PREFIX + size
            if frame_end > end:
                break
            frames.append(view[start + FRAME_PREFIX : frame_end])
            start = frame_end
        self._start = start
        if frames:
            self._frames_alive = True
        return frames

    def release(self) -> None:
        """Every frame handed out so far is finished with: its bytes may be reused."""
        self._frames_alive = False
        if self._start == self._end:
            self._start = self._end = 0
            if len(self._buf) > self._max_retained_bytes:
                # A one-off huge request should not pin its buffer for the connection's life;
                # buffers up to the retained size are kept, so steady large produces reuse one.
                self._buf = bytearray()
                self._view = memoryview(self._buf)

    def trim(self) -> None:
        """Give the buffer up when it holds nothing (no frame handed out and unreleased, no
        bytes of the next one): for a connection gone quiet, which would otherwise keep its
        buffer for its whole life. The next bytes get a new one."""
        if not self._frames_alive and self._start == self._end:
            self._start = self._end = 0
            self._buf = bytearray()
            self._view = memoryview(self._buf)
            self._read_room = _MIN_READ

    def _checked_size(self, pos: int) -> int:
        (size,) = INT32.unpack_from(self._buf, pos)
        if size < 0:
            raise ProtocolError(f"negative frame size {size}")
        if size > self._max_frame_bytes:
            raise FrameTooLargeError(
                f"frame of {size} bytes is larger than socket.request.max.bytes "
                f"({self._max_frame_bytes})"
            )
        return size

    def _compact(self) -> None:
        pending = self.buffered
        # Through the memoryview: one memmove within the buffer, where slicing the bytearray
        # would copy the bytes out first.
        self._view[:pending] = self._view[self._start : self._end]
        self._start, self._end = 0, pending

    def _move_to_new_buffer(self, wanted: int) -> None:
        pending = self.buffered
        buf = bytearray(max(self._buffer_bytes, wanted))
        buf[:pending] = self._buf[self._start : self._end]
        self._buf, self._view = buf, memoryview(buf)
        self._start, self._end = 0, pending
