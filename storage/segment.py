"""One segment of a partition log (Kafka's LogSegment).

Files, in the partition directory, named by the segment's base offset as 20 digits:
- <base>.log        record batches back to back (storage.records_file)
- <base>.index      sparse offset index: (last offset of a batch, position of that batch)
- <base>.timeindex  sparse time index: (largest timestamp so far, last offset of its batch)
- <base>.txnindex   the aborted transactions whose abort marker is in the segment, once there
                    is one (storage.txn_index)

An index entry is added before a batch once more than index.interval.bytes were appended since
the last entry, so a lookup lands at most about that many bytes before its target and the
remaining distance is covered by reading batch headers.

While the log cleaner writes a segment, and until it is swapped in, its files carry a suffix
after those names (<base>.log.cleaned, then <base>.log.swap: see storage.cleaner); a segment
being deleted carries .deleted.

Invariants: batches have increasing offsets, all at or above the base offset and below the
next segment's base; every offset index entry points at the start of a batch holding that
offset; the largest timestamp in the segment is the time index's last entry once the segment
is closed or rolled.

Thread-safety: owned by the event loop; `flush` may run in a worker thread.
"""

import os
import time
from bisect import bisect_left
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Final

from protocol.errors import CorruptRecordError
from protocol.record_batch import MAGIC_V2, NO_TIMESTAMP, crc_is_valid
from protocol.records import iter_records
from storage.index import CorruptIndexError, IndexFullError, OffsetIndex, TimeIndex
from storage.log_config import LogConfig
from storage.records_file import BatchLocation, DeferredWrites, FileRegion, RecordsFile
from storage.txn_index import TXN_INDEX_SUFFIX, TransactionIndex

LOG_SUFFIX: Final = ".log"
INDEX_SUFFIX: Final = ".index"
TIME_INDEX_SUFFIX: Final = ".timeindex"
DELETED_SUFFIX: Final = ".deleted"
CLEANED_SUFFIX: Final = ".cleaned"
SWAP_SUFFIX: Final = ".swap"
_INT32_MAX: Final = 2**31 - 1
# How many of the last appended batches a segment remembers (last offset, position, size) of: a
# consumer tailing the log asks for one of them, which is then found without reading the batch
# headers between the sparse index's entry and it (a dozen per fetch for small batches; issue 19),
# and read without reading its own header.
_RECENT_BATCHES: Final = 32
_last_offset_of: Final = itemgetter(0)


def segment_path(directory: str, base_offset: int, suffix: str) -> str:
    return os.path.join(directory, f"{base_offset:020d}{suffix}")


@dataclass(slots=True, init=False)  # its own __init__, which compiled code calls directly
class AppendedBatch:
    """What a segment needs to know of each batch appended to it."""

    last_offset: int
    max_timestamp: int
    size: int

    def __init__(self, last_offset: int, max_timestamp: int, size: int) -> None:
        self.last_offset = last_offset
        self.max_timestamp = max_timestamp
        self.size = size


