import pytest

from protocol.errors import ProtocolError
from protocol.framing import FrameReader, FrameTooLargeError
from protocol.primitives import INT32


def frame(payload: bytes) -> bytes:
    return INT32.pack(len(payload)) + payload


def feed(reader: FrameReader, data: bytes) -> list[bytes]:
    """Deliver `data` through the reader's own buffers, as a socket would."""
    frames = []
    while data:
        space = reader.writable()
        chunk = data[: len(space)]
        space[: len(chunk)] = chunk
        data = data[len(chunk) :]
        frames += [bytes(f) for f in reader.received(len(chunk))]
    return frames


def test_splits_back_to_back_frames():
    reader = FrameReader(1024)
    assert feed(reader, frame(b"one") + frame(b"") + frame(b"three")) == [b"one", b"", b"three"]


def test_frame_split_over_many_reads_is_whole_once_complete():
    reader = FrameReader(1024)
    data = frame(b"x" * 100)
    assert feed(reader, data[:3]) == []
    assert feed(reader, data[3:50]) == []
    assert feed(reader, data[50:]) == [b"x" * 100]


def test_frame_larger_than_the_buffer_is_received_whole():
    reader = FrameReader(10_000_000, buffer_bytes=1024)
    big = bytes(range(256)) * 4000
    assert feed(reader, frame(big) + frame(b"after")) == [big, b"after"]


def test_handed_out_frames_stay_intact_until_released():
    reader = FrameReader(1 << 20, buffer_bytes=64)
    space = reader.writable()
    first = frame(b"a" * 30)
    space[: len(first)] = first
    (kept,) = reader.received(len(first))
    # Many more frames arrive while `kept` is still being served.
    feed(reader, b"".join(frame(bytes([i]) * 40) for i in range(50)))
    assert bytes(kept) == b"a" * 30
    reader.release()
    assert reader.buffered == 0


def test_size_over_the_limit_raises_before_the_body_arrives():
    reader = FrameReader(100)
    space = reader.writable()
    space[:4] = INT32.pack(101)
    with pytest.raises(FrameTooLargeError):
        reader.received(4)


def test_negative_size_is_a_protocol_error():
    reader = FrameReader(100)
    space = reader.writable()
    space[:4] = INT32.pack(-5)
    with pytest.raises(ProtocolError):
        reader.received(4)


def test_an_announced_size_is_not_allocated_before_its_bytes_arrive():
    reader = FrameReader(100_000_000, buffer_bytes=1024)
    announced = 50_000_000
    feed(reader, INT32.pack(announced))
    assert reader.next_frame_size == announced
    assert len(reader.writable()) < 1 << 20
    feed(reader, b"x" * 3_000_000)
    # grown with what arrived (at most twice it plus a read), not to the announced size
    assert len(reader.writable()) < 7_000_000


def test_next_frame_size_needs_the_whole_prefix():
    reader = FrameReader(1024)
    feed(reader, INT32.pack(300)[:3])
    assert reader.next_frame_size is None
    feed(reader, INT32.pack(300)[3:])
    assert reader.next_frame_size == 300


def test_no_buffer_until_bytes_arrive_and_none_after_a_trim():
    reader = FrameReader(1024)
    assert reader._buf == bytearray()
    assert feed(reader, frame(b"one")) == [b"one"]
    reader.trim()  # a frame handed out and not released: its bytes stay
    assert len(reader._buf) > 0
    reader.release()
    reader.trim()
    assert len(reader._buf) == 0
    assert feed(reader, frame(b"two")) == [b"two"]


def test_a_trim_keeps_the_bytes_of_a_frame_in_progress():
    reader = FrameReader(1024)
    feed(reader, frame(b"partial")[:6])
    reader.trim()
    assert feed(reader, frame(b"partial")[6:]) == [b"partial"]


def _pipelined(reader: FrameReader, frames: int, size: int) -> int:
    """Serve `frames` pipelined frames of `size` bytes, each read filling its room as a socket
    with that much waiting would, released after each read; the room of the last read."""
    waiting = frame(b"p" * size) * frames
    room = 0
    while waiting:
        space = reader.writable()
        room = len(space)
        chunk = waiting[:room]
        space[: len(chunk)] = chunk
        waiting = waiting[len(chunk):]
        reader.received(len(chunk))
        reader.release()
    return room


def test_reads_that_fill_their_room_grow_it_so_pipelined_requests_come_in_together():
    reader = FrameReader(1 << 20)
    first_room = len(reader.writable())
    assert _pipelined(reader, 40, 16 * 1024) >= 8 * first_room


def test_the_read_room_of_a_connection_gone_quiet_starts_small_again():
    reader = FrameReader(1 << 20)
    first_room = len(reader.writable())
    _pipelined(reader, 40, 16 * 1024)
    reader.trim()
    assert len(reader.writable()) == first_room


def test_reads_that_leave_room_do_not_grow_it():
    reader = FrameReader(1 << 20)
    first_room = len(reader.writable())
    for _ in range(20):
        assert feed(reader, frame(b"small")) == [b"small"]
        reader.release()
    assert len(reader.writable()) == first_room


def _served_with_part_of_the_next(reader: FrameReader, first: bytes, next_part: bytes) -> None:
    space = reader.writable()
    space[: len(first) + len(next_part)] = first + next_part
    assert len(reader.received(len(first) + len(next_part))) == 1
    reader.release()


def test_the_next_frames_bytes_stay_in_place_while_the_buffer_has_room_for_that_frame():
    reader = FrameReader(1 << 20, buffer_bytes=256 * 1024)
    first, second = frame(b"a" * 1000), frame(b"b" * 1000)
    _served_with_part_of_the_next(reader, first, second[:100])
    buffer = reader._buf

    reader.writable()

    assert reader._buf is buffer and reader._start == len(first)  # not copied to the front
    assert feed(reader, second[100:]) == [b"b" * 1000]


def test_the_next_frames_bytes_move_to_the_front_of_the_same_buffer_when_it_lacks_room_behind():
    reader = FrameReader(1 << 20, buffer_bytes=64 * 1024)
    first, second = frame(b"a" * 40 * 1024), frame(b"b" * 40 * 1024)
    _served_with_part_of_the_next(reader, first, second[: 10 * 1024])
    buffer = reader._buf

    reader.writable()

    assert reader._buf is buffer and reader._start == 0
    assert feed(reader, second[10 * 1024 :]) == [b"b" * 40 * 1024]
