"""Reading records from the remote store (Kafka's RemoteLogReader and RemoteIndexCache).

A fetch below a tiered log's local start reads one remote segment: its offset index gives the
position of the greatest indexed offset at or below the fetch offset, and the .log is read from
there by ranges, whole batches only, up to the fetch's byte limit (at least one batch for the
first partition of a response, KIP-74). Both come through a bounded cache in memory
(remote.log.index.file.cache.total.size.bytes): index files whole, and the .log in aligned
chunks of CHUNK_BYTES, least recently used first out. read_committed fetches get the aborted
transactions of the fetched range from the segments' remote transaction indexes.

Every method blocks (store reads): call them on the reader thread pool. The cache is shared by
those threads (a lock guards it); nothing here touches a Log.
"""

import struct
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence

from protocol.record_batch import BATCH_HEADER_SIZE, BatchHeader
from protocol.records import iter_records
from storage.remote.metadata import RemoteSegmentMetadata
from storage.remote.storage_manager import FsspecRemoteStorageManager, IndexType
from storage.txn_index import AbortedTxn, collect_aborted, parse_entries

CHUNK_BYTES = 1024 * 1024
_INDEX_ENTRY = struct.Struct(">ii")
_TIME_INDEX_ENTRY = struct.Struct(">qi")


class ByteCache:
    """Values of bytes by key, at most `capacity` bytes of them; the least recently used go
    first. Thread-safe."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.size = 0
        self._entries: OrderedDict[object, bytes] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: object, load: Callable[[], bytes]) -> bytes:
        with self._lock:
            value = self._entries.get(key)
            if value is not None:
                self._entries.move_to_end(key)
                return value
        value = load()  # outside the lock: two threads may load one key, which is no harm
        with self._lock:
            if key not in self._entries and len(value) <= self.capacity:
                self._entries[key] = value
                self.size += len(value)
                while self.size > self.capacity:
                    _, evicted = self._entries.popitem(last=False)
                    self.size -= len(evicted)
        return value


def indexed_time_offset(time_index: bytes, base_offset: int, timestamp: int) -> int:
    """The offset of the time index's greatest entry stamped at or before `timestamp`; the base
    offset when there is none."""
    low, high = 0, len(time_index) // _TIME_INDEX_ENTRY.size - 1
    found = base_offset
    while low <= high:
        middle = (low + high) // 2
        stamped, relative = _TIME_INDEX_ENTRY.unpack_from(time_index, middle * _TIME_INDEX_ENTRY.size)
        if stamped <= timestamp:
            found = base_offset + relative
            low = middle + 1
        else:
            high = middle - 1
    return found


def indexed_position(index: bytes, base_offset: int, offset: int) -> int:
    """The position the offset index gives for `offset`: that of its greatest entry at or below
    it, 0 when there is none."""
    low, high = 0, len(index) // _INDEX_ENTRY.size - 1
    position = 0
    while low <= high:
        middle = (low + high) // 2
        relative, found = _INDEX_ENTRY.unpack_from(index, middle * _INDEX_ENTRY.size)
        if base_offset + relative <= offset:
            position = found
            low = middle + 1
        else:
            high = middle - 1
    return position


class RemoteLogReader:
    def __init__(self, store: FsspecRemoteStorageManager, cache_bytes: int) -> None:
        self.store = store
        self.cache = ByteCache(cache_bytes)

    def index(self, segment: RemoteSegmentMetadata, index: IndexType) -> bytes:
        return self.cache.get(
            (segment.segment_id, index), lambda: self.store.fetch_index(segment, index)
        )

    def _range(self, segment: RemoteSegmentMetadata, start: int, end: int) -> bytes:
        """Bytes [start, end) of the segment's .log, through the chunk cache."""
        end = min(end, segment.size)
        parts = []
        for chunk_number in range(start // CHUNK_BYTES, (end - 1) // CHUNK_BYTES + 1 if end > start else 0):
            chunk_start = chunk_number * CHUNK_BYTES
            chunk = self.cache.get(
                (segment.segment_id, chunk_number),
                lambda chunk_start=chunk_start: self.store.fetch_log_segment(
                    segment, chunk_start, min(chunk_start + CHUNK_BYTES, segment.size)
                ),
            )
            parts.append(chunk[max(start - chunk_start, 0) : end - chunk_start])
        return b"".join(parts)

    def _batches(self, segment: RemoteSegmentMetadata, position: int) -> Iterator[tuple[BatchHeader, memoryview]]:
        """Whole batches of the segment's .log from `position` (a batch start), read by chunks."""
        while position + BATCH_HEADER_SIZE <= segment.size:
            data = memoryview(self._range(segment, position, position + CHUNK_BYTES))
            used = 0
            while used + BATCH_HEADER_SIZE <= len(data):
                header = BatchHeader.from_buffer(data, used)
                if used + header.size > len(data):
                    break
                yield header, data[used : used + header.size]
                used += header.size
            if used == 0:  # a batch larger than a chunk
                header = BatchHeader.from_buffer(data, 0)
                yield header, memoryview(self._range(segment, position, position + header.size))
                used = header.size
            position += used

    def batches_from(self, segment: RemoteSegmentMetadata, offset: int) -> Iterator[tuple[BatchHeader, memoryview]]:
        """The segment's whole batches from the one the offset index points to for `offset` on
        (earlier batches may come first: skip those ending before it)."""
        start = indexed_position(self.index(segment, IndexType.OFFSET), segment.start_offset, offset)
        return self._batches(segment, start)

    def read(self, segment: RemoteSegmentMetadata, offset: int, max_bytes: int, min_one_batch: bool) -> bytes:
        """Whole batches of the segment from the one holding `offset`, within `max_bytes`
        (the first one whatever its size with `min_one_batch`); b"" when none fits."""
        found: list[memoryview] = []
        total = 0
        for header, batch in self.batches_from(segment, offset):
            if header.last_offset < offset:
                continue
            if total + header.size > max_bytes and (found or not min_one_batch):
                break
            found.append(batch)
            total += header.size
        return b"".join(found)

    def offset_for_timestamp(
        self, segment: RemoteSegmentMetadata, timestamp: int, start_offset: int
    ) -> tuple[int, int] | None:
        """(timestamp, offset) of the segment's first record at or after `start_offset` stamped
        at or after `timestamp` (Kafka's lookupTimestamp): from the time index's greatest entry
        not after it, through the offset index, then batch by batch."""
        indexed_offset = indexed_time_offset(self.index(segment, IndexType.TIMESTAMP), segment.start_offset, timestamp)
        position = indexed_position(
            self.index(segment, IndexType.OFFSET), segment.start_offset, max(indexed_offset, start_offset)
        )
        for header, batch in self._batches(segment, position):
            if header.max_timestamp < timestamp or header.last_offset < start_offset:
                continue
            for record in iter_records(batch):
                if record.timestamp >= timestamp and record.offset >= start_offset:
                    return record.timestamp, record.offset
        return None

    def aborted(
        self, segments: Sequence[RemoteSegmentMetadata], fetch_offset: int, upper_bound_offset: int
    ) -> tuple[list[AbortedTxn], bool]:
        """The aborted transactions with records in [fetch_offset, upper_bound_offset) that the
        remote transaction indexes of `segments` (in offset order, from the one read) list, and
        whether the search is complete (as storage.log's collect_aborted)."""
        found: list[AbortedTxn] = []
        for segment in segments:
            entries = parse_entries(self.index(segment, IndexType.TRANSACTION))
            more, complete = collect_aborted(entries, fetch_offset, upper_bound_offset)
            found += more
            if complete:
                return found, True
        return found, False
