"""A segment's .log file and the file regions that fetches send (Kafka's FileRecords).

Format: record batches back to back, byte for byte as producers sent them (after the broker set
baseOffset and partitionLeaderEpoch): [baseOffset INT64][batchLength INT32][batchLength bytes]...
The same bytes go to consumers with sendfile, never decoded on the way.
"""

import errno
import os
import resource
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

from protocol.errors import CorruptRecordError
from protocol.record_batch import BATCH_HEADER_SIZE, LOG_OVERHEAD, BatchHeader

_SCAN_WINDOW = 16 * 1024
# Never fewer open records files than this, whatever the descriptor limit.
_MIN_OPEN_FILES = 64


class Descriptor:
    """An open file descriptor that closes when the last holder lets go of it (a records file,
    the regions of it that fetch responses hold, a thread in the middle of a read)."""

    __slots__ = ("fd", "_close", "__weakref__")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._close = weakref.finalize(self, os.close, fd)

    def close(self) -> None:
        self._close()


class _DescriptorPool:
    """The records files that hold a descriptor, least recently used first; past `capacity` the
    oldest drops its descriptor and opens it again at its next use (Kafka keeps one per segment,
    which 10,000 partitions turn into an EMFILE).

    Thread-safety: a lock guards the order and every open or drop, since the cleaner's threads
    and fsyncs on the thread pool use records files too. Dropping only lets go of the pool's
    reference: whoever still holds the `Descriptor` keeps using it.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.lock = threading.Lock()
        self._files: OrderedDict[int, weakref.ref["RecordsFile"]] = OrderedDict()

    def use(self, file: "RecordsFile") -> Descriptor:
        with self.lock:
            descriptor = file._descriptor
            if descriptor is None:
                if file.closed:
                    raise OSError(errno.EBADF, "records file is closed", file.path)
                flags = os.O_RDONLY if file.read_only else os.O_RDWR
                descriptor = file._descriptor = Descriptor(os.open(file.path, flags))
            key = id(file)
            if key in self._files:
                self._files.move_to_end(key)
            else:
                self._files[key] = weakref.ref(file, lambda _, key=key: self._files.pop(key, None))
                self._shrink()
            return descriptor

    def forget(self, file: "RecordsFile") -> None:
        with self.lock:
            self._files.pop(id(file), None)

    def resize(self, capacity: int) -> None:
        with self.lock:
            self.capacity = capacity
            self._shrink()

    def _shrink(self) -> None:
        while len(self._files) > self.capacity:
            _, oldest = self._files.popitem(last=False)
            file = oldest()
            if file is not None:
                file._descriptor = None

    def __len__(self) -> int:
        return len(self._files)


def _capacity_for(open_files_limit: int) -> int:
    # Half the limit: the rest is for sockets, index maps being set up, checkpoints, ZooKeeper.
    return max(_MIN_OPEN_FILES, open_files_limit // 2)


_pool = _DescriptorPool(_capacity_for(resource.getrlimit(resource.RLIMIT_NOFILE)[0]))


def fit_open_files_to_limit() -> int:
    """Size the pool of open records files for the current soft RLIMIT_NOFILE (the broker calls
    this after raising it); returns the new capacity."""
    _pool.resize(_capacity_for(resource.getrlimit(resource.RLIMIT_NOFILE)[0]))
    return _pool.capacity


def set_max_open_files(capacity: int) -> None:
    """Bound the records files holding a descriptor at once (tests, tools)."""
    _pool.resize(max(1, capacity))


def open_files() -> int:
    """How many records files hold a descriptor of the pool now."""
    return len(_pool)


@dataclass(slots=True)
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


class RecordsFile:
    """An append-only file of record batches.

    Invariants: bytes are only added at `size`; `size` is what the broker wrote, and anything
    past it (a torn tail after a crash) is cut by `truncate_to` during recovery.

    Descriptors: a file holds one only while it is among the most recently used of the process
    (`_DescriptorPool`) and opens it again by path when needed, so a broker with many segments
    holds a bounded number. Reopening by path is safe because a segment's files are unlinked
    only file.delete.delay.ms after they left the log (Kafka gives in-flight readers the same
    grace), or with their whole directory once nothing reads them; fetch responses already
    queued hold their descriptors (`FileRegion`).

    Thread-safety: owned by the event loop; `flush` (fsync) and the cleaner's reads may run in
    worker threads: the pool is locked, and each operation holds its descriptor while it runs.
    """

    def __init__(self, path: str, size: int, read_only: bool = False) -> None:
        self.path = path
        self.size = size
        self.read_only = read_only
        self._descriptor: Descriptor | None = None
        self.closed = False

    @classmethod
    def open(cls, path: str, read_only: bool = False) -> "RecordsFile":
        """Open the file, creating it if missing (unless read-only)."""
        flags = os.O_RDONLY if read_only else os.O_RDWR | os.O_CREAT
        descriptor = Descriptor(os.open(path, flags, 0o644))
        records = cls(path, os.fstat(descriptor.fd).st_size, read_only)
        records._descriptor = descriptor
        _pool.use(records)
        return records

    def _fd_holder(self) -> Descriptor:
        return _pool.use(self)

    def append(self, data: bytes | memoryview) -> int:
        """Write `data` at the end; return the position it starts at."""
        descriptor = self._fd_holder()
        position = self.size
        written = 0
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
        with _pool.lock:  # a reopen by the old path would race with the rename
            os.rename(self.path, path)
            self.path = path

    def update_parent_dir(self, directory: str) -> None:
        """The directory holding the file was renamed: follow it, touching nothing on disk."""
        with _pool.lock:
            self.path = os.path.join(directory, os.path.basename(self.path))

    def close(self) -> None:
        """Let go of the descriptor (it closes once no region or reader holds it); later uses
        raise OSError (EBADF), as they did on a closed descriptor."""
        self.closed = True
        _pool.forget(self)
        self._descriptor = None
