"""Kafka's sparse segment indexes, memory-mapped, in Kafka's own on-disk format.

Every log segment `<20-digit base offset>.log` has two companions that let a reader start close to
what it wants instead of scanning the segment from its first byte:

- `OffsetIndex` (`.index`): offset -> physical position of a batch in the `.log` file.
- `TimeIndex` (`.timeindex`): timestamp -> offset from which to search for that timestamp.

Both are sparse (one entry per `index.interval.bytes` of log), so a lookup answers with a place to
start scanning, never with the exact record.
"""

import ctypes
import errno
import mmap
import os
import struct
import threading
from pathlib import Path
from typing import ClassVar, Final, NamedTuple

from storage import descriptor_pool
from storage.pooled_file import PooledFile

__all__ = ["CorruptIndexError", "IndexFullError", "OffsetIndex", "TimeIndex"]

_INT32_MAX: Final = 2**31 - 1
_ZERO_ENTRY: Final = (0, 0)
# What the first entry of either index must follow: first field from 0 up, second from 0 up.
_BEFORE_FIRST_ENTRY: Final = (-1, 0)
# Readers tailing the log look up recent keys; searching the newest 8 KiB of entries first keeps
# those lookups on pages that are already resident instead of faulting in the whole file.
_WARM_SECTION_BYTES: Final = 8192
_ZERO_CHECK_CHUNK_BYTES: Final = 1 << 20
# Entries appended but not yet written wait in memory up to this many: one pwrite for them all
# instead of one per entry (an entry per produced batch of index.interval.bytes or more).
_PENDING_ENTRIES: Final = 32


class CorruptIndexError(Exception):
    """An index file that breaks its format's invariants; rebuild it from the segment's log."""


class IndexFullError(Exception):
    """An append to an index without a free slot: the segment has to roll."""


class _Field(NamedTuple):
    """One big-endian integer column of an index entry, for binary searches over that column."""

    codec: struct.Struct
    offset_in_entry: int


