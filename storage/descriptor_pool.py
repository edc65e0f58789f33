"""Open descriptors of segment files, bounded for the whole process.

Kafka keeps one descriptor per segment (.log) and maps every index, which 10,000 partitions turn
into an EMFILE. Here a file holds a descriptor only while it is among the most recently used
(`storage.pooled_file.PooledFile`); past the pool's capacity the least recently used one lets
go of its descriptor and opens it again by path at its next use. Index maps keep no descriptor
at all (storage.index).

"Least recently used" is kept the second-chance (CLOCK) way. A file that holds its descriptor
only marks itself used, without the lock: every append writes through here twice (the batch
and its index entry), and reordering the pool under its lock cost about 5 % of a 16 KiB
Produce's instructions. The pool keeps its files in the order they opened; to let one go, it
takes the oldest, and a marked one loses its mark and goes to the back instead. A file just
opened is never the one its own opening lets go.

Reopening by path is safe because a segment's files are unlinked only file.delete.delay.ms
after they left their log (Kafka gives in-flight readers the same grace), or with their whole
directory once nothing reads them; what must outlive that (a fetch response already queued)
holds the `Descriptor` itself.

Thread-safety: one lock guards the order and every open or drop: the cleaner's threads and
fsyncs on the thread pool use these files too. A use that finds the descriptor held takes it
and sets the mark without the lock; a drop racing with it only lets go of the pool's
reference: whoever still holds a `Descriptor` keeps using it, and it closes when the last
holder lets go. A file holds a descriptor only while the pool has it in its order.
"""

import errno
import os
import resource
import threading
import weakref
from collections import OrderedDict
from typing import Protocol

# Never fewer open files than this, whatever the descriptor limit.
_MIN_CAPACITY = 64


class Descriptor:
    """An open file descriptor that closes when the last holder lets go of it (a file, the
    regions of it that fetch responses hold, a thread in the middle of a read)."""

    __slots__ = ("fd", "_close", "__weakref__")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._close = weakref.finalize(self, os.close, fd)


class _Named(Protocol):
    """A pooled file, as the pool sees it: its current path."""

    @property
    def path(self) -> str | os.PathLike[str]: ...


class Slot:
    """What the pool knows of one file: the descriptor it holds, if any, whether it was let go,
    and whether it was used since the pool last passed over it. The file owns its slot and the
    pool refers to the slot weakly, so a file that dies takes its pool entry with it. The pool
    never refers to the file itself: compiled classes (PooledFile and its subclasses, setup.py)
    cannot be weakly referenced. For the same reason this module is not compiled."""

    __slots__ = ("descriptor", "let_go", "used", "__weakref__")

    def __init__(self) -> None:
        self.descriptor: Descriptor | None = None
        self.let_go = False
        self.used = False


class _Pool:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.lock = threading.Lock()
        self._files: OrderedDict[int, weakref.ref[Slot]] = OrderedDict()

    def open(self, slot: Slot, file: _Named, read_only: bool) -> Descriptor:
        """The descriptor of a file that held none when asked (another thread may have opened
        it since), opened by the path the file has under the lock."""
        with self.lock:
            descriptor = slot.descriptor
            if descriptor is not None:
                slot.used = True
                return descriptor
            if slot.let_go:
                raise OSError(errno.EBADF, "file is closed", str(file.path))
            flags = os.O_RDONLY if read_only else os.O_RDWR
            descriptor = slot.descriptor = Descriptor(os.open(file.path, flags))
            self._enter(slot)
            return descriptor

    def add(self, slot: Slot, descriptor: Descriptor) -> None:
        with self.lock:
            slot.descriptor = descriptor
            self._enter(slot)

    def _enter(self, slot: Slot) -> None:
        """Put a slot that has just taken a descriptor at the back of the order; the caller holds
        the lock."""
        key = id(slot)
        slot.used = False
        # A dead file's entry goes with its slot, before the slot's id can be reused.
        self._files[key] = weakref.ref(slot, lambda _, key=key: self._files.pop(key, None))
        self._shrink(keep=key)

    def forget(self, slot: Slot) -> None:
        """Drop `slot`'s entry; the caller holds the lock."""
        self._files.pop(id(slot), None)

    def resize(self, capacity: int) -> None:
        with self.lock:
            self.capacity = capacity
            self._shrink(keep=None)

    def _shrink(self, keep: int | None) -> None:
        """Let go of the oldest unmarked descriptors until the pool is within its capacity,
        marked ones going to the back without their mark; never `keep`'s."""
        while len(self._files) > self.capacity:
            key, oldest = self._files.popitem(last=False)
            slot = oldest()
            if slot is None:
                continue
            if key == keep or slot.used:
                slot.used = False
                self._files[key] = oldest
            else:
                slot.descriptor = None

    def __len__(self) -> int:
        return len(self._files)


def _capacity_for(open_files_limit: int) -> int:
    # Half the limit: the rest is for sockets, maps being set up, checkpoints, ZooKeeper.
    return max(_MIN_CAPACITY, open_files_limit // 2)


_pool = _Pool(_capacity_for(resource.getrlimit(resource.RLIMIT_NOFILE)[0]))


def open_descriptor(slot: Slot, file: _Named, read_only: bool) -> Descriptor:
    """The descriptor for `slot`, which held none when its file asked: opened by `file.path`
    (read under the lock, which renames hold), unless the file was let go (EBADF)."""
    return _pool.open(slot, file, read_only)


def adopt(slot: Slot, descriptor: Descriptor) -> None:
    """`slot` takes a descriptor its file opened itself (creating the file)."""
    _pool.add(slot, descriptor)


def drop(slot: Slot) -> None:
    """`slot` gives its descriptor back now (its file will not be used for a while); the next
    use opens it again."""
    with _pool.lock:
        slot.descriptor = None
        _pool.forget(slot)


def let_go(slot: Slot) -> None:
    """`slot`'s file is closed: its descriptor goes, and no use opens it again."""
    with _pool.lock:
        slot.let_go = True
        slot.descriptor = None
        _pool.forget(slot)


def lock() -> threading.Lock:
    """Held while a pooled file's path changes."""
    return _pool.lock


def fit_to_open_files_limit() -> int:
    """Size the pool for the current soft RLIMIT_NOFILE (the broker calls this after raising
    it); returns the new capacity."""
    _pool.resize(_capacity_for(resource.getrlimit(resource.RLIMIT_NOFILE)[0]))
    return _pool.capacity


def set_capacity(capacity: int) -> None:
    """Bound the files holding a pooled descriptor at once (tests, tools)."""
    _pool.resize(max(1, capacity))


def capacity() -> int:
    return _pool.capacity


def files_holding_descriptors() -> int:
    return len(_pool)
