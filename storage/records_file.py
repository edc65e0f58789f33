"""A segment's .log file and the file regions that fetches send (Kafka's FileRecords).

Format: record batches back to back, byte for byte as producers sent them (after the broker set
baseOffset and partitionLeaderEpoch): [baseOffset INT64][batchLength INT32][batchLength bytes]...
The same bytes go to consumers with sendfile, never decoded on the way.

The active segment's file reserves its disk blocks ahead of large appends (fallocate with
FALLOC_FL_KEEP_SIZE: the file's size stays the end of what was written). An append into blocks
already reserved skips the file system's per-block work (ext4: the delayed-allocation
reservation, the quota charge, the extent cache): with the reservations' own cost, a quarter of
a 1 MiB append's kernel time and a seventh of a 16 KiB one's on this project's machines
(benchmarks/RESULTS.md). A reservation covers the next few appends of the size that asked
for it, and twice the last one while each is used up within a second (up to 4 MiB), so a busy
partition asks once every 4 MiB rather than every 256 KiB and a quiet one holds little. The reservation is given
back when the segment stops being active or closes, and a reservation a crash left is given
back on opening.

Appends may wait in memory to be written together (DeferredWrites): when one read of a
broker's connection brings several requests, it defers their appends while it serves them, so
that several Produce requests to one partition leave in one pwritev, and writes them before any
answer leaves.
"""

import ctypes
import errno
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from time import monotonic
from typing import Final, NamedTuple

from protocol.errors import CorruptRecordError
from protocol.record_batch import BATCH_HEADER_SIZE, LOG_OVERHEAD, BatchHeader
from storage import descriptor_pool
from storage.descriptor_pool import Descriptor
from storage.pooled_file import PooledFile

_SCAN_WINDOW: Final = 16 * 1024
log: Final = logging.getLogger(__name__)

# Appends shorter than a block gain nothing from a reservation (their block's work is shared by
# the appends that fill it); a reservation covers the next few appends of the size that asked.
_RESERVE_MIN_APPEND: Final = 4096
_RESERVE_MIN: Final = 256 * 1024
_RESERVE_MAX: Final = 4 * 1024 * 1024
# A reservation used up within this long doubles the next, up to _RESERVE_MAX: a busy partition
# then asks once every _RESERVE_MAX bytes, while a quiet one keeps reserving little (a
# reservation stays until its segment stops being active).
_BUSY_S: Final = 1.0
# Blocks past the end beyond this on opening are a reservation a crash left, not the file
# system's own metadata or rounding.
_LEFT_RESERVATION: Final = _RESERVE_MIN // 2
# Reserve only while the file system keeps this much free after the reservation: near full, a
# reservation would take room another partition's append needs (a log dir fails when full).
_RESERVE_FREE_FLOOR: Final = 1024 * 1024 * 1024
_FALLOC_FL_KEEP_SIZE: Final = 1
# Buffers a pwritev takes at most (Linux's IOV_MAX is 1024).
_MAX_IOV: Final = 512


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
    fd: int  # the descriptor's, copied: compiled readers of a region then take it natively
    position: int
    length: int

    def __init__(self, descriptor: Descriptor, position: int, length: int) -> None:
        self.descriptor = descriptor
        self.fd = descriptor.fd
        self.position = position
        self.length = length

    def __len__(self) -> int:
        return self.length

    def read(self) -> bytes:
        """The region's bytes, for the few places that must look at them (tests, tools)."""
        return os.pread(self.fd, self.length, self.position)


class BatchLocation(NamedTuple):
    position: int
    header: BatchHeader

    @property
    def size(self) -> int:
        return self.header.size


class DeferredWrites:
    """Appends that wait in memory between `start` and `finish`, to be written then, those to
    one file in one pwritev.

    Why: a read of a connection often brings several Produce requests to one partition (2.5 a
    read in the 16 KiB wire produce), and appending 16 KiB costs 6.1-6.4 µs of kernel and user
    time one at a time against 4.0-4.3 µs four to a pwritev (benchmarks/RESULTS.md).

    Rules: a broker's connection starts it before serving the requests of a read (of more
    than one: one request appends once to each file it writes) and finishes it before any
    answer leaves, so an append is in the page cache before it is acknowledged, as when it
    was written at once. Appends made while it is not started (followers', the coordinators'
    tasks) are written at once. A file's waiting bytes are written before
    anything reads, fsyncs, truncates, stops reserving for or closes it. Finishing writes every
    file that waits, so a `finish` nested in another start's serve is safe, and appends after it
    are written at once. A failed write is counted in `failures` and reported to
    `on_failure(path, error)` (the log manager takes the file's log dir offline); the connection
    that finishes closes without answering once `failures` moved while it served, as the
    appends it would acknowledge may be lost.

    Thread-safety: owned by the event loop, as the logs are.
    """

    def __init__(self, on_failure: Callable[[str, OSError], None]) -> None:
        self.deferring = False
        self.failures = 0
        self._on_failure = on_failure
        self._waiting: list[RecordsFile] = []

    def start(self) -> None:
        self.deferring = True

    def wait(self, file: "RecordsFile") -> None:
        """`file` holds appends to write at `finish` (told once, at its first)."""
        self._waiting.append(file)

    def finish(self) -> None:
        self.deferring = False
        if not self._waiting:
            return
        waiting, self._waiting = self._waiting, []
        for file in waiting:
            try:
                file.write_deferred()
            except OSError as exc:
                self.failures += 1
                log.error("writing appends to %s failed: %s", file.path, exc)
                self._on_failure(file.path, exc)


