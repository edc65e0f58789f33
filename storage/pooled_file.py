"""A file whose descriptor comes from the process's pool (storage.descriptor_pool), held only
while among the most recently used.

Compiled (setup.py): every append and read asks `_fd_holder` for the descriptor, and its
subclasses (RecordsFile, the indexes) are compiled classes only with a compiled base. The
pool's side takes weak references, which compiled classes cannot, so it stays interpreted.

Thread-safety: as the pool's; `_fd_holder` takes no lock while the descriptor is held.
"""

import os

from storage import descriptor_pool
from storage.descriptor_pool import Descriptor, Slot


class PooledFile:
    """A file that holds a descriptor only while among the most recently used of the process.

    Subclasses keep `path` current (renames take `descriptor_pool.lock()`, so no reopen races
    with them) and call `_let_go` when closed; a use after that raises OSError (EBADF), as a
    use of a closed descriptor did.
    """

    def __init__(self, read_only: bool = False) -> None:
        self._read_only = read_only
        self._slot = Slot()

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
            return descriptor_pool.open_descriptor(slot, self, self._read_only)
        slot.used = True
        return descriptor

    def _adopt(self, descriptor: Descriptor) -> None:
        """Take a descriptor the subclass opened itself (creating the file)."""
        descriptor_pool.adopt(self._slot, descriptor)

    def _drop_descriptor(self) -> None:
        """Give the descriptor back now (the file will not be used for a while); the next use
        opens it again."""
        descriptor_pool.drop(self._slot)

    def _let_go(self) -> None:
        descriptor_pool.let_go(self._slot)

    def is_closed(self) -> bool:
        """Whether the file was closed (`_let_go`): no use opens it again."""
        return self._slot.let_go
