"""A segment's transaction index (Kafka's TransactionIndex): the aborted transactions whose abort
marker is in the segment, so read_committed fetches can tell consumers which records to drop.

File: <base>.txnindex next to the segment's .log, created at the first aborted transaction.
Entries of 34 bytes, back to back, in the order of their abort markers (all big-endian):

    version int16 (0) | producer id int64 | first offset int64 | last offset int64 |
    last stable offset int64

first offset is the transaction's first record, last offset its abort marker, last stable offset
the partition's LSO once the transaction was complete. A torn tail (a size not a multiple of 34)
is cut when the file is opened; entries whose last offset is at or past a truncation point go
with `truncate_to`. The index is rebuilt from the log whenever the segment is recovered.

Thread-safety: owned by the event loop, like its segment; `flush` may run in a worker thread.
"""

import os
import struct
from typing import NamedTuple

TXN_INDEX_SUFFIX = ".txnindex"
_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TransactionIndex:
    def __init__(self, path: str) -> None:
        self.path = path
        self.entries: list[AbortedTxn] = _read(path)
        self._file = None

    def append(self, entry: AbortedTxn) -> None:
        if self.entries and entry.last_offset < self.entries[-1].last_offset:
            raise ValueError(f"{self.path}: aborted transaction ending at {entry.last_offset} is out of order")
        if self._file is None:
            self._file = open(self.path, "ab")
        self._file.write(_ENTRY.pack(_VERSION, *entry))
        self._file.flush()  # to the page cache: readers of the file (offline jobs) see it
        self.entries.append(entry)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries of transactions aborted at or after `offset`."""
        kept = [entry for entry in self.entries if entry.last_offset < offset]
        if len(kept) == len(self.entries):
            return
        self.close()
        with open(self.path, "r+b") as file:
            file.truncate(len(kept) * ENTRY_SIZE)
        self.entries = kept

    def reset(self) -> None:
        """Empty the index (before it is rebuilt from its segment)."""
        self.truncate_to(-1)

    def flush(self) -> None:
        if self._file is not None:
            os.fsync(self._file.fileno())

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def update_parent_dir(self, directory: str) -> None:
        """The directory holding the file was renamed: follow it, touching nothing on disk."""
        self.path = os.path.join(directory, os.path.basename(self.path))

    def rename(self, path: str) -> None:
        if os.path.exists(self.path):
            os.rename(self.path, path)
        self.path = path

    def delete(self) -> None:
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def collect_aborted(
    entries: list[AbortedTxn], fetch_offset: int, upper_bound_offset: int
) -> tuple[list[AbortedTxn], bool]:
    """The aborted transactions among an index's entries (a local or a remote segment's)
    overlapping [fetch_offset, upper_bound_offset), and whether the search is complete: an
    entry whose last stable offset reaches the bound means later segments hold none that
    started before it."""
    found = []
    for entry in entries:
        if entry.last_offset >= fetch_offset and entry.first_offset < upper_bound_offset:
            found.append(entry)
        if entry.last_stable_offset >= upper_bound_offset:
            return found, True
    return found, False


def parse_entries(data: bytes) -> list[AbortedTxn]:
    """The whole entries of an index file's bytes."""
    return [AbortedTxn(*_ENTRY.unpack_from(data, pos)[1:]) for pos in range(0, len(data) - ENTRY_SIZE + 1, ENTRY_SIZE)]


def read_entries(path: str) -> list[AbortedTxn]:
    """The whole entries of an index file, read-only (none when it does not exist)."""
    try:
        with open(path, "rb") as file:
            data = file.read()
    except FileNotFoundError:
        return []
    return parse_entries(data)


def _read(path: str) -> list[AbortedTxn]:
    """The entries, a torn tail cut from the file."""
    entries = read_entries(path)
    if os.path.exists(path) and os.path.getsize(path) != len(entries) * ENTRY_SIZE:
        with open(path, "r+b") as file:
            file.truncate(len(entries) * ENTRY_SIZE)
    return entries