class RecordsFile(PooledFile):
    """An append-only file of record batches.

    Invariants: bytes are only added at `size`; `size` is what the broker appended, and anything
    past it (a torn tail after a crash) is cut by `truncate_to` during recovery. The file's size
    on disk is `size` too, less the appends that wait in memory (`_deferred`, DeferredWrites),
    which are written before any read, fsync, truncation or close; blocks reserved ahead
    (`reserve_ahead`) lie past it, up to `_reserved_to`. The file holds a descriptor only while
    among the most recently used (storage.descriptor_pool).

    Thread-safety: owned by the event loop; `flush` (fsync) and the cleaner's reads may run in
    worker threads: each operation holds its descriptor while it runs. Appends wait in memory
    only on the loop, within one connection's serve, and only in the active segment's file:
    the loop writes them before a flush is scheduled (LogSegment.write_pending) and before the
    segment stops being active, so those threads never meet them.
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
        self._step = 0  # the length the last reservation asked for
        self._reserved_at = 0.0  # when it was made (monotonic)
        self._deferred: list[bytes | memoryview] = []  # appended, not written yet (DeferredWrites)
        self._deferred_bytes = 0

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

    def append(self, data: bytes | memoryview, writes: DeferredWrites | None = None) -> int:
        """Append `data` at the end (written at once, or at `writes.finish()` while `writes`
        defers); return the position it starts at."""
        position = self.size
        length = len(data)
        if self.reserve_ahead and position + length > self._ask_at and length >= _RESERVE_MIN_APPEND:
            self._reserve(self._fd_holder().fd, position, length)
        if writes is not None and writes.deferring:
            if not self._deferred:
                writes.wait(self)
            self._deferred.append(data)
            self._deferred_bytes += length
            self.size = position + length
            return position
        self._write_all(self._fd_holder().fd, data, position)
        self.size = position + length
        return position

    def write_deferred(self) -> None:
        """Write the appends that wait in memory, in one pwritev (a few for very many); nothing
        when none waits, so every reader may call it first."""
        deferred = self._deferred
        if not deferred:
            return
        position = self.size - self._deferred_bytes
        self._deferred = []
        self._deferred_bytes = 0
        fd = self._fd_holder().fd
        if len(deferred) == 1:
            self._write_all(fd, deferred[0], position)
            return
        for first in range(0, len(deferred), _MAX_IOV):
            chunks = deferred[first : first + _MAX_IOV]
            length = sum(len(chunk) for chunk in chunks)
            written = os.pwritev(fd, chunks, position)  # all of it, nearly always
            if written < length:
                self._write_all(fd, memoryview(b"".join(chunks))[written:], position + written)
            position += length

    @staticmethod
    def _write_all(fd: int, data: bytes | memoryview, position: int) -> None:
        written = os.pwrite(fd, data, position)  # all of it, nearly always
        while written < len(data):
            written += os.pwrite(fd, data[written:], position + written)

    def read(self, position: int, length: int) -> bytes:
        self.write_deferred()
        return os.pread(self._fd_holder().fd, length, position)

    def region(self, position: int, length: int) -> FileRegion:
        self.write_deferred()
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
        """Reserve the blocks of the next few appends of `length` bytes from `position`: more
        (twice the last reservation) when the last was used up within _BUSY_S."""
        start = max(position, self._reserved_to)
        step = max(4 * length, _RESERVE_MIN)
        now = monotonic()
        if now - self._reserved_at < _BUSY_S:
            step = max(step, 2 * self._step)
        step = min(step, _RESERVE_MAX)
        self._step, self._reserved_at = step, now
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
        """The file takes no more appends for now: write those waiting, give back the blocks
        reserved past its end."""
        self.write_deferred()
        self.reserve_ahead = False
        if self._reserved_to > self.size:
            descriptor = self._fd_holder()
            self._give_back_reservation(descriptor.fd, os.fstat(descriptor.fd))

    def _give_back_reservation(self, fd: int, stat: os.stat_result) -> None:
        # Truncating to the same size frees the blocks past it; it would also set the file's
        # times, which stand for a segment's timestamp when its records carry none.
        os.ftruncate(fd, self.size)
        os.utime(fd, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        self._reserved_to = self._ask_at = self._step = 0

    def truncate_to(self, size: int) -> None:
        self.write_deferred()
        os.ftruncate(self._fd_holder().fd, size)  # reserved blocks past `size` go too
        self.size = size
        self._reserved_to = self._ask_at = self._step = 0

    def flush(self) -> None:
        """fsync (on a worker thread too): what waits in memory was written on the loop before
        (see the class)."""
        # A descriptor opened again after the pool dropped one still fsyncs every dirty page of
        # the file: on Linux fsync writes back the inode, whichever descriptor wrote it.
        try:
            descriptor = self._fd_holder()
        except OSError:
            if self.is_closed():
                # Closed after this flush was scheduled: its segment was deleted (retention, or
                # cleaned segments swapped in, fsynced first) or its log closed, which wrote
                # everything first. Nothing is left to make durable, as for a deleted index.
                return
            raise
        os.fsync(descriptor.fd)

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
        raise OSError (EBADF). Appends waiting in memory are written first."""
        self.write_deferred()
        self._let_go()