class _MappedIndex(PooledFile):
    """The file handling shared by `OffsetIndex` and `TimeIndex`.

    File format: a flat array of fixed-size big-endian entries, no header. Each entry is a pair of
    integers whose first field strictly increases from entry to entry and whose second field never
    decreases; offsets are stored relative to the segment's base offset as int32.

    Lifecycle: the active segment's index is extended to its maximum size as a sparse file (as
    Kafka's RandomAccessFile.setLength does) and mapped; the unused tail is zeros and takes no
    disk. When the segment rolls or closes, the file is trimmed to exactly
    `entries * entry size`, which is the form Kafka itself reads back.

    Writes: the map is read-only; entries are written with pwrite and read back through the map
    (one page cache: a page written by pwrite is what the map shows). A store into a hole of a
    mapped file that the disk cannot back kills the process with SIGBUS, where pwrite fails with
    an OSError (ENOSPC) the broker handles; and on ext4 the first store into each page of a
    mapped file costs about a millisecond, against tens of microseconds for a pwrite. Reading a
    hole is safe (it reads zeros).

    Appended entries wait in memory (`_pending`, at most _PENDING_ENTRIES) and go out in one
    pwrite when that fills, and before anything reads the map (`_buffer`), truncates, trims or
    closes the index, or the log schedules a flush, or the log's scheduler writes them shortly
    after the append (`write_pending`; storage.log_manager waits 0.1 s at most, so readers of the
    file see them): a pwrite per produced batch cost more than the rest of indexing it. The
    entries lost with a crash only make the index sparser, which lookups tolerate (they scan
    forward from an earlier entry), and the log rebuilds the indexes of whatever it recovers
    anyway.

    Descriptors: the map keeps none. Python's mmap (before 3.13's trackfd) keeps a duplicate of
    the file's descriptor for as long as the map lives, which would be two per partition for the
    active segment alone; `_Mapping` maps the file with libc's mmap and closes the descriptor.
    Writes take theirs from the process's bounded pool (storage.descriptor_pool), which keeps
    one for an index written lately: opening one per entry would double an append's cost.

    Invariants:
    - No entry is all zeros, and every byte after the last entry is zero. Loading relies on it: the
      entry count is the position of the first all-zero entry, found by binary search, so a file
      left untrimmed by a crash loads with the right count. Appends refuse (or skip) an all-zero
      entry and truncation zeroes what it drops to keep this true.
    - `entries > 0` implies the file is mapped (a zero-length file cannot be mapped at all).
    - A read-only index never grows: its `max_entries` is its `entries`, so it is always full.
      Truncating it shrinks the file instead of zeroing the dropped entries.
    - Once closed or deleted, reading an entry or remapping raises ValueError; `close`, `delete`
      and `flush` stay harmless.

    Thread-safety: everything runs on the event loop, except `flush()`, which may run in a worker
    thread while the loop keeps appending. `flush()` fsyncs a descriptor of its own and never
    touches the mapping or the pending entries (the loop writes those first: `write_pending`),
    so remapping or closing concurrently is safe; the lock only keeps a concurrent `rename()`
    from making it open a path that no longer exists.
    """

    _ENTRY: ClassVar[struct.Struct]
    _OFFSET: ClassVar[_Field]

    def __init__(
        self,
        path: str | os.PathLike[str],
        base_offset: int,
        max_index_size: int,
        writable: bool = True,
    ) -> None:
        """Opens the index at `path`, creating an empty file if there is none.

        Writable: the file is extended (sparse) to `max_index_size` (rounded down to whole
        entries, and never below the entries it already holds) and mapped; appends go in with
        pwrite. Read-only: the file is mapped as it is.
        """
        super().__init__()
        # The entry's struct and size, read on every append: a compiled instance's own
        # attributes are read natively, class attributes through the type's dict.
        self._entry: struct.Struct = self._ENTRY
        self._entry_size: int = self._ENTRY.size
        self._path = Path(path)
        self._base_offset = base_offset
        self._writable = writable
        self._closed = False
        self._rename_lock = threading.Lock()
        self._mmap: _Mapping | None = None
        self._length = 0
        self._data_end = 0  # where the file's first hole starts (its length if none)
        self._entries = 0  # those in the file and those pending
        self._pending = bytearray()  # the last entries, not yet written (see the class)
        # The last entry's two fields, which every append compares with, once read (or
        # appended): _last_known is cleared wherever entries are dropped.
        self._last_first = 0
        self._last_second = 0
        self._last_known = False
        self._map()
        self._entries = self._count_entries()
        # A length that is not a whole number of entries is evidence for sanity_check; keep it.
        if writable and self._length % self._ENTRY.size == 0:
            self._map(max(self._capacity_bytes(max_index_size), self.size_bytes))

    @property
    def path(self) -> Path:
        return self._path

    @property
    def base_offset(self) -> int:
        return self._base_offset

    @property
    def entries(self) -> int:
        return self._entries

    @property
    def max_entries(self) -> int:
        return self._length // self._ENTRY.size if self._writable else self._entries

    @property
    def size_bytes(self) -> int:
        return self._entries * self._ENTRY.size

    def is_full(self) -> bool:
        # max_entries, inlined: asked several times for every batch appended.
        return not self._writable or self._entries >= self._length // self._entry_size

    def truncate_to(self, offset: int) -> None:
        """Drops the entries whose offset is at or above `offset`."""
        self._truncate_entries(
            self._last_slot_at_most(self._OFFSET, offset - self._base_offset - 1) + 1
        )

    def truncate(self) -> None:
        """Drops every entry; a writable index keeps its room, a read-only one empties its file."""
        length = self.max_entries * self._ENTRY.size if self._writable else 0
        self._entries = 0
        self._last_known = False
        self._pending.clear()
        # Cutting the file to nothing and growing it back yields fresh zero pages without writing
        # them, and wipes whatever a corrupt file held past its entries: this is how an index that
        # failed sanity_check is rebuilt.
        self._map(0)
        if length:
            self._map(length)

    def trim_to_valid_size(self) -> None:
        """Shrinks the file to its entries; the index stays readable, and is full."""
        self.write_pending()
        self._map(self.size_bytes)
        self._drop_descriptor()  # no more writes until a resize: leave the pool's room to others

    def resize(self, max_index_size: int) -> None:
        """Makes the index writable with room for `max_index_size` bytes of entries."""
        length = self._capacity_bytes(max_index_size)
        if length < self.size_bytes:
            raise ValueError(
                f"{self._path}: {max_index_size} bytes cannot hold its {self._entries} entries"
            )
        self._writable = True
        self._map(length)

    def write_pending(self) -> None:
        """Writes the entries waiting in memory, as `flush()` needs them written first."""
        pending = self._pending
        if pending:
            count = len(pending) // self._entry_size
            try:
                self._write(pending, (self._entries - count) * self._entry_size)
            except OSError:
                # The file keeps the entries before these: a sparser index, and a sound one.
                self._entries -= count
                self._last_known = False
                pending.clear()
                raise
            pending.clear()

    def flush(self) -> None:
        """Makes the written entries durable (`write_pending` first, on the loop, for those
        still in memory); safe to call from a worker thread."""
        # mmap.flush() holds the GIL for the whole msync and would stall the event loop. os.fsync
        # releases it, and it writes back pages dirtied through the mapping just the same (on Linux
        # msync(MS_SYNC) of a shared file mapping is an fsync of that range).
        with self._rename_lock:
            try:
                descriptor = os.open(self._path, os.O_RDONLY)
            except FileNotFoundError:
                return  # deleted after this flush was scheduled: nothing left to make durable
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)

    def close(self) -> None:
        """Trims a writable index to its entries and unmaps it; closing again does nothing."""
        if self._closed:
            return
        self.write_pending()
        self._closed = True
        self._unmap()
        self._let_go()
        if self._writable:
            os.truncate(self._path, self.size_bytes)

    def rename(self, new_path: str | os.PathLike[str]) -> None:
        # The pool's lock too: no reopen for a write may race with the path changing.
        with self._rename_lock, descriptor_pool.lock():
            os.replace(self._path, new_path)
            self._path = Path(new_path)

    def update_parent_dir(self, directory: str) -> None:
        """The directory holding the file was renamed (its partition was deleted): follow it,
        touching nothing on disk."""
        with self._rename_lock, descriptor_pool.lock():
            self._path = Path(directory) / self._path.name

    def release(self) -> None:
        """Unmaps the index without touching its file, which goes with its whole directory."""
        self._pending.clear()
        self._closed = True
        self._unmap()
        self._let_go()

    def delete(self) -> None:
        """Unmaps the index and removes its file, if it still exists."""
        self._pending.clear()
        self._closed = True
        self._unmap()
        self._let_go()
        self._path.unlink(missing_ok=True)

    def sanity_check(self, every_entry: bool = True) -> None:
        """Raises CorruptIndexError unless the file keeps the format's invariants.

        With `every_entry`, reads every entry, unlike a lookup: it is meant for loading a segment
        that may not have been closed cleanly. Without, only the length, the first and last
        entries and the file's data past them (Kafka's check, constant time): after a clean
        shutdown, reading every index of a broker with many partitions would make its start
        proportional to the data it holds.
        """
        if self._length % self._ENTRY.size:
            raise CorruptIndexError(
                f"{self._path}: length {self._length} is not a multiple of the entry size "
                f"{self._ENTRY.size}"
            )
        if every_entry:
            self._check_entries_in_order()
        else:
            self._check_first_and_last_entries()
        self._check_free_space_is_zero()

    def _check_first_and_last_entries(self) -> None:
        if not self._entries:
            return
        first, last = self._read(0), self._read(self._entries - 1)
        if not _follows(_BEFORE_FIRST_ENTRY, first) or (
            self._entries > 1 and not _follows(first, last)
        ):
            raise CorruptIndexError(f"{self._path}: entries from {first} to {last} are out of order")

    def _check_entries_in_order(self) -> None:
        if not self._entries:
            return
        previous = _BEFORE_FIRST_ENTRY
        with memoryview(self._buffer())[: self.size_bytes] as view:
            for slot, current in enumerate(self._ENTRY.iter_unpack(view)):
                if current == _ZERO_ENTRY or not _follows(previous, current):
                    raise CorruptIndexError(
                        f"{self._path}: entry {slot} {current} does not follow {previous}"
                    )
                previous = current

    def _check_free_space_is_zero(self) -> None:
        if self._length == self.size_bytes:
            return
        buffer = self._buffer()
        # Only the parts of the file holding data are read: the sparse tail an active index
        # leaves after a crash would otherwise be faulted in whole (megabytes a partition).
        for data_start, data_end in self._data_ranges(self.size_bytes):
            for start in range(data_start, data_end, _ZERO_CHECK_CHUNK_BYTES):
                chunk = buffer[start : min(start + _ZERO_CHECK_CHUNK_BYTES, data_end)]
                if chunk != bytes(len(chunk)):
                    raise CorruptIndexError(
                        f"{self._path}: non-zero bytes after the {self._entries} entries"
                    )

    def _data_ranges(self, start: int) -> list[tuple[int, int]]:
        """The byte ranges from `start` on that are not holes (the whole rest of the file on a
        file system that cannot tell: there SEEK_DATA answers its argument)."""
        ranges = []
        descriptor = os.open(self._path, os.O_RDONLY)
        try:
            while start < self._length:
                try:
                    data_start = os.lseek(descriptor, start, os.SEEK_DATA)
                except OSError as error:
                    if error.errno == errno.ENXIO:  # no data past `start`
                        break
                    raise
                data_end = min(os.lseek(descriptor, data_start, os.SEEK_HOLE), self._length)
                if data_start < data_end:
                    ranges.append((data_start, data_end))
                start = data_end
        finally:
            os.close(descriptor)
        return ranges

    def _relative(self, offset: int) -> int:
        relative = offset - self._base_offset
        if not 0 <= relative <= _INT32_MAX:
            raise ValueError(
                f"offset {offset} is outside what an index with base offset "
                f"{self._base_offset} can hold"
            )
        return relative

    def _read(self, slot: int) -> tuple[int, int]:
        return self._ENTRY.unpack_from(self._buffer(), slot * self._ENTRY.size)

    def _read_checked(self, slot: int) -> tuple[int, int]:
        if not 0 <= slot < self._entries:
            raise IndexError(f"entry {slot} of an index with {self._entries} entries")
        return self._read(slot)

    def _last_read(self) -> tuple[int, int]:
        """The last entry, pending or written, without writing the pending ones."""
        if not self._last_known:
            self._learn_last()
        return self._last_first, self._last_second

    def _learn_last(self) -> None:
        pending = self._pending
        last: tuple[int, int]
        if pending:
            last = self._entry.unpack_from(pending, len(pending) - self._entry_size)
        else:
            last = self._read(self._entries - 1) if self._entries else _BEFORE_FIRST_ENTRY
        self._last_first, self._last_second = last
        self._last_known = True

    def _require_room(self) -> None:
        if self.is_full():
            raise IndexFullError(f"{self._path} is full ({self._entries} entries)")

    def _write_next(self, first: int, second: int) -> None:
        try:
            entry = self._entry.pack(first, second)
        except struct.error as error:
            raise ValueError(f"({first}, {second}) does not fit an index entry") from error
        if self._mmap is None:
            raise ValueError(f"{self._path} is closed")
        pending = self._pending
        pending += entry
        self._entries += 1
        self._last_first = first
        self._last_second = second
        self._last_known = True
        if len(pending) >= _PENDING_ENTRIES * self._entry_size:
            self.write_pending()

    def _write(self, data: bytes | bytearray, position: int) -> None:
        """Writes `data` at `position` of the file; the map shows it at once."""
        if self._mmap is None:  # refuse a closed index before touching its file
            raise ValueError(f"{self._path} is closed")
        descriptor = self._fd_holder()
        written = os.pwrite(descriptor.fd, data, position) if data else 0  # all of it, nearly always
        while written < len(data):
            written += os.pwrite(descriptor.fd, data[written:], position + written)

    def _last_slot_at_most(self, field: _Field, target: int) -> int:
        """Slot of the last entry whose `field` is <= target, or -1 if there is none."""
        if not self._entries:
            return -1
        buffer = self._buffer()
        entry_size = self._ENTRY.size

        def field_at(slot: int) -> int:
            position = slot * entry_size + field.offset_in_entry
            value: int = field.codec.unpack_from(buffer, position)[0]
            return value

        if field_at(0) > target:
            return -1
        low, high = 0, self._entries - 1
        warm_start = max(0, self._entries - _WARM_SECTION_BYTES // entry_size)
        if field_at(warm_start) <= target:
            low = warm_start
        else:
            high = warm_start - 1
        while low < high:
            middle = (low + high + 1) // 2
            if field_at(middle) <= target:
                low = middle
            else:
                high = middle - 1
        return low

    def _truncate_entries(self, count: int) -> None:
        if count >= self._entries:
            return
        if self._writable:
            self.write_pending()
            start = count * self._ENTRY.size
            self._write(bytes(self.size_bytes - start), start)
            self._entries = count
        else:
            self._entries = count
            self._map(self.size_bytes)
        self._last_known = False

    def _count_entries(self) -> int:
        """Entries before the first all-zero slot (binary search: the zero slots are a suffix).

        Only the file's data before its first hole is searched: a hole is zeros, and each probe
        into the sparse tail a crash leaves would fault in a page of it (milliseconds a
        partition at start-up after a kill -9).
        """
        entry_size = self._ENTRY.size
        low, high = 0, min(-(-self._data_end // entry_size), self._length // entry_size)
        while low < high:
            middle = (low + high) // 2
            if self._read(middle) == _ZERO_ENTRY:
                high = middle
            else:
                low = middle + 1
        return low

    def _capacity_bytes(self, max_index_size: int) -> int:
        if max_index_size < self._ENTRY.size:
            raise ValueError(
                f"max index size {max_index_size} is smaller than one entry ({self._ENTRY.size})"
            )
        return max_index_size - max_index_size % self._ENTRY.size

    def _map(self, length: int | None = None) -> None:
        """Maps the file afresh (creating it if missing), first setting its length unless None."""
        if self._closed:
            raise ValueError(f"{self._path} is closed")
        self._unmap()
        needs_write = self._writable or length is not None
        flags = (os.O_RDWR if needs_write else os.O_RDONLY) | os.O_CREAT
        descriptor = os.open(self._path, flags, 0o644)
        try:
            if length is not None:
                os.ftruncate(descriptor, length)
            self._length = os.fstat(descriptor).st_size
            if self._length:
                self._mmap = _Mapping(descriptor, self._length)
                # A file system that cannot tell holes answers the length.
                self._data_end = min(os.lseek(descriptor, 0, os.SEEK_HOLE), self._length)
            else:
                self._data_end = 0
        finally:
            os.close(descriptor)

    def _unmap(self) -> None:
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None

    def _buffer(self) -> memoryview:
        """The map, with every entry in it: the pending ones are written first."""
        if self._mmap is None:
            raise ValueError(f"{self._path} is closed")
        if self._pending:
            self.write_pending()
        return self._mmap.view


_libc: Final = ctypes.CDLL(None, use_errno=True)
_libc.mmap.argtypes = (
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int64,
)
_libc.mmap.restype = ctypes.c_void_p
_libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
_libc.munmap.restype = ctypes.c_int
_MAP_FAILED: Final = ctypes.c_void_p(-1).value


class _Mapping:
    """A read-only shared mapping of a whole file that keeps no descriptor (libc mmap through
    ctypes).

    Invariant: `view` is valid until `close()`; the caller must not keep it, or any slice of it,
    past that, since the memory is gone then (a load would fault, not raise). The index reads it
    only within a method call, on the event loop.
    """

    def __init__(self, descriptor: int, length: int) -> None:
        address = _libc.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, descriptor, 0)
        if address in (None, _MAP_FAILED):
            code = ctypes.get_errno()
            raise OSError(code, f"mmap: {os.strerror(code)}")
        self._address = address
        self._length = length
        # Read-only at the Python level too: a store would fault on the PROT_READ pages.
        self.view = memoryview((ctypes.c_char * length).from_address(address)).cast("B").toreadonly()

    def close(self) -> None:
        self.view.release()
        if _libc.munmap(self._address, self._length) != 0:
            code = ctypes.get_errno()
            raise OSError(code, f"munmap: {os.strerror(code)}")


def _follows(previous: tuple[int, int], current: tuple[int, int]) -> bool:
    return current[0] > previous[0] and current[1] >= previous[1]


class OffsetIndex(_MappedIndex):
    """Maps offsets to physical positions in the segment's `.log` file.

    Entry (8 bytes, big-endian): int32 offset relative to the base offset, then int32 position of
    the batch in the `.log` file. Relative offsets strictly increase; positions never decrease.

    The entry for an offset points at the batch that holds it, or at an earlier one, so a reader
    starts at `lookup(offset)` and scans forward. (base_offset, 0) can never be an entry: it would
    read back as free space, and Kafka never indexes a segment's first batch anyway.

    Thread-safety: see `_MappedIndex`; only `flush()` may run off the event loop.
    """

    _ENTRY = struct.Struct(">ii")
    _OFFSET = _Field(struct.Struct(">i"), 0)
    _POSITION = _Field(struct.Struct(">i"), 4)

    @property
    def last_offset(self) -> int:
        """Offset of the last entry; the base offset when there is none."""
        return self._last_read()[0] + self._base_offset if self._entries else self._base_offset

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry at or below `offset`; (base_offset, 0) if none."""
        slot = self._last_slot_at_most(self._OFFSET, offset - self._base_offset)
        return self.entry(slot) if slot >= 0 else (self._base_offset, 0)

    def lookup_position(self, position: int) -> tuple[int, int]:
        """(offset, position) of the last entry at or below `position`; (base_offset, 0) if none.
        Entries point at batch starts, so this finds a batch boundary at or before `position`."""
        slot = self._last_slot_at_most(self._POSITION, position)
        return self.entry(slot) if slot >= 0 else (self._base_offset, 0)

    def entry(self, n: int) -> tuple[int, int]:
        """The n-th entry as (offset, position)."""
        relative_offset, position = self._read_checked(n)
        return relative_offset + self._base_offset, position

    def append(self, offset: int, position: int) -> None:
        """Indexes the batch holding `offset` at `position`; both must exceed the last entry's."""
        # On the append path (an entry every index.interval.bytes): the checks of _require_room
        # and _relative, inlined.
        last_relative_offset: int  # typed, so that compiled code keeps them C integers
        last_position: int
        if self.is_full():
            self._require_room()
        relative_offset = offset - self._base_offset
        if not 0 <= relative_offset <= _INT32_MAX:
            self._relative(offset)
        if not self._last_known:
            self._learn_last()
        last_relative_offset = self._last_first
        last_position = self._last_second
        if not (relative_offset > last_relative_offset and position >= last_position):
            raise ValueError(
                f"entry ({offset}, {position}) does not follow the last entry "
                f"({last_relative_offset + self._base_offset}, {last_position}) of {self._path}"
            )
        if (relative_offset, position) == _ZERO_ENTRY:
            raise ValueError(f"({offset}, 0) would read back as free space in {self._path}")
        self._write_next(relative_offset, position)


class TimeIndex(_MappedIndex):
    """Maps timestamps to offsets in the segment.

    Entry (12 bytes, big-endian): int64 timestamp, then int32 offset relative to the base offset.
    Timestamps strictly increase; offsets never decrease. An entry (t, o) records that t was the
    largest timestamp in the segment as of offset o; a search for the first record stamped at or
    after T scans forward from the offset `lookup(T)` returns.

    `maybe_append` records only a timestamp greater than the last one. It also skips
    (0, base_offset), which records stamped at the epoch could produce: that entry would read back
    as free space, and without it a lookup still answers base_offset, where the search would start.

    Thread-safety: see `_MappedIndex`; only `flush()` may run off the event loop.
    """

    _ENTRY = struct.Struct(">qi")
    _TIMESTAMP = _Field(struct.Struct(">q"), 0)
    _OFFSET = _Field(struct.Struct(">i"), 8)

    @property
    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry; (-1, base_offset) when there is none."""
        timestamp, relative_offset = self._last_read()
        return timestamp, relative_offset + self._base_offset

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """(timestamp, offset) of the last entry at or below `timestamp`, else (-1, base_offset)."""
        slot = self._last_slot_at_most(self._TIMESTAMP, timestamp)
        return self.entry(slot) if slot >= 0 else (-1, self._base_offset)

    def entry(self, n: int) -> tuple[int, int]:
        """The n-th entry as (timestamp, offset)."""
        timestamp, relative_offset = self._read_checked(n)
        return timestamp, relative_offset + self._base_offset

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Appends (timestamp, offset) if `timestamp` is greater than the last one recorded."""
        # On the append path: _relative, inlined.
        last_timestamp: int  # typed, so that compiled code keeps them C integers
        last_relative_offset: int
        relative_offset = offset - self._base_offset
        if not 0 <= relative_offset <= _INT32_MAX:
            self._relative(offset)
        if not self._last_known:
            self._learn_last()
        last_timestamp = self._last_first
        last_relative_offset = self._last_second
        if relative_offset < last_relative_offset:
            raise ValueError(
                f"offset {offset} is below the last entry's {self.last_entry[1]} in {self._path}"
            )
        if timestamp <= last_timestamp or (timestamp, relative_offset) == _ZERO_ENTRY:
            return
        self._require_room()
        self._write_next(timestamp, relative_offset)
