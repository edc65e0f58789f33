"""A range of a log's record bytes, taken on the event loop and read on another thread.

The event loop owns a Log (storage.log): its segment list, files and offsets change with appends,
rolls, compaction swaps, truncation, deletion and closing. A reader on a worker thread (a
coordinator replaying its partition) must not touch it, so the loop hands it a LogSlice instead,
as Kafka's reads hand out FileRecords slices: for each segment of the range, a duplicate of its
records file's descriptor and the byte range to read. Reading needs nothing of the Log then, and
the duplicates keep the taken files readable whatever the loop does meanwhile (a segment deleted,
replaced by compaction or closed is still read through its own descriptor); bytes cut off by a
truncation meanwhile end the slice early.
"""

import os
import weakref
from collections.abc import Iterator

from protocol.errors import CorruptRecordError
from protocol.record_batch import BATCH_HEADER_SIZE, LOG_OVERHEAD, BatchHeader
from storage.topic_partition import TopicPartition


def _close_all(parts: list[tuple[int, int, int]]) -> None:
    for fd, _, _ in parts:
        os.close(fd)


class LogSlice:
    """Whole batches of a log, file by file. Made on the loop (`Log.slice`); read anywhere, by
    one thread at a time. Close it when done (it is a context manager); the descriptors also
    close when it is garbage collected, as a slice whose reader never started is."""

    def __init__(self, topic_partition: TopicPartition) -> None:
        self.topic_partition = topic_partition
        self._parts: list[tuple[int, int, int]] = []  # (own descriptor, start, end position)
        self._close = weakref.finalize(self, _close_all, self._parts)

    def add_file(self, fd: int, start: int, end: int) -> None:
        """Bytes [start, end) of the file open as `fd` (duplicated: the caller keeps its own),
        starting and ending at batch boundaries."""
        self._parts.append((os.dup(fd), start, end))

    def batches(self, buffer_bytes: int) -> Iterator[tuple[BatchHeader, memoryview]]:
        """(header, batch bytes) of each batch in order, reading `buffer_bytes` (or one larger
        batch) at a time. Blocking: for a worker thread."""
        for fd, position, end in self._parts:
            while position + BATCH_HEADER_SIZE <= end:
                chunk = memoryview(os.pread(fd, min(buffer_bytes, end - position), position))
                used = 0
                while used + BATCH_HEADER_SIZE <= len(chunk):
                    header = _checked_header(chunk, used, position)
                    if used + header.size > len(chunk):
                        break
                    yield header, chunk[used : used + header.size]
                    used += header.size
                if used == 0:  # a batch larger than the buffer, or a file truncated meanwhile
                    if len(chunk) < BATCH_HEADER_SIZE:
                        return
                    header = _checked_header(chunk, 0, position)
                    batch = os.pread(fd, header.size, position) if position + header.size <= end else b""
                    if len(batch) < header.size:
                        return
                    yield header, memoryview(batch)
                    used = header.size
                position += used

    def close(self) -> None:
        self._close()

    def __enter__(self) -> "LogSlice":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def _checked_header(chunk: memoryview, at: int, chunk_position: int) -> BatchHeader:
    header = BatchHeader.from_buffer(chunk, at)
    if header.batch_length < BATCH_HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptRecordError(f"batch at position {chunk_position + at} has length {header.batch_length}")
    return header
