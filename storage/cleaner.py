"""Log compaction (Kafka's LogCleaner, LogCleanerManager and SkimpyOffsetMap).

A log whose cleanup.policy includes compact keeps at least the latest record of every key
("compact,delete" also keeps applying retention). Cleaning one log:

1. The cleanable range is [log start, first uncleanable offset). The first uncleanable offset is
   the earliest of: the active segment's base offset (the active segment is never cleaned), the
   high watermark, the last stable offset (below it every transaction is decided), and the base
   offset of the first dirty segment holding a batch newer than
   min.compaction.lag.ms (by its max timestamp). The cleaner checkpoint splits the range into the
   part cleaned before, [log start, first dirty offset), and the dirty part after it.
2. A map from key to latest offset is built over the dirty part (`OffsetMap`). If it fills up,
   the cleaning ends where it stopped, and the next one goes on from there.
3. The segments of the range are grouped, consecutive ones together while a group stays within
   segment.bytes, its indexes within segment.index.bytes and its offsets within a relative int32
   (small segments merge), and each group is rewritten as one segment. Offsets stay as they are
   (compaction leaves gaps); a batch keeps its offset range, timestamps, producer id, epoch and
   sequence, flags and codec, rebuilt with the records it keeps, or copied when it keeps all.
4. The new segments are swapped in on the event loop (`Log.replace_segments`) and the checkpoint
   moves to the end of the range, unless the segments they replace changed meanwhile (retention,
   DeleteRecords, deletion, truncation): then the result is dropped and the log cleaned later.

Which records of the range stay:
- those at or after where the map stopped (not looked at this time);
- not those without a key (compacted topics refuse them, but older records may lack one);
- not those whose key the map holds at a later offset;
- a tombstone (null value) until its delete horizon has passed (below);
- not those of an aborted transaction (the aborted transactions of the range, from the segments'
  transaction indexes, are collected when the cleaning is planned); they never enter the map;
- records of committed transactions are treated as any other; those of a transaction still open
  (in the part cleaned before, at or after the last stable offset) all stay, and enter no map.
A data batch left without records is dropped, unless it is the last data batch the cleaning saw
of its (idempotent or transactional) producer: then its header stays, with no records, so that
the producer's epoch and last sequence survive in the log, as Kafka keeps them.

Transaction markers (control batches), as Kafka's cleaner treats them: a marker stays while its
transaction (the producer's batches since its previous marker) keeps a batch in the log, even an
empty one. Once a cleaning has removed them all (a commit's records superseded, an abort's
records removed), the marker is a tombstone: it gets a delete horizon (below) and a cleaning
after it drops the marker. Kafka frees a marker one cleaning later: it counts the batches a
cleaning reads, logway those it keeps. A marker also stays while it is its producer's last batch
(its epoch may be newer than the data's), and, in a cleaning reaching segments not fsynced yet
(above the recovery point), markers all stay: a restart after a crash replays the log from the
newest snapshot at or below the recovery point, and a replay from before a marker that is gone
would leave its transaction open for good. A cleaned segment takes the transaction index entries
of the segments it replaces, but for those of aborted transactions that have no batch left.

Delete horizon (KIP-534): the first cleaning that keeps a tombstone (or a marker left alone)
marks its batch with DELETE_HORIZON_FLAG and baseTimestamp = now + delete.retention.ms; a
cleaning after that time drops it. So a tombstone is there for at least delete.retention.ms
after it was first cleaned, for consumers that read from the start to see the delete. The
horizon travels with the batch through merges and restarts. When no log is dirty enough, a log
whose tombstones' horizon passed is cleaned anyway, so they do not wait for new writes (known
only for logs cleaned since start).

Trigger: a log is cleanable when its dirty ratio (bytes of the dirty segments over those of the
range) is at least min.cleanable.dirty.ratio, or a dirty segment's first batch is older than
max.compaction.lag.ms. The dirtiest goes first; with none, each cleaner thread waits
log.cleaner.backoff.ms.

Files, and crash safety: a group is written as <base>.log.cleaned (.index.cleaned,
.timeindex.cleaned), fsynced with its directory; the swap renames them to .swap, the replaced
segments to .deleted, then the .swap files to their plain names. `Log.load` deletes *.cleaned
and *.deleted files and completes a swap it finds (*.swap), so a crash at any point leaves either
the old segments or the new ones. The cleaner checkpoint (cleaner-offset-checkpoint in each log
dir, storage.checkpoint's format) holds each compacted partition's first dirty offset; a stale
or lost one only makes the next cleaning look at more of the log.

Memory: the key map of each cleaner thread holds at most log.cleaner.dedupe.buffer.size /
log.cleaner.threads / `OffsetMap.BYTES_PER_ENTRY` keys; log.cleaner.io.buffer.size / threads is
split between the read and write buffers.

Thread-safety: the event loop owns the `LogCleaner` and the logs. A cleaning runs on one of the
cleaner's threads and only reads the files of the segments it was given (through their
descriptors: never their indexes, which the loop may unmap) and writes its own new files; the swap
and all bookkeeping happen on the loop.
"""