class LogSegment:
    def __init__(
        self,
        directory: str,
        base_offset: int,
        config: LogConfig,
        records: RecordsFile,
        offset_index: OffsetIndex,
        time_index: TimeIndex,
        txn_index: TransactionIndex,
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.records = records
        self.offset_index = offset_index
        self.time_index = time_index
        self.txn_index = txn_index
        self._index_interval_bytes = config.index_interval_bytes
        self._bytes_since_last_index_entry = 0
        # (last offset, position, size) of the batches appended last, oldest first; consecutive
        self._recent: deque[tuple[int, int, int]] = deque(maxlen=_RECENT_BATCHES)
        self.max_timestamp, self._offset_of_max_timestamp = time_index.last_entry
        self._first_batch_timestamp: int | None = None
        self.created_ms = int(time.time() * 1000)

    @classmethod
    def open(
        cls,
        directory: str,
        base_offset: int,
        config: LogConfig,
        active: bool,
        file_suffix: str = "",
    ) -> "LogSegment":
        """Open the segment's files (their names followed by `file_suffix`), creating any that is
        missing.

        Only the active segment (or one the cleaner writes) maps its indexes writable and
        extended (sparse) to segment.index.bytes, and reserves blocks ahead of its appends
        (storage.records_file); older segments map them as they are on disk.
        """
        records = RecordsFile.open(segment_path(directory, base_offset, LOG_SUFFIX + file_suffix))
        records.reserve_ahead = active
        size = config.segment_index_bytes
        offset_index = OffsetIndex(
            segment_path(directory, base_offset, INDEX_SUFFIX + file_suffix),
            base_offset,
            size,
            writable=active,
        )
        time_index = TimeIndex(
            segment_path(directory, base_offset, TIME_INDEX_SUFFIX + file_suffix),
            base_offset,
            size,
            writable=active,
        )
        txn_index = TransactionIndex(segment_path(directory, base_offset, TXN_INDEX_SUFFIX + file_suffix))
        return cls(directory, base_offset, config, records, offset_index, time_index, txn_index)

    @property
    def size(self) -> int:
        return self.records.size

    @property
    def largest_timestamp(self) -> int:
        """Largest record timestamp, or the file's modification time when records carry none."""
        if self.max_timestamp != NO_TIMESTAMP:
            return self.max_timestamp
        return int(os.stat(self.records.path).st_mtime * 1000)

    def is_full(self) -> bool:
        return self.offset_index.is_full() or self.time_index.is_full()

    def can_hold_offset(self, offset: int) -> bool:
        return offset - self.base_offset <= _INT32_MAX

    def append(
        self, data: bytes | memoryview, batches: Sequence[AppendedBatch], writes: DeferredWrites | None = None
    ) -> None:
        """Append `data`, the batches `batches` describe (written now, or at `writes.finish()`
        while `writes` defers), and index them."""
        position = self.records.append(data, writes)
        if position == 0:  # as Kafka's LogSegment.append: no read of it for the roll checks
            self._first_batch_timestamp = batches[0].max_timestamp
        for batch in batches:
            self._index_batch(position, batch)
            position += batch.size

    def _index_batch(self, position: int, batch: AppendedBatch) -> None:
        self._recent.append((batch.last_offset, position, batch.size))
        if batch.max_timestamp > self.max_timestamp:
            self.max_timestamp = batch.max_timestamp
            self._offset_of_max_timestamp = batch.last_offset
        # A full index can only be met by a segment the cleaner merges from several (the active
        # segment rolls first) or one rebuilt under a smaller segment.index.bytes; an entry left
        # out only makes lookups scan a little further.
        if self._bytes_since_last_index_entry > self._index_interval_bytes and not self.is_full():
            self.offset_index.append(batch.last_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self._offset_of_max_timestamp)
            self._bytes_since_last_index_entry = 0
        self._bytes_since_last_index_entry += batch.size

    def translate_offset(self, offset: int, starting_position: int = 0) -> BatchLocation | None:
        """The first batch holding `offset` or a later one, if the segment has any."""
        found = self._recent_index(offset)
        if found < 0:
            _, position = self.offset_index.lookup(offset)
        elif found == len(self._recent):
            return None
        else:
            position = self._recent[found][1]
        for location in self.records.batches(max(position, starting_position)):
            if location.header.last_offset >= offset:
                return location
        return None

    def _recent_index(self, offset: int) -> int:
        """Where in the recent batches the one holding `offset` (or the next one) is: their
        count when `offset` is past the last; -1 when it comes before them."""
        recent = self._recent
        if not recent or offset <= recent[0][0]:
            return -1
        # A tailing reader asks for the newest batch or the one after it: answered without
        # bisect, whose key= is a generic keyword call in compiled code (about 1,800
        # instructions).
        last = len(recent) - 1
        if offset > recent[last][0]:
            return last + 1
        if offset > recent[last - 1][0]:
            return last
        # The recent batches follow each other: the first ending at or after `offset` holds it,
        # or is the next batch.
        return bisect_left(recent, offset, key=_last_offset_of)

    def read(
        self, start_offset: int, max_size: int, max_position: int, min_one_batch: bool
    ) -> FileRegion | None:
        """Whole batches from the one holding `start_offset`, within `max_size` bytes and
        before `max_position`.

        With `min_one_batch`, the first batch is returned even when larger than `max_size`
        (KIP-74), so a consumer can always make progress. Kafka would fill `max_size` and end
        inside a batch, which clients drop and fetch again; ending at the last whole batch sends
        up to a third less for the same records (benchmarks/RESULTS.md).
        """
        found = self._recent_index(start_offset)
        if found < 0:
            location = self.translate_offset(start_offset)
            if location is None:
                return None
            position, size = location.position, location.size
        elif found == len(self._recent):
            return None
        else:
            _, position, size = self._recent[found]
        if position >= max_position:
            return None
        end = min(position + max_size, max_position)
        if end < max_position:
            end = self._last_batch_end(position, end)
        if min_one_batch:
            end = max(end, position + size)
        if end <= position:
            return None
        return self.records.region(position, end - position)

    def _last_batch_end(self, start: int, limit: int) -> int:
        """End of the last whole batch between `start` (a batch start) and `limit`; `start`
        when not even the first batch fits."""
        _, position = self.offset_index.lookup_position(limit)
        end = max(position, start)
        for location in self.records.batches(end, limit):
            end = location.position + location.size
        return end

    def find_offset_by_timestamp(self, timestamp: int, start_offset: int) -> tuple[int, int] | None:
        """(timestamp, offset) of the first record at or after `start_offset` stamped at or
        after `timestamp`."""
        _, indexed_offset = self.time_index.lookup(timestamp)
        _, position = self.offset_index.lookup(max(indexed_offset, start_offset))
        for location in self.records.batches(position):
            if location.header.max_timestamp < timestamp:
                continue
            batch = self.records.read(location.position, location.size)
            for record in iter_records(batch):
                if record.timestamp >= timestamp and record.offset >= start_offset:
                    return record.timestamp, record.offset
        return None

    def find_max_timestamp(self) -> tuple[int, int] | None:
        """(timestamp, offset) of the first record carrying the segment's largest timestamp."""
        if self.max_timestamp == NO_TIMESTAMP:
            return None
        return self.find_offset_by_timestamp(self.max_timestamp, self.base_offset)

    def read_next_offset(self) -> int:
        """The offset after the segment's last batch (the base offset when empty)."""
        _, position = self.offset_index.lookup(2**63 - 1)
        next_offset = self.base_offset
        for location in self.records.batches(position):
            next_offset = location.header.next_offset
        return next_offset

    def first_batch_timestamp(self) -> int | None:
        if self._first_batch_timestamp is None and self.size:
            first = next(self.records.batches(0, self.size), None)
            self._first_batch_timestamp = first.header.max_timestamp if first else None
        return self._first_batch_timestamp

    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        """How long this segment has been open, measured as Kafka does: by the timestamps of
        the incoming and the first batch when records carry them, else by the wall clock."""
        first = self.first_batch_timestamp()
        if first is not None and first >= 0 and message_timestamp >= 0:
            return message_timestamp - first
        return now_ms - self.created_ms

    def recover(self) -> int:
        """Rebuild the indexes from the .log, cutting it at the first invalid batch.

        Returns how many bytes were cut. A batch is valid when it is whole, of magic v2, passes
        its CRC, and its offsets follow those before it within this segment's range.
        """
        self.offset_index.truncate()
        self.time_index.truncate()
        self._recent.clear()
        self.max_timestamp, self._offset_of_max_timestamp = NO_TIMESTAMP, self.base_offset
        self._bytes_since_last_index_entry = 0
        valid_bytes = 0
        expected_offset = self.base_offset
        try:
            for location in self.records.batches():
                if not self._batch_is_valid(location, expected_offset):
                    break
                header = location.header
                batch = AppendedBatch(header.last_offset, header.max_timestamp, location.size)
                self._index_batch(location.position, batch)
                valid_bytes = location.position + location.size
                expected_offset = header.next_offset
        except CorruptRecordError:
            pass
        truncated = self.records.size - valid_bytes
        if truncated:
            self.records.truncate_to(valid_bytes)
        return truncated

    def truncate_to(self, offset: int, config: LogConfig) -> int:
        """Cut the segment at the first batch ending at or after `offset`, and make it the
        active segment (writable indexes): a truncated log appends to it next. Bytes cut."""
        self.make_active(config)
        location = self.translate_offset(offset)
        if location is None:
            return 0
        cut_offset = location.header.base_offset
        self.offset_index.truncate_to(cut_offset)
        self.time_index.truncate_to(cut_offset)
        truncated = self.records.size - location.position
        self.records.truncate_to(location.position)
        self._recent.clear()
        self._bytes_since_last_index_entry = 0
        self._first_batch_timestamp = None
        if self.size == 0:
            self.created_ms = int(time.time() * 1000)
        self._reload_max_timestamp()
        return truncated

    def _reload_max_timestamp(self) -> None:
        """The largest timestamp after a truncation: the time index's last entry, then the
        batches after it."""
        self.max_timestamp, self._offset_of_max_timestamp = self.time_index.last_entry
        _, position = self.offset_index.lookup(self._offset_of_max_timestamp)
        for location in self.records.batches(position):
            if location.header.max_timestamp > self.max_timestamp:
                self.max_timestamp = location.header.max_timestamp
                self._offset_of_max_timestamp = location.header.last_offset

    def _batch_is_valid(self, location: BatchLocation, expected_offset: int) -> bool:
        header = location.header
        if header.magic != MAGIC_V2 or header.base_offset < expected_offset:
            return False
        if not self.can_hold_offset(header.last_offset):
            return False
        return crc_is_valid(self.records.read(location.position, location.size))

    def sanity_check_indexes(self, every_entry: bool = True) -> bool:
        """Whether both indexes keep their format's invariants (see `_MappedIndex.sanity_check`)."""
        try:
            self.offset_index.sanity_check(every_entry)
            self.time_index.sanity_check(every_entry)
        except CorruptIndexError:
            return False
        return True

    def on_become_inactive(self) -> None:
        """The segment stops taking appends: record its largest timestamp, trim its indexes,
        give back the blocks its .log reserved ahead."""
        self._record_max_timestamp()
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        self.records.stop_reserving()

    def make_active(self, config: LogConfig) -> None:
        self.offset_index.resize(config.segment_index_bytes)
        self.time_index.resize(config.segment_index_bytes)
        self.records.reserve_ahead = True

    def _record_max_timestamp(self) -> None:
        if self.max_timestamp == NO_TIMESTAMP:
            return
        try:
            self.time_index.maybe_append(self.max_timestamp, self._offset_of_max_timestamp)
        except IndexFullError:
            pass  # the index filled up, which is why the segment rolled; lookups still work

    def write_pending(self) -> None:
        """Writes what waits in memory, as `flush` needs: appends (DeferredWrites), then index
        entries (storage.index)."""
        self.records.write_deferred()
        self.offset_index.write_pending()
        self.time_index.write_pending()

    def flush(self) -> None:
        self.records.flush()
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        self._record_max_timestamp()
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()
        self.records.stop_reserving()
        self.records.close()

    def rename_to_deleted(self) -> None:
        """First step of deletion, atomic per file: a restart finishes deleting .deleted files."""
        self.rename_with_suffix(DELETED_SUFFIX)

    def rename_with_suffix(self, suffix: str) -> None:
        """Rename the segment's files to their plain names followed by `suffix` ("" for none)."""
        for file, plain_suffix in (
            (self.records, LOG_SUFFIX),
            (self.offset_index, INDEX_SUFFIX),
            (self.time_index, TIME_INDEX_SUFFIX),
        ):
            file.rename(segment_path(self.directory, self.base_offset, plain_suffix + suffix))
        self.txn_index.rename(segment_path(self.directory, self.base_offset, TXN_INDEX_SUFFIX + suffix))

    def update_parent_dir(self, directory: str) -> None:
        """The partition directory was renamed (the partition is deleted): the segment's paths
        follow it, so that nothing done later by path can reach a new directory of the old
        name."""
        self.directory = directory
        for file in (self.records, self.offset_index, self.time_index, self.txn_index):
            file.update_parent_dir(directory)

    def release(self) -> None:
        """Unmap the indexes and close the transaction index and .log, touching no file: for a
        segment whose whole directory is removed, or left to the next start to remove. The .log
        descriptor closes once no queued fetch holds a region of it (FileRegion)."""
        self.offset_index.release()
        self.time_index.release()
        self.txn_index.close()
        self.records.close()

    def delete(self) -> None:
        """Unmap the indexes and unlink every file of the segment (gone already is fine). The
        .log descriptor stays open until no queued fetch holds a region of it (FileRegion)."""
        self.offset_index.delete()
        self.time_index.delete()
        self.txn_index.delete()
        self.records.close()  # first: it writes appends still waiting while it can open the path
        try:
            os.unlink(self.records.path)
        except FileNotFoundError:
            pass
