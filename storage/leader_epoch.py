"""Leader epochs of a partition's log (Kafka's LeaderEpochFileCache): for each leader epoch,
the first offset written in it.

File: <partition dir>/leader-epoch-checkpoint, text: a version line "0", a line with the entry
count, then one "<epoch> <start offset>" line per entry, oldest first. Written whole to
"<name>.tmp", fsynced and renamed over the old file (storage.checkpoint's discipline), so a crash
leaves the old or the new list, never a mix.

Invariants: epochs and start offsets both strictly increase along the list; every entry's start
offset is below the log end offset (truncating the log truncates the list) and the first entry's
is at least the log start offset once truncate_from_start moved it.

Followers use the list to find where their log diverges from the leader's (docs/cluster.md,
"Replicas"): the leader answers OffsetForLeaderEpoch with `end_offset_for`.

Thread-safety: the event loop owns the cache; `write` is blocking I/O that its owner runs off the
loop with a snapshot of the entries (`snapshot`), or directly while the log loads in a worker.
"""

import bisect
from collections.abc import Iterable
from typing import Final, NamedTuple

from storage.checkpoint import parse_checkpoint, read_checkpoint, write_checkpoint

LEADER_EPOCH_CHECKPOINT: Final = "leader-epoch-checkpoint"
UNDEFINED_EPOCH: Final = -1
UNDEFINED_EPOCH_OFFSET: Final = -1


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class LeaderEpochCache:
    def __init__(self, path: str, entries: Iterable[EpochEntry] = ()) -> None:
        self.path = path
        self._entries: list[EpochEntry] = list(entries)

    # ---------------------------------------------------------------------------- the file

    @classmethod
    def read(cls, path: str) -> "LeaderEpochCache | None":
        """The checkpointed list; None when the file does not exist. Blocking."""
        entries = read_checkpoint(path, _parse_entry)
        return None if entries is None else cls(path, entries)

    def snapshot(self) -> list[EpochEntry]:
        return list(self._entries)

    def write(self, entries: list[EpochEntry] | None = None) -> None:
        """Write `entries` (by default the current list) to the file. Blocking."""
        entries = self._entries if entries is None else entries
        write_checkpoint(self.path, [f"{e.epoch} {e.start_offset}" for e in entries])

    # ---------------------------------------------------------------------------- queries

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return tuple(self._entries)

    @property
    def latest_epoch(self) -> int:
        return self._entries[-1].epoch if self._entries else UNDEFINED_EPOCH

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetForLeaderEpoch, as Kafka answers: the largest epoch at
        or below `requested_epoch` and the offset where the next epoch starts (the log end for
        the latest epoch); (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET) when the requested epoch
        is undefined or above every known one. An epoch below every known one ends where the
        first known one starts, and is answered as itself."""
        if requested_epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self.latest_epoch:
            return requested_epoch, log_end_offset
        higher = bisect.bisect_right(self._entries, requested_epoch, key=_epoch)
        if higher == len(self._entries):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        end_offset = self._entries[higher].start_offset
        if higher == 0:
            return requested_epoch, end_offset
        return self._entries[higher - 1].epoch, end_offset

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch the record at `offset` was written in (UNDEFINED_EPOCH before the first)."""
        position = bisect.bisect_right(self._entries, offset, key=_start_offset)
        return self._entries[position - 1].epoch if position else UNDEFINED_EPOCH

    # ---------------------------------------------------------------------------- changes

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Note that `epoch` starts at `start_offset` (an appended batch's epoch and base
        offset); True when the list changed. Entries of a later or equal epoch, or starting at
        or after `start_offset`, conflict with the new one and go (Kafka's assign)."""
        if epoch < 0:
            return False
        latest = self._entries[-1] if self._entries else None
        if latest is not None and latest.epoch == epoch and latest.start_offset <= start_offset:
            return False
        while self._entries and (
            self._entries[-1].epoch >= epoch or self._entries[-1].start_offset >= start_offset
        ):
            self._entries.pop()
        self._entries.append(EpochEntry(epoch, start_offset))
        return True

    def truncate_from_end(self, end_offset: int) -> bool:
        """Drop the entries starting at or after `end_offset` (the log was truncated there)."""
        keep = bisect.bisect_left(self._entries, end_offset, key=_start_offset)
        if keep == len(self._entries):
            return False
        del self._entries[keep:]
        return True

    def truncate_from_start(self, start_offset: int) -> bool:
        """Drop the entries wholly below `start_offset` (the new log start offset); the entry
        holding it starts there."""
        holding = bisect.bisect_right(self._entries, start_offset, key=_start_offset) - 1
        if holding < 0:
            return False
        changed = holding > 0 or self._entries[holding].start_offset < start_offset
        entry = self._entries[holding]
        self._entries[: holding + 1] = [EpochEntry(entry.epoch, max(entry.start_offset, start_offset))]
        return changed

    def clear(self) -> bool:
        changed = bool(self._entries)
        self._entries.clear()
        return changed


def _epoch(entry: EpochEntry) -> int:
    return entry.epoch


def _start_offset(entry: EpochEntry) -> int:
    return entry.start_offset


def parse_epochs(data: bytes, source: str) -> list[EpochEntry]:
    """The entries of a leader-epoch checkpoint's contents (a remote segment's copy of it);
    raises CorruptCheckpointError."""
    return parse_checkpoint(data.decode("utf-8", "replace"), _parse_entry, source)


def _parse_entry(line: str) -> EpochEntry:
    epoch, start_offset = line.split(" ")
    return EpochEntry(int(epoch), int(start_offset))