import asyncio
import concurrent.futures
import hashlib
import logging
import os
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, NamedTuple

from protocol.record_batch import BatchHeader, iter_batches, size_of
from protocol.records import iter_keys, iter_records, rebuild_batch
from storage.log import Log
from storage.log_config import LogConfig
from storage.segment import (
    CLEANED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    AppendedBatch,
    LogSegment,
    segment_path,
)
from storage.topic_partition import TopicPartition
from storage.txn_index import TXN_INDEX_SUFFIX, AbortedTxn

if TYPE_CHECKING:
    from storage.log_manager import LogManager

log = logging.getLogger(__name__)

_INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class CleanerConfig:
    """The broker's log.cleaner.* settings (Kafka's CleanerConfig), with Kafka's defaults."""

    enable: bool = True
    threads: int = 1
    dedupe_buffer_size: int = 134_217_728
    io_buffer_size: int = 524_288
    backoff_ms: int = 15_000

    @property
    def offset_map_capacity(self) -> int:
        """Keys one cleaning may hold: its thread's share of the dedupe buffer (at least one)."""
        share = self.dedupe_buffer_size // max(self.threads, 1)
        return max(1, share // OffsetMap.BYTES_PER_ENTRY)

    @property
    def io_buffer_bytes(self) -> int:
        """Bytes of one read (or write) buffer: half of a thread's share of the I/O buffer."""
        return max(1, self.io_buffer_size // max(self.threads, 1) // 2)


class OffsetMap:
    """Key -> offset of its latest record, for at most `capacity` keys.

    Keys are held as their 16-byte MD5 digests, as Kafka's SkimpyOffsetMap holds them, so an entry
    costs the same whatever the key's size. Two keys sharing a digest (odds about 2^-64 for
    billions of keys) would count as one: Kafka takes the same risk.
    """

    # A dict entry of a 16-byte bytes key and an int, with the dict's spare slots: about 171 bytes
    # at the peak of a resize, measured on CPython 3.11.
    BYTES_PER_ENTRY = 176

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._offsets: dict[bytes, int] = {}

    def __len__(self) -> int:
        return len(self._offsets)

    def put(self, key: bytes, offset: int) -> bool:
        """Record `offset` as the latest of `key`; False, recording nothing, when `key` is new
        and the map is full."""
        digest = _digest(key)
        if digest not in self._offsets and len(self._offsets) >= self.capacity:
            return False
        self._offsets[digest] = offset
        return True

    def latest(self, key: bytes) -> int:
        """The latest offset recorded for `key`, -1 if none."""
        return self._offsets.get(_digest(key), -1)


def _digest(key: bytes) -> bytes:
    return hashlib.md5(key, usedforsecurity=False).digest()


class CleaningAborted(Exception):
    """The cleaning was called off (shutdown, or its partition deleted)."""


# ------------------------------------------------------------------- what a cleaning is given


class SegmentToClean(NamedTuple):
    """A segment as it was when the cleaning was planned."""

    segment: LogSegment
    size: int
    end_offset: int  # the next segment's base offset: this one's offsets are below it
    index_bytes: int
    time_index_bytes: int

    @property
    def base_offset(self) -> int:
        return self.segment.base_offset


@dataclass(frozen=True)
class LogToClean:
    """One log's cleanable range, planned on the event loop (Kafka's LogToClean).

    `segments` are the segments overlapping [log start, first uncleanable offset). The cleaning
    thread reads only these fields and the segments' records files; `log` is there for the swap.
    """

    log: Log
    directory: str
    config: LogConfig
    segments: tuple[SegmentToClean, ...]
    first_dirty_offset: int
    first_uncleanable_offset: int
    needs_compaction_now: bool
    now_ms: int
    truncations: int = 0  # the log's truncation count when planned: a change voids the result
    stable_offset: int = 2**63 - 1  # below it, every transaction is decided (the LSO)
    recovery_point: int = 2**63 - 1  # below it, the segments and producer snapshots are fsynced
    aborted: Mapping[int, tuple[tuple[int, int], ...]] = field(default_factory=dict)  # producer id -> (first, last)

    def is_aborted(self, header: BatchHeader) -> bool:
        """Whether a transactional batch belongs to an aborted transaction."""
        return any(first <= header.base_offset <= last for first, last in self.aborted.get(header.producer_id, ()))

    @property
    def topic_partition(self) -> TopicPartition:
        return self.log.topic_partition

    @property
    def dirty_bytes(self) -> int:
        return sum(s.size for s in self.segments if s.end_offset > self.first_dirty_offset)

    @property
    def cleanable_ratio(self) -> float:
        total = sum(s.size for s in self.segments)
        return self.dirty_bytes / total if total else 0.0

    @property
    def is_cleanable(self) -> bool:
        if self.dirty_bytes == 0:
            return False
        return self.needs_compaction_now or (
            self.cleanable_ratio >= self.config.min_cleanable_dirty_ratio
        )


def plan_cleaning(partition_log: Log, first_dirty_offset: int | None, now_ms: int) -> LogToClean:
    """The cleanable range of a log whose cleaner checkpoint is `first_dirty_offset`.

    A checkpoint outside [log start, log end] (none yet, a log deleted and created again, records
    deleted) starts from the log start, as Kafka does: looking at more is always safe.
    """
    config = partition_log.config
    start = partition_log.log_start_offset
    first_dirty = first_dirty_offset
    if first_dirty is None or not start <= first_dirty <= partition_log.log_end_offset:
        first_dirty = start
    active_base = partition_log.active_segment.base_offset
    stable = partition_log.high_watermark
    if partition_log.first_unstable_offset is not None:
        stable = min(stable, partition_log.first_unstable_offset)
    first_uncleanable = max(first_dirty, min(active_base, stable))
    segments = []
    ends = [s.base_offset for s in partition_log.segments[1:]]
    for segment, end_offset in zip(partition_log.segments, ends):
        if end_offset <= start:
            continue
        if segment.base_offset >= first_uncleanable:
            break
        is_dirty = end_offset > first_dirty
        if is_dirty and _too_young(segment, config, now_ms):
            first_uncleanable = max(first_dirty, segment.base_offset)
            break
        segments.append(_snapshot(segment, end_offset))
    return LogToClean(
        log=partition_log,
        directory=partition_log.directory,
        config=config,
        segments=tuple(segments),
        first_dirty_offset=first_dirty,
        first_uncleanable_offset=first_uncleanable,
        needs_compaction_now=any(
            _overdue(s.segment, config, now_ms) for s in segments if s.end_offset > first_dirty
        ),
        now_ms=now_ms,
        truncations=partition_log.truncations,
        stable_offset=stable,
        recovery_point=partition_log.recovery_point,
        aborted=_aborted_by_producer(partition_log.collect_aborted(start, first_uncleanable)),
    )


def _aborted_by_producer(aborted: Iterable[AbortedTxn]) -> dict[int, tuple[tuple[int, int], ...]]:
    by_producer: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for entry in aborted:
        by_producer[entry.producer_id].append((entry.first_offset, entry.last_offset))
    return {producer_id: tuple(ranges) for producer_id, ranges in by_producer.items()}


def _snapshot(segment: LogSegment, end_offset: int) -> SegmentToClean:
    return SegmentToClean(
        segment,
        segment.size,
        end_offset,
        segment.offset_index.size_bytes,
        segment.time_index.size_bytes,
    )


def _too_young(segment: LogSegment, config: LogConfig, now_ms: int) -> bool:
    """Whether the segment holds a batch newer than min.compaction.lag.ms."""
    lag = config.min_compaction_lag_ms
    return lag > 0 and segment.largest_timestamp > now_ms - lag


def _overdue(segment: LogSegment, config: LogConfig, now_ms: int) -> bool:
    """Whether the segment's first batch is older than max.compaction.lag.ms."""
    deadline = now_ms - config.max_compaction_lag_ms
    if deadline <= 0:  # the default lag, "never": no need to read the segment
        return False
    first = segment.first_batch_timestamp()
    return first is not None and 0 <= first < deadline


# ---------------------------------------------------------------- a cleaning, on its thread


@dataclass
class CleaningResult:
    """What a cleaning made: new segments, each to replace a run of the planned ones."""

    job: LogToClean
    swaps: list[tuple[tuple[SegmentToClean, ...], LogSegment]]
    end_offset: int  # the first dirty offset once swapped in
    next_delete_horizon_ms: int | None  # when a tombstone kept this time could go

    def discard(self) -> None:
        """Delete the new segments' files (blocking)."""
        for _, cleaned in self.swaps:
            _delete(cleaned)

    def release(self) -> None:
        """Let go of the new segments' open files, touching none."""
        for _, cleaned in self.swaps:
            cleaned.release()


class _Cleaning(NamedTuple):
    """A cleaning under way on a cleaner thread."""

    abort: threading.Event
    work: concurrent.futures.Future


class Cleaner:
    """Cleans one log at a time, on the calling thread: reads the planned segments' records files
    and writes new .cleaned segments, touching nothing else (see the module docstring)."""

    def __init__(self, config: CleanerConfig) -> None:
        self._map_capacity = config.offset_map_capacity
        self._buffer_bytes = config.io_buffer_bytes

    def clean(self, job: LogToClean, abort: threading.Event) -> CleaningResult:
        """Build the key map, rewrite the groups of segments, fsync them. On any failure (or
        `abort`, raising CleaningAborted) the files written so far are deleted."""
        offset_map = OffsetMap(self._map_capacity)
        producers = _LastBatches()
        self._scan_producers(job, producers, abort)  # first: the batches are noted in order
        end_offset = self._build_offset_map(job, offset_map, producers, abort)
        segments = [s for s in job.segments if s.base_offset < end_offset]
        groups = group_segments_by_size(
            segments, job.config.segment_bytes, job.config.segment_index_bytes
        )
        markers_may_go = bool(segments) and segments[-1].end_offset <= job.recovery_point
        retention = _Retention(job, offset_map, end_offset, producers, markers_may_go)
        result = CleaningResult(job, [], end_offset, None)
        try:
            for group in groups:
                cleaned = self._clean_group(job, group, retention, abort)
                result.swaps.append((tuple(group), cleaned))
            _fsync_directory(job.directory)
        except BaseException:
            result.discard()
            raise
        result.next_delete_horizon_ms = retention.next_delete_horizon_ms
        return result

    def _build_offset_map(
        self,
        job: LogToClean,
        offset_map: OffsetMap,
        producers: "_LastBatches",
        abort: threading.Event,
    ) -> int:
        """Map the keys of the dirty part; return where the cleaning ends: the first uncleanable
        offset, or the first record that did not fit a full map."""
        start, end = job.first_dirty_offset, job.first_uncleanable_offset
        for snapshot in job.segments:
            if snapshot.end_offset <= start:
                continue
            for header, batch in self._read_batches(snapshot, abort):
                if header.base_offset >= end:
                    return end
                producers.note(header)
                if header.last_offset < start or header.is_control:
                    continue
                if header.is_transactional and (job.is_aborted(header) or header.base_offset >= job.stable_offset):
                    continue
                for offset, key, _ in iter_keys(batch):
                    if offset >= end:
                        return end
                    if offset >= start and key is not None and not offset_map.put(key, offset):
                        return offset
        return end

    def _scan_producers(
        self, job: LogToClean, producers: "_LastBatches", abort: threading.Event
    ) -> None:
        """Note the producers' batches in the clean part, from their headers only."""
        for snapshot in job.segments:
            if snapshot.end_offset > job.first_dirty_offset:
                return
            for location in snapshot.segment.records.batches(0, snapshot.size):
                _check_abort(abort)
                producers.note(location.header)

    def _clean_group(
        self,
        job: LogToClean,
        group: Sequence[SegmentToClean],
        retention: "_Retention",
        abort: threading.Event,
    ) -> LogSegment:
        base_offset = group[0].base_offset
        _remove_cleaned_files(job.directory, base_offset)
        cleaned = LogSegment.open(
            job.directory, base_offset, job.config, active=True, file_suffix=CLEANED_SUFFIX
        )
        try:
            writer = _SegmentWriter(cleaned, self._buffer_bytes)
            for snapshot in group:
                for header, batch in self._read_batches(snapshot, abort):
                    kept = retention.clean_batch(header, batch)
                    if kept is not None:
                        writer.append(kept)
            writer.flush()
            for snapshot in group:
                # Inactive segments' transaction indexes change only when a log loads.
                for aborted in snapshot.segment.txn_index.entries:
                    if retention.keeps_aborted_entry(aborted):
                        cleaned.txn_index.append(aborted)
            cleaned.on_become_inactive()
            cleaned.flush()
        except BaseException:
            _delete(cleaned)
            raise
        return cleaned

    def _read_batches(
        self, snapshot: SegmentToClean, abort: threading.Event
    ) -> Iterator[tuple[BatchHeader, memoryview]]:
        """The whole batches of a planned segment, read a buffer at a time (a batch larger than
        the buffer on its own)."""
        records = snapshot.segment.records
        position = 0
        while position < snapshot.size:
            _check_abort(abort)
            chunk = records.read(position, min(self._buffer_bytes, snapshot.size - position))
            consumed = 0
            for offset_in_chunk, header in iter_batches(chunk):
                consumed = offset_in_chunk + header.size
                yield header, memoryview(chunk)[offset_in_chunk:consumed]
            if not consumed:
                whole = records.read(position, size_of(chunk))
                consumed = len(whole)
                yield BatchHeader.from_buffer(whole), memoryview(whole)
            position += consumed


class _LastBatches:
    """Each producer's last batch, and its last data batch (not a marker), among those a cleaning
    saw: what compaction keeps of a producer whatever else goes (see the module docstring)."""

    def __init__(self) -> None:
        self._last: dict[int, int] = {}  # producer id -> last offset of its batch
        self._last_data: dict[int, int] = {}

    def note(self, header: BatchHeader) -> None:
        if header.producer_id < 0:
            return
        self._last[header.producer_id] = header.last_offset
        if not header.is_control:
            self._last_data[header.producer_id] = header.last_offset

    def is_last(self, header: BatchHeader) -> bool:
        """Whether `header` heads its producer's last batch, or last data batch, of the log."""
        if header.producer_id < 0:
            return False
        last = self._last if header.is_control else self._last_data
        return last.get(header.producer_id) == header.last_offset


class _Retention:
    """Decides what a cleaning keeps of each batch, read in offset order (see the module
    docstring)."""

    def __init__(
        self,
        job: LogToClean,
        offset_map: OffsetMap,
        end_offset: int,
        producers: _LastBatches,
        markers_may_go: bool,
    ) -> None:
        self._job = job
        self._offset_map = offset_map
        self._end_offset = end_offset
        self._producers = producers
        self._markers_may_go = markers_may_go
        self._now_ms = job.now_ms
        self._delete_retention_ms = job.config.delete_retention_ms
        # Producers whose transaction, up to the batch being read, keeps a batch in the log.
        self._transactions_with_data: set[int] = set()
        self._markers_with_data: set[int] = set()  # offsets of markers closing such a transaction
        self.next_delete_horizon_ms: int | None = None

    def clean_batch(self, header: BatchHeader, batch: memoryview) -> bytes | memoryview | None:
        """The batch to write in place of `batch`: itself, rebuilt with fewer records or a delete
        horizon, or None to drop it."""
        if header.is_control:
            return self._clean_marker(header, batch)
        kept = self._clean_data(header, batch)
        if kept is not None and header.is_transactional:
            self._transactions_with_data.add(header.producer_id)
        return kept

    def keeps_aborted_entry(self, aborted: AbortedTxn) -> bool:
        """Whether a transaction index entry stays: while its transaction keeps a batch (read
        before: the entry's abort marker closes the transaction)."""
        return aborted.last_offset >= self._end_offset or aborted.last_offset in self._markers_with_data

    def _clean_marker(self, header: BatchHeader, batch: memoryview) -> bytes | memoryview | None:
        """A marker stays while its transaction keeps a batch; then, as a tombstone does, until
        delete.retention.ms after the cleaning that first found it alone."""
        if header.producer_id in self._transactions_with_data:
            self._transactions_with_data.discard(header.producer_id)
            self._markers_with_data.add(header.last_offset)
            return batch
        if (
            header.base_offset >= self._end_offset
            or not self._markers_may_go
            or self._producers.is_last(header)
        ):
            return batch
        if header.has_delete_horizon and self._now_ms >= header.base_timestamp:
            return None
        horizon = self._note_horizon(header, True)
        if horizon is None:
            return batch
        return rebuild_batch(header, list(iter_records(batch)), delete_horizon_ms=horizon)

    def _clean_data(self, header: BatchHeader, batch: memoryview) -> bytes | memoryview | None:
        if header.base_offset >= self._end_offset:
            return batch
        if header.is_transactional:
            if self._job.is_aborted(header):
                return rebuild_batch(header, []) if self._producers.is_last(header) else None
            if header.base_offset >= self._job.stable_offset:
                return batch
        retain_deletes = not header.has_delete_horizon or self._now_ms < header.base_timestamp
        keys = list(iter_keys(batch))
        verdicts = [
            self._keeps(offset, key, has_value, retain_deletes) for offset, key, has_value in keys
        ]
        tombstones = any(
            keep and not has_value and offset < self._end_offset
            for keep, (offset, _, has_value) in zip(verdicts, keys)
        )
        horizon = self._note_horizon(header, tombstones)
        if verdicts and all(verdicts) and (header.has_delete_horizon or not tombstones):
            return batch
        kept = [record for record, keep in zip(iter_records(batch), verdicts) if keep]
        if not kept:
            return rebuild_batch(header, []) if self._producers.is_last(header) else None
        return rebuild_batch(header, kept, delete_horizon_ms=horizon)

    def _keeps(self, offset: int, key: bytes | None, has_value: bool, retain_deletes: bool) -> bool:
        if offset >= self._end_offset:
            return True
        if key is None or self._offset_map.latest(key) > offset:
            return False
        return has_value or retain_deletes

    def _note_horizon(self, header: BatchHeader, deletes: bool) -> int | None:
        """The delete horizon a batch keeping tombstones or a lone marker (`deletes`) gets now
        (None when it has one already or needs none); the log's next horizon is the earliest of
        its batches'."""
        if not deletes:
            return None
        new = None if header.has_delete_horizon else self._now_ms + self._delete_retention_ms
        horizon = header.base_timestamp if new is None else new
        if self.next_delete_horizon_ms is None or horizon < self.next_delete_horizon_ms:
            self.next_delete_horizon_ms = horizon
        return new


class _SegmentWriter:
    """Appends batches to a segment being written, a buffer at a time."""

    def __init__(self, segment: LogSegment, buffer_bytes: int) -> None:
        self._segment = segment
        self._buffer_bytes = buffer_bytes
        self._data = bytearray()
        self._batches: list[AppendedBatch] = []

    def append(self, batch: bytes | memoryview) -> None:
        header = BatchHeader.from_buffer(batch)
        self._data += batch
        self._batches.append(AppendedBatch(header.last_offset, header.max_timestamp, header.size))
        if len(self._data) >= self._buffer_bytes:
            self.flush()

    def flush(self) -> None:
        if self._batches:
            self._segment.append(self._data, self._batches)
            self._data = bytearray()
            self._batches = []


def group_segments_by_size(
    segments: Sequence[SegmentToClean], max_size: int, max_index_size: int
) -> list[list[SegmentToClean]]:
    """Consecutive segments grouped so that each group's records fit `max_size` bytes, each of
    its indexes `max_index_size` bytes, and its offsets an int32 relative to its base offset
    (Kafka's groupSegmentsBySize). A segment too large on its own forms its own group."""
    groups: list[list[SegmentToClean]] = []
    for snapshot in segments:
        group = groups[-1] if groups else None
        if group is None or not _fits(group, snapshot, max_size, max_index_size):
            groups.append([snapshot])
        else:
            group.append(snapshot)
    return groups


def _fits(
    group: Sequence[SegmentToClean], snapshot: SegmentToClean, max_size: int, max_index_size: int
) -> bool:
    return (
        sum(s.size for s in group) + snapshot.size <= max_size
        and sum(s.index_bytes for s in group) + snapshot.index_bytes <= max_index_size
        and sum(s.time_index_bytes for s in group) + snapshot.time_index_bytes <= max_index_size
        and snapshot.end_offset - 1 - group[0].base_offset <= _INT32_MAX
    )


def _check_abort(abort: threading.Event) -> None:
    if abort.is_set():
        raise CleaningAborted()


def _delete(segment: LogSegment) -> None:
    segment.delete()
    segment.records.close()


def _remove_cleaned_files(directory: str, base_offset: int) -> None:
    """Files a failed discard may have left, which the new ones must not be opened over."""
    for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
        try:
            os.unlink(segment_path(directory, base_offset, suffix + CLEANED_SUFFIX))
        except FileNotFoundError:
            pass


def _fsync_directory(directory: str) -> None:
    """Make the new files' names durable along with their data."""
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


# ----------------------------------------------------------------- the cleaner, on the loop


def _now_ms() -> int:
    return int(time.time() * 1000)


class LogCleaner:
    """Keeps a LogManager's compacted logs cleaned (Kafka's LogCleaner and LogCleanerManager).

    `startup` starts log.cleaner.threads loops, each cleaning the dirtiest log it finds, or
    waiting log.cleaner.backoff.ms when none is cleanable; `clean_once` is one round of such a
    loop. State, all on the event loop: the first dirty offset of each partition (the cleaner
    checkpoint, which the LogManager writes), the partitions being cleaned, and those whose
    cleaning failed for a reason other than I/O (left alone until restart, as Kafka does).
    """

    def __init__(
        self,
        log_manager: "LogManager",
        config: CleanerConfig,
        clock: Callable[[], int] = _now_ms,
    ) -> None:
        self.config = config
        self._log_manager = log_manager
        self._clock = clock
        self._cleaner = Cleaner(config)
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max(config.threads, 1), "logway-cleaner"
        )
        self._first_dirty_offsets: dict[TopicPartition, int] = {}
        self._delete_horizons: dict[TopicPartition, int] = {}
        self._in_progress: dict[TopicPartition, _Cleaning] = {}
        self._running: set[asyncio.Future] = set()  # cleanings on the threads
        self._uncleanable: set[TopicPartition] = set()
        self._threads: list[asyncio.Task] = []
        self._stopping = asyncio.Event()

    def reconfigure(self, config: CleanerConfig) -> None:
        """New buffer sizes and backoff (dynamic broker configs): cleanings started from now on
        use the new buffers, and each loop waits the new backoff from its next wait on. The
        number of threads and `enable` stay as started."""
        self.config = replace(config, enable=self.config.enable, threads=self.config.threads)
        self._cleaner = Cleaner(self.config)

    # -------------------------------------------------------------------------- checkpoint

    def load_checkpoint(self, offsets: Mapping[TopicPartition, int]) -> None:
        self._first_dirty_offsets.update(offsets)

    def checkpoint_offsets(self, partitions: set[TopicPartition]) -> dict[TopicPartition, int]:
        """The cleaner checkpoint entries of `partitions` (those that have one)."""
        return {tp: o for tp, o in self._first_dirty_offsets.items() if tp in partitions}

    def forget(self, tp: TopicPartition) -> concurrent.futures.Future | None:
        """A partition is deleted: call off its cleaning and drop what is known of it. Returns
        the cleaning's thread work while it may still be under way: it writes and removes files
        by the partition directory's path, so it must be over before a new directory of that
        name is made (the LogManager waits for it)."""
        self.abort(tp)
        self._first_dirty_offsets.pop(tp, None)
        self._delete_horizons.pop(tp, None)
        self._uncleanable.discard(tp)
        cleaning = self._in_progress.get(tp)
        return None if cleaning is None else cleaning.work

    def abort(self, tp: TopicPartition) -> None:
        """Call off the cleaning of `tp` under way, if any (its log is about to be truncated);
        a result that comes back anyway is not swapped in, as the log's truncation count moved."""
        cleaning = self._in_progress.get(tp)
        if cleaning is not None:
            cleaning.abort.set()

    def cap_first_dirty_offset(self, tp: TopicPartition, log_end_offset: int) -> None:
        """The log was truncated to `log_end_offset`: what follows it is dirty again."""
        if self._first_dirty_offsets.get(tp, 0) > log_end_offset:
            self._first_dirty_offsets[tp] = log_end_offset

    # ----------------------------------------------------------------------------- running

    def startup(self) -> None:
        if self.config.enable:
            self._threads = [
                asyncio.ensure_future(self._run()) for _ in range(self.config.threads)
            ]

    async def shutdown(self) -> None:
        """Call off the cleanings under way and wait for the threads to stop."""
        self._stopping.set()
        for cleaning in self._in_progress.values():
            cleaning.abort.set()
        await asyncio.gather(*self._threads, *self._running, return_exceptions=True)
        self._executor.shutdown(wait=True)

    async def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                cleaned = await self.clean_once()
            except Exception:  # a bug must not stop compaction for good: log it, wait, go on
                log.exception("the log cleaner failed")
                cleaned = None
            if cleaned is None:
                try:
                    await asyncio.wait_for(self._stopping.wait(), self.config.backoff_ms / 1000)
                except asyncio.TimeoutError:
                    pass

    async def clean_once(self) -> TopicPartition | None:
        """Clean the dirtiest cleanable log, if any; return its partition."""
        job = self.grab_filthiest_log()
        if job is None:
            return None
        tp = job.topic_partition
        abort = threading.Event()
        work = self._executor.submit(self._cleaner.clean, job, abort)
        self._in_progress[tp] = _Cleaning(abort, work)
        running = asyncio.wrap_future(work)
        self._running.add(running)
        running.add_done_callback(self._running.discard)
        try:
            result = await running
        except CleaningAborted:
            log.info("%s: cleaning called off", tp)
            return tp
        except OSError as exc:
            if self._log_manager.get(tp) is job.log:
                self._log_manager.handle_io_error(tp, exc)
            return tp
        except Exception:
            log.exception("%s: cleaning failed; the log is left uncleaned until restart", tp)
            self._uncleanable.add(tp)
            return tp
        finally:
            del self._in_progress[tp]
        await self._swap_in(result)
        return tp

    def grab_filthiest_log(self) -> LogToClean | None:
        """The cleanable log with the highest dirty ratio; else one whose tombstones are due to
        go; else None."""
        now = self._clock()
        jobs = [
            plan_cleaning(partition_log, self._first_dirty_offsets.get(tp), now)
            for tp, partition_log in self._log_manager.logs.items()
            if partition_log.config.compact
            and tp not in self._in_progress
            and tp not in self._uncleanable
        ]
        cleanable = [job for job in jobs if job.is_cleanable]
        if cleanable:
            return max(cleanable, key=lambda job: job.cleanable_ratio)
        for job in jobs:
            horizon = self._delete_horizons.get(job.topic_partition)
            if horizon is not None and horizon <= now and job.segments:
                return job
        return None

    async def _swap_in(self, result: CleaningResult) -> None:
        job = result.job
        tp = job.topic_partition
        if self._log_manager.get(tp) is not job.log:
            # Deleted (the cleaned files went with its renamed directory) or offline (the next
            # load removes *.cleaned files): nothing is removed by path, for a new partition of
            # the name may have files there by now.
            result.release()
            return
        if (
            job.log.truncations != job.truncations
            or not _still_holds(job.log, result.swaps)
        ):
            log.info("%s: the log changed while it was cleaned; cleaning it again later", tp)
            try:
                await asyncio.get_running_loop().run_in_executor(self._executor, result.discard)
            except OSError as exc:  # the next load removes *.cleaned files anyway
                log.warning("%s: could not remove the discarded cleaned segments: %s", tp, exc)
            return
        try:
            for replaced, cleaned in result.swaps:
                job.log.replace_segments(cleaned, [s.segment for s in replaced])
        except OSError as exc:
            self._log_manager.handle_io_error(tp, exc)
            return
        self._first_dirty_offsets[tp] = result.end_offset
        self._set_delete_horizon(tp, result.next_delete_horizon_ms)
        log.info(
            "%s: cleaned up to offset %d, %d segment(s) in place of %d",
            tp,
            result.end_offset,
            len(result.swaps),
            sum(len(replaced) for replaced, _ in result.swaps),
        )
        self._log_manager.checkpoint_dir_of(tp)

    def _set_delete_horizon(self, tp: TopicPartition, horizon: int | None) -> None:
        if horizon is None:
            self._delete_horizons.pop(tp, None)
        else:
            self._delete_horizons[tp] = horizon


def _still_holds(
    partition_log: Log, swaps: Sequence[tuple[tuple[SegmentToClean, ...], LogSegment]]
) -> bool:
    """Whether every planned segment of `swaps` is still in the log, in place and unchanged."""
    positions = {id(segment): position for position, segment in enumerate(partition_log.segments)}
    for replaced, _ in swaps:
        first = positions.get(id(replaced[0].segment), -1)
        for index, snapshot in enumerate(replaced):
            in_place = first >= 0 and positions.get(id(snapshot.segment)) == first + index
            if not in_place or snapshot.segment.size != snapshot.size:
                return False
    return True
