"""Open descriptors of segment files, bounded for the whole process.

Kafka keeps one descriptor per segment (.log) and maps every index, which 10,000 partitions turn
into an EMFILE. Here a file holds a descriptor only while it is among the most recently used
(`PooledFile`); past the pool's capacity the least recently used one lets go of its descriptor
and opens it again by path at its next use. Index maps keep no descriptor at all
(storage.index).

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

# Never fewer open files than this, whatever the descriptor limit.
_MIN_CAPACITY = 64


class Descriptor:
    """An open file descriptor that closes when the last holder lets go of it (a file, the
    regions of it that fetch responses hold, a thread in the middle of a read)."""

    __slots__ = ("fd", "_close", "__weakref__")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._close = weakref.finalize(self, os.close, fd)


class _Slot:
    """What the pool knows of one file: the descriptor it holds, if any, whether it was let go,
    and whether it was used since the pool last passed over it. The file owns its slot and the
    pool refers to the slot weakly, so a file that dies takes its pool entry with it. The pool
    never refers to the file itself: the compiled builds of RecordsFile and the indexes
    (setup.py) cannot be weakly referenced safely, since mypyc's classes with a Python base
    class do not clear their weak references when they die."""

    __slots__ = ("descriptor", "let_go", "used", "__weakref__")

    def __init__(self) -> None:
        self.descriptor: Descriptor | None = None
        self.let_go = False
        self.used = False


class PooledFile:
    """A file that holds a descriptor only while among the most recently used of the process.

    Subclasses keep `path` current (renames take `lock()`, so no reopen races with them) and
    call `_let_go` when closed; a use after that raises OSError (EBADF), as a use of a closed
    descriptor did.
    """

    def __init__(self, read_only: bool = False) -> None:
        self._read_only = read_only
        self._slot = _Slot()

    @property
    def path(self) -> str | os.PathLike[str]:
        raise NotImplementedError

    @property
    def holds_descriptor(self) -> bool:
        return self._slot.descriptor is not None

    def _fd_holder(self) -> Descriptor:
        """The file's descriptor (opened now if the pool had dropped it), held by the caller for
        as long as it uses it."""
        slot = self._slot
        descriptor = slot.descriptor
        if descriptor is None:
            return _pool.open(self)
        slot.used = True
        return descriptor

    def _adopt(self, descriptor: Descriptor) -> None:
        """Take a descriptor the subclass opened itself (creating the file)."""
        _pool.add(self, descriptor)

    def _drop_descriptor(self) -> None:
        """Give the descriptor back now (the file will not be used for a while); the next use
        opens it again."""
        with _pool.lock:
            self._slot.descriptor = None
            _pool.forget(self)

    def _let_go(self) -> None:
        with _pool.lock:
            self._slot.let_go = True
            self._slot.descriptor = None
            _pool.forget(self)


class _Pool:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.lock = threading.Lock()
        self._files: OrderedDict[int, weakref.ref[_Slot]] = OrderedDict()

    def open(self, file: PooledFile) -> Descriptor:
        """The descriptor of a file that held none when asked (another thread may have opened
        it since)."""
        with self.lock:
            slot = file._slot
            descriptor = slot.descriptor
            if descriptor is not None:
                slot.used = True
                return descriptor
            if slot.let_go:
                raise OSError(errno.EBADF, "file is closed", str(file.path))
            flags = os.O_RDONLY if file._read_only else os.O_RDWR
            descriptor = slot.descriptor = Descriptor(os.open(file.path, flags))
            self._enter(slot)
            return descriptor

    def add(self, file: PooledFile, descriptor: Descriptor) -> None:
        with self.lock:
            file._slot.descriptor = descriptor
            self._enter(file._slot)

    def _enter(self, slot: _Slot) -> None:
        """Put a slot that has just taken a descriptor at the back of the order; the caller holds
        the lock."""
        key = id(slot)
        slot.used = False
        # A dead file's entry goes with its slot, before the slot's id can be reused.
        self._files[key] = weakref.ref(slot, lambda _, key=key: self._files.pop(key, None))
        self._shrink(keep=key)

    def forget(self, file: PooledFile) -> None:
        """Drop `file`'s entry; the caller holds the lock."""
        self._files.pop(id(file._slot), None)

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
