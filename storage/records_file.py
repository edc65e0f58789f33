"""A segment's .log file and the file regions that fetches send (Kafka's FileRecords).

Format: record batches back to back, byte for byte as producers sent them (after the broker set
baseOffset and partitionLeaderEpoch): [baseOffset INT64][batchLength INT32][batchLength bytes]...
The same bytes go to consumers with sendfile, never decoded on the way.
"""

import os
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

from protocol.errors import CorruptRecordError
from protocol.record_batch import BATCH_HEADER_SIZE, LOG_OVERHEAD, BatchHeader

_SCAN_WINDOW = 16 * 1024


@dataclass(slots=True)
class FileRegion:
    """`length` bytes at `position` of a records file, to be sent with sendfile.

    A region holds its file object, and the descriptor closes only when the last reference goes:
    a segment that retention deletes while a fetch response is queued still sends the right
    bytes, and its descriptor number cannot be reused for another file meanwhile.
    """

    file: "RecordsFile"
    position: int
    length: int

    def __len__(self) -> int:
        return self.length

    @property
    def fd(self) -> int:
        return self.file.fd

    def read(self) -> bytes:
        """The region's bytes, for the few places that must look at them (tests, tools)."""
        return self.file.read(self.position, self.length)


class BatchLocation(NamedTuple):
    position: int
    header: BatchHeader

    @property
    def size(self) -> int:
        return self.header.size


class RecordsFile:
    """An append-only file of record batches.

    Invariants: bytes are only added at `size`; `size` is what the broker wrote, and anything
    past it (a torn tail after a crash) is cut by `truncate_to` during recovery.
    Thread-safety: owned by the event loop; `flush` (fsync) may run in a worker thread, since it
    touches only the descriptor.
    """

    def __init__(self, path: str, fd: int, size: int) -> None:
        self.path = path
        self.fd = fd
        self.size = size
        self._close = weakref.finalize(self, os.close, fd)

    @classmethod
    def open(cls, path: str) -> "RecordsFile":
        """Open the file, creating it if missing."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        return cls(path, fd, os.fstat(fd).st_size)

    def append(self, data: bytes | memoryview) -> int:
        """Write `data` at the end; return the position it starts at."""
        position = self.size
        written = 0
        while written < len(data):
            written += os.pwrite(self.fd, data[written:], position + written)
        self.size += written
        return position

    def read(self, position: int, length: int) -> bytes:
        return os.pread(self.fd, length, position)

    def region(self, position: int, length: int) -> FileRegion:
        return FileRegion(self, position, length)

    def batches(self, start: int = 0, end: int | None = None) -> Iterator[BatchLocation]:
        """Headers of the whole batches between `start` and `end`, reading ahead in windows.

        Stops at a batch that runs past `end` (a torn tail) and raises CorruptRecordError on a
        size field too small to be a batch.
        """
        end = self.size if end is None else end
        position = start
        window, window_start = b"", start
        while position + BATCH_HEADER_SIZE <= end:
            offset_in_window = position - window_start
            if offset_in_window + BATCH_HEADER_SIZE > len(window):
                window_start, offset_in_window = position, 0
                window = self.read(position, min(_SCAN_WINDOW, end - position))
            header = BatchHeader.from_buffer(window, offset_in_window)
            if header.batch_length < BATCH_HEADER_SIZE - LOG_OVERHEAD:
                raise CorruptRecordError(
                    f"batch at position {position} of {self.path} has length {header.batch_length}"
                )
            if position + header.size > end:
                return
            yield BatchLocation(position, header)
            position += header.size

    def truncate_to(self, size: int) -> None:
        os.ftruncate(self.fd, size)
        self.size = size

    def flush(self) -> None:
        os.fsync(self.fd)

    def rename(self, path: str) -> None:
        os.rename(self.path, path)
        self.path = path

    def update_parent_dir(self, directory: str) -> None:
        """The directory holding the file was renamed: follow it, touching nothing on disk."""
        self.path = os.path.join(directory, os.path.basename(self.path))

    def close(self) -> None:
        self._close()
