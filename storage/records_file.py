"""A segment's .log file and the file regions that fetches send (Kafka's FileRecords).

Format: record batches back to back, byte for byte as producers sent them (after the broker set
baseOffset and partitionLeaderEpoch): [baseOffset INT64][batchLength INT32][batchLength bytes]...
The same bytes go to consumers with sendfile, never decoded on the way.
"""

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final, NamedTuple

from protocol.errors import CorruptRecordError
from protocol.record_batch import BATCH_HEADER_SIZE, LOG_OVERHEAD, BatchHeader
from storage import descriptor_pool
from storage.descriptor_pool import Descriptor, PooledFile

_SCAN_WINDOW: Final = 16 * 1024


@dataclass(slots=True, init=False)  # its own __init__, called directly when compiled
class FileRegion:
    """`length` bytes at `position` of a records file, to be sent with sendfile.

    A region holds the file's descriptor, which closes only when the last reference goes: a
    segment that retention deletes while a fetch response is queued still sends the right
    bytes, its descriptor number cannot be reused for another file meanwhile, and the pool
    dropping the file's descriptor does not close it under the response.
    """

    descriptor: Descriptor
    position: int
    length: int

    def __init__(self, descriptor: Descriptor, position: int, length: int) -> None:
        self.descriptor = descriptor
        self.position = position
        self.length = length

    def __len__(self) -> int:
        return self.length

    @property
    def fd(self) -> int:
        return self.descriptor.fd

    def read(self) -> bytes:
        """The region's bytes, for the few places that must look at them (tests, tools)."""
        return os.pread(self.descriptor.fd, self.length, self.position)


class BatchLocation(NamedTuple):
    position: int
    header: BatchHeader

    @property
    def size(self) -> int:
        return self.header.size


class RecordsFile(PooledFile):
    """An append-only file of record batches.

    Invariants: bytes are only added at `size`; `size` is what the broker wrote, and anything
    past it (a torn tail after a crash) is cut by `truncate_to` during recovery. The file holds a
    descriptor only while among the most recently used (storage.descriptor_pool).

    Thread-safety: owned by the event loop; `flush` (fsync) and the cleaner's reads may run in
    worker threads: each operation holds its descriptor while it runs.
    """

    def __init__(self, path: str, size: int, read_only: bool = False) -> None:
        super().__init__(read_only)
        self._path = path
        self.size = size

    @property
    def path(self) -> str:
        return self._path

    @classmethod
    def open(cls, path: str, read_only: bool = False) -> "RecordsFile":
        """Open the file, creating it if missing (unless read-only)."""
        flags = os.O_RDONLY if read_only else os.O_RDWR | os.O_CREAT
        descriptor = Descriptor(os.open(path, flags, 0o644))
        records = cls(path, os.fstat(descriptor.fd).st_size, read_only)
        records._adopt(descriptor)
        return records

    def append(self, data: bytes | memoryview) -> int:
        """Write `data` at the end; return the position it starts at."""
        descriptor = self._fd_holder()
        position = self.size
        written = os.pwrite(descriptor.fd, data, position)  # all of it, nearly always
        while written < len(data):
            written += os.pwrite(descriptor.fd, data[written:], position + written)
        self.size += written
        return position

    def read(self, position: int, length: int) -> bytes:
        return os.pread(self._fd_holder().fd, length, position)

    def region(self, position: int, length: int) -> FileRegion:
        return FileRegion(self._fd_holder(), position, length)

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
        os.ftruncate(self._fd_holder().fd, size)
        self.size = size

    def flush(self) -> None:
        # A descriptor opened again after the pool dropped one still fsyncs every dirty page of
        # the file: on Linux fsync writes back the inode, whichever descriptor wrote it.
        os.fsync(self._fd_holder().fd)

    def rename(self, path: str) -> None:
        with descriptor_pool.lock():  # a reopen by the old path would race with the rename
            os.rename(self._path, path)
            self._path = path

    def update_parent_dir(self, directory: str) -> None:
        """The directory holding the file was renamed: follow it, touching nothing on disk."""
        with descriptor_pool.lock():
            self._path = os.path.join(directory, os.path.basename(self._path))

    def close(self) -> None:
        """Let go of the descriptor (it closes once no region or reader holds it); later uses
        raise OSError (EBADF)."""
        self._let_go()
