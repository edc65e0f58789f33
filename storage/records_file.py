"""A segment's .log file and the file regions that fetches send (Kafka's FileRecords).

Format: record batches back to back, byte for byte as producers sent them (after the broker set
baseOffset and partitionLeaderEpoch): [baseOffset INT64][batchLength INT32][batchLength bytes]...
The same bytes go to consumers with sendfile, never decoded on the way.

The active segment's file reserves its disk blocks ahead of large appends (fallocate with
FALLOC_FL_KEEP_SIZE: the file's size stays the end of what was written). An append into blocks
already reserved skips the file system's per-block work (ext4: the delayed-allocation
reservation, the quota charge, the extent cache): with the reservations' own cost, a quarter of
a 1 MiB append's kernel time and a seventh of a 16 KiB one's on this project's machines
(benchmarks/RESULTS.md). The reservation is given back when the
segment stops being active or closes, and a reservation a crash left is given back on opening.
"""

import ctypes
import errno
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final, NamedTuple

from protocol.errors import CorruptRecordError
from protocol.record_batch import BATCH_HEADER_SIZE, LOG_OVERHEAD, BatchHeader
from storage import descriptor_pool
from storage.descriptor_pool import Descriptor, PooledFile

_SCAN_WINDOW: Final = 16 * 1024
log: Final = logging.getLogger(__name__)

# Appends shorter than a block gain nothing from a reservation (their block's work is shared by
# the appends that fill it); a reservation covers the next few appends of the size that asked.
_RESERVE_MIN_APPEND: Final = 4096
_RESERVE_MIN: Final = 256 * 1024
_RESERVE_MAX: Final = 4 * 1024 * 1024
# Blocks past the end beyond this on opening are a reservation a crash left, not the file
# system's own metadata or rounding.
_LEFT_RESERVATION: Final = _RESERVE_MIN // 2
# Reserve only while the file system keeps this much free after the reservation: near full, a
# reservation would take room another partition's append needs (a log dir fails when full).
_RESERVE_FREE_FLOOR: Final = 1024 * 1024 * 1024
_FALLOC_FL_KEEP_SIZE: Final = 1


def _libc_fallocate() -> Callable[[int, int, int, int], int] | None:
    try:
        fallocate = ctypes.CDLL(None, use_errno=True).fallocate
    except (AttributeError, OSError):  # not Linux
        return None
    fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
    fallocate.restype = ctypes.c_int
    return fallocate


_fallocate: Final = _libc_fallocate()


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
    past it (a torn tail after a crash) is cut by `truncate_to` during recovery. The file's size
    on disk is `size` too: blocks reserved ahead (`reserve_ahead`) lie past it, up to
    `_reserved_to`. The file holds a descriptor only while among the most recently used
    (storage.descriptor_pool).

    Thread-safety: owned by the event loop; `flush` (fsync) and the cleaner's reads may run in
    worker threads: each operation holds its descriptor while it runs.
    """

    def __init__(self, path: str, size: int, read_only: bool = False) -> None:
        super().__init__(read_only)
        self._path = path
        self.size = size
        # Set while the file is a log's active segment (LogSegment.open, make_active); off
        # again when a reservation fails (a file system without fallocate, a full disk).
        self.reserve_ahead = False
        self._reserved_to = 0  # the end of the blocks reserved past `size` (0: none)
        self._ask_at = 0  # appends that end past this ask for a reservation

    @property
    def path(self) -> str:
        return self._path

    @classmethod
    def open(cls, path: str, read_only: bool = False) -> "RecordsFile":
        """Open the file, creating it if missing (unless read-only)."""
        flags = os.O_RDONLY if read_only else os.O_RDWR | os.O_CREAT
        descriptor = Descriptor(os.open(path, flags, 0o644))
        stat = os.fstat(descriptor.fd)
        records = cls(path, stat.st_size, read_only)
        records._adopt(descriptor)
        if not read_only and stat.st_blocks * 512 > stat.st_size + _LEFT_RESERVATION:
            records._give_back_reservation(descriptor.fd, stat)
        return records

    def append(self, data: bytes | memoryview) -> int:
        """Write `data` at the end; return the position it starts at."""
        descriptor = self._fd_holder()
        position = self.size
        if self.reserve_ahead and position + len(data) > self._ask_at and len(data) >= _RESERVE_MIN_APPEND:
            self._reserve(descriptor.fd, position, len(data))
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

    def _reserve(self, fd: int, position: int, length: int) -> None:
        """Reserve the blocks of the next few appends of `length` bytes from `position`."""
        start = max(position, self._reserved_to)
        step = min(max(4 * length, _RESERVE_MIN), _RESERVE_MAX)
        self._ask_at = position + step
        free = os.fstatvfs(fd)
        if free.f_bavail * free.f_frsize < _RESERVE_FREE_FLOOR + step:
            return  # these appends allocate block by block, as without reservations
        if _fallocate is None or _fallocate(fd, _FALLOC_FL_KEEP_SIZE, start, position + step - start) != 0:
            code = ctypes.get_errno() if _fallocate is not None else errno.ENOSYS
            # Appends go on as before, allocating block by block; a full disk fails them there.
            log.info("%s: no longer reserving blocks ahead of appends: %s", self._path, os.strerror(code))
            self.reserve_ahead = False
            return
        self._reserved_to = position + step

    def stop_reserving(self) -> None:
        """The file takes no more appends for now: give back the blocks reserved past its end."""
        self.reserve_ahead = False
        if self._reserved_to > self.size:
            descriptor = self._fd_holder()
            self._give_back_reservation(descriptor.fd, os.fstat(descriptor.fd))

    def _give_back_reservation(self, fd: int, stat: os.stat_result) -> None:
        # Truncating to the same size frees the blocks past it; it would also set the file's
        # times, which stand for a segment's timestamp when its records carry none.
        os.ftruncate(fd, self.size)
        os.utime(fd, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        self._reserved_to = self._ask_at = 0

    def truncate_to(self, size: int) -> None:
        os.ftruncate(self._fd_holder().fd, size)  # reserved blocks past `size` go too
        self.size = size
        self._reserved_to = self._ask_at = 0

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
